"""What a loader's reads did: images, files opened, scratch and open readers' share, rates by format.

A loader (`vitrio._loading.ImageLoader`) holds a `ReadCounters`, which keeps
a `_Tally` for each thread that reads for it. Its reads run as tasks wrapped
by `ReadCounters.counted`: while one runs, its thread's tally is the one the
reader providers and the scratch add to (`add_count`, `note_read`,
`note_runs`), with no lock, since only that thread writes it; `stats()` adds
the tallies up. What a batch does as it is submitted (the files its hints
open) is added to the submitting thread's tally (`ReadCounters.add`). Code
that runs outside both (a scratch prefetched ahead, a read of the user's
own) counts nothing.
"""

from __future__ import annotations

import dataclasses
import heapq
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ._native import CHECK_KIND, RUN_FILE

__all__ = ["ReadCounters", "ReadStats", "FormatRate", "FileRead", "add_count", "note_read", "note_runs"]

_SLOWEST = 5
"""How many of the slowest reads of files are kept."""

_local = threading.local()


@dataclasses.dataclass(frozen=True)
class FormatRate:
    """What the files of one format took: images, bytes handed over, and seconds of reading threads.

    Files read by the native path (MRC, uncompressed TIFF, DM) count as "raw";
    images served from a scratch as "scratch".
    """

    images: int
    bytes: int
    seconds: float

    @property
    def images_per_second(self) -> float:
        """Images a reading thread makes in a second of this format; 0 before any."""
        return self.images / self.seconds if self.seconds > 0 else 0.0


@dataclasses.dataclass(frozen=True)
class FileRead:
    """The slowest read of images of one file: seconds per image, the file, its images and seconds."""

    seconds_per_image: float
    key: str
    images: int
    seconds: float


@dataclasses.dataclass(frozen=True)
class ReadStats:
    """What a loader's reads did since its counters were last reset.

    Attributes:
        images: Images (and patches) read into batches.
        bytes: Bytes written into batches.
        patches: Patches cropped, of those images.
        scratch_images: Images a scratch served from what it held already, reading no file.
        files_opened: Files opened, by readers or by the native path.
        readers_reused: Times a reader left open served a file without opening it.
        conversions: Images converted to the batch's type on the way.
        remote_requests: Requests made for the keys of remote stores; 0 for local files.
        zarr_chunk_hits: OME-Zarr chunks found decoded in the chunk cache (or being decoded).
        zarr_chunk_misses: OME-Zarr chunks fetched and decoded, not found in the chunk cache; misses
            in an epoch that reads what the one before read say the cache is too small for it
            (`zarr_cache_bytes` of the configuration).
        zarr_decoded_bytes: The bytes of the OME-Zarr chunks decoded.
        formats: What the files of each format took, by format name.
        slowest: The files read slowest (seconds per image of their slowest read), the slowest first.
    """

    images: int = 0
    bytes: int = 0
    patches: int = 0
    scratch_images: int = 0
    files_opened: int = 0
    readers_reused: int = 0
    conversions: int = 0
    remote_requests: int = 0
    zarr_chunk_hits: int = 0
    zarr_chunk_misses: int = 0
    zarr_decoded_bytes: int = 0
    formats: dict[str, FormatRate] = dataclasses.field(default_factory=dict)
    slowest: tuple[FileRead, ...] = ()

    @property
    def scratch_share(self) -> float:
        """The share of the images served by a scratch; 0 before any."""
        return self.scratch_images / self.images if self.images else 0.0

    @property
    def reuse_share(self) -> float:
        """The share of the files asked for whose reader was open already; 0 before any."""
        asked = self.readers_reused + self.files_opened
        return self.readers_reused / asked if asked else 0.0

    def as_dict(self) -> dict[str, float]:
        """The figures as plain numbers by name, for a logger; each format's rate as `FORMAT_images_per_s`."""
        figures: dict[str, float] = {
            field.name: getattr(self, field.name)
            for field in dataclasses.fields(self)
            if field.name not in ("formats", "slowest")
        }
        figures.update(scratch_share=self.scratch_share, reuse_share=self.reuse_share)
        for name, rate in self.formats.items():
            figures[f"{name}_images_per_s"] = rate.images_per_second
        return figures


class _Tally:
    """What the reads of one thread did for one loader, added to by that thread alone."""

    __slots__ = ("images", "bytes", "patches", "scratch_images", "files_opened", "readers_reused")
    __slots__ += ("conversions", "remote_requests", "zarr_chunk_hits", "zarr_chunk_misses")
    __slots__ += ("zarr_decoded_bytes", "formats", "slowest")

    def __init__(self) -> None:
        self.images = self.bytes = self.patches = self.scratch_images = 0
        self.files_opened = self.readers_reused = self.conversions = self.remote_requests = 0
        self.zarr_chunk_hits = self.zarr_chunk_misses = self.zarr_decoded_bytes = 0
        self.formats: dict[str, list[float]] = {}
        self.slowest: list[tuple] = []


_COUNTED = _Tally.__slots__[:-2]


def add_count(name: str, number: int = 1) -> None:
    """Add `number` to the counter `name` of the task running on this thread, if it is counted.

    The names: scratch_images, files_opened, readers_reused, conversions, remote_requests,
    zarr_chunk_hits, zarr_chunk_misses, zarr_decoded_bytes.
    """
    tally = getattr(_local, "tally", None)
    if tally is not None:
        setattr(tally, name, getattr(tally, name) + number)


