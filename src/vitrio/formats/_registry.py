"""The registry of formats, and opening a file with the format that claims it.

`open_reader(key, formats)` opens a file with the first format that claims
it: by its key alone for a format that opens stores (`Format.claims_key`),
then by its contents where the format can tell, by its extension otherwise.
`create_writer(key, descriptor, formats)` picks the format by extension.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable

from .._fs import open_readonly
from .._types import ImageDescriptor, as_key
from ._contract import Format, FormatError, ImageReader, ImageWriter

__all__ = ["register_format", "registered_formats", "resolve_formats", "open_reader", "create_writer"]

_REGISTRY: list[type[Format]] = []
_REGISTRY_LOCK = threading.Lock()


def register_format(cls: type[Format]) -> type[Format]:
    """Make a format known to every provider made without `formats`; usable as a decorator.

    Formats registered later are tried first, so a plug-in can claim a file
    before the built-in formats do.
    """
    if not (isinstance(cls, type) and issubclass(cls, Format)):
        raise TypeError(f"a format is a subclass of vitrio.formats.Format, not {cls!r}")
    with _REGISTRY_LOCK:
        if cls not in _REGISTRY:
            _REGISTRY.insert(0, cls)
    return cls


def registered_formats() -> tuple[type[Format], ...]:
    """The registered formats, in the order they are tried."""
    with _REGISTRY_LOCK:
        return tuple(_REGISTRY)


_HEAD_BYTES = 4096


def resolve_formats(formats: Iterable[type[Format]] | None) -> tuple[type[Format], ...]:
    """The formats to try: those given, in order, or every registered one.

    Raises:
        TypeError: If an element is not a `Format` subclass.
        ValueError: If `formats` is empty.
    """
    if formats is None:
        return registered_formats()
    resolved = tuple(formats)
    for candidate in resolved:
        if not (isinstance(candidate, type) and issubclass(candidate, Format)):
            raise TypeError(f"a format is a subclass of vitrio.formats.Format, not {candidate!r}")
    if not resolved:
        raise ValueError("formats is empty: no format to read or write with")
    return resolved


def _extension(key: str) -> str:
    return os.path.splitext(key)[1].lower()


def open_reader(key, formats: Iterable[type[Format]] | None = None) -> ImageReader:
    """Open the file at `key` with the first of `formats` that claims it.

    The reader's `format_name` is that format's `name`.

    Raises:
        FileNotFoundError: If there is no file at `key`.
        FormatError: If no format claims the file, or the one that does finds it malformed.
    """
    key = as_key(key)
    candidates = resolve_formats(formats)
    for candidate in candidates:
        if candidate.claims_key(key):
            reader = candidate.open_key(key)
            reader.format_name = candidate.name
            return reader
    try:
        fd = open_readonly(key)
    except FileNotFoundError:
        raise FileNotFoundError(f"{key}: no such file") from None
    except IsADirectoryError:
        raise IsADirectoryError(f"{key}: is a directory, not an image file") from None
    try:
        if os.path.isdir(key):
            raise IsADirectoryError(f"{key}: is a directory, not an image file")
        head = os.pread(fd, _HEAD_BYTES, 0)
        extension = _extension(key)
        for candidate in candidates:
            if candidate.recognizes(head, extension):
                reader = candidate.open(key, fd, head)
                reader.format_name = candidate.name
                return reader
        names = ", ".join(c.name for c in candidates)
        raise FormatError(f"{key}: not a file of any known format ({names})")
    except BaseException:
        os.close(fd)
        raise


def create_writer(
    key, descriptor: ImageDescriptor, formats: Iterable[type[Format]] | None = None
) -> ImageWriter:
    """Start writing a new file at `key` in the format its extension names.

    Raises:
        ValueError: If no format writes files with that extension.
    """
    key = as_key(key)
    extension = _extension(key)
    for candidate in resolve_formats(formats):
        if extension in candidate.write_extensions:
            return candidate.create(key, descriptor)
    raise ValueError(f"{key}: no format writes files ending {extension or 'without an extension'!r}")
