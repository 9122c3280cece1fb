"""Readers and writers of files whose images lie uncompressed, one after another, at an offset.

MRC, uncompressed TIFF and DM files are laid out so: a header, then the
values of image 0, image 1, ... in one type and byte order. A reader maps
the file into memory once and copies images out of the map with numpy,
converting type and byte order in the same pass; a batch of images of one
file bound for consecutive slots is one `numpy.take`. Copies release the
GIL, and after the first touch of a page there is no system call at all.
Before each copy the reader checks the file has not shrunk under the map.
A page that cannot be read during a copy (the file shrank meanwhile, or an
I/O error) would kill the process with SIGBUS: the map of `vitrio._native.map_file`
reads it as zeros instead and counts it, and the read raises `OSError`; the
reader raises it from then on.

A reader also gives its file's layout (`RawArrayReader.layout`): where the
images lie, in what type, and what the file was (size, mtime, inode) when
its header was parsed. With it, `read_runs` reads images of files whose
readers are closed with one native call: open, `pread`s, close, converting
in the same pass, without the GIL. Patches of one image are cropped out of
the map in one native call too (`RawArrayReader.read_patches`).

Writers write with `os.pwrite` into a private file made beside the
destination (`vitrio._fs.PartialFile`) and renamed onto it when flushed or
finished.
An `OSError` of the system (a full disk, a file too large) is raised again
with the same errno and the file's key.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any, BinaryIO, NamedTuple

import numpy as np

from .._arrays import gather
from .._fs import PartialFile
from .._native import (
    CHECK_FIELDS,
    CHECK_KIND,
    KIND_BF16,
    KIND_BYTES,
    KIND_F16,
    KIND_F32,
    KIND_I8,
    KIND_I16,
    KIND_U8,
    KIND_U16,
    READ_CHANGED,
    READ_OPEN,
    READ_SHORT,
    SWAP,
    convert,
    crop,
    map_file,
)
from .._native import read_runs as _read_runs
from .._types import ImageDescriptor, past_the_end
from ._contract import FormatError, HeaderStatistics, ImageReader, ImageWriter

__all__ = [
    "Decoder",
    "KnownFiles",
    "Plan",
    "RawArrayReader",
    "RawArrayWriter",
    "RawLayout",
    "Statistics",
    "read_runs",
    "value_kind",
]

_buffers = threading.local()

Decoder = Callable[[np.ndarray, np.ndarray], None]
"""Turns values as the file holds them into an out array of any type."""


def _thread_buffer(nbytes: int) -> np.ndarray:
    buffer = getattr(_buffers, "array", None)
    if buffer is None or buffer.nbytes < nbytes:
        buffer = np.empty(max(nbytes, 1 << 16), dtype=np.uint8)
        _buffers.array = buffer
    return buffer[:nbytes]


_KINDS = {
    np.dtype(np.uint8): KIND_U8,
    np.dtype(np.int8): KIND_I8,
    np.dtype(np.uint16): KIND_U16,
    np.dtype(np.int16): KIND_I16,
    np.dtype(np.float16): KIND_F16,
    np.dtype(np.float32): KIND_F32,
}
try:  # numpy has no bfloat16; JAX's ml_dtypes gives one
    from ml_dtypes import bfloat16
except ImportError:  # pragma: no cover - ml_dtypes comes with JAX
    pass
else:
    _KINDS[np.dtype(bfloat16)] = KIND_BF16
_FLOATS = {KIND_F32, KIND_F16, KIND_BF16}
SPLIT_BYTES, MAX_SPLIT = 64 << 20, 8
"""A run of at least SPLIT_BYTES read into one block is copied on up to MAX_SPLIT threads."""


def _new_split_helpers() -> None:
    global _split_helpers
    _split_helpers = threading.BoundedSemaphore(max(0, (os.cpu_count() or 1) - 1))


_new_split_helpers()  # the threads such copies start, the process over: reads at once share the processors
os.register_at_fork(after_in_child=_new_split_helpers)


class Plan(NamedTuple):
    """How `read_runs` reads an image of a file into a type of destination."""

    stored: int
    """The kind of the values in the file, with `SWAP` if of the other byte order."""
    wanted: int
    """The kind of the destination's values."""
    values: int
    """Values per image (bytes, if both kinds are `KIND_BYTES`)."""


