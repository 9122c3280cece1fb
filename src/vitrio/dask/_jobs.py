"""Bulk jobs on a cluster: `run_jobs`, one task per file, and `remove_leftovers`, what a killed one left."""

from __future__ import annotations

import itertools
import os
import queue
import secrets
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._config import configuration
from .._fs import FOLDER
from .._partial import remove_partials

if TYPE_CHECKING:
    import distributed


def run_jobs(
    client: distributed.Client,
    function: Callable[[Any], Any],
    jobs: Sequence[Any],
    name: str,
    done: Callable[[int, Any], object] | None = None,
    retries: int = 3,
) -> list[Any]:
    """Run `function(job)` for every job on the cluster of `client`, and the results in the order of `jobs`.

    Each job is one task, named `name` on the dashboard, retried up to
    `retries` times where it fails or its worker is lost: a job must leave the
    same files when run twice. `done(n, result)` is called here as job `n` ends.
    Jobs are handed out as they end, no more at once than
    `cluster_jobs_per_thread` of the configuration per thread of the cluster
    (a thread that ends one has the next at hand). At the
    first job that fails for good no more are handed out, and those handed
    out are waited for: once this raises, no job runs any more (a task cannot
    be stopped midway; one left running would write after its caller has
    cleaned up). An interruption here (Ctrl-C) cancels them without waiting.

    Raises:
        What the failed job raised.
    """
    if not jobs:
        return []
    finished: queue.SimpleQueue = queue.SimpleQueue()
    run = secrets.token_hex(8)  # the keys of two runs on one scheduler must differ, or they share results
    at_once = configuration().cluster_jobs_per_thread * max(1, sum(client.nthreads().values()))
    waiting = iter(enumerate(jobs))
    running: dict[str, tuple[int, distributed.Future]] = {}
    results: list[Any] = [None] * len(jobs)
    failure: BaseException | None = None

    def hand_out() -> None:
        for n, job in itertools.islice(waiting, at_once - len(running)):
            future = client.submit(function, job, key=f"{name}-{run}-{n}", retries=retries, pure=False)
            running[future.key] = n, future
            future.add_done_callback(finished.put)

    try:
        hand_out()
        while running:
            future = finished.get()
            n, _ = running.pop(future.key)
            try:
                results[n] = future.result()
            except Exception as error:  # the others running finish first
                failure = failure or error
                continue
            if done is not None:
                done(n, results[n])
            if failure is None:
                hand_out()
    except BaseException:
        client.cancel([future for _, future in running.values()])
        raise
    if failure is not None:
        raise failure
    return results


def remove_leftovers(paths: Sequence[str | os.PathLike[str]]) -> None:
    """Remove what writes of the files at `paths` left beside them when their process was killed.

    vitrio writes a file beside its path under a hidden name (`vitrio._partial.PartialFile`); a process
    killed before moving it into place leaves it there. Only regular files of that naming owned by
    this user are removed, each by its name in its folder opened once, never through a link. One that
    cannot be removed (a folder not writable) is named in a `ResourceWarning`, and the others removed.
    """
    by_folder: dict[Path, set[str]] = {}
    for path in map(Path, paths):
        by_folder.setdefault(path.parent, set()).add(path.name)
    for folder, names in by_folder.items():
        try:
            descriptor = os.open(folder, FOLDER)
        except FileNotFoundError:
            continue
        try:
            kept = remove_partials(descriptor, lambda found, names=names: found[0] in names)
        finally:
            os.close(descriptor)
        for name, error in kept:
            warnings.warn(
                f"{folder / name}: left by a write, not removed: {error.strerror}", ResourceWarning, 2
            )
