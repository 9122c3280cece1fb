"""Where an epoch's time goes: how long the program waited for batches, and a progress bar that shows it.

An `EpochClock` is told when the program asks for the next batch (`ask`) and
when that batch is ready for it (`ready`): the time between the two is
waiting for data, the time from a batch ready to the next asked for is the
program's own (its transform, its step). `LoaderStats` holds the figures,
with what the reads did (`vitrio._counters.ReadStats`).
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from time import perf_counter
from typing import Any

from .._counters import ReadStats

__all__ = ["LoaderStats", "ReadStats", "EpochClock", "progress_bar"]


@dataclasses.dataclass(frozen=True)
class LoaderStats:
    """What a `DataLoader`'s epoch so far did: where its time went, and what its reads did.

    Attributes:
        batches: Batches handed out.
        rows: Rows of the dataset handed out in them.
        waiting_seconds: Time the program spent waiting for a batch, from asking for it to having it.
        working_seconds: Time the program spent between batches: from having one to asking for the next
            (the transform's time is the program's where it runs on the thread that iterates; on the
            loader's threads, it is waited for only where it does not keep up).
        reads: What the reads did: images, bytes, the scratch's and open readers' share, files opened,
            rates by format, the slowest files, conversions, patches, and requests for remote keys
            (`remote_requests`, 0 for local files).
        recycled_arrays: Arrays of batches read into the memory of a batch the program let go of.
        new_arrays: Arrays of batches read into new memory, whose pages the kernel clears first: those of
            the first batches, and of any while the program holds on to the batches before (both count
            where a `RecyclingAllocator` makes the arrays, as by default).
    """

    batches: int = 0
    rows: int = 0
    waiting_seconds: float = 0.0
    working_seconds: float = 0.0
    reads: ReadStats = dataclasses.field(default_factory=ReadStats)
    recycled_arrays: int = 0
    new_arrays: int = 0

    @property
    def seconds(self) -> float:
        """The time of the epoch so far, waiting and working."""
        return self.waiting_seconds + self.working_seconds

    @property
    def waiting_share(self) -> float:
        """The share of the time the program waited for data: near 0 when reading keeps up; 0 before any."""
        return self.waiting_seconds / self.seconds if self.seconds > 0 else 0.0

    @property
    def images_per_second(self) -> float:
        """Images read a second of the epoch so far; 0 before any."""
        return self.reads.images / self.seconds if self.seconds > 0 else 0.0

    @property
    def rows_per_second(self) -> float:
        """Rows handed out a second of the epoch so far; 0 before any."""
        return self.rows / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, float]:
        """The figures as plain numbers by name, for a logger (TensorBoard, Weights & Biases, Lightning's
        `log_dict`); those of the reads are named `reads/NAME`."""
        figures: dict[str, float] = {
            "batches": self.batches,
            "rows": self.rows,
            "waiting_seconds": self.waiting_seconds,
            "working_seconds": self.working_seconds,
            "waiting_share": self.waiting_share,
            "images_per_second": self.images_per_second,
            "rows_per_second": self.rows_per_second,
            "recycled_arrays": self.recycled_arrays,
            "new_arrays": self.new_arrays,
        }
        figures.update({f"reads/{name}": value for name, value in self.reads.as_dict().items()})
        return figures


class EpochClock:
    """The time of one epoch, split between waiting for batches and working on them.

    Safe to read (`figures`) from another thread while the epoch goes on.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._since: float | None = None  # when the interval under way began
        self._waiting_now = False
        self.reset()

    def reset(self) -> None:
        """Count from zero, from now: the interval under way starts again."""
        now = perf_counter()
        with self._lock:
            self.batches = self.rows = 0
            self._seconds = [0.0, 0.0]  # working, waiting
            self._since = now if self._since is not None else None

    def _switch(self, waiting: bool, rows: int) -> None:
        now = perf_counter()
        with self._lock:
            if self._since is not None:
                self._seconds[self._waiting_now] += now - self._since
            self._since, self._waiting_now = now, waiting
            if not waiting:  # a batch is ready
                self.batches += 1
                self.rows += rows

    def ask(self) -> None:
        """The program asks for the next batch."""
        self._switch(True, 0)

    def ready(self, rows: int) -> None:
        """The batch asked for, of `rows` rows, is ready."""
        self._switch(False, rows)

    def figures(self, reads: ReadStats, recycled_arrays: int = 0, new_arrays: int = 0) -> LoaderStats:
        """The figures so far, the interval under way counted up to now, with the reads' and the arrays'."""
        now = perf_counter()
        with self._lock:
            seconds = list(self._seconds)
            if self._since is not None:
                seconds[self._waiting_now] += now - self._since
            return LoaderStats(
                self.batches, self.rows, seconds[True], seconds[False], reads, recycled_arrays, new_arrays
            )


class _TextBar:
    """A progress line on standard error, rewritten at most twice a second, where tqdm is not installed."""

    def __init__(self, total: int | None):
        self._total = f"/{total}" if total is not None else ""
        self._file = sys.stderr
        self._shown = 0.0
        self._batches = 0

    def show(self, stats: LoaderStats) -> None:
        self._batches += 1
        now = perf_counter()
        if now - self._shown >= 0.5:
            self._shown = now
            self._write(stats, "")

    def close(self, stats: LoaderStats) -> None:
        self._write(stats, "\n")

    def _write(self, stats: LoaderStats, end: str) -> None:
        self._file.write(f"\rbatches {self._batches}{self._total}, {_figures(stats)}{end}")
        self._file.flush()


class _TqdmBar:
    """A tqdm bar of an epoch's batches, the figures after it."""

    def __init__(self, tqdm: Any, total: int | None):
        self._bar = tqdm.tqdm(total=total, unit="batch", desc="batches")

    def show(self, stats: LoaderStats) -> None:
        self._bar.set_postfix_str(_figures(stats), refresh=False)
        self._bar.update()

    def close(self, stats: LoaderStats) -> None:
        self._bar.set_postfix_str(_figures(stats), refresh=False)
        self._bar.close()


def _figures(stats: LoaderStats) -> str:
    shown = f"{stats.images_per_second:,.0f} images/s, waiting for data {stats.waiting_share:.0%}"
    reads = stats.reads
    asked = reads.zarr_chunk_hits + reads.zarr_chunk_misses
    return f"{shown}, chunks decoded {reads.zarr_chunk_misses / asked:.0%}" if asked else shown


def progress_bar(total: int | None) -> _TqdmBar | _TextBar:
    """A bar of an epoch's batches on standard error, showing images a second, the share of the time
    the program waited for data and, where OME-Zarr chunks were read, the share of them decoded (not
    found in the chunk cache): tqdm's where it is installed, else a line of text."""
    try:
        import tqdm
    except ModuleNotFoundError as error:
        if error.name != "tqdm":
            raise
        return _TextBar(total)
    return _TqdmBar(tqdm, total)
