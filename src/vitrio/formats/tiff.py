"""TIFF and BigTIFF, through tifffile: one page, many pages, compressed or not.

The first series of the file is what it holds, as tifffile reads its shape
and axes: the axes before the last `YX` (or `ZYX`, a volume) stack the
images. A file written a page at a time (tifffile's `append=True`, or
`contiguous=False`), which tifffile reads as a series per page, is a stack
of those pages when they are 2-D images of one shape and type.

A series stored uncompressed in one block, as tifffile and most
acquisition programs write it, is read like a raw array (out of a memory
map, see `_raw`); any other series is decoded by tifffile, a page at a
time.

Before a page is decoded, its data must lie in the file; a strip or tile
must not decode to more than the page needs (plus 1 MiB); and what the
page decodes to must not be more than its compression can make of its
bytes: 8 times as many bytes for uncompressed pages (of 1-bit samples), 128
for PackBits, 2048 for Deflate, 4096 for LZW, and `TiffFormat.max_expansion`
(1024) for any other compression, plus 1 MiB. So a malformed header, or a
small file of highly compressed data (a decompression bomb), cannot make
the reader allocate or decode what the file does not justify: it raises
`FormatError` naming the file and the page. A file that compresses better
than 1024 to 1 is read by a subclass of `TiffFormat` with a larger
`max_expansion`, registered or handed to the provider. A patch of a page
that is one 2-D image decodes only the strips or tiles it touches. The
segments of an LZW page are checked for the codes that crash
imagecodecs' LZW decoder (see `vitrio._native.lzw_check`). Opening a file
indexes all its pages first, which cuts a loop of pages that tifffile
would otherwise follow forever.

A reader's `voxel_size` comes from metadata that means a pixel size (ImageJ's,
OME-XML, FEI's, TVIPS's, Zeiss's; see `_tiff_metadata`), never from the
resolution tags alone; its `voxel_size_source` names the metadata.

Written files are uncompressed, one page per image (per section for
volumes), with tifffile's shape metadata: axes `YX` for an image, `IYX` for a
stack of images, `ZYX` for a volume, `IZYX` for a stack of volumes. A voxel
size given makes them ImageJ hyperstacks or OME-TIFF files that say it (see
`_tiff_metadata.written_layout`). They
become BigTIFF when the data passes 4 GiB. Bool is written as uint8. An
empty stack, or an image without pixels, is refused (`ValueError`): a TIFF
page holds at least one pixel.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, BinaryIO, ClassVar

import numpy as np
import tifffile

from .._native import lzw_check
from .._storage import ByteSource
from .._types import ImageDescriptor, NumericalType, numpy_dtype
from ._contract import Format, FormatError, ImageReader, ImageWriter
from ._raw import RawArrayReader
from ._raw_writer import RawArrayWriter
from ._remote_raw import raw_reader
from ._tiff_metadata import pixel_size, written_layout

__all__ = ["TiffFormat"]

_MAGIC = (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+")
_BIGTIFF_BYTES = 2**32 - 2**25
_EXPANSION = {1: 8, 5: 4096, 8: 2048, 32946: 2048, 32773: 128}
_EXPANSION_SLACK = 1 << 20
_LZW = 5
_REVERSED_BITS = bytes(int(f"{value:08b}"[::-1], 2) for value in range(256))


def _check_page(key: str, page: tifffile.TiffPage, index: int, size: int, max_expansion: int) -> None:
    """Raise `FormatError` if `page`'s data lie past the end of the file, or would decode to too much.

    Only the parts with both an offset and a byte count count as data.

    Args:
        key: The file's key, for messages.
        page: The page.
        index: Its index, for messages.
        size: The file's size.
        max_expansion: The most a page of a compression without a known bound
            may decode to, as a multiple of its bytes of data.
    """
    segments = list(zip(page.dataoffsets, page.databytecounts))
    for segment, (offset, count) in enumerate(segments):
        if offset + count > size:
            raise FormatError(
                f"{key}: page {index}: its data (part {segment}, bytes {offset} to {offset + count}) lie "
                f"past the end of the file ({size} bytes); the file is truncated"
            )
    held = sum(count for _, count in segments)
    geometry = page.keyframe
    itemsize = np.dtype(geometry.dtype).itemsize if geometry.dtype is not None else 1
    needed, part = math.prod(geometry.shape) * itemsize, math.prod(geometry.chunks) * itemsize
    if part > needed + _EXPANSION_SLACK:
        raise FormatError(
            f"{key}: page {index} of shape {geometry.shape} needs {needed} bytes, but its parts of shape "
            f"{geometry.chunks} would each decode to {part}"
        )
    compression = int(geometry.compression)
    expansion = _EXPANSION.get(compression, max_expansion)
    decoded = max(needed, part)
    if decoded > expansion * held + _EXPANSION_SLACK:
        raise FormatError(
            f"{key}: page {index} of shape {geometry.shape} would decode to {decoded} bytes, more than "
            f"{expansion} times its {held} bytes of data (compression {compression}): refused as a "
            "decompression bomb"
        )


def _check_lzw(
    key: str, data: bytes, geometry: tifffile.TiffPage, index: int, segment: int, offset: int
) -> None:
    """Raise `FormatError` if `data`, a segment of LZW page `index`, holds a code that crashes the decoder.

    The segment is checked for as many bytes as the largest segment of the page decodes to.

    Args:
        key: The file's key, for messages.
        data: The segment's bytes.
        geometry: The page's key frame.
        index: The page's index, for messages.
        segment: The segment's index, for messages.
        offset: Where the segment lies in the file, for messages.
    """
    samples = geometry.samplesperpixel if geometry.planarconfig == 1 else 1
    if geometry.is_tiled:
        values = geometry.tiledepth * geometry.tilelength * geometry.tilewidth
    else:
        values = min(geometry.rowsperstrip, geometry.imagelength) * geometry.imagewidth
    decoded = values * samples * (np.dtype(geometry.dtype).itemsize if geometry.dtype is not None else 1)
    if geometry.fillorder == 2:
        data = data.translate(_REVERSED_BITS)
    bad = lzw_check(data, decoded)
    if bad is not None:
        raise FormatError(f"{key}: page {index}: its LZW segment {segment} is corrupt at byte {offset + bad}")


def _appended_pages(tiff: tifffile.TiffFile) -> list[tifffile.TiffPage] | None:
    """The pages of a stack written a page at a time, or None if the file is not one.

    tifffile makes each page appended (`imwrite(..., append=True)`, or
    `TiffWriter.write(page, contiguous=False)` in a loop) a series of its
    own; series that are each one 2-D page of one shape and type are the
    images of one stack.
    """
    series = tiff.series
    if len(series) < 2:
        return None
    first = series[0]
    for one in series:
        if len(one.pages) != 1 or one.axes != "YX" or one.shape != first.shape or one.dtype != first.dtype:
            return None
    return [one.pages[0] for one in series]


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

    def __init__(
        self,
        key: str,
        tiff: tifffile.TiffFile,
        descriptor: ImageDescriptor,
        source: ByteSource,
        max_expansion: int,
        voxel_size: tuple[float, ...] | None = None,
        pages: Sequence[tifffile.TiffPage] | None = None,
    ):
        super().__init__(key, descriptor)
        self.voxel_size = voxel_size
        self._max_expansion = max_expansion
        self._tiff = tiff
        self._source = source
        self._size = source.size
        self._pages = tiff.series[0].pages if pages is None else pages
        pages, images = len(self._pages), max(self.image_count, 1)
        # A page holds whole images (tifffile writes a stack of 1-pixel-wide images as one page),
        # or an image spans whole pages (the sections of a volume).
        self._images_per_page = images // pages if pages and images % pages == 0 and images > pages else 1
        self._pages_per_image = pages // images
        leading = self.core_extents[0] if self.core_extents else 0
        if self._images_per_page == 1 and (
            self._pages_per_image < 1 or pages % images or (leading % self._pages_per_image)
        ):
            raise FormatError(
                f"{key}: TIFF of {pages} pages does not split into {self.image_count} "
                f"images of shape {self.core_extents}"
            )
        # a patch of a page that is one 2-D image is cut out of the strips or tiles it touches
        self._by_segment = (
            self._images_per_page == 1 and self._pages_per_image == 1 and len(self.core_extents) == 2
        )
        self._lock = threading.Lock()

    def read_run(self, start: int, outs: Sequence[np.ndarray]) -> None:
        self.check_run(start, len(outs))
        if self._images_per_page > 1:
            for i, out in enumerate(outs):
                page, within = divmod(start + i, self._images_per_page)
                values = self._page(page).reshape((self._images_per_page, *self.core_extents))
                np.copyto(out, values[within], casting="unsafe")
            return
        per_image = self._pages_per_image
        for i, out in enumerate(outs):
            first = (start + i) * per_image
            step = out.shape[0] // per_image
            for z in range(per_image):
                values = self._page(first + z)
                part = out[z * step : (z + 1) * step]
                if values.size != part.size:
                    raise FormatError(
                        f"{self.key}: page {first + z} holds {values.shape}, not a part of shape {part.shape}"
                    )
                np.copyto(part, values.reshape(part.shape), casting="unsafe")

    def read_region(self, index: int, region: tuple[slice, ...], out: np.ndarray) -> None:
        self.read_regions(index, [region], [out])

    def read_regions(
        self, index: int, regions: Sequence[tuple[slice, ...]], outs: Sequence[np.ndarray]
    ) -> None:
        """Copy each of `regions` of image `index` into its out, decoding only the parts they touch.

        Where an image is one 2-D page, only the strips or tiles that the
        regions touch are decoded, each once; otherwise the image is.
        """
        self.check_run(index, 1)
        if self._by_segment:
            self._read_segments(index, regions, outs)
            return
        image = np.empty(self.core_extents, dtype=numpy_dtype(self.descriptor.data_type))
        self.read_run(index, [image])
        for region, out in zip(regions, outs):
            np.copyto(out, image[region], casting="unsafe")

    def _read_segments(
        self, number: int, regions: Sequence[tuple[slice, ...]], outs: Sequence[np.ndarray]
    ) -> None:
        """Copy `regions` of 2-D page `number` into `outs`, decoding the strips or tiles they touch."""
        with self._reading(number):
            with self._lock:
                page = self._checked(number)
                geometry = page.keyframe
                if tuple(geometry.shape) != self.core_extents:
                    raise FormatError(
                        f"{self.key}: page {number} holds {geometry.shape}, not {self.core_extents}"
                    )
                decode, tables = geometry.decode, geometry.jpegtables
                segments = list(zip(page.dataoffsets, page.databytecounts))
            rows, columns = geometry.chunks[:2]
            per_row = geometry.chunked[1] if len(geometry.chunked) > 1 else 1
            decoded: dict[int, tuple[np.ndarray, int, int]] = {}
            for region, out in zip(regions, outs):
                (y0, y1, _), (x0, x1, _) = (
                    part.indices(extent) for part, extent in zip(region, self.core_extents)
                )
                if y1 <= y0 or x1 <= x0:
                    continue
                for row in range(y0 // rows, (y1 - 1) // rows + 1):
                    for column in range(x0 // columns, (x1 - 1) // columns + 1):
                        segment = row * per_row + column
                        if segment not in decoded:
                            decoded[segment] = self._segment(
                                number, geometry, decode, tables, segments, segment
                            )
                        values, top, left = decoded[segment]
                        a, b = max(y0, top), min(y1, top + values.shape[0])
                        c, d = max(x0, left), min(x1, left + values.shape[1])
                        if a < b and c < d:
                            np.copyto(
                                out[a - y0 : b - y0, c - x0 : d - x0],
                                values[a - top : b - top, c - left : d - left],
                                casting="unsafe",
                            )

    def _segment(
        self,
        number: int,
        geometry: tifffile.TiffPage,
        decode: Callable[..., Any],
        tables: bytes | None,
        segments: list[tuple[int, int]],
        segment: int,
    ) -> tuple[np.ndarray, int, int]:
        """Strip or tile `segment` of 2-D page `number`, decoded, and where its first row and column lie."""
        if segment >= len(segments):
            raise FormatError(f"{self.key}: page {number} has {len(segments)} parts, not part {segment}")
        offset, count = segments[segment]
        data = self._source.pread(count, offset) if count else None
        if data is not None and len(data) < count:
            raise FormatError(
                f"{self.key}: page {number}: the file is truncated at byte {offset + len(data)}"
            )
        if data is not None and int(geometry.compression) == _LZW:
            _check_lzw(self.key, data, geometry, number, segment, offset)
        values, position, shape = decode(data, segment, jpegtables=tables)
        if values is None:
            values = np.zeros(shape, dtype=geometry.dtype)
        return values.reshape(shape[1], shape[2]), int(position[2]), int(position[3])

    def _checked(self, number: int) -> tifffile.TiffPage:
        """Page `number`, checked to lie in the file and not to decode to too much; hold the lock."""
        page = self._pages[number]
        if page is None:
            raise IndexError("it is missing")
        _check_page(self.key, page, number, self._size, self._max_expansion)
        return page

    @contextlib.contextmanager
    def _reading(self, number: int) -> Iterator[None]:
        """Raise what reading page `number` raises as `FormatError` naming the file and the page."""
        try:
            yield
        except (FormatError, MemoryError):
            raise
        except Exception as error:
            raise FormatError(
                f"{self.key}: page {number} cannot be read (is the file truncated?): {error}"
            ) from error

    def _page(self, number: int) -> np.ndarray:
        """The values of page `number`, decoded after checking it fits the file."""
        with self._reading(number), self._lock:  # tifffile loads pages lazily, seeking the shared file
            page = self._checked(number)
            if int(page.keyframe.compression) == _LZW:
                for segment, (offset, count) in enumerate(zip(page.dataoffsets, page.databytecounts)):
                    _check_lzw(
                        self.key, self._source.pread(count, offset), page.keyframe, number, segment, offset
                    )
            return page.asarray()

    def close(self) -> None:
        self._tiff.close()
        self._source.close()


class TiffFormat(Format):
    """TIFF and BigTIFF files: `.tif .tiff`.

    Class attributes:
        max_expansion: The most a page of a compression without a known bound
            (zstd, LZMA, JPEG, ...) may decode to, as a multiple of its bytes
            of data (plus 1 MiB); a page that would decode to more is refused
            as a decompression bomb. A subclass may raise it.
    """

    name = "tiff"
    read_extensions = (".tif", ".tiff")
    write_extensions = (".tif", ".tiff")
    reads_urls = True
    max_expansion: ClassVar[int] = 1024

    @classmethod
    def recognizes(cls, head: bytes, extension: str) -> bool:
        return head[:4] in _MAGIC or extension in cls.read_extensions

    @classmethod
    def open(cls, key: str, source: ByteSource, head: bytes) -> ImageReader:
        file = source.open_blocks()
        try:
            tiff = tifffile.TiffFile(file, name=os.path.basename(key))
            len(tiff.pages)  # indexes every page, which cuts a loop of pages before tifffile follows it
            if not tiff.series:
                raise FormatError(f"{key}: TIFF holds no image")
            series = tiff.series[0]
            descriptor = _descriptor(key, series)
            voxel_size, said_in = pixel_size(tiff, series.pages[0], descriptor.core_rank)
            offset = series.dataoffset
            pages = _appended_pages(tiff)
            if pages is not None:
                descriptor = ImageDescriptor((len(pages), *descriptor.extents), 2, descriptor.data_type)
            raw = offset is not None and pages is None and series.dtype != np.dtype(bool)
            if not raw:
                _check_page(key, series.pages[0], 0, source.size, cls.max_expansion)
        except (FormatError, MemoryError):
            file.close()
            raise
        except Exception as error:
            file.close()
            raise FormatError(f"{key}: not a readable TIFF file: {error}") from error
        if raw:
            stored = np.dtype(series.dtype).newbyteorder(tiff.byteorder)
            tiff.close()
            file.close()
            reader: ImageReader = raw_reader(
                RawArrayReader, key, source, descriptor, stored, offset, voxel_size=voxel_size
            )
        else:
            try:
                reader = _TiffPagesReader(key, tiff, descriptor, source, cls.max_expansion, voxel_size, pages)
            except BaseException:
                tiff.close()
                file.close()
                raise
        reader.voxel_size_source = said_in
        return reader

    stores_voxel_size = True

    @classmethod
    def create(
        cls, key: str, descriptor: ImageDescriptor, voxel_size: tuple[float, ...] | None = None
    ) -> ImageWriter:
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

        bigtiff = nbytes >= _BIGTIFF_BYTES
        layout = written_layout(axes, dtype, extents, voxel_size, bigtiff)

        def prepare(file: BinaryIO) -> int:
            offset, _ = tifffile.imwrite(
                file,
                shape=extents,
                dtype=dtype,
                photometric="minisblack",
                bigtiff=bigtiff,
                returnoffset=True,
                **layout,
            )
            return offset

        return RawArrayWriter(key, descriptor, dtype, prepare)
