"""Turning detector events into movies: fractionation of time, binning of space, renderers.

`DetectorEventFractionation` cuts an acquisition's time into the fractions
of a movie, `DetectorEventBinning` says how many detector pixels one image
pixel gathers, and a `DetectorEventRenderer` turns the events of one
fraction into one image. `CountingDetectorEventRenderer` counts them.
"""

from __future__ import annotations

import math
import operator
from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from ..._arrays import as_destination
from ..._types import NumericalType
from ._events import DetectorEventTimeline
from ._timeline import DetectorEventTimelineDescriptor

__all__ = [
    "DetectorEventFractionation",
    "DetectorEventBinning",
    "DetectorEventRenderer",
    "CountingDetectorEventRenderer",
]

_MOST_COUNT = 2**32 - 1


class DetectorEventFractionation:
    """How an acquisition's time is cut into the fractions of a movie: into a count, or by dose.

    Fraction `i` of `N` over a time extent `T` covers
    `[floor(i*T/N), floor((i+1)*T/N))`: no quantum is dropped, fractions
    differ in length by one quantum at most, and the longer ones are spread
    through the acquisition.

    Cut by dose instead (`dose_per_fraction`, with the acquisition's
    `total_dose` or its `dose_per_frame`), each fraction groups the whole
    frames (time quanta) whose dose comes nearest `dose_per_fraction`, at
    least one: `k = max(1, round(dose_per_fraction / frame dose))` frames,
    as many fractions as `T // k`, the last absorbing the `T % k` frames left,
    as RELION groups EER frames. How many fractions that makes depends on `T`
    (`count_for`).

    Args:
        fraction_count: How many fractions; None when cut by dose.
        dose_per_fraction: The dose a fraction is to hold, in e/Å².
        total_dose: The dose of the whole acquisition, in e/Å².
        dose_per_frame: Or the dose rate, in e/Å² per frame (time quantum).

    Raises:
        ValueError: If `fraction_count` is 0 or greater than `max_fraction_count`;
            if it is given with a dose, or a dose is given without one of the other two,
            or both; if a dose is not positive and finite.
        TypeError: If neither `fraction_count` nor `dose_per_fraction` is given.
    """

    __slots__ = ("_count", "_dose", "_total", "_rate")

    max_fraction_count = _MOST_COUNT
    """The most fractions: 2**32 - 1."""

    def __init__(
        self,
        fraction_count: int | None = None,
        *,
        dose_per_fraction: float | None = None,
        total_dose: float | None = None,
        dose_per_frame: float | None = None,
    ):
        self._dose, self._total, self._rate = (
            None if value is None else _positive_dose(value, name)
            for value, name in (
                (dose_per_fraction, "dose_per_fraction"),
                (total_dose, "total_dose"),
                (dose_per_frame, "dose_per_frame"),
            )
        )
        if fraction_count is None:
            if self._dose is None:
                raise TypeError("DetectorEventFractionation needs fraction_count or dose_per_fraction")
            if (self._total is None) == (self._rate is None):
                raise ValueError("a fractionation by dose needs total_dose or dose_per_frame, one of them")
            self._count = None
            return
        if self._dose is not None or self._total is not None or self._rate is not None:
            raise ValueError("give fraction_count or dose_per_fraction, not both")
        count = operator.index(fraction_count)
        if not 1 <= count <= _MOST_COUNT:
            raise ValueError(f"fraction_count is within 1 and 2**32 - 1: {fraction_count}")
        self._count = count

    @property
    def fraction_count(self) -> int | None:
        """How many fractions; None when cut by dose (see `count_for`)."""
        return self._count

    @property
    def dose_per_fraction(self) -> float | None:
        """The dose a fraction is to hold, in e/Å², when cut by dose."""
        return self._dose

    def frame_dose(self, time_extent: int) -> float | None:
        """The dose of one frame of an acquisition of `time_extent` frames, in e/Å²; None if not by dose."""
        if self._count is not None:
            return None
        return self._rate if self._rate is not None else self._total / operator.index(time_extent)

    def frames_per_fraction(self, time_extent: int) -> int:
        """How many frames a fraction by dose groups (the last may group more); for a count, the fewest."""
        if self._count is not None:
            return operator.index(time_extent) // self._count
        return max(1, round(self._dose / self.frame_dose(time_extent)))

    def count_for(self, time_extent: int) -> int:
        """How many fractions an acquisition of `time_extent` quanta is cut into.

        Raises:
            ValueError: If `time_extent` is not positive.
        """
        time_extent = operator.index(time_extent)
        if time_extent < 1:
            raise ValueError(f"a time extent is positive: {time_extent}")
        if self._count is not None:
            return self._count
        return max(1, time_extent // self.frames_per_fraction(time_extent))

    def get_fraction_begin(self, fraction: int, time_extent: int) -> int:
        """The first time quantum of `fraction`: `floor(fraction * time_extent / fraction_count)` for a
        count, `fraction * frames_per_fraction` by dose; the fraction past the last gives `time_extent`.

        Raises:
            IndexError: If `fraction` is greater than the count of fractions.
        """
        fraction, time_extent = operator.index(fraction), operator.index(time_extent)
        count = self._count if self._count is not None else self.count_for(time_extent)
        if not 0 <= fraction <= count:
            raise IndexError(f"fraction {fraction} of {count}")
        if self._count is not None:
            return fraction * time_extent // self._count
        return time_extent if fraction == count else fraction * self.frames_per_fraction(time_extent)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DetectorEventFractionation):
            return NotImplemented
        return self._key() == other._key()

    def _key(self) -> tuple:
        return (self._count, self._dose, self._total, self._rate)

    def __hash__(self) -> int:
        return hash((DetectorEventFractionation, self._key()))

    def configuration(self) -> str:
        """A stable description of the grouping of frames, the same for equal fractionations."""
        return repr(self)

    def __repr__(self) -> str:
        if self._count is not None:
            return f"DetectorEventFractionation(fraction_count={self._count})"
        given = "total_dose" if self._total is not None else "dose_per_frame"
        value = self._total if self._total is not None else self._rate
        return f"DetectorEventFractionation(dose_per_fraction={self._dose}, {given}={value})"


