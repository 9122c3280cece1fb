"""Reading files whose images lie uncompressed, one after another, at an offset.

MRC, uncompressed TIFF and DM files are laid out so: a header, then the
values of image 0, image 1, ... in one type and byte order. A reader maps
the file into memory once and copies images out of the map with numpy,
converting type and byte order in the same pass; a batch of images of one
file bound for consecutive slots is one `numpy.take`. Copies release the
GIL, and after the first touch of a page there is no system call at all.
The map of a stack is read at random (`map_file`'s `random`): a fault reads
its page, not megabytes around it, and a read first tells the kernel the
ranges of its images (`advise_map`), so that a cold stack is read image by image.
Before each copy the reader checks the file has not shrunk under the map.
A page that cannot be read during a copy (the file shrank meanwhile, or an
I/O error) would kill the process with SIGBUS: the map of `vitrio._native.map_file`
reads it as zeros instead and counts it, and the read raises `OSError`; the
reader raises it from then on.

A reader also gives its file's layout (`RawArrayReader.layout`, see
`_raw_layout`), with which `read_runs` reads images of files whose readers
are closed. Patches of one image are cropped out of the map in one native
call too (`RawArrayReader.read_patches`). Writers are in `_raw_writer`.
"""

from __future__ import annotations

import errno
import functools
import math
import os
import struct
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._arrays import gather
from .._concurrency import ThreadPoolExecutor, run_tasks, shared_pool
from .._config import configuration
from .._errors import redact
from .._native import KIND_BYTES, advise_map, convert, crop, map_file
from .._storage import ByteSource
from .._types import ImageDescriptor
from ._contract import FormatError, HeaderStatistics, ImageReader
from ._raw_layout import RawLayout

__all__ = ["Decoder", "RawArrayReader"]

Decoder = Callable[[np.ndarray, np.ndarray], None]
"""Turns values as the file holds them into an out array of any type."""

_split_lock = threading.Lock()
_split_permits: dict[int, threading.BoundedSemaphore] = {}


def _forget_split_permits() -> None:
    global _split_lock, _split_permits
    _split_lock, _split_permits = threading.Lock(), {}


os.register_at_fork(after_in_child=_forget_split_permits)


def _split_threads(size: int) -> tuple[ThreadPoolExecutor, threading.BoundedSemaphore]:
    """The pool of `size` threads that copies parts of large runs, the process over (made at its first
    use), and one permit per thread of it: a part is copied on the pool once a permit is taken, so that
    it never waits there, and reads at once share the processors."""
    with _split_lock:
        permits = _split_permits.get(size)
        if permits is None:
            permits = _split_permits[size] = threading.BoundedSemaphore(size)
    return shared_pool("split", size), permits


_RANGE = struct.Struct("=qq")
"""One range (offset, bytes) as `advise_map` takes its rows."""

_NEAR = 1 << 16
"""Images to read no further apart than this many bytes are hinted as the one range around them."""


def check_size(key: str, size: int, end: int) -> None:
    """Check that a file of `size` bytes holds the images its header says end at byte `end`.

    Raises:
        FormatError: If it is shorter.
    """
    if size < end:
        raise FormatError(
            f"{redact(key)}: the file is truncated: it has {size} bytes, "
            f"its header says its images need {end}"
        )


