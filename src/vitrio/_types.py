"""Value types of the core: what a file holds (`ImageDescriptor`) and what its header says of it.

The data types (`_numerical`), keys and locations (`_locations`) and errors
(`_errors`) have modules of their own; their names are importable from here
too. This layer knows nothing of files or threads.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, NamedTuple

import numpy as np

from ._errors import (
    DeclaredTwiceError,
    DestinationTypeError,
    ImageFileNotFoundError,
    IncompleteFileError,
    LocationAsKeyError,
    PastTheEndError,
    ReadOnlyDestinationError,
    no_such_file,
    past_the_end,
)
from ._grouping import ImageLocationGrouping, IndexTable, group_ids
from ._locations import ImageLocation, as_key, index_locations, integer_array
from ._numerical import NumericalType, as_numerical_type, numpy_dtype

__all__ = [
    "NumericalType",
    "ImageDescriptor",
    "get_core_extents",
    "ImageLocation",
    "ImageLocationGrouping",
    "IndexTable",
    "index_locations",
    "group_ids",
    "past_the_end",
    "PastTheEndError",
    "LocationAsKeyError",
    "ImageFileNotFoundError",
    "no_such_file",
    "ReadOnlyDestinationError",
    "DeclaredTwiceError",
    "DestinationTypeError",
    "IncompleteFileError",
    "ImageMetadata",
    "as_numerical_type",
    "as_voxel_size",
    "ANGSTROMS_PER_UNIT",
    "section_view",
    "numpy_dtype",
    "as_key",
    "integer_array",
]


class ImageDescriptor:
    """What a file holds: its extents, slowest first, and the type of its values.

    The last `core_rank` extents are one image or volume; the ones before
    them, if any, stack such images or volumes.

    Args:
        extents: The shape of the whole file, slowest axis first.
        core_rank: How many of the last extents make one image (2) or volume (3).
        data_type: The type of the values, as `NumericalType` takes it.

    Raises:
        ValueError: If an extent is negative or `core_rank` is not within
            1 and the number of extents.
    """

    __slots__ = ("_extents", "_core_rank", "_data_type")

    def __init__(self, extents: Iterable[int], core_rank: int, data_type: Any):
        extents = tuple(int(e) for e in extents)
        if any(e < 0 for e in extents):
            raise ValueError(f"extents must not be negative: {extents}")
        if not 1 <= core_rank <= len(extents):
            raise ValueError(f"core_rank {core_rank} does not fit extents {extents}")
        self._extents = extents
        self._core_rank = int(core_rank)
        self._data_type = as_numerical_type(data_type)

    @property
    def extents(self) -> tuple[int, ...]:
        """The shape of the whole file, slowest axis first."""
        return self._extents

    @property
    def core_rank(self) -> int:
        """How many of the last extents make one image or volume."""
        return self._core_rank

    @property
    def data_type(self) -> NumericalType:
        """The type of the values."""
        return self._data_type

    @property
    def core_extents(self) -> tuple[int, ...]:
        """The shape of one image or volume."""
        return self._extents[len(self._extents) - self._core_rank :]

    @property
    def stack_extents(self) -> tuple[int, ...]:
        """The extents that stack images or volumes; empty for a single one."""
        return self._extents[: len(self._extents) - self._core_rank]

    @property
    def image_count(self) -> int:
        """How many images or volumes the file holds: 1 if it holds a single one."""
        return math.prod(self.stack_extents)

    @property
    def is_stack(self) -> bool:
        """Whether the file stacks images or volumes."""
        return len(self._extents) > self._core_rank

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ImageDescriptor):
            return NotImplemented
        return (self._extents, self._core_rank, self._data_type) == (
            other._extents,
            other._core_rank,
            other._data_type,
        )

    def __hash__(self) -> int:
        return hash((self._extents, self._core_rank, self._data_type))

    def __repr__(self) -> str:
        return (
            f"ImageDescriptor(extents={self._extents}, core_rank={self._core_rank}, "
            f"data_type=NumericalType.{self._data_type.name})"
        )

    def __reduce__(self):
        return (ImageDescriptor, (self._extents, self._core_rank, self._data_type))


def get_core_extents(descriptor: ImageDescriptor) -> tuple[int, ...]:
    """The shape of one image or volume of the file `descriptor` describes."""
    return descriptor.core_extents


def section_view(descriptor: ImageDescriptor) -> ImageDescriptor | None:
    """A single volume as the stack of its 2-D sections, which an index into it names; else None.

    RELION, cryoSPARC and cryoDRGN name image `i` of a file whose header says
    it holds one volume (`7@particles.mrc`): that is the volume's section `i`.
    """
    if descriptor.is_stack or descriptor.core_rank != 3:
        return None
    return ImageDescriptor(descriptor.extents, 2, descriptor.data_type)


ANGSTROMS_PER_UNIT = {
    "Å": 1.0,
    "\u212b": 1.0,  # the Ångström sign
    "A": 1.0,
    "angstrom": 1.0,
    "pm": 1e-2,
    "picometer": 1e-2,
    "nm": 10.0,
    "nanometer": 10.0,
    "µm": 1e4,
    "\u03bcm": 1e4,  # with a Greek mu
    "um": 1e4,
    "micrometer": 1e4,
    "mm": 1e7,
    "millimeter": 1e7,
    "cm": 1e8,
    "centimeter": 1e8,
    "m": 1e10,
    "meter": 1e10,
}
"""Ångströms per unit of length, by the symbols and names that file formats (DM, EER, NGFF) write."""


def as_voxel_size(voxel_size: Any, core_rank: int, key: str = "") -> tuple[float, ...] | None:
    """A voxel size in Å per axis of an image, slowest first: one number for every axis, or one per axis.

    Raises:
        ValueError: If it is not `core_rank` positive finite numbers (or one).
    """
    if voxel_size is None:
        return None
    sizes = np.atleast_1d(np.asarray(voxel_size, dtype=np.float64)).ravel()
    if sizes.size == 1:
        sizes = np.repeat(sizes, core_rank)
    if sizes.size != core_rank or not np.isfinite(sizes).all() or (sizes <= 0).any():
        raise ValueError(
            f"{key}: a voxel size is one positive number in Å, or one for each of the {core_rank} axes "
            f"of an image, not {voxel_size!r}"
        )
    return tuple(float(size) for size in sizes)


class ImageMetadata(NamedTuple):
    """What a file's header says of it: what it holds, its voxel size in Å per axis (and whence), its format.

    Attributes:
        descriptor: What the file holds, as `query_descriptor` has it.
        voxel_size: The size of a pixel (or voxel) along each axis of an
            image, slowest first, in Å; None where the file does not say.
        format_name: The name of the format that read it (`"mrc"`, `"tiff"`, ...).
        voxel_size_source: The metadata the voxel size was read from, in
            words (`"MRC cell"`, `"ImageJ"`, `"OME-XML"`, `"FEI"`, ...); None
            where there is no voxel size.
    """

    descriptor: ImageDescriptor
    voxel_size: tuple[float, ...] | None
    format_name: str | None
    voxel_size_source: str | None = None
