"""Readers and writers of files whose images lie uncompressed, one after another, at an offset.

MRC, uncompressed TIFF and DM files are laid out so: a header, then the
values of image 0, image 1, ... in one type and byte order. Runs of
consecutive images are read with one `os.preadv` straight into the
destination's memory when it already has the file's type; otherwise a
per-thread buffer takes a chunk at a time and numpy converts it into place.
Patches are copied out of a memory map of the file.
"""

from __future__ import annotations

import mmap
import os
import threading
from collections.abc import Callable, Sequence

import numpy as np

from .._types import ImageDescriptor
from ._base import FormatError, ImageReader, ImageWriter, temporary_path

__all__ = ["RawArrayReader", "RawArrayWriter", "Statistics", "read_exactly"]

_IOV_MAX = min(os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024, 1024)
_CHUNK_BYTES = 4 << 20
_buffers = threading.local()

Decoder = Callable[[np.ndarray, np.ndarray], None]
"""Turns values as the file holds them into an out array of any type."""


def _thread_buffer(nbytes: int) -> np.ndarray:
    buffer = getattr(_buffers, "array", None)
    if buffer is None or buffer.nbytes < nbytes:
        buffer = np.empty(max(nbytes, 1 << 16), dtype=np.uint8)
        _buffers.array = buffer
    return buffer[:nbytes]


