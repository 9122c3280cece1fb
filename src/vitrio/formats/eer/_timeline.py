"""Reading detector events a stretch of time at a time: descriptors, readers, providers, `read_events`.

An acquisition of an event-counting detector is described by a
`DetectorEventTimelineDescriptor` (its grid of position quanta and its time
extent), read through a `DetectorEventTimelineReader`, which a
`DetectorEventTimelineReaderProvider` hands out by key. The bundled provider
opens files with the event formats of a
`DetectorEventTimelineFileReadFormatSelector` (EER), and files at URLs
(`s3://`, `https://`) through a `Storage` (made of the `storage_options`
fsspec takes), their frames' strips fetched by byte ranges as an
`EerReader`'s are.
"""

from __future__ import annotations

import math
import operator
import os
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..._errors import redact
from ..._storage import ByteSource, Storage
from ..._types import as_key
from .._contract import Format, FormatError
from .._registry import formats_configuration, resolve_formats
from .._selectors import DetectorEventTimelineFileReadFormatSelector
from ._events import DetectorEventTimeline, decode_frames
from ._layout import Layout

__all__ = [
    "DetectorEventTimelineDescriptor",
    "DetectorEventTimelineReader",
    "DetectorEventTimelineReaderProvider",
    "FileDetectorEventTimelineReaderProvider",
    "EerTimelineReader",
    "detector_event_timeline_reader_provider",
    "read_events",
]

_HEAD_BYTES = 4096
_MOST_EXTENT = 2**32


def _integers(values: Iterable[Any], what: str) -> tuple[int, ...]:
    try:
        return tuple(operator.index(v) for v in values)
    except TypeError:
        raise TypeError(f"{what} are integers: {values!r}") from None


class DetectorEventTimelineDescriptor:
    """What stays fixed for one acquisition: the grid events are placed on, and how long it runs.

    Positions are integers in position quanta; a detector pixel spans
    `subdivisions[axis]` quanta along each axis, so the detector has
    `extents[axis] // subdivisions[axis]` pixels along it. Time runs from 0
    to `time_extent` time quanta (for EER, a quantum is a frame). An EER file
    has `extents = (rows << vbits, columns << hbits)`, `subdivisions =
    (1 << vbits, 1 << hbits)`, `time_extent` its frame count, and
    `time_quantum` 0.0.

    Args:
        extents: The grid's extent along each axis, in position quanta, slowest first.
        subdivisions: The quanta of one detector pixel along each axis.
        time_extent: How many time quanta the acquisition runs.
        time_quantum: The length of a time quantum in seconds, or 0.0 when it is unknown.

    Raises:
        ValueError: If `extents` is empty, `subdivisions` is of another length, an extent
            or subdivision is 0, an extent exceeds 2**32, a subdivision does not divide its
            extent, `time_extent` is 0, or `time_quantum` is negative, infinite or NaN.
    """

    __slots__ = ("_extents", "_subdivisions", "_time_extent", "_time_quantum")

    def __init__(
        self, extents: Sequence[int], subdivisions: Sequence[int], time_extent: int, time_quantum: float
    ):
        extents, subdivisions = _integers(extents, "extents"), _integers(subdivisions, "subdivisions")
        time_extent, time_quantum = operator.index(time_extent), float(time_quantum)
        if not extents:
            raise ValueError("a detector's extents are not empty")
        if len(subdivisions) != len(extents):
            raise ValueError(f"subdivisions {subdivisions} are not one per axis of extents {extents}")
        if any(e <= 0 or e > _MOST_EXTENT for e in extents) or any(s <= 0 for s in subdivisions):
            raise ValueError(
                f"extents are within 1 and 2**32 and subdivisions positive: {extents}, {subdivisions}"
            )
        if any(e % s for e, s in zip(extents, subdivisions)):
            raise ValueError(f"subdivisions {subdivisions} do not divide extents {extents}")
        if time_extent <= 0:
            raise ValueError(f"time_extent is positive: {time_extent}")
        if not (math.isfinite(time_quantum) and time_quantum >= 0):
            raise ValueError(f"time_quantum is a finite length of time, 0 or more: {time_quantum}")
        self._extents, self._subdivisions = extents, subdivisions
        self._time_extent, self._time_quantum = time_extent, time_quantum

    @property
    def rank(self) -> int:
        """How many axes positions have."""
        return len(self._extents)

    @property
    def extents(self) -> tuple[int, ...]:
        """The grid's extent along each axis, in position quanta."""
        return self._extents

    @property
    def subdivisions(self) -> tuple[int, ...]:
        """The position quanta of one detector pixel along each axis."""
        return self._subdivisions

    @property
    def time_extent(self) -> int:
        """How many time quanta the acquisition runs."""
        return self._time_extent

    @property
    def time_quantum(self) -> float:
        """The length of a time quantum in seconds; 0.0 when unknown."""
        return self._time_quantum

    def _fields(self) -> tuple[Any, ...]:
        return (self._extents, self._subdivisions, self._time_extent, self._time_quantum)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DetectorEventTimelineDescriptor):
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return (
            f"DetectorEventTimelineDescriptor(extents={self._extents}, subdivisions={self._subdivisions}, "
            f"time_extent={self._time_extent}, time_quantum={self._time_quantum})"
        )


