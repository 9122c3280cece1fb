"""`Dataset`, rows of named fields, and `PendingBatch`, a batch of them under way.

A dataset only describes its rows: its fields are sources, columns being
held as `ArraySource`s. Reading a batch makes a fresh array for each field,
has each source start reading into it on the loader given (or the one shared
by the process), and hands back what to wait for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from .._arrays import as_destination
from .._concurrency import Completion
from .._loading import ImageLoader
from .._types import integer_array
from ._shared import shared_loader
from ._source import ArraySource, Source, Waitable, as_completion

__all__ = ["Dataset", "PendingBatch", "Allocator", "resolve_rows"]

Allocator = Callable[[tuple[int, ...], np.dtype], Any]
"""Makes the array of a field, given its shape and its numpy type."""


def resolve_rows(rows: Any, count: int) -> np.ndarray:
    """Rows as non-negative int64 indices below `count`.

    Args:
        rows: Integers (negative ones counting from the end), a slice, or a
            mask of a boolean for each of the `count` rows.
        count: How many rows there are.

    Raises:
        IndexError: If a row is past either end, or a mask is not `count` long.
        TypeError: If the rows are neither integers nor booleans.
    """
    if isinstance(rows, slice):
        return np.arange(count, dtype=np.int64)[rows]
    values = np.asarray(rows)
    if values.dtype == np.bool_:
        if values.shape != (count,):
            raise IndexError(
                f"a mask of rows has a boolean for each of the {count} rows, not shape {values.shape}"
            )
        return np.flatnonzero(values)
    if values.size == 0:
        return np.zeros(0, dtype=np.int64)
    values = integer_array(values, "rows are integers or a mask of booleans")
    if values.ndim > 1:
        raise IndexError(f"rows are a sequence of integers, not an array of shape {values.shape}")
    values = values.reshape(-1)
    low, high = int(values.min()), int(values.max())
    if low < -count or high >= count:
        raise IndexError(f"row {low if low < -count else high} is past the end of {count} rows")
    return np.where(values < 0, values + count, values) if low < 0 else values


class PendingBatch:
    """A batch under way. Its arrays are handed out once it is complete.

    Args:
        values: The array of each field, being filled.
        pending: What to wait for before they are: completions, or anything with
            `wait()`, `get()` and `is_ready` as a `Completion` has.
    """

    __slots__ = ("_values", "_pending")

    def __init__(self, values: Mapping[str, np.ndarray], pending: Iterable[Waitable]):
        self._values = dict(values)
        self._pending = Completion.all(pending)

    @property
    def is_ready(self) -> bool:
        """Whether every read of the batch is done."""
        return self._pending.is_ready

    def wait(self) -> None:
        """Block until every read of the batch is done. Raises nothing."""
        self._pending.wait()

    def get(self) -> dict[str, np.ndarray]:
        """Wait for the batch.

        Returns:
            The value of each field for each row of the batch, in the order its rows were asked for.

        Raises:
            Exception: Whatever a read of the batch raised. Every read is waited for first.
        """
        self._pending.get()
        return dict(self._values)

    def __repr__(self) -> str:
        return f"<PendingBatch of {list(self._values)} {'ready' if self.is_ready else 'pending'}>"


class Dataset:
    """Rows of named fields: images, patches, and the metadata that goes with them.

    A field is a source, such as an ImageSource, or a column, which is
    anything numpy takes as an array of a value for each row: an array of CTF
    parameters, a column of a DataFrame. Every field has a value for each row.

    Indexing a dataset with an integer reads one row, and with a slice or an
    array of integers reads a batch of rows into an array for each field.
    Each batch also holds the index of each of its rows, under index. So it
    works as it is with the DataLoader of PyTorch, which reads a batch at a
    time when its sampler draws batches::

        torch.utils.data.DataLoader(
            dataset,
            sampler=torch.utils.data.BatchSampler(torch.utils.data.RandomSampler(dataset), 64, False),
            batch_size=None,
        )

    A dataset only describes its rows, and holds nothing that reads them.
    Each read is given the loader it goes through, a thread pool with its
    open readers and maybe a scratch, and a read given none goes through a
    loader shared by the process. Indexing always does. DataLoader of
    vitrio.data takes a loader of its own, and needs no worker process.

    Args:
        fields: The fields by name, each a source or a column.
        index: The name the indices of the rows of a batch go under. None leaves them out.

    Raises:
        ValueError: If there are no fields, they are not all as long, or one
            has the name index is given.
    """

    def __init__(self, fields: Mapping[str, Any], index: str | None = "index"):
        sources = {
            name: field if isinstance(field, Source) else ArraySource(field) for name, field in fields.items()
        }
        self._columns = frozenset(name for name, field in fields.items() if not isinstance(field, Source))
        if not sources:
            raise ValueError("a dataset needs at least one field")
        if index is not None and index in sources:
            raise ValueError(f"a field is named {index!r}, the name the indices of the rows go under")
        lengths = {name: len(source) for name, source in sources.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"the fields are not all as long: {lengths}")
        self._sources = sources
        self._index = index
        self._length = next(iter(lengths.values()))

    @property
    def fields(self) -> dict[str, Source]:
        """The fields by name, columns as the ArraySource holding them."""
        return dict(self._sources)

    @property
    def index(self) -> str | None:
        """The name the indices of the rows go under, if anywhere."""
        return self._index

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, item: Any) -> dict[str, Any]:
        """Read one row (an integer: its values without the batch axis) or a batch of rows."""
        if isinstance(item, (int, np.integer)) and not isinstance(item, (bool, np.bool_)):
            batch = self.read_async([item]).get()
            return {name: values[0] for name, values in batch.items()}
        return self.read_async(item).get()

    def read_async(
        self, rows: Any, allocator: Allocator | None = None, loader: ImageLoader | None = None
    ) -> PendingBatch:
        """Start reading a batch of rows.

        Args:
            rows: The rows, as integers, negative ones counting from the end,
                or as a mask of a boolean for each row. A row may be asked for more than once.
            allocator: What makes the array of each field, given its shape and
                its numpy type. Defaults to numpy.empty. An allocator of pinned
                memory lets PyTorch copy the batch to a GPU without staging it.
            loader: Where reads of files are dispatched. Defaults to the loader shared by the process.

        Returns:
            The batch, once it is complete.

        Raises:
            IndexError: If a row is past the end of the dataset.
            TypeError: If the rows are neither integers nor booleans.
            ValueError: If the allocator makes an array of another shape or type than asked.
        """
        rows = resolve_rows(rows, self._length)
        loader = loader or shared_loader()
        allocate = allocator or np.empty
        values: dict[str, np.ndarray] = {}
        pending: list[Completion] = []
        for name, source in self._sources.items():
            out = _allocate(allocate, (len(rows), *source.shape), np.dtype(source.dtype), name)
            pending.append(as_completion(source.read_async(loader, rows, out)))
            values[name] = out
        if self._index is not None:
            indices = _allocate(allocate, (len(rows),), np.dtype(np.int64), self._index)
            indices[...] = rows
            values[self._index] = indices
        return PendingBatch(values, pending)

    def subset(self, rows: Any) -> Dataset:
        """Get a dataset of only some of the rows, in the order asked for.

        It shares the sources of this one. Its indices count its own rows.

        Args:
            rows: The rows, named as read_async takes them.
        """
        rows = resolve_rows(rows, self._length)
        subset = Dataset({name: source.subset(rows) for name, source in self._sources.items()}, self._index)
        subset._columns = self._columns
        return subset

    def preload(self, names: Iterable[str] | None = None, loader: ImageLoader | None = None) -> Dataset:
        """Get a dataset whose sources have all been read into memory.

        Going through it afterwards reads no file.

        Args:
            names: The fields to read. Defaults to every source not already in memory.
            loader: Where reads of files are dispatched. Defaults to the loader shared by the process.

        Raises:
            KeyError: If a name is not a field's.
            ValueError: If a name is that of a column given as values, not as a source.
        """
        if names is None:
            names = [name for name, source in self._sources.items() if not isinstance(source, ArraySource)]
        names = list(names)
        unknown = [name for name in names if name not in self._sources]
        if unknown:
            raise KeyError(f"no fields named {unknown}; the fields are {list(self._sources)}")
        columns = [name for name in names if name in self._columns]
        if columns:
            raise ValueError(
                f"fields {columns} are columns of values, not sources: there is nothing to preload"
            )
        reading = [name for name in names if not isinstance(self._sources[name], ArraySource)]
        batch = Dataset({name: self._sources[name] for name in reading}, None) if reading else None
        loaded = batch.read_async(slice(None), loader=loader).get() if batch is not None else {}
        fields = {
            name: ArraySource(loaded[name]) if name in loaded else source
            for name, source in self._sources.items()
        }
        preloaded = Dataset(fields, self._index)
        preloaded._columns = self._columns
        return preloaded

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}: {type(source).__name__}" for name, source in self._sources.items())
        return f"Dataset({self._length} rows; {fields})"


def _allocate(allocate: Allocator, shape: tuple[int, ...], dtype: np.dtype, name: str) -> np.ndarray:
    out = as_destination(allocate(shape, dtype))
    if out.shape != shape or out.dtype != dtype:
        raise ValueError(
            f"the allocator made an array of {out.shape} {out.dtype} for {name!r}, not {shape} {dtype}"
        )
    return out
