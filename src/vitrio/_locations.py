"""Keys and locations of images: `ImageLocation`, `LocationColumns`, their files numbered.

This layer knows nothing of files or threads.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from ._errors import redact

__all__ = [
    "as_key",
    "ImageLocation",
    "LocationColumns",
    "index_locations",
    "integer_array",
]


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


_PUBLISHED_NO_STACK_INDEX = 2**64 - 1
_LOCATION_TEXT = re.compile(r"^\s*(?:(\d+)@)?(.*\S)\s*$", re.DOTALL)


class ImageLocation:
    """One image of a stack, or a whole file.

    `ImageLocation()` names nothing: its key is `''`.

    Args:
        key: The file, a `str` or `os.PathLike`.
        index_in_stack: The index of the image in its stack, counting from
            zero, or `ImageLocation.no_stack_index` (-1) for the whole file
            (`2**64 - 1`, the value of the published package, is taken as it too).

    Raises:
        TypeError: If `key` is not a str or os.PathLike.
        ValueError: If the index is below -1, `no_stack_index`.
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
            return f"ImageLocation(key={redact(self._key)!r}, index_in_stack={self._index})"
        return f"ImageLocation(key={redact(self._key)!r})"

    def __reduce__(self):
        return (ImageLocation, (self._key, self._index))


_ITERATED = 4096
"""How many locations `LocationColumns` turns into objects at once as it is iterated."""