def read_exactly(fd: int, buffers: Sequence, offset: int, key: str) -> None:
    """Fill `buffers` (writable byte buffers) from consecutive bytes of `fd` at `offset`.

    Raises:
        FormatError: If the file ends first (it is truncated).
    """
    views = [memoryview(b).cast("B") for b in buffers]
    while views:
        count = os.preadv(fd, views[:_IOV_MAX], offset)
        if count == 0:
            raise FormatError(f"{key}: the file is truncated: no data at byte {offset}")
        offset += count
        while views and count >= len(views[0]):
            count -= len(views[0])
            views.pop(0)
        if views and count:
            views[0] = views[0][count:]


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
    ):
        super().__init__(key, descriptor)
        self._fd = fd
        self._dtype = np.dtype(file_dtype)
        self._offset = int(offset)
        self._axes = axes if axes is not None and tuple(axes) != tuple(range(len(axes))) else None
        self._stored_core = (
            self.core_extents
            if self._axes is None
            else tuple(self.core_extents[self._axes.index(i)] for i in range(len(self._axes)))
        )
        self._decoder = decoder
        self._image_values = int(np.prod(self.core_extents, dtype=np.int64))
        self._image_bytes = self._image_values * self._dtype.itemsize
        self._end = self._offset + self.image_count * self._image_bytes
        self._direct = decoder is None and self._axes is None and self._dtype.isnative
        self._map: np.ndarray | None = None
        self._mmap: mmap.mmap | None = None
        self._map_lock = threading.Lock()
        size = os.fstat(fd).st_size
        if size < self._end:
            raise FormatError(
                f"{key}: the file is truncated: it has {size} bytes, its header says its "
                f"images need {self._end}"
            )

    @property
    def file_dtype(self) -> np.dtype:
        """The type and byte order of the values in the file."""
        return self._dtype

    @property
    def data_offset(self) -> int:
        """Where image 0 starts in the file."""
        return self._offset

    def read_run(self, start: int, outs: Sequence[np.ndarray]) -> None:
        self.check_run(start, len(outs))
        offset = self._offset + start * self._image_bytes
        if self._direct and all(o.dtype == self._dtype and o.flags.c_contiguous for o in outs):
            read_exactly(self._fd, [o.reshape(-1).view(np.uint8) for o in outs], offset, self.key)
            return
        for i, out in enumerate(outs):
            self._read_converted(offset + i * self._image_bytes, out)

    def _read_converted(self, offset: int, out: np.ndarray) -> None:
        if self._axes is not None:
            stored = _thread_buffer(self._image_bytes).view(self._dtype).reshape(self._stored_core)
            read_exactly(self._fd, [stored], offset, self.key)
            self._convert(stored.transpose(self._axes), out)
            return
        rows = out.shape[0]
        row_bytes = self._image_bytes // max(rows, 1)
        step = max(1, _CHUNK_BYTES // max(row_bytes, 1))
        for first in range(0, rows, step):
            last = min(rows, first + step)
            stored = _thread_buffer((last - first) * row_bytes).view(self._dtype)
            read_exactly(self._fd, [stored], offset + first * row_bytes, self.key)
            self._convert(stored.reshape((last - first, *self.core_extents[1:])), out[first:last])

    def _convert(self, stored: np.ndarray, out: np.ndarray) -> None:
        if self._decoder is not None:
            self._decoder(stored, out)
        else:
            np.copyto(out, stored, casting="unsafe")

    def _mapped(self) -> np.ndarray:
        with self._map_lock:
            if self._map is None:
                self._mmap = mmap.mmap(self._fd, self._end, access=mmap.ACCESS_READ)
                values = np.frombuffer(
                    self._mmap, self._dtype, self.image_count * self._image_values, self._offset
                ).reshape((self.image_count, *self._stored_core))
                self._map = values if self._axes is None else values.transpose(0, *(a + 1 for a in self._axes))
            return self._map

    def read_region(self, index: int, region: tuple[slice, ...], out: np.ndarray) -> None:
        self.check_run(index, 1)
        image = self._mapped()[index]
        self.check_unchanged()
        self._convert(image[region], out)

    def check_unchanged(self) -> None:
        size = os.fstat(self._fd).st_size
        if size < self._end:
            raise OSError(f"{self.key}: the file was truncated to {size} bytes while open")

    def close(self) -> None:
        with self._map_lock:
            self._map = None
            if self._mmap is not None:
                self._mmap.close()
                self._mmap = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


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
        prepare: Makes the file at a temporary path and returns where image 0 starts.
        complete: Given the open file and the statistics, finishes its header;
            None when the format keeps no statistics.
    """

    def __init__(
        self,
        key: str,
        descriptor: ImageDescriptor,
        file_dtype: np.dtype,
        prepare: Callable[[str], int],
        complete: Callable[[int, Statistics], None] | None = None,
    ):
        super().__init__(key, descriptor)
        self._dtype = np.dtype(file_dtype)
        self._image_values = int(np.prod(self.core_extents, dtype=np.int64))
        self._image_bytes = self._image_values * self._dtype.itemsize
        self._complete = complete
        self._statistics = Statistics(self.image_count, self._image_values) if complete else None
        directory = os.path.dirname(os.path.abspath(key))
        if not os.path.isdir(directory):
            raise FileNotFoundError(f"{key}: no directory {directory} to write the file in")
        self._partial = temporary_path(key)
        try:
            self._offset = prepare(self._partial)
            self._fd = os.open(self._partial, os.O_RDWR)
        except BaseException:
            _remove(self._partial)
            raise

    def write_run(self, start: int, sources: Sequence[np.ndarray]) -> None:
        if start < 0 or start + len(sources) > self.image_count:
            raise IndexError(f"{self.key}: index {start + len(sources) - 1} is past the end of a stack of {self.image_count}")
        for i, source in enumerate(sources):
            if source.shape != self.core_extents:
                raise ValueError(f"{self.key}: an image of shape {source.shape} does not fit {self.core_extents}")
            if source.dtype == self._dtype and source.flags.c_contiguous:
                stored = source
            else:
                stored = _thread_buffer(self._image_bytes).view(self._dtype).reshape(self.core_extents)
                np.copyto(stored, source, casting="unsafe")
            offset = self._offset + (start + i) * self._image_bytes
            data = memoryview(stored.reshape(-1).view(np.uint8))
            while data:
                written = os.pwrite(self._fd, data, offset)
                data, offset = data[written:], offset + written
            if self._statistics is not None:
                self._statistics.record(start + i, stored)

    def flush(self) -> None:
        if self._complete is not None:
            self._complete(self._fd, self._statistics)
        os.fsync(self._fd)

    def finish(self) -> None:
        try:
            if self._complete is not None:
                self._complete(self._fd, self._statistics)
            os.close(self._fd)
            self._fd = -1
            os.replace(self._partial, self.key)
        except BaseException:
            self.discard()
            raise

    def discard(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        _remove(self._partial)


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