def note_read(format_name: str | None, key: str, images: int, image_bytes: int, seconds: float) -> None:
    """Note a read of `images` images (of `image_bytes` each in the batch) of one file that took `seconds`,
    if counted."""
    tally = getattr(_local, "tally", None)
    if tally is None:
        return
    _add_rate(tally.formats, format_name or "scratch", images, images * image_bytes, seconds)
    if images:
        _keep_slowest(tally.slowest, (seconds / images, key, images, seconds))


def note_runs(
    files: Any, runs: np.ndarray, slots: np.ndarray, image_bytes: int, seconds: float, dst_kind: int
) -> None:
    """Note one native read of `runs` of raw files, if counted: the files it opened (those whose reader
    was not open), the images it converted, and its time, shared among its files by their images.

    Args:
        files: The `KnownFiles` read.
        runs: The runs read, as `read_runs` takes them, those of one file together; `slots`, each
            run's first slot and images.
        image_bytes: The bytes of one image of the destination.
        dst_kind: The kind of the destination's values.
    """
    tally = getattr(_local, "tally", None)
    if tally is None:
        return
    numbers = runs[:, RUN_FILE]
    firsts = np.flatnonzero(np.diff(numbers, prepend=-1))
    read, counts = numbers[firsts], np.add.reduceat(slots[:, 1], firsts)
    total = int(counts.sum())
    _add_rate(tally.formats, "raw", total, total * image_bytes, seconds)
    opened = sum(files.maps[number] is None for number in read.tolist())
    tally.files_opened += opened
    tally.readers_reused += len(read) - opened
    tally.conversions += int(counts[files.checks[read, CHECK_KIND] != dst_kind].sum())
    slowest, per_image = tally.slowest, seconds / total
    if len(slowest) == _SLOWEST and per_image < slowest[0][0]:
        return  # all of this read's files share one rate: none of them is among the slowest
    for number, count in zip(read.tolist()[:_SLOWEST], counts.tolist()):
        _keep_slowest(slowest, (per_image, files.layouts[number].key, count, seconds * count / total))


def _add_rate(formats: dict[str, list[float]], name: str, images: int, nbytes: int, seconds: float) -> None:
    summed = formats.get(name)
    if summed is None:
        formats[name] = [images, nbytes, seconds]
    else:
        summed[0] += images
        summed[1] += nbytes
        summed[2] += seconds


def _keep_slowest(slowest: list[tuple], read: tuple) -> None:
    """Keep `read` (the fields of a `FileRead`) in the heap `slowest` if it is among the slowest reads,
    one (the slowest) a file."""
    key = read[1]
    for position, kept in enumerate(slowest):
        if kept[1] == key:
            if read > kept:
                slowest[position] = read
                heapq.heapify(slowest)
            return
    if len(slowest) < _SLOWEST:
        heapq.heappush(slowest, read)
    elif read > slowest[0]:
        heapq.heapreplace(slowest, read)


class ReadCounters:
    """The counters of one loader: a tally for each thread that reads for it, added up when asked.

    Args:
        enabled: Whether to count at all; a loader that does not has `stats()` all zero.
    """

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self._tallies: dict[int, _Tally] = {}

    def reset(self) -> None:
        """Start counting from zero; what tasks under way count meanwhile is left out."""
        self._tallies = {}

    def _tally(self) -> _Tally:
        """The tally of this thread."""
        tallies, thread = self._tallies, threading.get_ident()
        tally = tallies.get(thread)
        return tallies.setdefault(thread, _Tally()) if tally is None else tally

    def batch(self, images: int, nbytes: int, patches: int = 0) -> None:
        """Count a batch submitted: its images (or patches) and the bytes of its destination."""
        if self.enabled:
            tally = self._tally()
            tally.images += images
            tally.bytes += nbytes
            tally.patches += patches

    def add(self, name: str, number: int = 1) -> None:
        """Add `number` to the counter `name` (as `add_count` names them) for what a batch does as it is
        submitted, outside its tasks: the files its hints open."""
        if self.enabled:
            tally = self._tally()
            setattr(tally, name, getattr(tally, name) + number)

    def counted(self, tasks: Sequence[Callable[[], None]]) -> Sequence[Callable[[], None]]:
        """The tasks, each made to count what its reads do into these counters."""
        if not self.enabled:
            return tasks
        return [lambda task=task: self._run(task) for task in tasks]

    def _run(self, task: Callable[[], None]) -> None:
        outer = getattr(_local, "tally", None)  # a task run on the thread of another (synchronously)
        _local.tally = self._tally()
        try:
            task()
        finally:
            _local.tally = outer

    def stats(self, reset: bool = False) -> ReadStats:
        """What the reads did so far, as of now; with `reset`, start counting from zero at once."""
        tallies = list(self._tallies.values())
        if reset:
            self.reset()
        formats: dict[str, list[float]] = {}
        slowest: list[tuple] = []
        for tally in tallies:
            for name, rate in list(tally.formats.items()):
                _add_rate(formats, name, *rate)
            for read in list(tally.slowest):
                _keep_slowest(slowest, read)
        return ReadStats(
            **{name: sum(getattr(tally, name) for tally in tallies) for name in _COUNTED},
            formats={name: FormatRate(int(i), int(b), s) for name, (i, b, s) in formats.items()},
            slowest=tuple(FileRead(*read) for read in sorted(slowest, reverse=True)),
        )

    def __repr__(self) -> str:
        return f"<ReadCounters {'on' if self.enabled else 'off'}: {len(self._tallies)} threads>"
