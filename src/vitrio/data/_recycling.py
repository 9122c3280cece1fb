"""`RecyclingAllocator`: batches read into the memory of earlier ones, once the program has let go of them."""

from __future__ import annotations

import sys
import threading
from typing import Any

import numpy as np

__all__ = ["RecyclingAllocator"]


def _references_of_a_free_buffer() -> int | None:
    """What `sys.getrefcount` says, in `RecyclingAllocator._take`, of a buffer nothing else refers to;
    None where a view of it would not add to that count (nothing is recycled then)."""
    buffers = [np.empty(1, np.uint8)]
    for buffer in buffers:
        free = sys.getrefcount(buffer)
    del buffer
    view = buffers[0].view(np.int8).reshape(())
    for buffer in buffers:
        held = sys.getrefcount(buffer)
    del view
    return free if held == free + 1 else None


class RecyclingAllocator:
    """Makes the arrays of batches out of buffers that arrays made before held, once nothing refers to them.

    A batch read into fresh memory pays for its pages first: the kernel faults
    them in and clears them, which costs about as much as reading the batch.
    Given to a `DataLoader` (or `Dataset.read_async`) as its allocator, this
    hands out views of buffers it keeps; once the program has dropped a batch
    (every array, view and tensor sharing its memory, which all refer to the
    buffer), the buffer goes to the next batch of the same size, its pages in
    place. A batch kept, in a list say, keeps its buffer: nothing is reused
    while anything refers to it.

    A `DataLoader` given no allocator reads through one of its own, keeping
    for each array of a batch as many buffers as it has batches under way,
    and two more: the batch handed out and the one the program's loop still
    holds. Arrays of objects are made new: their memory holds references,
    never reused.

    Args:
        keep: How many buffers of each size to keep; beyond them, arrays are made new.

    Raises:
        ValueError: If keep is below 1.
    """

    _FREE = _references_of_a_free_buffer()

    def __init__(self, keep: int = 8):
        if keep < 1:
            raise ValueError(f"keep is 1 or more, not {keep}")
        self._keep = int(keep)
        self._buffers: dict[int, list[np.ndarray]] = {}
        self._lock = threading.Lock()
        self._recycled = self._made = 0

    @property
    def recycled(self) -> int:
        """How many arrays it has made in the memory of an earlier one."""
        return self._recycled

    @property
    def made(self) -> int:
        """How many arrays it has made in new memory."""
        return self._made

    def __call__(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """An array of `shape` and `dtype`, in a buffer nothing else refers to."""
        dtype = np.dtype(dtype)
        if dtype.hasobject:
            with self._lock:
                self._made += 1
            return np.empty(shape, dtype)
        size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        with self._lock:
            buffer = self._take(size)
        return buffer.view(dtype).reshape(shape)

    def _take(self, size: int) -> np.ndarray:
        buffers = self._buffers.setdefault(size, [])
        for buffer in buffers:
            if sys.getrefcount(buffer) == self._FREE:  # never for None
                self._recycled += 1
                return buffer
        self._made += 1
        buffer = np.empty(size, np.uint8)
        if len(buffers) < self._keep:
            buffers.append(buffer)
        return buffer

    def __repr__(self) -> str:
        held = sum(len(buffers) for buffers in self._buffers.values())
        return f"RecyclingAllocator(keep={self._keep}, buffers={held})"
