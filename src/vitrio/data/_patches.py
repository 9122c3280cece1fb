"""`PatchSource`: patches cropped out of larger images, a patch for each row.

The images are gathered once, when the source is made, into a list of
distinct `(key, index)` pairs and an array of which one each row crops;
reading a batch is fancy indexing of that array and of the centres, handed
to the core's planned patch read, which reads the rows sharing an image
through one reader.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from .._functions import reader_provider
from .._loading import ImageLoader, read_patches_indexed_async
from .._providers import ImageReaderProvider
from .._types import (
    ImageDescriptor,
    ImageLocation,
    index_locations,
    integer_array,
    past_the_end,
    section_view,
)
from ._source import FileSource, Pendings, describe_failure

__all__ = ["PatchSource"]


def _gather_images(images: Iterable[Any]) -> tuple[list[tuple[str, int]], np.ndarray]:
    """The distinct images, as (key, index) with -1 for a whole file, and which one each row names.

    The images are in the order they first appear.
    """
    keys, key_ids, indices = index_locations(images)
    pairs, first, ids = np.unique(
        np.stack((key_ids, indices), axis=1).reshape(-1, 2), axis=0, return_index=True, return_inverse=True
    )
    order = np.argsort(first)
    number = np.empty_like(order)
    number[order] = np.arange(len(order))
    distinct = [(keys[key_id], index) for key_id, index in pairs[order].tolist()]
    return distinct, number[ids.reshape(-1)].astype(np.int64)


def _centre_rows(centres: Any) -> np.ndarray:
    values = integer_array(centres, "centres are integers (round them first)")
    if values.ndim != 2:
        raise ValueError(f"centres are a row of integers for each row, not an array of shape {values.shape}")
    return values


class PatchSource(FileSource):
    """Patches cropped out of larger images, a patch for each row.

    Each row names the image its patch is cropped from and the centre of the
    patch, which lands at index extent // 2 within it, as RELION has it. A
    patch reaching past the edge of its image is read as far as the image
    goes, and the rest of it is fill. The rows of a batch that share an image
    are read in one call.

    Particles picked on micrographs are patches, and so are the boxes of a
    tomogram around its picked objects, or around random centres.

    Args:
        images: The image each row is cropped from: an ImageLocation or the
            key of a file that holds one image or volume.
        centres: The centre of each patch, a row of integers for each row,
            slowest axis first, as (y, x) or (z, y, x).
        shape: The shape of one patch.
        data_type: The type to read the values as. Defaults to the one the first image holds.
        fill: The value of what a patch has beyond its image.
        readers: Where files are asked for their shape. Defaults to a
            provider that opens the file at the path a key is.
        check: Whether to ask every image for its shape. Otherwise only the first is asked.
        casting: None to refuse a `data_type` that cannot hold every value of the first image's;
            "unsafe" to convert to it as numpy's `casting="unsafe"` does (as `vitrio.read`).

    Raises:
        ValueError: If the images, centres and patches are not of one rank,
            there are not as many centres as images, a centre is negative, or
            there are no rows; also if an image is a whole stack rather than
            one image of it, or an index into a file that holds one 2-D image
            (an index into a file that holds one volume names its 2-D section).
        IndexError: If an index is past the end of its stack.
        TypeError: If the centres are not integers.
        DestinationTypeError: If `data_type` cannot hold the first image's values, without
            `casting="unsafe"`.
    """

    def __init__(
        self,
        images: Iterable[Any],
        centres: Any,
        shape: Sequence[int],
        data_type: Any = None,
        fill: Any = 0,
        readers: ImageReaderProvider | None = None,
        check: bool = True,
        casting: str | None = None,
    ):
        distinct, image_ids = _gather_images(images)
        values = _centre_rows(centres)
        patch = tuple(int(extent) for extent in shape)
        if len(image_ids) == 0:
            raise ValueError("a PatchSource needs at least one row")
        if len(values) != len(image_ids):
            raise ValueError(f"there are {len(values)} centres for {len(image_ids)} images")
        if values.shape[1] != len(patch):
            raise ValueError(f"centres of rank {values.shape[1]} do not fit patches of shape {patch}")
        if any(extent < 1 for extent in patch):
            raise ValueError(f"a patch has a positive extent along every axis, not shape {patch}")
        negative = np.flatnonzero((values < 0).any(axis=1))
        if len(negative):
            raise ValueError(f"centre {values[negative[0]].tolist()} of row {negative[0]} is negative")
        readers = readers or reader_provider()
        descriptors: dict[str, ImageDescriptor] = {}
        for key, index in distinct if check else distinct[:1]:
            if key not in descriptors:
                descriptors[key] = readers.query_descriptor(key)
            descriptor = descriptors[key]
            if index >= 0:
                descriptor = section_view(descriptor) or descriptor  # a single volume's sections
            if len(descriptor.core_extents) != len(patch):
                raise ValueError(
                    f"{key}: patches of shape {patch} cannot be cropped out of images of shape "
                    f"{descriptor.core_extents}"
                )
            if index < 0 and descriptor.is_stack:
                raise ValueError(f"{key}: is a stack of {descriptor.image_count}; name one of its images")
            if index >= 0 and not descriptor.is_stack:
                raise ValueError(f"{key}: holds a single image, not a stack: it has no image {index}")
            if index >= descriptor.image_count:
                raise past_the_end(
                    key, index, descriptor.image_count, sections=descriptor is not descriptors[key]
                )
        self._images = distinct
        self._image_ids = image_ids
        self._centres = values
        self._shape = patch
        first = descriptors[distinct[0][0]]
        self._read_as(distinct[0][0], first.data_type, data_type, casting)
        self._fill = np.asarray(fill).astype(self._dtype).item()

    def __len__(self) -> int:
        return len(self._image_ids)

    @property
    def images(self) -> list[ImageLocation]:
        """The images the patches are cropped from, each once."""
        return [ImageLocation(key, index) for key, index in self._images]

    @property
    def centres(self) -> np.ndarray:
        """The centre of the patch of each row, a row of integers for each, slowest axis first."""
        view = self._centres.view()
        view.flags.writeable = False
        return view

    def read_async(self, loader: ImageLoader, rows: np.ndarray, out: np.ndarray) -> Pendings:
        """Start reading the values of some rows, as Source.read_async."""
        rows = np.asarray(rows, dtype=np.int64)
        image_ids, centres = self._image_ids[rows], self._centres[rows]
        completion = read_patches_indexed_async(
            loader, out, self._images, image_ids, centres, fill=self._fill, casting=self._casting
        )
        keys = [key for key, _ in self._images]

        def describe_row(position: int) -> str:
            key, index = self._images[int(image_ids[position])]
            image = ImageLocation(key, index)
            return f"{int(rows[position])} (a patch at {centres[position].tolist()} of {image})"

        explained = completion.explained(
            lambda error: describe_failure(error, rows, image_ids, keys, describe_row)
        )
        return Pendings([explained])

    def subset(self, rows: np.ndarray) -> PatchSource:
        """Get the source of only these rows, in this order."""
        rows = np.asarray(rows, dtype=np.int64)
        used, image_ids = np.unique(self._image_ids[rows], return_inverse=True)
        source = copy.copy(self)
        source._images = [self._images[i] for i in used.tolist()]
        source._image_ids = image_ids.astype(np.int64).reshape(-1)
        source._centres = self._centres[rows]
        return source

    def __repr__(self) -> str:
        images = len(self._images)
        return f"PatchSource({len(self)} rows, {images} images, shape={self._shape}, dtype={self._dtype})"
