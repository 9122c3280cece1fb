"""`ImageLoader`, and what every planned read checks of its arguments and how it splits into tasks."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._arrays import check_numeric_destination
from .._concurrency import SynchronousExecutor, ThreadPoolExecutor
from .._config import Configuration
from .._config import configuration as _configuration
from .._counters import ReadCounters, ReadStats
from .._providers import ImageReaderProvider
from .._storage import is_url
from .._types import group_ids, index_locations, integer_array

__all__ = [
    "ImageLoader",
    "plan_locations",
    "check_leading_extent",
    "task_bounds",
    "task_positions",
    "slot_integers",
    "check_ids",
    "as_out",
    "as_sequence",
]


class ImageLoader:
    """What reads batches: an executor to run reads on, and a provider of readers.

    Args:
        executor: Where the reads run.
        readers: What hands out the reader of each file.
        read_ahead: Whether a batch tells the kernel what it will read of raw files
            (`posix_fadvise` WILLNEED) as it is submitted, so that files not in the page cache
            are read from disk many requests at a time while earlier batches are copied: worth
            it where batches are submitted ahead of their use, as a `vitrio.data.DataLoader`
            does. It costs the submitting thread a system call per run (and an open per file).
        counters: What counts what its reads do (`stats()`). Defaults to counters of its own.
        configuration: How batches are planned into tasks (`tasks_per_worker`, `open_ahead`, ...).
            Defaults to the configuration in force when it is made (`vitrio.configuration()`).
    """

    def __init__(
        self,
        executor: ThreadPoolExecutor | SynchronousExecutor,
        readers: ImageReaderProvider,
        read_ahead: bool = False,
        counters: ReadCounters | None = None,
        configuration: Configuration | None = None,
    ):
        self.executor = executor
        self.readers = readers
        self.read_ahead = read_ahead
        self.counters = ReadCounters() if counters is None else counters
        self.configuration = _configuration() if configuration is None else configuration

    def stats(self, reset: bool = False) -> ReadStats:
        """What its reads did since it was made or reset (`ReadStats`); `reset` counts from zero after."""
        return self.counters.stats(reset)

    @property
    def worker_count(self) -> int:
        """How many reads run at once."""
        return self.executor.worker_count

    def __repr__(self) -> str:
        return f"ImageLoader({self.executor!r}, {self.readers!r})"


def plan_locations(locations: Sequence[Any]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The distinct keys of `locations`, and for each location its key's number and its index.

    As `vitrio._types.index_locations`, for locations that are all whole files or all images of stacks.

    Raises:
        ValueError: If whole files and images of stacks are mixed.
    """
    keys, key_ids, indices = index_locations(locations)
    whole = indices < 0
    if whole.any() and not whole.all():
        raise ValueError("locations mix whole files and images of stacks")
    return keys, key_ids, indices


def check_leading_extent(array: np.ndarray, count: int, what: str, of: str) -> None:
    """Raise `ValueError` unless `array` has a leading extent of `count`, one slot per element of `of`."""
    if array.ndim == 0 or array.shape[0] != count:
        raise ValueError(
            f"{what}'s leading extent must be the number of {of}, {count}: its shape is {array.shape}"
        )


def task_bounds(count: int, workers: int, per_worker: int) -> list[tuple[int, int]]:
    """Bounds of about `workers * per_worker` tasks of equal stretches of `count` slots, none empty."""
    tasks = max(1, min(count, workers * per_worker))
    bounds = np.linspace(0, count, tasks + 1).astype(np.int64).tolist()
    return [(a, b) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def task_positions(
    loader: ImageLoader, ids: np.ndarray, positions: np.ndarray, key_of: Callable[[int], str]
) -> list[np.ndarray]:
    """The `positions` each task takes: those of files at URLs, whole files a task, a worker's share of
    them each, so that a file's ranges are merged and a task's fetched at once; the rest in stretches,
    `tasks_per_worker` of its configuration a worker (`task_bounds`).

    Args:
        ids: For each position, the number of its file; `key_of(id)`, that file's key.
    """
    workers = loader.worker_count
    remote = [i for i in np.unique(ids[positions]).tolist() if is_url(key_of(i))]
    parts = []
    if remote:
        far = np.isin(ids[positions], remote)
        fetched = positions[far]
        files = [fetched[group] for _, group in group_ids(ids[fetched])]
        parts = [np.concatenate(files[a:b]) for a, b in task_bounds(len(files), workers, 1)]
        positions = positions[~far]
    per_worker = loader.configuration.tasks_per_worker
    return parts + [positions[a:b] for a, b in task_bounds(len(positions), workers, per_worker)]


def slot_integers(values: Any, name: str, count: int) -> np.ndarray:
    """`values` as a 1-D int64 array of `count` elements, or a clear error naming `name`."""
    array = integer_array(values, f"{name} are integers")
    if array.ndim != 1 or len(array) != count:
        raise ValueError(
            f"{name} are one per slot of the destination, {count} in a 1-D array, not of shape {array.shape}"
        )
    return array


def check_ids(ids: np.ndarray, name: str, count: int, of: str) -> None:
    """Raise `ValueError` unless every one of `ids` numbers one of the `count` elements of `of`."""
    if len(ids) and (ids.min() < 0 or ids.max() >= count):
        bad = int(np.flatnonzero((ids < 0) | (ids >= count))[0])
        raise ValueError(f"{name}[{bad}] is {int(ids[bad])}, not the number of one of the {count} {of}")


def as_out(out: Any) -> np.ndarray:
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out is a numpy array, not {type(out).__name__}")
    if out.ndim == 0:
        raise ValueError("out has a leading extent, a slot per read: it is a 0-d array")
    if not out.flags.writeable:
        raise ValueError("out is read-only")
    check_numeric_destination(out.dtype)
    return out


def as_sequence(values: Any, name: str) -> Sequence[Any]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise TypeError(f"{name} is a sequence, not {type(values).__name__}")
    return values
