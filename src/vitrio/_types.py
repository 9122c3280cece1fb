"""Value types of the core: data types, descriptors, locations, centre tables.

This layer knows nothing of files or threads.
"""

from __future__ import annotations

import enum
import math
import os
import re
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np

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
]


class NumericalType(enum.Enum):
    """The type of the values of an image, independent of byte order.

    `NumericalType(x)` takes what every data type argument takes: a member,
    its name (`"complex_float32"`) or value (`"complex64"`), a numpy dtype
    (of either byte order) or type, a string numpy reads as one (`"f4"`),
    or a PyTorch dtype (`torch.float32`). Anything else raises `ValueError`.
    """

    boolean = "bool"
    int8 = "int8"
    uint8 = "uint8"
    int16 = "int16"
    uint16 = "uint16"
    int32 = "int32"
    uint32 = "uint32"
    int64 = "int64"
    uint64 = "uint64"
    float16 = "float16"
    float32 = "float32"
    float64 = "float64"
    complex_float16 = "complex32"
    complex_float32 = "complex64"
    complex_float64 = "complex128"

    @property
    def itemsize(self) -> int:
        """Bytes one value takes."""
        return _ITEMSIZE[self]

    @property
    def dtype(self) -> np.dtype:
        """The native-order numpy dtype that holds the values: complex64 for `complex_float16`.

        numpy has no type of two float16 values; reads of them fill complex64 arrays.
        """
        return _HELD[self]

    @classmethod
    def _missing_(cls, value: Any) -> NumericalType | None:
        try:
            return as_numerical_type(value)
        except TypeError:
            return None


_ITEMSIZE = {
    NumericalType.boolean: 1,
    NumericalType.int8: 1,
    NumericalType.uint8: 1,
    NumericalType.int16: 2,
    NumericalType.uint16: 2,
    NumericalType.int32: 4,
    NumericalType.uint32: 4,
    NumericalType.int64: 8,
    NumericalType.uint64: 8,
    NumericalType.float16: 2,
    NumericalType.float32: 4,
    NumericalType.float64: 8,
    NumericalType.complex_float16: 4,
    NumericalType.complex_float32: 8,
    NumericalType.complex_float64: 16,
}
_BY_NAME = {t.name: t for t in NumericalType} | {t.value: t for t in NumericalType}
_BY_DTYPE = {np.dtype(t.value): t for t in NumericalType if t is not NumericalType.complex_float16}
_HELD = {t: np.dtype(np.complex64 if t is NumericalType.complex_float16 else t.value) for t in NumericalType}


def as_numerical_type(data_type: Any) -> NumericalType:
    """Turn a string, a numpy dtype or type, a PyTorch dtype, or a member into a `NumericalType`.

    Raises:
        TypeError: If `data_type` names no numerical type.
    """
    if isinstance(data_type, NumericalType):
        return data_type
    if isinstance(data_type, np.dtype) and data_type in _BY_DTYPE:  # what readers give: no name to look up
        return _BY_DTYPE[data_type]
    if isinstance(data_type, str) and data_type in _BY_NAME:
        return _BY_NAME[data_type]
    if data_type is None:
        raise TypeError("not a data type: None")
    if type(data_type).__module__ == "torch" and type(data_type).__name__ == "dtype":
        found = _BY_NAME.get(str(data_type).removeprefix("torch."))
        if found is None:
            raise TypeError(f"not a numerical data type vitrio reads: {data_type}")
        return found
    try:
        dtype = np.dtype(data_type)
    except TypeError as error:
        raise TypeError(f"not a data type: {data_type!r}") from error
    found = _BY_NAME.get(dtype.newbyteorder("=").name) if dtype.fields is None else None
    if found is None:
        raise TypeError(f"not a numerical data type: {data_type!r}")
    return found


def numpy_dtype(data_type: Any) -> np.dtype:
    """The native-order numpy dtype of a data type, exactly: its `dtype`, but none for `complex_float16`.

    Raises:
        TypeError: For `complex_float16`, which numpy has no type for, or a
            value that names no numerical type.
    """
    member = as_numerical_type(data_type)
    if member is NumericalType.complex_float16:
        raise TypeError("complex_float16 has no numpy type")
    return _HELD[member]


def as_key(key: Any) -> str:
    """A key as a string: a `str` as it is, an `os.PathLike` through `os.fspath`.

    Raises:
        TypeError: If `key` is neither.
    """
    if isinstance(key, str):
        return key
    if isinstance(key, os.PathLike):
        path = os.fspath(key)
        return path if isinstance(path, str) else os.fsdecode(path)
    raise TypeError(f"a key is a str or os.PathLike, not {type(key).__name__}")


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


_PUBLISHED_NO_STACK_INDEX = 2**64 - 1
_LOCATION_TEXT = re.compile(r"^\s*(?:(\d+)@)?(.*\S)\s*$", re.DOTALL)


