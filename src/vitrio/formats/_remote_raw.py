"""Reading raw files (images stored uncompressed at an offset) at URLs, by byte ranges.

The remote twin of `RawArrayReader`: the header parsed by the same format
code (a format reads any `ByteSource` alike), then images fetched as byte
ranges, those of one call all at once (`RemoteFile.read_ranges` merges and
fetches them concurrently), and
converted from the fetched bytes. A patch fetches the rows it crosses, never
the whole image; a single volume's sections are images of their own here, so
that sections of a particle stack whose header says volume are fetched
together too.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._storage import ByteSource
from .._types import ImageDescriptor, section_view
from ._contract import ImageReader
from ._raw import Decoder, RawArrayReader, check_size

__all__ = ["RemoteRawReader", "raw_reader"]


class RemoteRawReader(ImageReader):
    """Images stored uncompressed at `offset` of a file at a URL, each `core` values of `file_dtype`.

    Args:
        key, descriptor, file_dtype, offset, axes, decoder: As `RawArrayReader` takes them.
        file: The file's bytes (a `ByteSource` with no descriptor: a `RemoteFile`).
        said: What the header says, as `RawArrayReader` takes it (`voxel_size`, `header_statistics`).

    Raises:
        FormatError: If the file is shorter than its images need.
    """

    fetches_ranges = True

    def __init__(
        self,
        key: str,
        file: ByteSource,
        descriptor: ImageDescriptor,
        file_dtype: np.dtype,
        offset: int,
        axes: tuple[int, ...] | None = None,
        decoder: Decoder | None = None,
        **said: Any,
    ):
        super().__init__(key, descriptor)
        self.voxel_size = said.get("voxel_size")
        self.header_statistics = said.get("header_statistics")
        self.file = file
        self._dtype = np.dtype(file_dtype)
        self._offset = int(offset)
        self._axes = axes if axes is not None and tuple(axes) != tuple(range(len(axes))) else None
        core = self.core_extents
        self._stored = (
            core if self._axes is None else tuple(core[self._axes.index(i)] for i in range(len(core)))
        )
        self._decoder = decoder
        self.image_bytes = math.prod(self._stored) * self._dtype.itemsize
        check_size(key, file.size, self._offset + self.image_count * self.image_bytes)

    @property
    def source(self) -> ByteSource:
        """The file its images are fetched from, as `image_ranges` gives their ranges."""
        return self.file

    def _image(self, body: Any) -> np.ndarray:
        values = np.frombuffer(body, self._dtype).reshape(self._stored)
        return values if self._axes is None else values.transpose(self._axes)

    def read_run(self, start: int, outs: Sequence[np.ndarray]) -> None:
        self.check_run(start, len(outs))
        first = self._offset + start * self.image_bytes
        body = self.file.read_ranges([(first, first + len(outs) * self.image_bytes)])[0]
        for i, out in enumerate(outs):
            self._copy(self._image(body[i * self.image_bytes : (i + 1) * self.image_bytes]), out)

    def _copy(self, values: np.ndarray, out: np.ndarray) -> None:
        if self._decoder is not None:
            self._decoder(values, out)
        else:
            np.copyto(out, values, casting="unsafe")

    def read_images(self, indices: np.ndarray, out: np.ndarray, slots: np.ndarray) -> None:
        self.put_images(self.file.read_ranges(self.image_ranges(indices)), out, slots)

    def image_ranges(self, indices: np.ndarray) -> list[tuple[int, int]]:
        """The byte ranges of images `indices`, to fetch with `read_many` and give `put_images`.

        Raises:
            IndexError: If an index is past the end of the stack.
        """
        self.check_indices(indices)
        starts = (self._offset + np.asarray(indices, dtype=np.int64) * self.image_bytes).tolist()
        return [(a, a + self.image_bytes) for a in starts]

    def put_images(self, bodies: Sequence[Any], out: np.ndarray, slots: np.ndarray) -> None:
        """Convert the fetched `bodies` of `image_ranges` into `out[slots]`."""
        for body, slot in zip(bodies, slots.tolist()):
            self._copy(self._image(body), out[slot])

    def read_region(self, index: int, region: tuple[slice, ...], out: np.ndarray) -> None:
        self.read_regions(index, [region], [out])

    def read_regions(
        self, index: int, regions: Sequence[tuple[slice, ...]], outs: Sequence[np.ndarray]
    ) -> None:
        image = self._offset + index * self.image_bytes
        self.check_run(index, 1)
        if self._axes is not None:  # stored in another order: the whole image
            values = self._image(self.file.read_ranges([(image, image + self.image_bytes)])[0])
            for region, out in zip(regions, outs):
                self._copy(values[region], out)
            return
        bounds = [_bounds(region, self.core_extents) for region in regions]
        spans = [self._rows(image, b) for b in bounds]
        bodies = iter(self.file.read_ranges([s for rows in spans for s in rows]))
        for (low, high), rows, out in zip(bounds, spans, outs):
            shape = (*(h - lo for lo, h in zip(low[:-1], high[:-1])), self.core_extents[-1])
            block = np.empty(shape, self._dtype)
            flat = block.reshape(-1).view(np.uint8)
            at = 0
            for _ in rows:
                body = next(bodies)
                flat[at : at + len(body)] = np.frombuffer(body, np.uint8)
                at += len(body)
            self._copy(block[..., low[-1] : high[-1]], out)

    def _rows(self, image: int, bounds: tuple[tuple[int, ...], tuple[int, ...]]) -> list[tuple[int, int]]:
        """The byte ranges of the whole rows a region's box crosses: one per plane of its outer axes."""
        low, high = bounds
        extents, item = self.core_extents, self._dtype.itemsize
        row = extents[-1] * item
        strides = [math.prod(extents[i + 1 : -1]) * row for i in range(len(extents) - 1)]
        ranges = []
        for outer in itertools.product(*(range(a, b) for a, b in zip(low[:-2], high[:-2]))):
            at = image + sum(i * s for i, s in zip(outer, strides))
            if len(extents) == 1:
                ranges.append((image + low[0] * item, image + high[0] * item))
            else:
                ranges.append((at + low[-2] * row, at + high[-2] * row))
        return ranges

    def indexed(self) -> ImageReader:
        """A single volume's 2-D sections as images of their own, fetched by ranges as images are."""
        view = section_view(self.descriptor)
        if view is None or self._axes is not None or self._decoder is not None:
            return super().indexed()
        sections = getattr(self, "_sections", None)
        if sections is None:
            sections = self._sections = RemoteRawReader(self.key, self.file, view, self._dtype, self._offset)
            sections.format_name, sections.header_statistics = self.format_name, self.header_statistics
            sections.voxel_size = None if self.voxel_size is None else self.voxel_size[1:]
            sections.voxel_size_source = self.voxel_size_source
        return sections


def _bounds(region: tuple[slice, ...], extents: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The low and high corner of a region of unit steps within an image of `extents`."""
    spans = [
        s.indices(n)[:2] for s, n in zip((*region, *(slice(None),) * (len(extents) - len(region))), extents)
    ]
    return tuple(a for a, _ in spans), tuple(max(a, b) for a, b in spans)


def raw_reader(cls: type[RawArrayReader], key: str, source: ByteSource, *args: Any, **kwargs: Any) -> Any:
    """A `cls` (a `RawArrayReader`) of the local file `source`, or a `RemoteRawReader` of a file with no
    descriptor (at a URL)."""
    if source.fileno() is None:
        return RemoteRawReader(key, source, *args, **kwargs)
    return cls(key, source, *args, **kwargs)