def value_kind(dtype: np.dtype) -> int | None:
    """The kind `vitrio._native` gives values of `dtype` (other byte order included), or None."""
    dtype = np.dtype(dtype)
    kind = _KINDS.get(dtype.newbyteorder("=")) if dtype.fields is None else None
    if kind is None:
        return None
    return kind if dtype.isnative or dtype.itemsize == 1 else kind | SWAP


class RawLayout:
    """Where the images of a file lie and in what type, as its header said, and what the file was then.

    Attributes:
        key: The file's key.
        descriptor: What the file holds.
        offset: Where image 0 starts.
        dtype: The type and byte order of the stored values.
        image_bytes: The bytes of one image as stored.
        check: (size, mtime in ns, inode, device) of the file when its header was parsed.

    Args:
        key, descriptor, offset, dtype: The attributes above.
        status: The file's status when its header was parsed.
        mapped: The map of the file's reader, while it lives (a weak reference is kept).
    """

    __slots__ = ("key", "path", "descriptor", "core_extents", "image_count", "offset", "dtype")
    __slots__ += ("image_bytes", "check", "_plans", "_map")

    def __init__(
        self,
        key: str,
        descriptor: ImageDescriptor,
        offset: int,
        dtype: np.dtype,
        status: os.stat_result,
        mapped: Any = None,
    ):
        self.key, self.path, self.descriptor = key, os.fsencode(key), descriptor
        self.core_extents = descriptor.core_extents
        self.image_count = descriptor.image_count
        self.offset, self.dtype = offset, dtype
        self.image_bytes = math.prod(self.core_extents) * dtype.itemsize
        self.check = (status.st_size, status.st_mtime_ns, status.st_ino, status.st_dev)
        self._plans: dict[np.dtype, Plan | None] = {}
        self._map = weakref.ref(mapped) if mapped is not None else None

    def mapped(self) -> Any:
        """The map of the file's reader while it lives (and the SIGBUS guard covers it) and no page
        of it has failed to read, else None."""
        mapped = self._map() if self._map is not None else None
        return mapped if mapped is not None and not mapped.faults else None

    def plan(self, out_dtype: np.dtype) -> Plan | None:
        """How `read_runs` reads an image into `out_dtype`, or None when it cannot convert to that type
        (numpy must)."""
        plan = self._plans.get(out_dtype, False)
        if plan is False:
            plan = self._plan(np.dtype(out_dtype))
            self._plans[out_dtype] = plan
        return plan

    def _plan(self, out_dtype: np.dtype) -> Plan | None:
        values = math.prod(self.core_extents)
        stored, wanted = value_kind(self.dtype), _KINDS.get(out_dtype) if out_dtype.isnative else None
        if stored is not None and wanted is not None:
            kind = stored & ~SWAP
            if kind == wanted or wanted in _FLOATS:
                return Plan(stored, wanted, values)
        if out_dtype == self.dtype and self.dtype.isnative and not self.dtype.hasobject:
            return Plan(KIND_BYTES, KIND_BYTES, self.image_bytes)
        return None


class KnownFiles:
    """Files of known layouts, as `read_runs` takes them: their layouts, paths, check rows and maps.

    A file whose reader is open is read out of the reader's map, without a system call but a `stat`.

    Args:
        layouts: The files.
        kinds: The stored kind of each file's values, as its `plan` gives it.
    """

    __slots__ = ("layouts", "paths", "checks", "maps", "_mapped")

    def __init__(self, layouts: Sequence[RawLayout], kinds: Sequence[int]):
        self.layouts = list(layouts)
        self.paths = tuple(layout.path for layout in layouts)
        self.maps = tuple(layout.mapped() for layout in layouts)
        self._mapped = [i for i, m in enumerate(self.maps) if m is not None]
        self.checks = np.empty((len(layouts), CHECK_FIELDS), dtype=np.int64)
        self.checks[:, :CHECK_KIND] = [layout.check for layout in layouts]
        self.checks[:, CHECK_KIND] = kinds


