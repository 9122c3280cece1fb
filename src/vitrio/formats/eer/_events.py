"""Detector events: the timeline of groups of positions, and the decoding of an EER file's frames into one."""

from __future__ import annotations

import contextlib
import operator
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np

from ... import _native
from ..._config import configuration
from ..._storage import ByteSource
from ..._types import integer_array
from ._layout import Layout

__all__ = ["DetectorEventTimeline", "decode_frames"]


class _ViewOwner:
    """The owner of the memory of one read-only view of a timeline, so that the timeline can count views."""

    __slots__ = ("__array_interface__", "_array", "__weakref__")

    def __init__(self, array: np.ndarray):
        self._array = array
        interface = dict(array.__array_interface__)
        interface["data"] = (interface["data"][0], True)
        self.__array_interface__ = interface


class DetectorEventTimeline:
    """Detector events in groups, each group with a timestamp: the events of the frames of a movie.

    A position is a row of `rank` uint32 coordinates, slowest axis first:
    (y, x) on the sub-pixel grid for EER files. Timestamps increase from
    group to group. The arrays handed out (`timestamps`,
    `get_positions`) are read-only views of the timeline's memory; while any
    of them, or an array made from one, is alive, the timeline cannot change:
    `add_group`, `clear` and `reserve` raise `BufferError`. Not safe to change
    from several threads at once.

    Args:
        rank: How many coordinates a position has. The published package
            requires it; here it defaults to 2, the rank of EER events.

    Raises:
        ValueError: If `rank` is not positive.
    """

    def __init__(self, rank: int = 2) -> None:
        rank = operator.index(rank)
        if rank < 1:
            raise ValueError(f"a timeline's rank is positive: {rank}")
        self._timestamps = np.empty(0, dtype=np.int64)
        self._ends = np.empty(0, dtype=np.int64)
        self._positions = np.empty((0, rank), dtype=np.uint32)
        self._groups = 0
        self._events = 0
        self._views: weakref.WeakSet[_ViewOwner] = weakref.WeakSet()
        self._busy = threading.RLock()

    @property
    def rank(self) -> int:
        """How many coordinates a position has."""
        return self._positions.shape[1]

    @property
    def group_count(self) -> int:
        """How many groups the timeline holds."""
        return self._groups

    @property
    def event_count(self) -> int:
        """How many events the timeline holds, in all groups."""
        return self._events

    @property
    def view_count(self) -> int:
        """How many views handed out are alive."""
        return len(self._views)

    @property
    def timestamps(self) -> np.ndarray:
        """The timestamp of each group (for EER files, the frame index): a read-only int64 view."""
        with self._in_use():
            return self._view(self._timestamps[: self._groups])

    def get_positions(self, group: int | None = None) -> np.ndarray:
        """The positions of the events of one group, or of all: a read-only uint32 view, a row each.

        Raises:
            IndexError: If there is no group `group`.
        """
        with self._in_use():
            if group is None:
                return self._view(self._positions[: self._events])
            index = operator.index(group)
            if not -self._groups <= index < self._groups:
                raise IndexError(f"group {group} of a timeline of {self._groups}")
            index %= self._groups
            start = int(self._ends[index - 1]) if index else 0
            return self._view(self._positions[start : self._ends[index]])

    def add_group(self, timestamp: int, positions: Any) -> None:
        """Append a group of events.

        Args:
            timestamp: The group's timestamp, an integer later than the last group's.
            positions: The events' positions, rows of `rank` non-negative integers below 2**32.

        Raises:
            BufferError: If a view is alive.
            TypeError: If a timestamp or position is not an integer.
            ValueError: If the timestamp is not later than the last, the positions
                are not rows of `rank`, or one is out of range.
        """
        timestamp = operator.index(timestamp)
        rank = self.rank
        rows = np.asarray(positions)
        if rows.size == 0:
            rows = rows.reshape(0, rank)
        if rows.ndim != 2 or rows.shape[1] != rank:
            raise ValueError(f"positions are rows of {rank} coordinates, not of shape {rows.shape}")
        rows = integer_array(rows, "positions are integers")
        if rows.size and (rows.min() < 0 or rows.max() > 0xFFFFFFFF):
            raise ValueError("positions must be within 0 and 2**32 - 1")
        with self._in_use():
            self._check_later(timestamp)
            self._grow(1, len(rows))
            self._positions[self._events : self._events + len(rows)] = rows
            self._events += len(rows)
            self._timestamps[self._groups] = timestamp
            self._ends[self._groups] = self._events
            self._groups += 1

    def clear(self) -> None:
        """Remove every group, keeping the memory.

        Raises:
            BufferError: If a view is alive.
        """
        with self._in_use():
            self._check_unshared()
            self._groups = self._events = 0

    def reserve(self, groups: int, events: int) -> None:
        """Make room for `groups` groups and `events` events in all.

        Raises:
            BufferError: If a view is alive.
        """
        self._check_unshared()
        groups, events = operator.index(groups), operator.index(events)
        if groups > len(self._timestamps):
            self._timestamps = self._resized(self._timestamps, groups, self._groups)
            self._ends = self._resized(self._ends, groups, self._groups)
        if events > len(self._positions):
            self._positions = self._resized(self._positions, events, self._events)

    def __repr__(self) -> str:
        return f"<DetectorEventTimeline: {self._groups} groups, {self._events} events>"

    @staticmethod
    def _resized(array: np.ndarray, length: int, used: int) -> np.ndarray:
        grown = np.empty((length, *array.shape[1:]), dtype=array.dtype)
        grown[:used] = array[:used]
        return grown

    @contextlib.contextmanager
    def _in_use(self) -> Iterator[None]:
        """Hold the timeline for one call: a call of another thread meanwhile raises `BufferError`."""
        if not self._busy.acquire(blocking=False):
            raise BufferError("the timeline is being read or changed by another call at this moment")
        try:
            yield
        finally:
            self._busy.release()

    def _check_unshared(self) -> None:
        if len(self._views):
            raise BufferError(
                f"the timeline has {len(self._views)} live views; delete them before changing it"
            )

    def _grow(self, groups: int, events: int) -> None:
        """Make room for `groups` and `events` more, growing geometrically."""
        groups += self._groups
        events += self._events
        self.reserve(
            max(groups, 2 * len(self._ends)) if groups > len(self._ends) else 0,
            max(events, 2 * len(self._positions)) if events > len(self._positions) else 0,
        )

    def _check_later(self, timestamp: int) -> None:
        if self._groups and timestamp <= int(self._timestamps[self._groups - 1]):
            raise ValueError(
                f"timestamp {timestamp} is not later than the last, {int(self._timestamps[self._groups - 1])}"
            )

    def _view(self, array: np.ndarray) -> np.ndarray:
        owner = _ViewOwner(array)
        self._views.add(owner)
        return np.asarray(owner)

    def _commit(self, timestamps: np.ndarray, counts: np.ndarray) -> None:
        """Append groups whose positions were written past the last event already, leaving out empty ones."""
        kept = counts > 0
        timestamps, ends = timestamps[kept], self._events + np.cumsum(counts)[kept]
        if len(timestamps):
            self._check_later(int(timestamps[0]))
        groups = len(timestamps)
        self._timestamps[self._groups : self._groups + groups] = timestamps
        self._ends[self._groups : self._groups + groups] = ends
        self._groups += groups
        self._events += int(counts.sum())

    def _truncate(self, groups: int, events: int) -> None:
        self._groups, self._events = groups, events


