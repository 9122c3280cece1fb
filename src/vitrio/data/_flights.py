"""The batches of an epoch under way: each read, then finished (handed out as the output says,
transformed, put in its type) on the loader's threads while the program works on those before it.

A `Flight` is one batch. A `Finisher`, a thread of the epoch's own, waits
for each batch's reads in turn and then submits its finishing to the
loader's executor: a task never waits for another on its own executor (a
`PreparedSource` prepares its images there), so the wait is the finisher's.
The batch the program asks for, if its finishing has not been submitted
yet, is finished by the thread that asks, once read.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from .._concurrency import Completion, Executor, run_tasks
from ._dataset import PendingBatch

__all__ = ["Finish", "Finisher", "Flight", "Progress"]

Finish = Callable[[dict[str, np.ndarray], int], Any]
"""What finishes a batch: given its values (with the fields the loader adds) and its position in the epoch."""


class Flight:
    """One batch under way: its reads, then its finishing, by whichever claims it first.

    Args:
        reads: The batch being read.
        extra: The fields the loader adds to it (pad_last's).
        position: Where the batch stands in its epoch, counting from 0.
        rows: How many rows it has.
    """

    __slots__ = ("_reads", "_extra", "position", "rows", "_claimed", "_finishing", "_result", "_lock")

    def __init__(self, reads: PendingBatch, extra: dict[str, np.ndarray], position: int, rows: int):
        self._reads, self._extra, self.position, self.rows = reads, extra, position, rows
        self._claimed = False
        self._finishing: Completion | None = None
        self._result: Any = None
        self._lock = threading.Lock()

    def _claim(self) -> bool:
        """Whether the finishing is the caller's to do: no one claimed it before."""
        with self._lock:
            claimed, self._claimed = self._claimed, True
        return not claimed

    def submit_once_read(self, executor: Executor, finish: Finish) -> None:
        """Wait for the reads, then submit the finishing to `executor` unless it is claimed already."""
        self._reads.wait()
        with self._lock:
            if not self._claimed:
                self._claimed = True
                self._finishing = run_tasks(executor, [lambda: self._finish(finish)])

    def _finish(self, finish: Finish) -> None:
        self._result = finish({**self._reads.get(), **self._extra}, self.position)

    def read(self) -> dict[str, np.ndarray]:
        """The batch's values once read, with the fields the loader adds: its finishing is the caller's.

        Raises:
            Exception: Whatever a read raised.
        """
        self._claim()
        return {**self._reads.get(), **self._extra}

    def result(self, finish: Finish) -> Any:
        """The finished batch: its finishing waited for, or, if not submitted, run here once read.

        Raises:
            Exception: Whatever a read or the finishing raised.
        """
        if self._claim():
            self._finish(finish)
        else:
            self._finishing.get()  # type: ignore[union-attr] (set with the claim)
        result, self._result = self._result, None
        return result

    def abandon(self) -> None:
        """Wait for the reads and any finishing submitted, and leave the batch unfinished. Raises nothing."""
        self._claim()
        self._reads.wait()
        if self._finishing is not None:
            self._finishing.wait()


class Finisher:
    """A thread that submits the finishing of each flight given to it, in turn, once it is read.

    Args:
        executor: Where the finishing runs.
        finish: What finishes a batch.
    """

    def __init__(self, executor: Executor, finish: Finish):
        self._executor, self._finish = executor, finish
        self._flights: queue.SimpleQueue[Flight | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name="vitrio-finisher", daemon=True)
        self._thread.start()

    def add(self, flight: Flight) -> None:
        """Submit the finishing of `flight` once it is read, after those added before."""
        self._flights.put(flight)

    def _serve(self) -> None:
        while (flight := self._flights.get()) is not None:
            flight.submit_once_read(self._executor, self._finish)
            del flight

    def close(self) -> None:
        """Stop once the flights added are seen to, and wait for that."""
        self._flights.put(None)
        self._thread.join()


class Progress:
    """How far an iteration has got: the batch sampler's state as it began, its epoch, and the batches
    handed out."""

    __slots__ = ("sampler", "epoch", "batches")

    def __init__(self, sampler: dict[str, Any] | None, epoch: int, batches: int):
        self.sampler = sampler
        self.epoch = epoch
        self.batches = batches