def read_runs(files: KnownFiles, runs: np.ndarray, out: np.ndarray, dst_kind: int) -> tuple[int, int] | None:
    """Read runs of values of files into `out` with one native call, without the GIL.

    Args:
        files: The files.
        runs: C-contiguous int64 rows (file, offset, values, destination byte), those of one file together.
        out: A C-contiguous array.
        dst_kind: The kind of `out`'s values.

    Returns:
        None when all were read; `(run, file)` for the first run whose file is not what its layout
        says any more (changed or gone): the runs before it were read.

    Raises:
        OSError: If a read fails, a file ends before a run does, or pages of a map could not be
            read (they read as zeros), naming the file.
    """
    failure = _read_runs(files.paths, files.checks, runs, out, dst_kind, files.maps)
    for i in files._mapped:
        faults = files.maps[i].faults
        if faults:
            raise OSError(
                errno.EIO,
                f"{files.layouts[i].key}: {faults} pages of the file could not be read while open "
                "(it was truncated, or an I/O error), and read as zeros",
            )
    if failure is None:
        return None
    run, file, status, code = failure
    if status in (READ_CHANGED, READ_OPEN):
        return run, file
    key = files.layouts[file].key
    if status == READ_SHORT:
        raise OSError(errno.EIO, f"{key}: the file ended before its images did: it was truncated while read")
    raise OSError(code, f"{key}: {os.strerror(code)}")


