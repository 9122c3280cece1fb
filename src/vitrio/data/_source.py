"""What a field of a dataset is: the `Source` protocol, and `ArraySource`, values already in memory.

A source reads the values of some of its rows into an array it is given and
returns a list of completions to wait for (`Pendings`), empty when the values
are in place already. Sources that read files (`ImageSource`, `PatchSource`)
return completions whose failures name the rows they belong to. What a
user's source returns is taken either way: a sequence of things to wait on,
or one thing to wait on (`as_completion`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .._arrays import as_casting, check_destination_type, gather
from .._concurrency import Completion, run_tasks
from .._loading import ImageLoader
from .._numerical import numpy_dtype

__all__ = ["Source", "ArraySource", "Pendings", "Waitable", "as_completion", "describe_failure"]

_INLINE_BYTES = 1 << 20
"""Copies of rows smaller than this are made at once; larger ones run on the loader's threads."""


class Waitable(Protocol):
    """What a source returns to wait for: a `Completion` or anything that waits like one."""

    @property
    def is_ready(self) -> bool: ...

    def wait(self) -> None: ...

    def get(self) -> None: ...


class Pendings(list):
    """The list of completions a source's `read_async` returns, as the published API has it a list.

    It can also be waited on as one, through `Completion.all` of its
    elements, so callers that treat the result as one completion keep working.
    """

    @property
    def is_ready(self) -> bool:
        """Whether every element is ready."""
        return Completion.all(self).is_ready

    def wait(self) -> None:
        """Block until every element is done. Raises nothing."""
        Completion.all(self).wait()

    def get(self) -> None:
        """Block until every element is done, then raise the first failure, if any."""
        Completion.all(self).get()


def as_completion(returned: Any) -> Completion:
    """What to wait for, from what a source's `read_async` returned: a sequence of waitables, one, or None.

    Raises:
        TypeError: If `returned` is none of these.
    """
    if returned is None:
        return Completion()
    if hasattr(returned, "get") and hasattr(returned, "wait"):  # a completion, a `Pendings`, a user's
        return Completion.all([returned])
    if isinstance(returned, Iterable):
        return Completion.all(returned)
    raise TypeError(f"read_async returns a sequence of things to wait on, not {type(returned).__name__}")


@runtime_checkable
class Source(Protocol):
    """The values of one field of a dataset, a value for each row.

    shape and dtype are those of the value of one row, so the values of n
    rows are read into an array of shape (n, *shape).
    """

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape of the value of one row."""
        ...

    @property
    def dtype(self) -> np.dtype:
        """The data type of the values."""
        ...

    def __len__(self) -> int:
        """How many rows there are."""
        ...

    def read_async(self, loader: ImageLoader, rows: np.ndarray, out: np.ndarray) -> Sequence[Waitable]:
        """Start reading the values of some rows.

        Args:
            loader: Where reads of files are dispatched.
            rows: The rows to read, as integers within the length of the source.
            out: Where the value of each row lands, in the order of rows. Its
                shape is (len(rows), *shape) and its type dtype.

        Returns:
            What to wait for before out holds the values: a sequence of
            things with `wait()` and `get()`. It may be empty, when the
            values are in out already.
        """
        ...

    def subset(self, rows: np.ndarray) -> Source:
        """Get the source of only these rows, in this order."""
        ...


class FileSource(Source):
    """A source whose values are read from files, as one data type given or the stored one."""

    _shape: tuple[int, ...]
    _dtype: np.dtype
    _casting: str

    def _read_as(self, key: str, stored: Any, data_type: Any, casting: Any) -> None:
        """Read values as `data_type` (the type `key` stores when None), checked to hold what `key` holds."""
        self._dtype = numpy_dtype(data_type if data_type is not None else stored)
        self._casting = as_casting(casting)
        check_destination_type(key, stored, self._dtype, self._casting)

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape of the value of one row."""
        return self._shape

    @property
    def dtype(self) -> np.dtype:
        """The data type of the values."""
        return self._dtype


class ArraySource(Source):
    """Values already in memory, the first axis of an array running along the rows.

    Args:
        array: The values. Anything numpy takes as an array, which it uses
            without a copy where it can.

    Raises:
        ValueError: If the array has no first axis to run along the rows.
    """

    def __init__(self, array: Any):
        values = np.asarray(array)
        if values.ndim == 0:
            raise ValueError("an ArraySource needs an array with a value for each row, not a scalar")
        self._array = values

    @property
    def array(self) -> np.ndarray:
        """The values."""
        return self._array

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape of the value of one row."""
        return self._array.shape[1:]

    @property
    def dtype(self) -> np.dtype:
        """The data type of the values."""
        return self._array.dtype

    def __len__(self) -> int:
        return len(self._array)

    def read_async(self, loader: ImageLoader | None, rows: np.ndarray, out: np.ndarray) -> Pendings:
        """Start reading the values of some rows, as Source.read_async.

        Small copies, and all copies without a loader, are made at once and
        return an empty list; large ones run on the loader's threads.
        """
        rows = np.asarray(rows, dtype=np.int64)

        def copy() -> None:
            gather(self._array, rows, out, np.arange(len(rows)))

        if loader is None or out.nbytes < _INLINE_BYTES or self._array.dtype.hasobject:
            copy()
            return Pendings()
        return Pendings([run_tasks(loader.executor, [copy], keep=(out, self._array))])

    def subset(self, rows: np.ndarray) -> ArraySource:
        """Get the source of only these rows, in this order."""
        return ArraySource(self._array[np.asarray(rows, dtype=np.int64)])

    def __repr__(self) -> str:
        return f"ArraySource(shape={self._array.shape}, dtype={self._array.dtype})"


def describe_failure(
    error: BaseException,
    rows: np.ndarray,
    row_keys: np.ndarray,
    keys: Sequence[str],
    describe_row: Callable[[int], str],
) -> str:
    """Which rows of a failed read the failure belongs to: those that read the file it concerns.

    Args:
        error: The failure, whose `key` names the file it concerns, as every failure of a read does.
        rows: The rows read.
        row_keys: For each row read, the numbers of the keys it reads (one or a row of them).
        keys: The keys, by number.
        describe_row: Gives the text naming one row, given its position in `rows`.
    """
    key = getattr(error, "key", None)
    number = list(keys).index(key) if key in keys else -1
    hits = np.flatnonzero((row_keys.reshape(len(rows), -1) == number).any(axis=1))
    if not len(hits):
        hits = np.arange(len(rows))
    more = f" and {len(hits) - 1} more" if len(hits) > 1 else ""
    return f"reading row {describe_row(int(hits[0]))}{more}"