class ImageLocation:
    """One image of a stack, or a whole file.

    `ImageLocation()` names nothing: its key is `''`.

    Args:
        key: The file, a `str` or `os.PathLike`.
        index_in_stack: The index of the image in its stack, counting from
            zero, or `ImageLocation.no_stack_index` for the whole file
            (`2**64 - 1`, the value of the published package, is taken as it too).

    Raises:
        TypeError: If `key` is not a str or os.PathLike.
        ValueError: If the index is negative.
    """

    __slots__ = ("_key", "_index")

    no_stack_index = -1
    """The index of a location that names a whole file."""

    def __init__(self, key: Any = "", index_in_stack: int = -1):
        index = int(index_in_stack)
        if index == _PUBLISHED_NO_STACK_INDEX:
            index = -1
        if index < -1:
            raise ValueError(f"index_in_stack must not be negative: {index_in_stack}")
        self._key = as_key(key)
        self._index = index

    @classmethod
    def from_string(cls, text: str) -> ImageLocation:
        """Parse RELION's spelling, `"index@key"` counting from one, or `"key"`.

        Raises:
            ValueError: If the text is empty, its index is not a positive
                integer, or it has no key.
        """
        if isinstance(text, bytes):
            text = text.decode()
        match = _LOCATION_TEXT.match(text) if isinstance(text, str) else None
        if match is None or (match.group(1) is None and "@" in match.group(2).split("/")[0]):
            raise ValueError(f"not an image location: {text!r}")
        number, key = match.groups()
        if number is None:
            return cls(key)
        if int(number) < 1:
            raise ValueError(f"not an image location: {text!r} (indices count from 1)")
        return cls(key, int(number) - 1)

    @property
    def key(self) -> str:
        """The file."""
        return self._key

    @property
    def index_in_stack(self) -> int:
        """The index of the image in its stack, or `no_stack_index`."""
        return self._index

    @property
    def has_index_in_stack(self) -> bool:
        """Whether the location names one image of a stack."""
        return self._index >= 0

    def _order(self) -> tuple[str, int]:
        return (self._key, self._index)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ImageLocation):
            return NotImplemented
        return self._key == other._key and self._index == other._index

    def __lt__(self, other: ImageLocation) -> bool:
        if not isinstance(other, ImageLocation):
            return NotImplemented
        return self._order() < other._order()

    def __le__(self, other: ImageLocation) -> bool:
        if not isinstance(other, ImageLocation):
            return NotImplemented
        return self._order() <= other._order()

    def __gt__(self, other: ImageLocation) -> bool:
        if not isinstance(other, ImageLocation):
            return NotImplemented
        return self._order() > other._order()

    def __ge__(self, other: ImageLocation) -> bool:
        if not isinstance(other, ImageLocation):
            return NotImplemented
        return self._order() >= other._order()

    def __hash__(self) -> int:
        return hash((self._key, self._index))

    def __str__(self) -> str:
        return f"{self._index + 1}@{self._key}" if self._index >= 0 else self._key

    def __repr__(self) -> str:
        if self._index >= 0:
            return f"ImageLocation(key={self._key!r}, index_in_stack={self._index})"
        return f"ImageLocation(key={self._key!r})"

    def __reduce__(self):
        return (ImageLocation, (self._key, self._index))


class PastTheEndError(IndexError, ValueError):
    """An index past the end of a stack.

    An `IndexError`, as the core raises it, and a `ValueError`, as the
    sources of `vitrio.data` are specified to raise it: callers of either
    catch it.
    """


class ImageFileNotFoundError(FileNotFoundError, RuntimeError):
    """No file at a key: a `FileNotFoundError` (errno kept), and the published package's `RuntimeError`."""


class LocationAsKeyError(ImageFileNotFoundError, ValueError):
    """No file at a key written as a location ("7@stack.mrcs"), as RELION writes an image of a stack: an
    `ImageFileNotFoundError` whose message points to the parsers, and a `ValueError`."""


def no_such_file(key: str, errno: int | None) -> ImageFileNotFoundError:
    """The error for a file missing at `key`, pointing to the parsers where `key` is written "index@path"."""
    if re.match(r"\s*\d+@", key):
        hint = "for an image of a stack, pass ImageLocation.from_string(text), or parse_locations(texts)"
        return LocationAsKeyError(errno, f"{key}: no such file; a key is a file's path: {hint}")
    return ImageFileNotFoundError(errno, f"{key}: no such file")


class ReadOnlyDestinationError(TypeError, ValueError):
    """A destination that reads cannot land in (read-only memory): a `TypeError`, as the published
    package raises it, and a `ValueError`, as earlier versions of this one did."""


