"""The format selectors of the published API: immutable sequences of formats, each with a shared one.

A selector is what every `formats=` argument takes (as it takes any
sequence of `Format` classes). `get_shared()` of each class returns one
process-wide selector, a live view of the registry: a format registered
later is part of it.

- `ImageFileReadFormatSelector`: formats files are opened with as images;
  the shared one holds every registered format but those of detector events.
- `ImageFileWriteFormatSelector`: formats files are created with, chosen by
  extension; the shared one holds every registered format that writes.
- `DetectorEventTimelineFileReadFormatSelector`: formats detector events are
  read from; the shared one holds every registered event format (EER).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar, overload

from ._contract import Format
from ._registry import registered_formats, resolve_formats

__all__ = [
    "FormatSelector",
    "ImageFileReadFormatSelector",
    "ImageFileWriteFormatSelector",
    "DetectorEventTimelineFileReadFormatSelector",
]


class FormatSelector(Sequence[type[Format]]):
    """An immutable sequence of formats, tried in order.

    Args:
        formats: The formats. (The published package has no public
            constructor; building a selector from formats is an extension.)

    Raises:
        TypeError: If `formats` is missing or holds something that is not a `Format` subclass.
        ValueError: If it is empty.
    """

    _shared: ClassVar[FormatSelector | None] = None
    _shared_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, formats: Iterable[type[Format]]):
        if formats is None:
            raise TypeError(
                f"{type(self).__name__} takes the formats it holds; get_shared() gives the usual one"
            )
        fixed = resolve_formats(formats)
        self._formats: Callable[[], tuple[type[Format], ...]] = lambda: fixed

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._shared = None
        cls._shared_lock = threading.Lock()

    @classmethod
    def _keeps(cls, format: type[Format]) -> bool:
        """Whether the shared selector holds the registered `format`."""
        raise NotImplementedError

    @classmethod
    def get_shared(cls) -> FormatSelector:
        """The process-wide selector of the registered formats of its kind: the same object every call."""
        with cls._shared_lock:
            if cls._shared is None:
                shared = object.__new__(cls)
                shared._formats = lambda: tuple(f for f in registered_formats() if cls._keeps(f))
                cls._shared = shared
            return cls._shared

    @overload
    def __getitem__(self, item: int) -> type[Format]: ...

    @overload
    def __getitem__(self, item: slice) -> tuple[type[Format], ...]: ...

    def __getitem__(self, item: Any) -> Any:
        return self._formats()[item]

    def __len__(self) -> int:
        return len(self._formats())

    def __repr__(self) -> str:
        shared = " (shared)" if self is type(self)._shared else ""
        return f"<{type(self).__name__}{shared}: {', '.join(f.name for f in self._formats())}>"


class ImageFileReadFormatSelector(FormatSelector):
    """The formats files are opened with as images: by contents where a format tells, else by extension.

    `get_shared()` holds the registered image formats (MRC, TIFF, DM and
    plug-ins), not those of detector events (EER).
    """

    @classmethod
    def _keeps(cls, format: type[Format]) -> bool:
        return not format.events


class ImageFileWriteFormatSelector(FormatSelector):
    """The formats files are created with, chosen by the extension of the path.

    `get_shared()` holds the registered formats that write (MRC, TIFF and plug-ins).
    """

    @classmethod
    def _keeps(cls, format: type[Format]) -> bool:
        return bool(format.write_extensions)


class DetectorEventTimelineFileReadFormatSelector(FormatSelector):
    """The formats detector events are read from (`Format.open_events`).

    `get_shared()` holds the registered event formats (EER).
    """

    @classmethod
    def _keeps(cls, format: type[Format]) -> bool:
        return format.events