def decode_frames(
    layout: Layout, source: ByteSource, timeline: DetectorEventTimeline, begin: int, end: int
) -> None:
    """Append the events of frames `begin..end` of an EER file to `timeline`, a group per frame with events.

    Each group's timestamp is its frame's index. The frames are read and decoded about `eer_batch_bytes`
    of the configuration in force at a time. On failure the timeline is as it was.

    Raises:
        FormatError: If a frame is malformed or the file is truncated.
        ValueError: If `begin` is not later than the timeline's last timestamp.
        BufferError: If the timeline has a live view.
    """
    timeline._check_unshared()
    groups, count = timeline.group_count, timeline.event_count
    try:
        timeline._grow(end - begin, layout.most_events(begin, end))
        frame, batch_bytes = begin, configuration().eer_batch_bytes
        while frame < end:
            batch_end = np.searchsorted(layout.frame_bytes, layout.frame_bytes[frame] + batch_bytes, "right")
            stop = min(max(frame + 1, int(batch_end) - 1), end)
            data = np.empty(int(layout.frame_bytes[stop] - layout.frame_bytes[frame]), dtype=np.uint8)
            strips = layout.read(source, frame, stop, data)
            strip_counts = np.empty(len(strips), dtype=np.int64)
            status = _native.events(
                data,
                strips,
                timeline._positions[timeline.event_count :],
                strip_counts,
                layout.code,
            )
            if status is not None:
                raise layout.failure(frame, status)
            starts = layout.frame_starts[frame:stop] - layout.frame_starts[frame]
            timeline._commit(np.arange(frame, stop, dtype=np.int64), np.add.reduceat(strip_counts, starts))
            frame = stop
    except BaseException:
        timeline._truncate(groups, count)
        raise