class LocationColumns(Sequence):
    """Locations held as columns: each distinct key once, and the number of its key and its index for
    each location. A location is made an `ImageLocation` only when one is asked for.

    It is a sequence of `ImageLocation` (or, of two axes, an array of them, a row of locations for each
    row): indexing with an integer gives one, with a slice, an array of integers or of booleans the
    `LocationColumns` of those; `numpy.asarray` of it is an array of `ImageLocation` objects. It equals
    another sequence of the same locations in the same order. vitrio's reads, `ImageSource` and
    `index_locations` take its columns as they are: ten million locations cost two arrays, not ten
    million objects.

    Args:
        keys: The distinct keys.
        key_ids: For each location, the number of its key in `keys`.
        indices: For each location, its index in its stack, counting from zero, or -1
            (`ImageLocation.no_stack_index`) for a whole file; of the shape of `key_ids`.
        origin: The metadata file the locations were read from, to name in errors.
        counts_from: What the metadata counts images from (1 for RELION, 0 for cryoSPARC), to number
            images in errors as it does.

    Raises:
        ValueError: If the columns are not of one shape of one or two axes, the keys are not distinct, a
            key number is not one of `keys`, or an index is below -1.
    """

    __slots__ = ("keys", "key_ids", "indices", "origin", "counts_from")

    def __init__(
        self,
        keys: Sequence[str],
        key_ids: Any,
        indices: Any,
        origin: str | None = None,
        counts_from: int = 0,
    ):
        self.keys = [as_key(key) for key in keys]
        """The distinct keys."""
        self.key_ids = integer_array(key_ids, "key numbers are integers")
        """The number of each location's key in `keys`."""
        self.indices = integer_array(indices, "indices in stacks are integers")
        """Each location's index in its stack, or -1 for a whole file."""
        self.origin = origin
        """The metadata file the locations were read from, if any."""
        self.counts_from = counts_from
        """What the metadata counts images from."""
        if self.key_ids.shape != self.indices.shape or self.key_ids.ndim not in (1, 2):
            raise ValueError(
                f"key numbers and indices are columns of one shape, not {self.key_ids.shape} and "
                f"{self.indices.shape}"
            )
        if len(set(self.keys)) != len(self.keys):
            raise ValueError("the keys of LocationColumns are distinct")
        if self.key_ids.size and (self.key_ids.min() < 0 or self.key_ids.max() >= len(self.keys)):
            raise ValueError(f"a key number is not one of the {len(self.keys)} keys")
        if self.indices.size and self.indices.min() < -1:
            raise ValueError(f"an index in a stack cannot be below -1: {self.indices.min()}")

    def _like(self, key_ids: np.ndarray, indices: np.ndarray) -> LocationColumns:
        """These keys, with other columns, checked already."""
        made = object.__new__(LocationColumns)
        made.keys, made.key_ids, made.indices = self.keys, key_ids, indices
        made.origin, made.counts_from = self.origin, self.counts_from
        return made

    @property
    def shape(self) -> tuple[int, ...]:
        """`(locations,)`, or `(rows, locations of a row)`."""
        return self.key_ids.shape

    @property
    def ndim(self) -> int:
        """1, or 2 for rows of several locations."""
        return self.key_ids.ndim

    def __len__(self) -> int:
        return len(self.key_ids)

    def __getitem__(self, item: Any) -> Any:
        key_ids, indices = self.key_ids[item], self.indices[item]
        if np.ndim(key_ids) == 0:
            return ImageLocation(self.keys[int(key_ids)], int(indices))
        return self._like(key_ids, indices)

    def __iter__(self) -> Iterator[Any]:
        if self.ndim == 2:
            for row in range(len(self)):
                yield self._like(self.key_ids[row], self.indices[row])
            return
        keys = self.keys
        for start in range(0, len(self), _ITERATED):
            stop = start + _ITERATED
            for key_id, index in zip(self.key_ids[start:stop].tolist(), self.indices[start:stop].tolist()):
                yield ImageLocation(keys[key_id], index)

    def ravel(self) -> LocationColumns:
        """The locations of one axis, row after row."""
        return self._like(self.key_ids.ravel(), self.indices.ravel())

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        if copy is False:
            raise ValueError("LocationColumns makes its ImageLocation objects: it has no array to view")
        made = np.empty(self.key_ids.size, dtype=object)
        made[:] = list(self.ravel())
        return made.reshape(self.shape).astype(dtype or object, copy=False)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LocationColumns):
            if other.shape != self.shape:
                return False
            numbers = {key: number for number, key in enumerate(self.keys)}
            ours = np.asarray([numbers.get(key, -1) for key in other.keys] or [-1], dtype=np.int64)
            return bool((ours[other.key_ids] == self.key_ids).all() and (other.indices == self.indices).all())
        if isinstance(other, Sequence) and not isinstance(other, (str, bytes)):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def planned(self) -> tuple[list[str], np.ndarray, np.ndarray]:
        """As `index_locations` gives them: the keys used, in the order they first appear, and the
        number of each location's key in them and its index, flattened row after row."""
        key_ids, indices = self.key_ids.ravel(), self.indices.ravel()
        if not len(key_ids):
            return [], key_ids, indices
        if _numbered_as_they_appear(key_ids, len(self.keys)):
            return list(self.keys), key_ids, indices
        used, firsts = np.unique(key_ids, return_index=True)
        order = used[np.argsort(firsts)]
        renumbered = np.empty(len(self.keys), dtype=np.int64)
        renumbered[order] = np.arange(len(order))
        return [self.keys[number] for number in order.tolist()], renumbered[key_ids], indices

    def __repr__(self) -> str:
        return f"LocationColumns({self.shape} locations in {len(self.keys)} files)"


def _numbered_as_they_appear(key_ids: np.ndarray, keys: int) -> bool:
    """Whether `key_ids` use every number below `keys`, each first after all the smaller ones: a block of
    rows at a time, each at most one more than the highest before it."""
    highest = -1
    for start in range(0, len(key_ids), _ITERATED * 256):
        block = key_ids[start : start + _ITERATED * 256]
        before = np.maximum.accumulate(block)
        np.maximum(before, highest, out=before)
        if block[0] > highest + 1 or (block[1:] > before[:-1] + 1).any():
            return False
        highest = int(before[-1])
    return highest == keys - 1


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
    if isinstance(locations, LocationColumns):
        return locations.planned()
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


def integer_array(values: Any, refusal: str) -> np.ndarray:
    """`values` as an int64 array, if they are integers; an empty array of any type is taken as one.

    Raises:
        TypeError: `"{refusal}, not {dtype}"` if `values` hold other values (booleans among them).
    """
    array = np.asarray(values)
    if array.size and array.dtype.kind not in "iu":
        raise TypeError(f"{refusal}, not {array.dtype}")
    return array.astype(np.int64, copy=False)