class DetectorEventTimelineReader(ABC):
    """One open acquisition, read a stretch of time at a time; safe to read from many threads.

    Its descriptor never changes. A reader that cannot decode in parallel
    serialises its reads itself. Subclasses implement `descriptor` and `read`.

    Raises:
        TypeError: When called: it is abstract.
    """

    @property
    @abstractmethod
    def descriptor(self) -> DetectorEventTimelineDescriptor:
        """The acquisition's descriptor."""

    @abstractmethod
    def read(self, time_begin: int, time_end: int, destination: DetectorEventTimeline) -> None:
        """Clear `destination`, then fill it with the events of time quanta `time_begin..time_end`.

        A group per time quantum that has events, in ascending order of
        timestamp; a quantum without events adds no group.

        Raises:
            ValueError: If `time_begin > time_end`, or `destination` is of another rank.
            IndexError: If `time_end` is past the descriptor's `time_extent`.
            BufferError: If `destination` has a live view, or another call is reading or
                changing it at that moment.
            FormatError: If the file turns out to be malformed where it is read (a `RuntimeError`).
        """

    def close(self) -> None:
        """Release what the reader holds; the default holds nothing."""

    def _check_read(self, time_begin: int, time_end: int, destination: DetectorEventTimeline) -> None:
        """Raise as `read` does for a stretch outside the acquisition or a destination that does not fit."""
        if not isinstance(destination, DetectorEventTimeline):
            raise TypeError(f"the destination is a DetectorEventTimeline, not {type(destination).__name__}")
        if time_begin < 0 or time_begin > time_end:
            raise ValueError(f"time quanta {time_begin} to {time_end} are no stretch of time")
        if destination.rank != self.descriptor.rank:
            raise ValueError(
                f"a destination of rank {destination.rank} for events of rank {self.descriptor.rank}"
            )
        if time_end > self.descriptor.time_extent:
            raise IndexError(f"time quantum {time_end} is past the end, {self.descriptor.time_extent}")
        destination.clear()