class RawArrayReader(ImageReader):
    """Images stored uncompressed at `offset`, each `core` values of `file_dtype`.

    Args:
        key: The file's key.
        source: The local file (a `ByteSource` with a descriptor, which is mapped), which the reader owns.
        descriptor: What the file holds, as it is read.
        file_dtype: The type and byte order of the values in the file.
        offset: Where image 0 starts.
        axes: How to permute the axes of an image as stored to get it as
            read (slowest first); None when stored as read.
        decoder: Turns stored values into another type, for stored types
            numpy cannot cast (such as pairs of integers that make a complex).
        voxel_size: What the header says, as `ImageReader` has it; `header_statistics` likewise.

    Raises:
        FormatError: If the file is shorter than its images need.
    """

    def __init__(
        self,
        key: str,
        source: ByteSource,
        descriptor: ImageDescriptor,
        file_dtype: np.dtype,
        offset: int,
        axes: tuple[int, ...] | None = None,
        decoder: Decoder | None = None,
        voxel_size: tuple[float, ...] | None = None,
        header_statistics: HeaderStatistics | None = None,
    ):
        super().__init__(key, descriptor)
        self.voxel_size = voxel_size
        self.header_statistics = header_statistics
        self._source = source
        fd = source.fileno()
        self._dtype = np.dtype(file_dtype)
        self._offset = int(offset)
        self._axes = axes if axes is not None and tuple(axes) != tuple(range(len(axes))) else None
        stored_core = (
            self.core_extents
            if self._axes is None
            else tuple(self.core_extents[self._axes.index(i)] for i in range(len(self._axes)))
        )
        self._decoder = decoder
        self._end = self._offset + self.image_count * math.prod(stored_core) * self._dtype.itemsize
        self._status = os.fstat(fd)
        check_size(key, self._status.st_size, self._end)
        self._direct = decoder is None and self._dtype.isnative
        if self._end > self._offset:
            self._map = map_file(fd, self._end, self.descriptor.is_stack)
            values = np.frombuffer(
                self._map, self._dtype, self.image_count * math.prod(stored_core), self._offset
            ).reshape((self.image_count, *stored_core))
            if self._axes is not None:
                values = values.transpose(0, *(a + 1 for a in self._axes))
        else:
            self._map = None
            values = np.empty((self.image_count, *self.core_extents), self._dtype)
        self._images = values
        raw = decoder is None and self._axes is None and self._map is not None
        mapped = self._map if raw and self._map.guarded else None
        self._layout = (
            RawLayout(key, descriptor, self._offset, self._dtype, self._status, mapped) if raw else None
        )

    @property
    def file_dtype(self) -> np.dtype:
        """The type and byte order of the values in the file."""
        return self._dtype

    @property
    def data_offset(self) -> int:
        """Where image 0 starts in the file."""
        return self._offset

    def layout(self) -> RawLayout | None:
        """Where the file's images lie, for `read_runs` (made once, its plans kept); None where numpy
        must read them (a decoder or a permutation of the axes)."""
        return self._layout

    def read_patches(
        self,
        index: int,
        origins: np.ndarray,
        patch: tuple[int, ...],
        out: np.ndarray,
        slots: np.ndarray,
        fill: Any,
    ) -> bool:
        """Crop the patches of image `index` starting at `origins` into the slots of `out` in one native
        call; what lies beyond the image is `fill`, or left as it was when `fill` is None.

        Returns:
            Whether it did: not where the values need numpy to convert them or `out` is not C-contiguous.
        """
        layout = self.layout()
        plan = layout.plan(out.dtype) if layout is not None else None
        if plan is None or plan.wanted == KIND_BYTES or not out.flags.c_contiguous:
            return False
        self.check_run(index, 1)
        self.check_unchanged()
        self._will_read_run(index, 1)
        value = None if fill is None else np.asarray(fill).astype(out.dtype).tobytes()
        image = self._offset + index * layout.image_bytes
        crop(self._map, image, plan.stored, self.core_extents, origins, slots, out, plan.wanted, patch, value)
        self._check_copied()
        return True

    def _copy(self, stored: np.ndarray, out: np.ndarray) -> None:
        if self._decoder is not None:
            self._decoder(stored, out)
        else:
            np.copyto(out, stored, casting="unsafe")

    def read_run(self, start: int, outs: Sequence[np.ndarray]) -> None:
        self.check_run(start, len(outs))
        self.check_unchanged()
        self._will_read_run(start, len(outs))
        if not self._copy_split(start, outs):
            for i, out in enumerate(outs):
                self._copy(self._images[start + i], out)
        self._check_copied()

    def _copy_split(self, start: int, outs: Sequence[np.ndarray]) -> bool:
        """Copy a large run into one block of memory (a whole volume or stack, as `vitrio.read` reads
        it) on several threads, a native copy each: the pages of a fresh destination are faulted in
        and filled in parallel.

        Returns:
            Whether it did: not for less than `split_bytes` of the configuration in force, nor where
            numpy must convert, nor into outs that are not one after another in memory.
        """
        layout = self.layout() if outs else None
        first = outs[0] if outs else None
        plan = layout.plan(first.dtype) if layout is not None else None
        chosen = configuration()
        if plan is None or len(outs) * first.nbytes < chosen.split_bytes:
            return False
        address, size = first.ctypes.data, first.nbytes
        if not all(
            out.flags.c_contiguous and out.dtype == first.dtype and out.ctypes.data == address + i * size
            for i, out in enumerate(outs)
        ):
            return False
        flat = np.lib.stride_tricks.as_strided(first.reshape(-1).view(np.uint8), (len(outs) * size,), (1,))
        src_size, dst_size = (1, 1) if plan.wanted == KIND_BYTES else (self._dtype.itemsize, first.itemsize)
        source = memoryview(self._map)[self._offset + start * layout.image_bytes :]
        values = len(outs) * plan.values
        wanted = min(
            os.cpu_count() or 1, chosen.split_parts, values * dst_size // max(1, chosen.split_bytes // 2)
        )
        pool, permits = _split_threads(chosen.split_threads)
        helpers = 0
        while helpers < wanted - 1 and permits.acquire(blocking=False):
            helpers += 1
        try:
            _convert_in_parts(
                source, plan.stored, src_size, flat, plan.wanted, dst_size, values, pool, helpers
            )
        finally:
            for _ in range(helpers):
                permits.release()
        return True

    def read_images(self, indices: np.ndarray, out: np.ndarray, slots: np.ndarray) -> None:
        self.check_indices(indices)
        self.check_unchanged()
        self.will_read(indices)
        if self._direct and self._axes is None:
            gather(self._images, indices, out, slots)
        else:
            for index, slot in zip(indices.tolist(), slots.tolist()):
                self._copy(self._images[index], out[slot])
        self._check_copied()

    def read_region(self, index: int, region: tuple[slice, ...], out: np.ndarray) -> None:
        self.check_run(index, 1)
        self.check_unchanged()
        self._will_read_run(index, 1)
        self._copy(self._images[index][region], out)
        self._check_copied()

    def read_regions(
        self, index: int, regions: Sequence[tuple[slice, ...]], outs: Sequence[np.ndarray]
    ) -> None:
        self.check_run(index, 1)
        self.check_unchanged()
        self._will_read_run(index, 1)
        image = self._images[index]
        for region, out in zip(regions, outs):
            self._copy(image[region], out)
        self._check_copied()

    def will_read(self, indices: np.ndarray) -> None:
        """Tell the kernel the images `indices` (checked) of a stack are read next, a range per run of
        consecutive ones: its map reads a page a fault (`map_file`'s `random`), so that a cold stack is read
        image by image, not megabytes around each, and this has the disk read them at once."""
        if self._map is None or not self.descriptor.is_stack or not len(indices):
            return
        if self._end - self._offset <= _NEAR:
            self._will_read_run(0, self.image_count)  # a small file: all of it, no search
            return
        first, last = int(indices.min()), int(indices.max())
        if (last - first) * (self._end - self._offset) <= _NEAR * self.image_count:
            self._will_read_run(first, last + 1 - first)  # all within a few pages: one range, no search
            return
        ordered = np.unique(indices)
        starts = np.flatnonzero(np.diff(ordered, prepend=ordered[0] - 2) != 1)
        counts = np.diff(np.append(starts, len(ordered)))
        self._advise(ordered[starts], counts)

    def _will_read_run(self, start: int, count: int) -> None:
        """`will_read` of the images `start..start + count`, one range, with no search for runs."""
        if self._map is not None and self.descriptor.is_stack and count:
            image_bytes = (self._end - self._offset) // self.image_count
            advise_map(self._map, _RANGE.pack(self._offset + start * image_bytes, count * image_bytes))

    def _advise(self, firsts: np.ndarray, counts: np.ndarray) -> None:
        image_bytes = (self._end - self._offset) // self.image_count
        ranges = np.empty((len(firsts), 2), np.int64)
        ranges[:, 0] = self._offset + firsts * image_bytes
        ranges[:, 1] = counts * image_bytes
        advise_map(self._map, ranges)

    def check_unchanged(self) -> None:
        """Raise `OSError` if the file is shorter than its images need, or a page of it could not be read."""
        size = os.fstat(self._source.fileno()).st_size
        if size < self._end:
            self.stale = True
            raise OSError(f"{self.key}: the file was truncated to {size} bytes while open")
        self._check_copied()

    def _check_copied(self) -> None:
        if self._map is not None and self._map.faults:
            self.stale = True
            raise OSError(
                errno.EIO,
                f"{self.key}: {self._map.faults} pages of the file could not be read while open "
                "(it was truncated, or an I/O error), and read as zeros",
            )

    def close(self) -> None:
        self._images = None
        self._map = None  # unmapped when the last view of it goes
        self._source.close()


def _convert_in_parts(
    source: memoryview,
    src_kind: int,
    src_size: int,
    flat: np.ndarray,
    dst_kind: int,
    dst_size: int,
    values: int,
    pool: ThreadPoolExecutor,
    helpers: int,
) -> None:
    """Convert `values` values of `source` (`src_size` bytes each) into the bytes `flat` (`dst_size`
    bytes each), in parts: one on this thread, one for each of `helpers` threads of `pool`."""
    bounds = np.linspace(0, values, helpers + 2).astype(np.int64).tolist()

    def copy(a: int, b: int) -> None:
        convert(source[a * src_size : b * src_size], src_kind, flat[a * dst_size : b * dst_size], dst_kind)

    parts = [functools.partial(copy, *part) for part in zip(bounds[1:-1], bounds[2:])]
    helped = run_tasks(pool, parts)
    try:
        copy(bounds[0], bounds[1])
    finally:
        helped.wait()
    helped.get()
