"""Locations grouped by file: `group_ids`, `ImageLocationGrouping`, and `IndexTable`, the table of centres.

This layer knows nothing of files or threads.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ._locations import ImageLocation, index_locations, integer_array

__all__ = ["ImageLocationGrouping", "IndexTable", "group_ids"]


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
