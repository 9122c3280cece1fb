"""A bounded cache of decoded chunks, shared by the readers of a store, that decodes each chunk once.

A chunk asked for by several threads at once is fetched and decoded by the
first; the others wait for it, and have it as soon as it is decoded. Past its capacity in bytes, the least
recently used chunks are dropped; a capacity of 0 keeps none (chunks are
still shared by the threads that asked for them at the same time). A chunk
counts as the whole buffer it views, which keeping it keeps alive.

Each chunk asked for counts, in the counters of the loader whose task asks
(`add_count`), as a hit (kept, or being decoded by another thread) or a
miss, with the bytes a miss decoded: a loader's `stats()` shows whether
its cache holds what its epochs read again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Sequence
from concurrent.futures import Future

import numpy as np

from ..._config import configuration
from ..._counters import add_count

__all__ = ["ChunkCache", "held_bytes"]


def held_bytes(chunk: np.ndarray) -> int:
    """What keeping `chunk` costs: its bytes, or those of the whole buffer it views, if more."""
    owner = chunk
    while isinstance(owner, np.ndarray) and owner.base is not None:
        owner = owner.base
    if isinstance(owner, np.ndarray):
        return max(chunk.nbytes, owner.nbytes)
    try:
        return max(chunk.nbytes, memoryview(owner).nbytes)
    except TypeError:  # a buffer not exported as one
        return chunk.nbytes


class ChunkCache:
    """Decoded chunks by key, up to `capacity` bytes.

    Args:
        capacity: How many bytes of decoded chunks to keep; None: the configuration's
            `zarr_cache_bytes`, as in force each time a chunk is kept.

    Raises:
        ValueError: If `capacity` is negative.
    """

    def __init__(self, capacity: int | None = None):
        if capacity is not None and int(capacity) < 0:
            raise ValueError(f"a chunk cache's capacity must not be negative: {capacity}")
        self._capacity = None if capacity is None else int(capacity)
        self._chunks: OrderedDict[Hashable, np.ndarray] = OrderedDict()
        self._loading: dict[Hashable, Future] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def capacity(self) -> int:
        """How many bytes of decoded chunks are kept at most."""
        return configuration().zarr_cache_bytes if self._capacity is None else self._capacity

    @property
    def nbytes(self) -> int:
        """How many bytes of chunks are kept now."""
        with self._lock:
            return self._bytes

    def get_many(
        self,
        keys: Sequence[Hashable],
        load: Callable[[list[Hashable]], Iterator[tuple[Hashable, np.ndarray]]],
    ) -> dict[Hashable, np.ndarray]:
        """The chunks of `keys`: kept ones as they are, the others from `load`, each loaded once.

        `load(missing)` yields a `(key, chunk)` pair for each of `missing`, and each chunk is handed
        to the threads waiting for it as soon as it comes. What `load` raises is raised here and to
        the threads waiting for the chunks it had not yielded yet, and nothing of it is kept.
        """
        found: dict[Hashable, np.ndarray] = {}
        waiting: list[tuple[Hashable, Future]] = []
        mine: dict[Hashable, Future] = {}
        with self._lock:
            for key in dict.fromkeys(keys):
                chunk = self._chunks.get(key)
                if chunk is not None:
                    self._chunks.move_to_end(key)
                    found[key] = chunk
                elif key in self._loading:
                    waiting.append((key, self._loading[key]))
                else:
                    mine[key] = self._loading[key] = Future()
        add_count("zarr_chunk_hits", len(found) + len(waiting))
        if mine:
            add_count("zarr_chunk_misses", len(mine))
            capacity = self.capacity
            try:
                for key, chunk in load(list(mine)):
                    add_count("zarr_decoded_bytes", chunk.nbytes)
                    with self._lock:
                        self._keep(key, chunk, capacity)
                        del self._loading[key]
                    mine.pop(key).set_result(chunk)
                    found[key] = chunk
            except BaseException as error:
                with self._lock:
                    for key in mine:
                        del self._loading[key]
                for future in mine.values():
                    future.set_exception(error)
                raise
        for key, future in waiting:
            found[key] = future.result()
        return found

    def _keep(self, key: Hashable, chunk: np.ndarray, capacity: int) -> None:
        size = held_bytes(chunk)
        if size > capacity:
            return
        self._chunks[key] = chunk
        self._bytes += size
        while self._bytes > capacity:
            _, dropped = self._chunks.popitem(last=False)
            self._bytes -= held_bytes(dropped)

    def clear(self) -> None:
        """Drop every kept chunk."""
        with self._lock:
            self._chunks.clear()
            self._bytes = 0