def _positive_dose(value: float, name: str) -> float:
    dose = float(value)
    if not (math.isfinite(dose) and dose > 0):
        raise ValueError(f"{name} is a positive, finite dose in e/Å², not {value!r}")
    return dose


class DetectorEventBinning:
    """How many detector pixels, along each axis, one pixel of a rendered image gathers.

    Stated in detector pixels rather than position quanta, so one binning
    means the same for acquisitions of any subdivision; 1 renders at the
    detector's resolution. It must divide the detector's pixel count along
    every axis.

    Args:
        factor: The detector pixels per image pixel along each axis.

    Raises:
        ValueError: If `factor` is 0.
    """

    __slots__ = ("_factor",)

    def __init__(self, factor: int):
        factor = operator.index(factor)
        if factor < 1:
            raise ValueError(f"a binning factor is positive: {factor}")
        self._factor = factor

    @property
    def factor(self) -> int:
        """The detector pixels per image pixel along each axis."""
        return self._factor

    def resolve(self, events: DetectorEventTimelineDescriptor) -> tuple[int, ...]:
        """The block of position quanta one image pixel covers: `subdivisions[axis] * factor` per axis.

        Raises:
            ValueError: If `factor` does not divide the detector's pixel count along an axis.
        """
        pixels = [e // s for e, s in zip(events.extents, events.subdivisions)]
        if any(p % self._factor for p in pixels):
            raise ValueError(f"binning {self._factor} does not divide the detector's {tuple(pixels)} pixels")
        return tuple(s * self._factor for s in events.subdivisions)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DetectorEventBinning):
            return NotImplemented
        return self._factor == other._factor

    def __hash__(self) -> int:
        return hash((DetectorEventBinning, self._factor))

    def __repr__(self) -> str:
        return f"DetectorEventBinning(factor={self._factor})"