class RawArrayReader(ImageReader):
    """Images stored uncompressed at `offset`, each `core` values of `file_dtype`.

    Args:
        key: The file's key.
        fd: The open file, which the reader owns.
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
        fd: int,
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
        self._fd = fd
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
        size = self._status.st_size
        if size < self._end:
            raise FormatError(
                f"{key}: the file is truncated: it has {size} bytes, its header says its "
                f"images need {self._end}"
            )
        self._direct = decoder is None and self._dtype.isnative
        if self._end > self._offset:
            self._map = map_file(fd, self._end)
            values = np.frombuffer(
                self._map, self._dtype, self.image_count * math.prod(stored_core), self._offset
            ).reshape((self.image_count, *stored_core))
            if self._axes is not None:
                values = values.transpose(0, *(a + 1 for a in self._axes))
        else:
            self._map = None
            values = np.empty((self.image_count, *self.core_extents), self._dtype)
        self._images = values

    @property
    def file_dtype(self) -> np.dtype:
        """The type and byte order of the values in the file."""
        return self._dtype

    @property
    def data_offset(self) -> int:
        """Where image 0 starts in the file."""
        return self._offset

    def layout(self) -> RawLayout | None:
        """Where the file's images lie, for `read_runs`; None where numpy must read them (a
        decoder or a permutation of the axes)."""
        if self._decoder is not None or self._axes is not None or self._map is None:
            return None
        mapped = self._map if self._map.guarded else None
        return RawLayout(self.key, self.descriptor, self._offset, self._dtype, self._status, mapped)

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
        if not self._copy_split(start, outs):
            for i, out in enumerate(outs):
                self._copy(self._images[start + i], out)
        self._check_copied()

    def _copy_split(self, start: int, outs: Sequence[np.ndarray]) -> bool:
        """Copy a large run into one block of memory (a whole volume or stack, as `vitrio.read` reads
        it) on several threads, a native copy each: the pages of a fresh destination are faulted in
        and filled in parallel.

        Returns:
            Whether it did: not for less than `SPLIT_BYTES`, nor where numpy must convert, nor
            into outs that are not one after another in memory.
        """
        layout = self.layout() if outs else None
        first = outs[0] if outs else None
        plan = layout.plan(first.dtype) if layout is not None else None
        if plan is None or len(outs) * first.nbytes < SPLIT_BYTES:
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
        wanted = min(os.cpu_count() or 1, MAX_SPLIT, values * dst_size // max(1, SPLIT_BYTES // 2))
        helpers = 0
        while helpers < wanted - 1 and _split_helpers.acquire(blocking=False):
            helpers += 1
        try:
            _convert_in_parts(source, plan.stored, src_size, flat, plan.wanted, dst_size, values, helpers)
        finally:
            for _ in range(helpers):
                _split_helpers.release()
        return True

    def read_images(self, indices: np.ndarray, out: np.ndarray, slots: np.ndarray) -> None:
        self.check_indices(indices)
        self.check_unchanged()
        if self._direct and self._axes is None:
            gather(self._images, indices, out, slots)
        else:
            for index, slot in zip(indices.tolist(), slots.tolist()):
                self._copy(self._images[index], out[slot])
        self._check_copied()

    def read_region(self, index: int, region: tuple[slice, ...], out: np.ndarray) -> None:
        self.check_run(index, 1)
        self.check_unchanged()
        self._copy(self._images[index][region], out)
        self._check_copied()

    def read_regions(
        self, index: int, regions: Sequence[tuple[slice, ...]], outs: Sequence[np.ndarray]
    ) -> None:
        self.check_run(index, 1)
        self.check_unchanged()
        image = self._images[index]
        for region, out in zip(regions, outs):
            self._copy(image[region], out)
        self._check_copied()

    def check_unchanged(self) -> None:
        """Raise `OSError` if the file is shorter than its images need, or a page of it could not be read."""
        size = os.fstat(self._fd).st_size
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
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _convert_in_parts(
    source: memoryview,
    src_kind: int,
    src_size: int,
    flat: np.ndarray,
    dst_kind: int,
    dst_size: int,
    values: int,
    helpers: int,
) -> None:
    """Convert `values` values of `source` (`src_size` bytes each) into the bytes `flat` (`dst_size`
    bytes each), in parts: one on this thread, one on each of `helpers` threads."""
    bounds = np.linspace(0, values, helpers + 2).astype(np.int64).tolist()
    failures: list[BaseException] = []

    def copy(a: int, b: int) -> None:
        try:
            convert(
                source[a * src_size : b * src_size], src_kind, flat[a * dst_size : b * dst_size], dst_kind
            )
        except BaseException as error:  # raised again in the calling thread
            failures.append(error)

    threads = [threading.Thread(target=copy, args=part) for part in zip(bounds[1:-1], bounds[2:])]
    for thread in threads:
        thread.start()
    copy(bounds[0], bounds[1])
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]


class Statistics:
    """Minimum, maximum, mean and RMS deviation of the values written, image by image.

    Images written again replace what they were; images never written count
    as zeros. Complex values have a mean and an RMS deviation, and no order.
    """

    def __init__(self, image_count: int, image_values: int):
        self._values = image_values
        self._written = np.zeros(image_count, dtype=bool)
        self._min = np.zeros(image_count)
        self._max = np.zeros(image_count)
        self._mean = np.zeros(image_count, dtype=np.complex128)
        self._m2 = np.zeros(image_count)
        self._lock = threading.Lock()

    def record(self, index: int, values: np.ndarray) -> None:
        """Note the values of image `index`."""
        if values.dtype.kind == "b":
            values = values.view(np.uint8)
        if values.size == 0:
            return
        wide = np.complex128 if values.dtype.kind == "c" else np.float64
        mean = values.mean(dtype=wide)
        m2 = float(np.square(np.abs(values - mean), dtype=np.float64).sum())
        low, high = (0.0, 0.0) if wide is np.complex128 else (values.min(), values.max())
        with self._lock:
            self._written[index] = True
            self._min[index], self._max[index] = low, high
            self._mean[index], self._m2[index] = mean, m2

    def summary(self) -> tuple[float, float, complex, float]:
        """`(minimum, maximum, mean, rms)` of every value of the file; the mean is complex."""
        with self._lock:
            written = self._written
            n = self._values
            count = n * len(written)
            if count == 0 or not written.any():
                return (0.0, 0.0, 0j, 0.0)
            unwritten = int((~written).sum())
            low = min(self._min[written].min(), 0.0) if unwritten else self._min[written].min()
            high = max(self._max[written].max(), 0.0) if unwritten else self._max[written].max()
            mean = complex(self._mean[written].sum() * n / count)
            m2 = float(self._m2[written].sum() + n * np.square(np.abs(self._mean[written] - mean)).sum())
            m2 += unwritten * n * abs(mean) ** 2
            return (float(low), float(high), mean, float(np.sqrt(m2 / count)))


class RawArrayWriter(ImageWriter):
    """Writes images uncompressed at an offset of a file made beside `key`, renamed onto it at the end.

    Args:
        key: The path of the file to make.
        descriptor: What the file holds.
        file_dtype: The type and byte order of the values in the file.
        prepare: Given the new file (a binary file object at its start), writes its
            header and size and returns where image 0 starts.
        complete: Given the open file and the statistics, finishes its header;
            None when the format keeps no statistics.
    """

    def __init__(
        self,
        key: str,
        descriptor: ImageDescriptor,
        file_dtype: np.dtype,
        prepare: Callable[[BinaryIO], int],
        complete: Callable[[int, Statistics], None] | None = None,
    ):
        super().__init__(key, descriptor)
        self._dtype = np.dtype(file_dtype)
        self._image_values = int(np.prod(self.core_extents, dtype=np.int64))
        self._image_bytes = self._image_values * self._dtype.itemsize
        self._complete = complete
        self._statistics = Statistics(self.image_count, self._image_values) if complete else None
        with _naming(key):
            self._partial = PartialFile(key)
        self._fd = self._partial.fd
        try:
            with _naming(key), self._partial.file() as file:
                self._offset = prepare(file)
        except BaseException:
            self._partial.discard()
            raise

    def write_run(self, start: int, sources: Sequence[np.ndarray]) -> None:
        if start < 0 or start + len(sources) > self.image_count:
            raise past_the_end(self.key, start + len(sources) - 1, self.image_count)
        for i, source in enumerate(sources):
            if source.shape != self.core_extents:
                raise ValueError(
                    f"{self.key}: an image of shape {source.shape} does not fit {self.core_extents}"
                )
            if source.dtype == self._dtype and source.flags.c_contiguous:
                stored = source
            else:
                stored = _thread_buffer(self._image_bytes).view(self._dtype).reshape(self.core_extents)
                np.copyto(stored, source, casting="unsafe")
            offset = self._offset + (start + i) * self._image_bytes
            data = memoryview(stored.reshape(-1).view(np.uint8))
            with _naming(self.key):
                while data:
                    written = os.pwrite(self._fd, data, offset)
                    data, offset = data[written:], offset + written
            if self._statistics is not None:
                self._statistics.record(start + i, stored)

    def flush(self) -> None:
        """Complete the header as of now, hand the file to the system and move it onto its path."""
        with _naming(self.key):
            if self._complete is not None:
                self._complete(self._fd, self._statistics)
            os.fsync(self._fd)
            self._partial.expose()

    def finish(self) -> None:
        try:
            with _naming(self.key):
                if self._complete is not None:
                    self._complete(self._fd, self._statistics)
                self._fd = -1
                self._partial.publish()
        except BaseException:
            self.discard()
            raise

    def discard(self) -> None:
        self._fd = -1
        self._partial.discard()


@contextlib.contextmanager
def _naming(key: str) -> Iterator[None]:
    """Raise an `OSError` that does not name `key` again as one that does, of its class and errno."""
    try:
        yield
    except OSError as error:
        if key in str(error):
            raise
        if error.errno is None:
            raise type(error)(f"{key}: {error}") from error
        raise type(error)(error.errno, f"{key}: {error.strerror}") from error