class EerTimelineReader(DetectorEventTimelineReader):
    """The events of an EER file, a time quantum per frame; decoding runs without the GIL.

    Args:
        key: The file's key.
        source: The file's bytes, which the reader owns.

    Raises:
        FormatError: If the file is not a TIFF file of EER frames, or is truncated.
    """

    def __init__(self, key: str, source: ByteSource):
        self.key = key
        self._source: ByteSource | None = None
        self._layout = layout = Layout(key, source)
        self._descriptor = DetectorEventTimelineDescriptor(
            (layout.height << layout.vbits, layout.width << layout.hbits),
            (1 << layout.vbits, 1 << layout.hbits),
            layout.frame_count,
            0.0,
        )
        self._source = source

    @property
    def descriptor(self) -> DetectorEventTimelineDescriptor:
        """The file's grid (the sub-pixel grid) and frame count."""
        return self._descriptor

    def read(self, time_begin: int, time_end: int, destination: DetectorEventTimeline) -> None:
        """Clear `destination`, then fill it with the events of frames `time_begin..time_end`."""
        time_begin, time_end = operator.index(time_begin), operator.index(time_end)
        if not isinstance(destination, DetectorEventTimeline):
            raise TypeError(f"the destination is a DetectorEventTimeline, not {type(destination).__name__}")
        with destination._in_use():  # another call on `destination` meanwhile raises BufferError
            self._check_read(time_begin, time_end, destination)
            if self._source is None:
                raise ValueError(f"{self.key}: the reader is closed")
            decode_frames(self._layout, self._source, destination, time_begin, time_end)

    def close(self) -> None:
        """Close the file."""
        source, self._source = self._source, None
        if source is not None:
            source.close()

    def __del__(self) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<EerTimelineReader {redact(self.key)!r} {self._descriptor!r}>"


class DetectorEventTimelineReaderProvider(ABC):
    """Turns a key into a `DetectorEventTimelineReader`; safe to use from many threads.

    Raises:
        TypeError: When called: it is abstract.
    """

    @abstractmethod
    def acquire(self, key: Any) -> DetectorEventTimelineReader:
        """A reader of the acquisition at `key`.

        Raises:
            ImageFileNotFoundError: If there is no file at `key` (a `RuntimeError`).
            FormatError: If no format reads the file, or it is malformed (a `RuntimeError`).
        """

    def configuration(self) -> str | None:
        """A stable description of what decides the events this provider reads, for a cache kept
        across programs to tell providers apart; None (the default) where it cannot tell."""
        return None


class FileDetectorEventTimelineReaderProvider(DetectorEventTimelineReaderProvider):
    """Opens the file at the path (or URL) a key is, with the event format `formats` picks; keeps no reader.

    Args:
        formats: A `DetectorEventTimelineFileReadFormatSelector`, or a sequence of event formats.
        storage_options: Where keys' bytes come from: a `Storage`, or what fsspec takes to reach keys
            that are URLs (`{"anon": True}`, credentials).

    Raises:
        TypeError: If `formats` is None or holds something that is not a `Format`, or `storage_options`
            is not a mapping.
    """

    def __init__(
        self, formats: Iterable[type[Format]], storage_options: Storage | Mapping[str, Any] | None = None
    ):
        if formats is None:
            raise TypeError("formats is a DetectorEventTimelineFileReadFormatSelector, not None")
        self._formats = formats
        self._storage = Storage.of(storage_options)

    @property
    def formats(self) -> Iterable[type[Format]]:
        """The event formats files are opened with."""
        return self._formats

    def acquire(self, key: Any) -> DetectorEventTimelineReader:
        key = as_key(key)
        remote = self._storage.is_remote(key)
        candidates = [f for f in resolve_formats(self._formats) if f.events and (f.reads_urls or not remote)]
        source = self._storage.open(key)
        try:
            head = source.pread(_HEAD_BYTES, 0)
            extension = os.path.splitext(key)[1].lower()
            for candidate in candidates:
                if candidate.recognizes(head, extension):
                    return candidate.open_events(key, source, head)
            names = ", ".join(c.name for c in candidates) or "none"
            raise FormatError(f"{key}: not a file of any detector event format ({names})")
        except BaseException:
            source.close()
            raise

    def configuration(self) -> str:
        """The event formats tried, in order, with their settings, and the digest of the storage's
        options where it has any (`formats_configuration`)."""
        return formats_configuration(resolve_formats(self._formats), self._storage)

    def __repr__(self) -> str:
        return f"FileDetectorEventTimelineReaderProvider({self._formats!r})"


