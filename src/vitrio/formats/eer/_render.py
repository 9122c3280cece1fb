"""Turning detector events into movies: fractionation of time, binning of space, renderers.

`DetectorEventFractionation` cuts an acquisition's time into the fractions
of a movie, `DetectorEventBinning` says how many detector pixels one image
pixel gathers, and a `DetectorEventRenderer` turns the events of one
fraction into one image. `CountingDetectorEventRenderer` counts them.
"""

from __future__ import annotations

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
    """How an acquisition's time is cut into the fractions of a movie, whatever the acquisition.

    Fraction `i` of `N` over a time extent `T` covers
    `[floor(i*T/N), floor((i+1)*T/N))`: no quantum is dropped, fractions
    differ in length by one quantum at most, and the longer ones are spread
    through the acquisition.

    Args:
        fraction_count: How many fractions.

    Raises:
        ValueError: If `fraction_count` is 0 or greater than `max_fraction_count`.
    """

    __slots__ = ("_count",)

    max_fraction_count = _MOST_COUNT
    """The most fractions: 2**32 - 1."""

    def __init__(self, fraction_count: int):
        count = operator.index(fraction_count)
        if not 1 <= count <= _MOST_COUNT:
            raise ValueError(f"fraction_count is within 1 and 2**32 - 1: {fraction_count}")
        self._count = count

    @property
    def fraction_count(self) -> int:
        """How many fractions."""
        return self._count

    def get_fraction_begin(self, fraction: int, time_extent: int) -> int:
        """The first time quantum of `fraction`: `floor(fraction * time_extent / fraction_count)`.

        `fraction == fraction_count` gives `time_extent`.

        Raises:
            IndexError: If `fraction` is greater than `fraction_count`.
        """
        fraction, time_extent = operator.index(fraction), operator.index(time_extent)
        if not 0 <= fraction <= self._count:
            raise IndexError(f"fraction {fraction} of {self._count}")
        return fraction * time_extent // self._count

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DetectorEventFractionation):
            return NotImplemented
        return self._count == other._count

    def __hash__(self) -> int:
        return hash((DetectorEventFractionation, self._count))

    def __repr__(self) -> str:
        return f"DetectorEventFractionation(fraction_count={self._count})"


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

    def __repr__(self) -> str:
        return f"CountingDetectorEventRenderer({self._binning!r})"