class DestinationTypeError(TypeError, ValueError):
    """A destination whose type cannot hold the values of a file read into it (`docs/paths-and-types.md`)."""


class IncompleteFileError(ValueError):
    """A declared file closed with images never written, without `allow_partial=True`."""


class DeclaredTwiceError(ValueError, RuntimeError):
    """A file declared twice to a writer provider: the `ValueError` the published package raises, and
    the `RuntimeError` its docstring names."""


def past_the_end(key: str, index: int, count: int, sections: bool = False) -> PastTheEndError:
    """The error for image `index` of the file at `key`, which holds a stack of `count`.

    With `sections`, the file holds one volume of `count` sections, which the indices name.
    """
    if sections:
        return PastTheEndError(
            f"{key}: index {index} is past the last section of a volume of {count} sections"
        )
    return PastTheEndError(f"{key}: index {index} is past the end of a stack of {count}")


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


def index_locations(locations: Iterable[Any]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The distinct keys of `locations`, and for each location the number of its key and its index.

    Args:
        locations: `ImageLocation` objects, or keys of whole files.

    Returns:
        The keys in the order they first appear; an int64 array of the
        number of each location's key in them; an int64 array of each
        location's index in its stack (`no_stack_index` for a whole file).

    Raises:
        TypeError: If a location is neither an `ImageLocation` nor a key.
    """
    keys: dict[str, int] = {}
    key_ids: list[int] = []
    indices: list[int] = []
    for location in locations:
        if isinstance(location, ImageLocation):
            key_ids.append(keys.setdefault(location._key, len(keys)))
            indices.append(location._index)
        else:
            key_ids.append(keys.setdefault(as_key(location), len(keys)))
            indices.append(ImageLocation.no_stack_index)
    return list(keys), np.asarray(key_ids, dtype=np.int64), np.asarray(indices, dtype=np.int64)


def group_ids(ids: np.ndarray, within: np.ndarray | None = None) -> list[tuple[int, np.ndarray]]:
    """The positions of `ids` grouped by id, in ascending order of id.

    Args:
        ids: Integers, such as the key numbers `index_locations` gives.
        within: Integers as many as `ids`, the order of the positions of a
            group (ties in ascending position); None for ascending position.

    Returns:
        `(id, positions)` for each distinct id, `positions` an int64 array.
    """
    ids = np.asarray(ids, dtype=np.int64)
    if not len(ids):
        return []
    if within is None:
        if ids.min() == ids.max():
            return [(int(ids[0]), np.arange(len(ids), dtype=np.int64))]
        order = np.argsort(ids, kind="stable")
    else:
        order = np.lexsort((within, ids))
    ordered = ids[order]
    bounds = [0, *(np.flatnonzero(np.diff(ordered)) + 1).tolist(), len(order)]
    return [(int(ordered[a]), order[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]


class _LocationGroup:
    """The locations of one file, as `ImageLocationGrouping` holds them."""

    __slots__ = ("key", "location_indices", "positions", "_indices")

    def __init__(self, key: str, location_indices: np.ndarray, positions: np.ndarray):
        self.key = key
        self.location_indices = location_indices
        self.positions = positions
        self._indices: tuple[int, ...] | None = None

    @property
    def is_whole(self) -> bool:
        """Whether a location names the whole file (has no index in its stack)."""
        return bool(len(self.location_indices)) and int(self.location_indices[0]) < 0

    @property
    def indices(self) -> tuple[int, ...]:
        """The indices asked of the file, ascending and each once; `()` for a whole file."""
        if self._indices is None:
            self._indices = () if self.is_whole else tuple(np.unique(self.location_indices).tolist())
        return self._indices

    def __len__(self) -> int:
        return len(self.location_indices)

    def __repr__(self) -> str:
        return f"ImageLocationGrouping.Group(key={self.key!r}, indices={self.indices})"


_LocationGroup.__name__ = "Group"
_LocationGroup.__qualname__ = "ImageLocationGrouping.Group"


class ImageLocationGrouping:
    """Locations gathered by file, in ascending order of key.

    Each group has `key`; `indices`, the indices asked of the file, a tuple
    ascending and without duplicates (`()` for a group that is whole); and
    `is_whole`, whether a location of the file has no index in its stack.
    For planning, a group also has `location_indices` (the index of each of
    its locations, `no_stack_index` for whole files, ascending) and
    `positions` (where each of them stood in the sequence given). `len()` of a
    group counts its locations.

    Args:
        locations: `ImageLocation` objects, or keys of whole files.
    """

    Group = _LocationGroup

    def __init__(self, locations: Iterable[ImageLocation | str | os.PathLike]):
        keys, key_ids, indices = index_locations(locations)
        by_rank = sorted(keys)
        rank = {key: number for number, key in enumerate(by_rank)}
        ranks = np.asarray([rank[key] for key in keys], dtype=np.int64)
        self._groups = [
            _LocationGroup(by_rank[number], indices[positions], positions)
            for number, positions in group_ids(ranks[key_ids], within=indices)
        ]

    def __len__(self) -> int:
        return len(self._groups)

    def __getitem__(self, item: int) -> _LocationGroup:
        return self._groups[item]

    def __iter__(self):
        return iter(self._groups)

    def __repr__(self) -> str:
        return f"ImageLocationGrouping({self._groups!r})"


class IndexTable:
    """A table of integer coordinates, a row of `rank` of them per entry: the centres of patches.

    `IndexTable()` has rank 0 and no entry; the rank never changes.
    `numpy.asarray(table)` is a copy of the entries, of type `numpy.uintp`
    and shape `(len(table), rank)`; asking for no copy (`copy=False`)
    raises `ValueError`.

    Args:
        rank: How many coordinates an entry has.

    Raises:
        ValueError: If `rank` is negative.
    """

    def __init__(self, rank: int = 0):
        if int(rank) < 0:
            raise ValueError(f"rank must not be negative: {rank}")
        self._rows = np.empty((0, int(rank)), dtype=np.int64)
        self._count = 0

    @classmethod
    def from_array(cls, array: Any) -> IndexTable:
        """A table holding the rows of a 2-D integer array.

        Only arrays that expose their memory are taken (a numpy array, a
        `memoryview`, a DLPack tensor); a list is not converted: pass
        `numpy.asarray(rows)`.

        Raises:
            TypeError: If `array` exposes no memory, or does not hold integers.
            ValueError: If it is not 2-D, has no column, or holds a negative index.
        """
        values = integer_array(_exposed(array), "an index table holds integers")
        if values.ndim != 2 or values.shape[1] < 1:
            raise ValueError(f"an index table is made of a 2-D array, not of shape {values.shape}")
        if values.size and values.min() < 0:
            raise ValueError("an index table holds no negative index")
        table = cls(values.shape[1])
        table._rows = values.copy()
        table._count = len(values)
        return table

    @property
    def rank(self) -> int:
        """How many coordinates an entry has."""
        return self._rows.shape[1]

    def reserve(self, count: int) -> None:
        """Make room for `count` entries in all."""
        if count > len(self._rows):
            grown = np.empty((int(count), self.rank), dtype=np.int64)
            grown[: self._count] = self._rows[: self._count]
            self._rows = grown

    def add(self, entry: Sequence[int]) -> None:
        """Append one entry of `rank` non-negative integers.

        Raises:
            ValueError: If the entry does not have `rank` values or one is negative.
        """
        values = np.asarray(entry)
        if values.shape != (self.rank,):
            raise ValueError(f"an entry of this table has {self.rank} values, not {values.shape}")
        values = integer_array(values, "an index table holds integers")
        if values.size and values.min() < 0:
            raise ValueError(f"an index table holds no negative index: {entry}")
        if self._count == len(self._rows):
            self.reserve(max(8, 2 * self._count))
        self._rows[self._count] = values
        self._count += 1

    def clear(self) -> None:
        """Remove every entry."""
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, item: int) -> tuple[int, ...]:
        if not -self._count <= item < self._count:
            raise IndexError(f"entry {item} of a table of {self._count}")
        return tuple(int(v) for v in self._rows[item % self._count])

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        if copy is False:
            raise ValueError("an IndexTable hands out a copy of its entries, never a view")
        return self._rows[: self._count].astype(np.uintp if dtype is None else dtype, copy=True)

    def __repr__(self) -> str:
        return f"IndexTable(rank={self.rank}, entries={self._count})"


def integer_array(values: Any, refusal: str) -> np.ndarray:
    """`values` as an int64 array, if they are integers; an empty array of any type is taken as one.

    Raises:
        TypeError: `"{refusal}, not {dtype}"` if `values` hold other values (booleans among them).
    """
    array = np.asarray(values)
    if array.size and array.dtype.kind not in "iu":
        raise TypeError(f"{refusal}, not {array.dtype}")
    return array.astype(np.int64, copy=False)


def _exposed(array: Any) -> np.ndarray:
    """A view of an object that exposes its memory (numpy, buffer protocol, DLPack), never a conversion.

    Raises:
        TypeError: If `array` exposes no memory, such as a list or an object with only `__array__`.
    """
    if isinstance(array, np.ndarray):
        return array
    if hasattr(array, "__dlpack__") and not isinstance(array, memoryview):
        return np.from_dlpack(array)
    try:
        return np.asarray(memoryview(array))
    except TypeError:
        raise TypeError(
            f"an array that exposes its memory is needed (numpy, memoryview, DLPack), not "
            f"{type(array).__name__}; pass numpy.asarray(...) of it"
        ) from None
