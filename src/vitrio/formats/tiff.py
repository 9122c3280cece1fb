"""TIFF and BigTIFF, through tifffile: one page, many pages, compressed or not.

The first series of the file is what it holds, as tifffile reads its shape
and axes: the axes before the last `YX` (or `ZYX`, a volume) stack the
images. A series stored uncompressed in one block, as tifffile and most
acquisition programs write it, is read like a raw array (runs with one
`preadv`, patches from a memory map); any other series is decoded by
tifffile, a page at a time.

Written files are uncompressed, one page per image (per section for
volumes), with tifffile's shape metadata: axes `YX` for an image, `IYX` for a
stack of images, `ZYX` for a volume, `IZYX` for a stack of volumes. They
become BigTIFF when the data passes 4 GiB. Bool is written as uint8. An
empty stack, or an image without pixels, is refused (`ValueError`): a TIFF
page holds at least one pixel.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence

import numpy as np
import tifffile

from .._types import ImageDescriptor, NumericalType, numpy_dtype
from ._base import Format, FormatError, ImageReader, ImageWriter, register_format
from ._raw import RawArrayReader, RawArrayWriter

__all__ = ["TiffFormat"]

_MAGIC = (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+")
_BIGTIFF_BYTES = 2**32 - 2**25


def _descriptor(key: str, series: tifffile.TiffPageSeries) -> ImageDescriptor:
    axes, shape = series.axes, tuple(series.shape)
    if "S" in axes:
        raise FormatError(f"{key}: TIFF of {series.shape} with samples per pixel ({axes}) is not supported")
    if not axes.endswith("YX"):
        raise FormatError(f"{key}: TIFF series axes {axes!r} do not end with YX")
    core_rank = 3 if axes.endswith("ZYX") else 2
    try:
        return ImageDescriptor(shape, core_rank, series.dtype)
    except TypeError as error:
        raise FormatError(f"{key}: TIFF values of type {series.dtype} are not supported") from error


class _TiffPagesReader(ImageReader):
    """Decodes a series page by page with tifffile, one page at a time per file.

    An image (or volume) spans a whole number of pages: one page per image,
    one page per section of a volume, or one page holding a whole volume
    (an SGI `ImageDepth` page, as tifffile writes `ZYX` data).

    Raises:
        FormatError: If the pages do not split evenly into the series' images.
    """

    def __init__(self, key: str, tiff: tifffile.TiffFile, descriptor: ImageDescriptor, fd: int):
        super().__init__(key, descriptor)
        self._tiff = tiff
        self._fd = fd
        self._pages = tiff.series[0].pages
        self._pages_per_image = len(self._pages) // max(self.image_count, 1)
        leading = self.core_extents[0] if self.core_extents else 0
        if (
            self._pages_per_image < 1
            or len(self._pages) % max(self.image_count, 1)
            or (leading % self._pages_per_image)
        ):
            raise FormatError(
                f"{key}: TIFF of {len(self._pages)} pages does not split into {self.image_count} "
                f"images of shape {self.core_extents}"
            )
        self._lock = threading.Lock()

    def read_run(self, start: int, outs: Sequence[np.ndarray]) -> None:
        self.check_run(start, len(outs))
        per_image = self._pages_per_image
        for i, out in enumerate(outs):
            first = (start + i) * per_image
            step = out.shape[0] // per_image
            for z in range(per_image):
                try:
                    with self._lock:  # tifffile loads pages lazily, seeking the shared file
                        page = self._pages[first + z]
                        if page is None:
                            raise IndexError("it is missing")
                        values = page.asarray()
                except Exception as error:
                    raise FormatError(
                        f"{self.key}: page {first + z} cannot be read (is the file truncated?): {error}"
                    ) from error
                part = out[z * step : (z + 1) * step]
                if values.size != part.size:
                    raise FormatError(
                        f"{self.key}: page {first + z} holds {values.shape}, not a part of shape {part.shape}"
                    )
                np.copyto(part, values.reshape(part.shape), casting="unsafe")

    def close(self) -> None:
        self._tiff.close()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


@register_format
class TiffFormat(Format):
    """TIFF and BigTIFF files: `.tif .tiff`."""

    name = "tiff"
    read_extensions = (".tif", ".tiff")
    write_extensions = (".tif", ".tiff")

    @classmethod
    def recognizes(cls, head: bytes, extension: str) -> bool:
        return head[:4] in _MAGIC or extension in cls.read_extensions

    @classmethod
    def open(cls, key: str, fd: int, head: bytes) -> ImageReader:
        file = open(fd, "rb", closefd=False)  # noqa: SIM115 - the reader owns it
        try:
            tiff = tifffile.TiffFile(file, name=os.path.basename(key))
            if not tiff.series:
                raise FormatError(f"{key}: TIFF holds no image")
            series = tiff.series[0]
            descriptor = _descriptor(key, series)
            offset = series.dataoffset
        except FormatError:
            file.close()
            raise
        except Exception as error:
            file.close()
            raise FormatError(f"{key}: not a readable TIFF file: {error}") from error
        if offset is not None and series.dtype != np.dtype(bool):
            stored = np.dtype(series.dtype).newbyteorder(tiff.byteorder)
            tiff.close()
            file.close()
            return RawArrayReader(key, fd, descriptor, stored, offset)
        try:
            return _TiffPagesReader(key, tiff, descriptor, fd)
        except BaseException:
            tiff.close()
            file.close()
            raise

    @classmethod
    def create(cls, key: str, descriptor: ImageDescriptor) -> ImageWriter:
        if descriptor.data_type is NumericalType.complex_float16:
            raise ValueError(f"{key}: TIFF cannot hold complex_float16 values")
        if 0 in descriptor.extents:
            raise ValueError(f"{key}: TIFF cannot hold an empty stack or an image without pixels")
        dtype = (
            np.dtype(np.uint8)
            if descriptor.data_type is NumericalType.boolean
            else numpy_dtype(descriptor.data_type)
        )
        extents = descriptor.extents
        core = "ZYX" if descriptor.core_rank == 3 else "YX"
        stack = len(extents) - descriptor.core_rank
        if stack > 1 or len(core) != descriptor.core_rank:
            raise ValueError(f"{key}: TIFF holds images, volumes and stacks of one of them, not {descriptor}")
        axes = "I" * stack + core
        nbytes = int(np.prod(extents, dtype=np.int64)) * dtype.itemsize

        def prepare(path: str) -> int:
            offset, _ = tifffile.imwrite(
                path,
                shape=extents,
                dtype=dtype,
                photometric="minisblack",
                metadata={"axes": axes},
                bigtiff=nbytes >= _BIGTIFF_BYTES,
                returnoffset=True,
            )
            return offset

        return RawArrayWriter(key, descriptor, dtype, prepare)
