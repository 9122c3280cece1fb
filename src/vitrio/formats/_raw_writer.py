"""Writing images uncompressed at an offset (MRC, uncompressed TIFF), and the statistics of what was written.

A writer writes with `os.pwrite` into a private file made beside the
destination (`vitrio._partial.PartialFile`) and renamed onto it when flushed or
finished. An `OSError` of the system (a full disk, a file too large) is
raised again with the same errno and the file's key.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import BinaryIO

import numpy as np

from .._partial import PartialFile
from .._types import ImageDescriptor, past_the_end
from ._contract import ImageWriter

__all__ = ["RawArrayWriter", "Statistics"]

_buffers = threading.local()


def _thread_buffer(nbytes: int) -> np.ndarray:
    buffer = getattr(_buffers, "array", None)
    if buffer is None or buffer.nbytes < nbytes:
        buffer = np.empty(max(nbytes, 1 << 16), dtype=np.uint8)
        _buffers.array = buffer
    return buffer[:nbytes]


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
