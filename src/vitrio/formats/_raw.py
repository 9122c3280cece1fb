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
from collections.abc import Callable, Iterator, Sequence
from typing import BinaryIO

import numpy as np

from .._arrays import gather
from .._fs import PartialFile
from .._native import map_file
from .._types import ImageDescriptor, past_the_end
from ._contract import FormatError, HeaderStatistics, ImageReader, ImageWriter

__all__ = ["Decoder", "RawArrayReader", "RawArrayWriter", "Statistics"]

_buffers = threading.local()

Decoder = Callable[[np.ndarray, np.ndarray], None]
"""Turns values as the file holds them into an out array of any type."""


def _thread_buffer(nbytes: int) -> np.ndarray:
    buffer = getattr(_buffers, "array", None)
    if buffer is None or buffer.nbytes < nbytes:
        buffer = np.empty(max(nbytes, 1 << 16), dtype=np.uint8)
        _buffers.array = buffer
    return buffer[:nbytes]


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
        size = os.fstat(fd).st_size
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

    def _copy(self, stored: np.ndarray, out: np.ndarray) -> None:
        if self._decoder is not None:
            self._decoder(stored, out)
        else:
            np.copyto(out, stored, casting="unsafe")

    def read_run(self, start: int, outs: Sequence[np.ndarray]) -> None:
        self.check_run(start, len(outs))
        self.check_unchanged()
        for i, out in enumerate(outs):
            self._copy(self._images[start + i], out)
        self._check_copied()

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
