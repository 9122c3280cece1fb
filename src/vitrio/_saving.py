"""Planning batch writes into declared files: the converse of `read_batch_async`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ._arrays import as_source
from ._concurrency import Completion, Executor, run_tasks
from ._config import configuration
from ._errors import concerning
from ._loading import check_leading_extent, plan_locations, task_bounds
from ._writers import ImageWriterProvider

__all__ = ["ImageSaver", "write_batch_async"]


class ImageSaver:
    """What writes batches: an executor to run writes on, and the declared files.

    Used as a context manager, it closes the declared files at the end of
    the block as its writers do (see `FileImageWriterProvider`).

    Args:
        executor: Where the writes run.
        writers: The files written into, an `ImageWriterProvider`.
    """

    def __init__(self, executor: Executor, writers: ImageWriterProvider):
        self.executor = executor
        self.writers = writers

    @property
    def worker_count(self) -> int:
        """How many writes run at once."""
        return self.executor.worker_count

    def __enter__(self) -> ImageSaver:
        return self

    def __exit__(self, kind, error, trace) -> None:
        """Leave the block as the writers do: a `FileImageWriterProvider` closes every declared file."""
        leave = getattr(self.writers, "__exit__", None)
        if leave is not None:
            leave(kind, error, trace)

    def __repr__(self) -> str:
        return f"ImageSaver({self.executor!r}, {self.writers!r})"


def write_batch_async(saver: ImageSaver, source: Any, locations: Sequence[Any]) -> Completion:
    """Write slot `i` of `source` as what `locations[i]` names, into files declared to `saver.writers`.

    A stack can be written a batch at a time, and one batch may span several
    files. Values are converted to each file's type.

    Args:
        saver: What writes.
        source: An array whose leading extent is `len(locations)`.
        locations: `ImageLocation` objects naming images of declared stacks,
            or keys of declared files to write whole; not both kinds.

    Returns:
        A `Completion` of the writes. A key not declared raises `IndexError`
        from its `get()`, as does an index past the end of its stack.

    Raises:
        ValueError: If the leading extent is not `len(locations)`, or whole
            files and images of stacks are mixed.
    """
    values = as_source(source)
    locations = list(locations)
    check_leading_extent(values, len(locations), "the source", "locations")
    keys, key_ids, indices = plan_locations(locations)
    if not len(locations):
        return Completion()
    order = np.lexsort((indices, key_ids))
    writers = saver.writers

    def task(first: int, last: int) -> None:
        for slot in order[first:last].tolist():
            with concerning(keys[key_ids[slot]]):
                _write_slot(writers.writer(keys[key_ids[slot]]), values[slot], int(indices[slot]))

    bounds = task_bounds(len(locations), saver.worker_count, configuration().tasks_per_worker)
    tasks = [lambda a=a, b=b: task(a, b) for a, b in bounds]
    return run_tasks(saver.executor, tasks, keep=source)


def _write_slot(writer: Any, value: np.ndarray, index: int) -> None:
    """Write `value` as image `index` of `writer`'s file, or as the whole file where `index` is -1."""
    if index < 0:
        stack = writer.descriptor.stack_extents
        if value.shape != writer.descriptor.extents:
            raise ValueError(f"{writer.key}: holds {writer.descriptor.extents}, not {value.shape}")
        writer.write_run(0, [value[i] for i in np.ndindex(*stack)] if stack else [value])
    else:
        writer.write_run(index, [value])
