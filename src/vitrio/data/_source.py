"""What a field of a dataset is: the `Source` protocol, and `ArraySource`, values already in memory.

A source reads the values of some of its rows into an array it is given and
returns what to wait for. Sources that read files (`ImageSource`,
`PatchSource`) return a completion whose failure names the rows it belongs to.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .._concurrency import Completion, run_tasks
from .._loading import ImageLoader

__all__ = ["Source", "ArraySource", "Explained", "describe_failure"]

_INLINE_BYTES = 1 << 20
"""Copies of rows smaller than this are made at once; larger ones run on the loader's threads."""


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

    def read_async(self, loader: ImageLoader, rows: np.ndarray, out: np.ndarray) -> Completion:
        """Start reading the values of some rows.

        Args:
            loader: Where reads of files are dispatched.
            rows: The rows to read, as integers within the length of the source.
            out: Where the value of each row lands, in the order of rows. Its
                shape is (len(rows), *shape) and its type dtype.

        Returns:
            What to wait for before out holds the values. It may be empty,
            when the values are in out already.
        """
        ...

    def subset(self, rows: np.ndarray) -> Source:
        """Get the source of only these rows, in this order."""
        ...


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

    def read_async(self, loader: ImageLoader, rows: np.ndarray, out: np.ndarray) -> Completion:
        """Start reading the values of some rows, as Source.read_async.

        Small copies are made at once and return an empty completion; large
        ones run on the loader's threads.
        """
        rows = np.asarray(rows, dtype=np.int64)

        def copy() -> None:
            np.take(self._array, rows, axis=0, out=out, mode="clip")

        if out.nbytes < _INLINE_BYTES or self._array.dtype.hasobject:
            copy()
            return Completion()
        return run_tasks(loader.executor, [copy], keep=(out, self._array))

    def subset(self, rows: np.ndarray) -> ArraySource:
        """Get the source of only these rows, in this order."""
        return ArraySource(self._array[np.asarray(rows, dtype=np.int64)])

    def __repr__(self) -> str:
        return f"ArraySource(shape={self._array.shape}, dtype={self._array.dtype})"


class Explained:
    """A completion whose failure is raised again with what it belongs to added to its message.

    Args:
        completion: The reads.
        explain: Says, given the failure, which rows and files it belongs to.
    """

    __slots__ = ("_completion", "_explain")

    def __init__(self, completion: Completion, explain: Callable[[BaseException], str]):
        self._completion = completion
        self._explain = explain

    @property
    def is_ready(self) -> bool:
        """Whether every read is done."""
        return self._completion.is_ready

    def wait(self) -> None:
        """Block until every read is done. Raises nothing."""
        self._completion.wait()

    def get(self) -> None:
        """Block until every read is done, then raise the first failure, saying what it belongs to."""
        try:
            self._completion.get()
        except Exception as error:
            context = self._explain(error)
            try:
                explained = type(error)(f"{error} ({context})")
            except Exception:
                error.add_note(context)
                raise
            raise explained from error


def describe_failure(
    error: BaseException,
    rows: np.ndarray,
    row_keys: np.ndarray,
    keys: Sequence[str],
    describe_row: Callable[[int], str],
) -> str:
    """Which rows of a failed read the failure belongs to: those whose file its message names.

    Args:
        error: The failure, whose message names a file, as every failure of the core does.
        rows: The rows read.
        row_keys: For each row read, the numbers of the keys it reads (one or a row of them).
        keys: The keys, by number.
        describe_row: Gives the text naming one row, given its position in `rows`.
    """
    message = str(error)
    named = [k for k in np.unique(row_keys).tolist() if keys[k] in message]
    if named:
        longest = max(named, key=lambda k: len(keys[k]))
        hits = np.flatnonzero((row_keys.reshape(len(rows), -1) == longest).any(axis=1))
    else:
        hits = np.arange(len(rows))
    more = f" and {len(hits) - 1} more" if len(hits) > 1 else ""
    return f"reading row {describe_row(int(hits[0]))}{more}"