def detector_event_timeline_reader_provider(
    formats: Iterable[type[Format]] | None = None,
    *,
    storage_options: Storage | Mapping[str, Any] | None = None,
) -> DetectorEventTimelineReaderProvider:
    """The usual event provider: a `FileDetectorEventTimelineReaderProvider` over `formats`.

    Args:
        formats: A `DetectorEventTimelineFileReadFormatSelector`; None for the shared one.
        storage_options: A `Storage`, or what fsspec takes to reach keys that are URLs.
    """
    return FileDetectorEventTimelineReaderProvider(
        DetectorEventTimelineFileReadFormatSelector.get_shared() if formats is None else formats,
        storage_options,
    )


def read_events(
    key: Any,
    begin: int | None = None,
    end: int | None = None,
    events: DetectorEventTimelineReaderProvider | DetectorEventTimeline | None = None,
    *,
    storage_options: Storage | Mapping[str, Any] | None = None,
) -> DetectorEventTimeline:
    """The events of frames `begin..end` of the acquisition at `key`, a group per frame with events.

    Each group's timestamp is its frame's index; a frame without events adds
    no group. Positions are (y, x) on the sub-pixel grid (4 times the
    detector's resolution per axis for 2 sub-pixel bits).

    Args:
        key: The file, or its URL.
        begin: The first frame to read, up to `end` (not included); None: from the first, to the last.
        events: What reads: a `DetectorEventTimelineReaderProvider` (as the
            published package takes it), or a `DetectorEventTimeline` to append
            to, reusing its memory; None for the usual provider.
        storage_options: What fsspec takes to reach a URL, unless `events` is a provider (which has its own).

    Returns:
        A new timeline of the reader's rank, or `events` if it is a timeline.

    Raises:
        ImageFileNotFoundError: If there is no file at `key`.
        IndexError: If the frames are not within the file's.
        ValueError: If appending frames not later than the timeline's last timestamp.
        FormatError: If the file is not an EER file or a frame is malformed; the timeline is
            then as it was.
        BufferError: If `events` is a timeline with a live view.
    """
    if isinstance(events, DetectorEventTimeline):
        return _append_events(as_key(key), begin, end, events, Storage.of(storage_options))
    if events is not None and storage_options is not None:
        raise ValueError("give events or storage_options, not both: the provider reaches the files")
    provider = (
        detector_event_timeline_reader_provider(storage_options=storage_options) if events is None else events
    )
    if not isinstance(provider, DetectorEventTimelineReaderProvider):
        raise TypeError(
            f"events is a DetectorEventTimelineReaderProvider or a DetectorEventTimeline, "
            f"not {type(events).__name__}"
        )
    reader = provider.acquire(key)
    try:
        descriptor = reader.descriptor
        timeline = DetectorEventTimeline(descriptor.rank)
        first = 0 if begin is None else operator.index(begin)
        last = descriptor.time_extent if end is None else operator.index(end)
        if not 0 <= first <= last <= descriptor.time_extent:
            raise IndexError(
                f"{key}: frames {first} to {last} are not within its {descriptor.time_extent} frames"
            )
        reader.read(first, last, timeline)
        return timeline
    finally:
        reader.close()


def _append_events(
    key: str,
    begin: int | None,
    end: int | None,
    timeline: DetectorEventTimeline,
    storage: Storage,
) -> DetectorEventTimeline:
    timeline._check_unshared()
    with storage.open(key) as source:
        layout = Layout(key, source)
        begin = 0 if begin is None else operator.index(begin)
        end = layout.frame_count if end is None else operator.index(end)
        if not 0 <= begin <= end <= layout.frame_count:
            raise IndexError(f"{key}: frames {begin} to {end} are not within its {layout.frame_count} frames")
        decode_frames(layout, source, timeline, begin, end)
    return timeline