class DetectorEventRenderer(ABC):
    """Turns the events of one stretch of time into one image; its methods may run concurrently.

    The renderer decides what a pixel means, the image's extents, and the
    type it computes in (`data_type`). Subclasses implement all three members.

    Raises:
        TypeError: When called: it is abstract.
    """

    @property
    @abstractmethod
    def data_type(self) -> NumericalType:
        """The type the renderer computes in; a destination of that type needs no conversion."""

    @abstractmethod
    def get_image_extents(self, events: DetectorEventTimelineDescriptor) -> tuple[int, ...]:
        """The extents of the image of an acquisition described by `events`, slowest first."""

    @abstractmethod
    def render(
        self, descriptor: DetectorEventTimelineDescriptor, events: DetectorEventTimeline, destination: Any
    ) -> None:
        """Overwrite every element of `destination` with the image of `events`, cast to its type.

        Args:
            descriptor: The acquisition's descriptor.
            events: The events to render, of the descriptor's rank.
            destination: A writable host array (numpy, a CPU tensor, a memoryview, an `Array`;
                strided views are fine) of shape `get_image_extents(descriptor)`.

        Raises:
            TypeError: If `destination` is not a writable host array.
            ValueError: If the grid does not suit the renderer, `events` is of another rank, or
                `destination` has the wrong shape.
            IndexError: If an event lies outside the grid.
        """

    def configuration(self) -> str | None:
        """A stable description of what decides the images it renders, equal for renderers that render
        alike; None (the default) where it cannot tell."""
        return None


class CountingDetectorEventRenderer(DetectorEventRenderer):
    """Counts, for each image pixel, the events in its block of `binning.factor`² detector pixels.

    Subpixel positions are ignored. Counts are accumulated as uint32.

    Args:
        binning: A `DetectorEventBinning`.

    Raises:
        TypeError: If `binning` is not a `DetectorEventBinning`.
    """

    __slots__ = ("_binning",)

    def __init__(self, binning: DetectorEventBinning):
        if not isinstance(binning, DetectorEventBinning):
            raise TypeError(f"binning is a DetectorEventBinning, not {type(binning).__name__}")
        self._binning = binning

    @property
    def binning(self) -> DetectorEventBinning:
        """The binning the image is rendered at."""
        return self._binning

    @property
    def data_type(self) -> NumericalType:
        """`NumericalType.uint32`: counts."""
        return NumericalType.uint32

    def get_image_extents(self, events: DetectorEventTimelineDescriptor) -> tuple[int, ...]:
        """The detector's pixel count along each axis, divided by the factor.

        Raises:
            ValueError: If the factor does not divide the detector.
        """
        blocks = self._binning.resolve(events)
        return tuple(e // b for e, b in zip(events.extents, blocks))

    def render(
        self, descriptor: DetectorEventTimelineDescriptor, events: DetectorEventTimeline, destination: Any
    ) -> None:
        """Overwrite `destination` with the counts of `events`, as the base class says.

        Raises:
            OverflowError: If a pixel would count more than 2**32 - 1 events; and as the base class.
        """
        if isinstance(destination, (list, tuple)):
            raise TypeError("the destination is a writable host array, not a list: nothing is converted")
        out = as_destination(destination)
        shape = self.get_image_extents(descriptor)
        if out.shape != shape:
            raise ValueError(f"the destination has shape {out.shape}, the image {shape}")
        if events.rank != descriptor.rank:
            raise ValueError(f"events of rank {events.rank} for a detector of rank {descriptor.rank}")
        blocks = np.asarray(self._binning.resolve(descriptor), dtype=np.int64)
        positions = events.get_positions()
        pixels = positions.astype(np.int64) // blocks
        del positions
        outside = (pixels >= np.asarray(shape, dtype=np.int64)).any(axis=1)
        if outside.any():
            raise IndexError(
                f"an event at {tuple(int(v) for v in pixels[outside.argmax()] * blocks)} lies outside "
                f"the grid {descriptor.extents}"
            )
        counts = np.bincount(np.ravel_multi_index(pixels.T, shape), minlength=int(np.prod(shape)))
        if len(counts) and counts.max() > _MOST_COUNT:
            raise OverflowError(f"a pixel counts {int(counts.max())} events, more than 2**32 - 1")
        np.copyto(out, counts.reshape(shape), casting="unsafe")

    def configuration(self) -> str:
        """The renderer by its binning: renderers of one binning count alike."""
        return repr(self)

    def __repr__(self) -> str:
        return f"CountingDetectorEventRenderer({self._binning!r})"
