"""Event acquisitions read as movies, through the image reader API: `DetectorEventImageReaderProvider`,
built by hand from the published API's objects (an event provider, a fractionation of time and a
renderer), and `detector_event_image_reader_provider`, the usual EER movie through the format's native
renderer.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ._providers import CachingImageReaderProvider, FileImageReaderProvider, ImageReaderProvider
from ._types import ImageDescriptor, as_key, as_numerical_type, numpy_dtype
from .formats import Format, ImageReader, resolve_formats
from .formats.eer import (
    DetectorEventFractionation,
    DetectorEventRenderer,
    DetectorEventTimeline,
    DetectorEventTimelineReader,
    DetectorEventTimelineReaderProvider,
    EerFormat,
)

__all__ = ["DetectorEventImageReaderProvider", "detector_event_image_reader_provider"]

_RENDERER_MEMBERS = ("data_type", "get_image_extents", "render")


class _EventImageReader(ImageReader):
    """The fractions of one acquisition as images; the fraction rendered last is kept."""

    def __init__(
        self,
        key: str,
        events: DetectorEventTimelineReader,
        fractionation: DetectorEventFractionation,
        renderer: Any,
    ):
        descriptor = events.descriptor
        count = fractionation.count_for(descriptor.time_extent)
        if count > descriptor.time_extent:
            raise ValueError(
                f"{key}: {count} fractions of {descriptor.time_extent} time quanta: at most one per quantum"
            )
        image = tuple(renderer.get_image_extents(descriptor))
        if len(image) != 2:
            raise ValueError(f"{key}: the renderer's images are {len(image)}-D, not 2-D: {image}")
        data_type = as_numerical_type(renderer.data_type)
        super().__init__(key, ImageDescriptor((count, *image) if count > 1 else image, 2, data_type))
        self._events = events
        self._fractionation = fractionation
        self._renderer = renderer
        self._timeline = DetectorEventTimeline(descriptor.rank)
        self._image = np.empty(image, dtype=numpy_dtype(data_type))
        self._rendered = -1
        self._lock = threading.Lock()

    def read_run(self, start: int, outs: Sequence[np.ndarray]) -> None:
        """Render fractions `start, start + 1, ...` into `outs`, converting to each out's type.

        Raises:
            IndexError: If a fraction is past the end, or an event lies outside the grid.
        """
        self.check_run(start, len(outs))
        with self._lock:
            for offset, out in enumerate(outs):
                np.copyto(out, self._fraction(start + offset), casting="unsafe")

    def read_region(self, index: int, region: tuple[slice, ...], out: np.ndarray) -> None:
        """Copy `region` of fraction `index` into `out`, rendering the fraction once for all its regions."""
        self.check_run(index, 1)
        with self._lock:
            np.copyto(out, self._fraction(index)[region], casting="unsafe")

    def _fraction(self, index: int) -> np.ndarray:
        if index != self._rendered:
            self._rendered = -1
            time_extent = self._events.descriptor.time_extent
            begin = self._fractionation.get_fraction_begin(index, time_extent)
            end = self._fractionation.get_fraction_begin(index + 1, time_extent)
            self._events.read(begin, end, self._timeline)
            self._renderer.render(self._events.descriptor, self._timeline, self._image)
            self._rendered = index
        return self._image

    def close(self) -> None:
        """Close the event reader."""
        self._events.close()


class DetectorEventImageReaderProvider(ImageReaderProvider):
    """An image reader provider that shows an event acquisition as a movie, one image per fraction.

    The acquisition's time is cut by `fractionation`, and the events of each
    fraction are rendered into one image by `renderer`. With more than one
    fraction a reader's file is a stack, `(fraction_count, *image_extents)`;
    with one, a single 2-D image. Each key goes unchanged to `events`. A
    fraction is rendered whole the first time any part of it is read, and
    the one rendered last is kept; reads through one reader take turns.
    Nothing is kept between acquires: put a `CachingImageReaderProvider`
    in front to keep readers.

    Args:
        events: A `DetectorEventTimelineReaderProvider`.
        fractionation: A `DetectorEventFractionation`.
        renderer: A `DetectorEventRenderer` of 2-D images, or any object with its
            `data_type`, `get_image_extents` and `render`.

    Raises:
        TypeError: If an argument is None or of the wrong type.

    When a key is opened (surfacing from `read` and `query_descriptor`):
    `ValueError` if there are more fractions than time quanta, the
    renderer's images are not 2-D, or the binning does not divide the
    detector; otherwise what `events.acquire` raises.
    """

    def __init__(
        self,
        events: DetectorEventTimelineReaderProvider,
        fractionation: DetectorEventFractionation,
        renderer: DetectorEventRenderer,
    ):
        if not isinstance(events, DetectorEventTimelineReaderProvider):
            raise TypeError(f"events is a DetectorEventTimelineReaderProvider, not {type(events).__name__}")
        if not isinstance(fractionation, DetectorEventFractionation):
            raise TypeError(
                f"fractionation is a DetectorEventFractionation, not {type(fractionation).__name__}"
            )
        if not isinstance(renderer, DetectorEventRenderer) and not all(
            hasattr(renderer, member) for member in _RENDERER_MEMBERS
        ):
            raise TypeError(f"renderer is a DetectorEventRenderer, not {type(renderer).__name__}")
        self._events = events
        self._fractionation = fractionation
        self._renderer = renderer

    @property
    def events(self) -> DetectorEventTimelineReaderProvider:
        """The provider of the acquisitions' events."""
        return self._events

    @property
    def fractionation(self) -> DetectorEventFractionation:
        """How each acquisition's time is cut into fractions."""
        return self._fractionation

    @property
    def renderer(self) -> DetectorEventRenderer:
        """What renders each fraction."""
        return self._renderer

    def acquire(self, key: Any) -> ImageReader:
        events = self._events.acquire(key)
        try:
            return _EventImageReader(as_key(key), events, self._fractionation, self._renderer)
        except BaseException:
            events.close()
            raise

    def release(self, reader: ImageReader) -> None:
        reader.close()

    def configuration(self) -> str | None:
        """The events' provider, the fractionation and the renderer, each by its `configuration()`;
        None where one of them cannot tell (a renderer without `configuration`)."""
        renderer = getattr(self._renderer, "configuration", None)
        parts = (self._events.configuration(), self._fractionation.configuration(), renderer and renderer())
        return None if None in parts else f"events {parts[0]}; {parts[1]}; {parts[2]}"

    def __repr__(self) -> str:
        return (
            f"DetectorEventImageReaderProvider({self._events!r}, {self._fractionation!r}, {self._renderer!r})"
        )


def detector_event_image_reader_provider(
    fractions: int,
    binning: int = 1,
    cache: Any = None,
    formats: Sequence[type[Format]] | None = None,
    *,
    superres: int = 1,
    gain: Any = None,
    storage_options: Mapping | None = None,
) -> ImageReaderProvider:
    """A reader provider that reads EER files as `fractions` rendered images, other files with `formats`.

    Args:
        fractions: As `EerFormat.configured` takes it, and `binning`, `superres` and `gain` likewise.
        cache: How many files to keep open, as `vitrio.reader_provider` takes it.
        formats: The formats of the other files; None for every registered one.
        storage_options: What fsspec takes to reach files at URLs, as `vitrio.reader_provider` takes it.

    Returns:
        A provider like `vitrio.reader_provider`'s.

    Raises:
        ValueError, TypeError: As `EerFormat.configured` raises them.
    """
    configured = EerFormat.configured(fractions, binning, superres, gain)
    provider: ImageReaderProvider = FileImageReaderProvider(
        [configured, *resolve_formats(formats)], storage_options
    )
    return provider if cache is None else CachingImageReaderProvider(provider, cache)
