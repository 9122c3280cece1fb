"""`ImageSource`: images or volumes read from files, a location (or a row of them) for each row.

The locations are planned once, when the source is made, into the distinct
keys and two integer arrays, the key and the index in its stack of every
location; `LocationColumns` (what `particle_locations` gives) are those
already. Reading a batch is then fancy indexing of those arrays, handed to
the core's planned batch read, and `locations` and `subset` are views of
them: no Python object per row on the way.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from .._concurrency import Completion
from .._errors import PastTheEndError
from .._functions import reader_provider
from .._loading import ImageLoader, plan_locations, read_indexed_async
from .._locations import LocationColumns
from .._providers import ImageReaderProvider
from .._types import ImageDescriptor, ImageLocation, past_the_end, section_view
from ._source import FileSource, Pendings, describe_failure

__all__ = ["ImageSource"]


def _is_location(item: Any) -> bool:
    return isinstance(item, (ImageLocation, str, os.PathLike))


def _location_rows(locations: Iterable[Any]) -> tuple[Any, int, bool]:
    """The locations flattened row by row, how many a row has, and whether rows are rows of locations."""
    if isinstance(locations, LocationColumns):
        if not len(locations):
            raise ValueError("an ImageSource needs at least one location")
        if locations.ndim == 1:
            return locations, 1, False
        if locations.shape[1] == 0:
            raise ValueError("a row of locations of an ImageSource is empty")
        return locations.ravel(), locations.shape[1], True
    items = list(locations)
    if not items:
        raise ValueError("an ImageSource needs at least one location")
    if _is_location(items[0]):
        return items, 1, False
    rows = [list(row) for row in items]
    width = len(rows[0])
    if width == 0:
        raise ValueError("a row of locations of an ImageSource is empty")
    for number, row in enumerate(rows):
        if len(row) != width:
            raise ValueError(
                f"every row needs as many locations: row 0 has {width}, row {number} has {len(row)}"
            )
    return [location for row in rows for location in row], width, True


class ImageSource(FileSource):
    """Images or volumes read from files, a location for each row.

    A row may have several locations instead, as many for every row: the
    tilts of a particle, the halves of a movie, an image and its target. Its
    value is then those images stacked, and shape has the number of
    locations of a row in front of the shape of one image.

    Every location has to name an image of the same shape. The files are
    asked for their shape when the source is made, each file once, and a
    location that does not fit is reported then.

    Args:
        locations: The location of the image of each row, or a row of
            locations for each row: ImageLocation objects, or keys of whole files.
        data_type: The type to read the values as. Defaults to the one the first file holds.
        readers: Where files are asked for their shape. Defaults to a
            provider that opens the file at the path a key is.
        check: Whether to ask every file for its shape, and every stack
            whether it holds the indices asked of it. Otherwise only the
            first file is asked.
        casting: None to refuse a `data_type` that cannot hold every value of the first file's;
            "unsafe" to convert to it as numpy's `casting="unsafe"` does (as `vitrio.read`).

    Raises:
        ValueError: If two locations name images of different shapes, a
            location has an index into a file that holds one 2-D image, or
            there are no locations. (An index into a file that holds one
            volume names one of its 2-D sections, as RELION and cryoSPARC
            name particles.)
        IndexError: If an index is past the end of its stack.
        DestinationTypeError: If `data_type` cannot hold the first file's values, without
            `casting="unsafe"`.
    """

    def __init__(
        self,
        locations: Iterable[Any],
        data_type: Any = None,
        readers: ImageReaderProvider | None = None,
        check: bool = True,
        casting: str | None = None,
    ):
        flat, width, multiple = _location_rows(locations)
        keys, key_ids, indices = plan_locations(flat)
        past_end = past_the_end
        if isinstance(flat, LocationColumns) and flat.origin is not None:
            past_end = _past_the_end_of_rows(flat, keys, key_ids, indices, width)
        readers = readers or reader_provider()
        image_shape, (first, *_) = plan_files(readers, keys, key_ids, indices, check, past_end)
        self._keys = keys
        self._key_ids = key_ids.reshape(-1, width)
        self._indices = indices.reshape(-1, width)
        self._read_as(keys[0], first.data_type, data_type, casting)
        self._shape = (width, *image_shape) if multiple else image_shape
        self._multiple = multiple

    def __len__(self) -> int:
        return len(self._key_ids)

    @property
    def locations(self) -> LocationColumns:
        """The location of each row, as an array of ImageLocation objects.

        Its shape is (rows,), or (rows, locations of a row) when rows have
        several. It holds the columns of the source, and makes an
        ImageLocation only when one is asked for (`LocationColumns`);
        `numpy.asarray` of it is an array of objects.
        """
        locations = LocationColumns(self._keys, self._key_ids, self._indices)
        return locations if self._multiple else locations.ravel()

    def read_async(self, loader: ImageLoader, rows: np.ndarray, out: np.ndarray) -> Pendings:
        """Start reading the values of some rows, as Source.read_async."""
        rows = np.asarray(rows, dtype=np.int64)
        key_ids, indices = self._key_ids[rows], self._indices[rows]
        image_shape = self._shape[1:] if self._multiple else self._shape
        if out.flags.c_contiguous:
            flat = out.reshape(-1, *image_shape)
            completion = read_indexed_async(
                loader, flat, self._keys, key_ids.ravel(), indices.ravel(), keep=out, casting=self._casting
            )
        else:
            completion = Completion.all(
                read_indexed_async(
                    loader, out[:, j], self._keys, key_ids[:, j], indices[:, j], out, self._casting
                )
                for j in range(key_ids.shape[1])
            )

        def describe_row(position: int) -> str:
            locations = ", ".join(
                str(ImageLocation(self._keys[k], i))
                for k, i in zip(key_ids[position].tolist(), indices[position].tolist())
            )
            return f"{int(rows[position])} ({locations})"

        explained = completion.explained(
            lambda error: describe_failure(error, rows, key_ids, self._keys, describe_row)
        )
        return Pendings([explained])

    def subset(self, rows: np.ndarray) -> ImageSource:
        """Get the source of only these rows, in this order."""
        source = copy.copy(self)
        rows = np.asarray(rows, dtype=np.int64)
        source._key_ids, source._indices = self._key_ids[rows], self._indices[rows]
        return source

    def __repr__(self) -> str:
        files = len(self._keys)
        return f"ImageSource({len(self)} rows, {files} files, shape={self._shape}, dtype={self._dtype})"


def _past_the_end_of_rows(
    located: LocationColumns, keys: list[str], key_ids: np.ndarray, indices: np.ndarray, width: int
) -> Callable[[str, int, int, bool], PastTheEndError]:
    """The error of an index past the end of its stack that names the first row asking for it, in the
    numbering of the metadata the locations were read from (RELION's from one)."""

    def past_end(key: str, index: int, count: int, sections: bool = False) -> PastTheEndError:
        number = keys.index(key)
        row = int(np.flatnonzero((key_ids == number) & (indices == index))[0]) // width
        held = f"volume of {count} sections" if sections else f"stack of {count} images"
        first = located.counts_from
        error = PastTheEndError(
            f"{located.origin}: row {row} (counting from 0) names image {index + first} of {key} "
            f"(counting from {first}), past the end of its {held}"
        )
        error.key = key
        return error

    return past_end


def plan_files(
    readers: ImageReaderProvider,
    keys: list[str],
    key_ids: np.ndarray,
    indices: np.ndarray,
    check: bool = True,
    past_end: Callable[[str, int, int, bool], Exception] = past_the_end,
) -> tuple[tuple[int, ...], list[ImageDescriptor]]:
    """The shape of the image a location names, and what each file holds as its locations name it.

    The locations are planned (`plan_locations`). An index into a single
    volume names one of its sections. Every file is asked for its shape, and
    every stack whether it holds the largest index asked of it; with `check`
    false, only the first file is asked, for its shape. `past_end(key, index,
    count, sections)` makes the error of an index past the end.

    Raises:
        ValueError: If two files hold images of different shapes, or a
            location has an index into a file that holds one 2-D image.
        IndexError: If an index is past the end of its stack.
    """
    whole = bool(indices[0] < 0)
    largest = np.full(len(keys), -1, dtype=np.int64)
    np.maximum.at(largest, key_ids, indices)
    shape: tuple[int, ...] = ()
    served = []
    asked = keys if check else keys[:1]
    seen: dict[ImageDescriptor, tuple[ImageDescriptor, tuple[int, ...], int]] = {}  # files alike, once
    for number, (key, index, descriptor) in enumerate(
        zip(asked, largest.tolist(), readers.query_descriptors(asked))
    ):
        known = seen.get(descriptor)
        if known is None:
            indexed = descriptor if whole else section_view(descriptor) or descriptor
            if not whole and not indexed.is_stack:
                raise ValueError(
                    f"{key}: holds a single image, not a stack: name the file, not an index in it"
                )
            known = seen[descriptor] = (
                indexed,
                indexed.extents if whole else indexed.core_extents,
                indexed.image_count,
            )
        indexed, found, count = known
        if number == 0:
            shape = found
        elif found != shape:
            what = "holds" if whole else "holds images of"
            raise ValueError(f"{key}: {what} shape {found}, while {keys[0]} {what} shape {shape}")
        if check and index >= count:
            raise past_end(key, index, count, indexed is not descriptor)
        served.append(indexed)
    return shape, served
