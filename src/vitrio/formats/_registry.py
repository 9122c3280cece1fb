"""The registry of formats, and opening a file with the format that claims it.

`open_reader(key, formats)` opens a file with the first format that claims
it: by its key alone for a format that opens stores (`Format.claims_key`),
then by its contents where the format can tell, by its extension otherwise.
`create_writer(key, descriptor, formats)` picks the format by extension.
"""

from __future__ import annotations

import importlib.metadata
import os
import threading
import warnings
from collections.abc import Iterable

from .._fs import open_readonly
from .._types import ImageDescriptor, ImageFileNotFoundError, as_key, as_voxel_size
from ._contract import Format, FormatError, ImageReader, ImageWriter

__all__ = [
    "load_plugin_formats",
    "register_format",
    "registered_formats",
    "resolve_formats",
    "open_reader",
    "create_writer",
]

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


_PLUGIN_GROUP = "vitrio.formats"
_plugins_loaded = False


def load_plugin_formats() -> None:
    """Register the formats that installed packages declare under the entry point group `vitrio.formats`.

    Each entry point names a `Format` subclass (`hdf5 = "cryovit.hdf5:Hdf5Format"`); it is imported and
    registered the first time this is called, and never again. One that cannot be imported (its own
    dependency missing, say) or is no format is left out with a warning.
    """
    global _plugins_loaded
    with _REGISTRY_LOCK:
        if _plugins_loaded:
            return
        _plugins_loaded = True
    for entry in importlib.metadata.entry_points(group=_PLUGIN_GROUP):
        try:
            loaded = entry.load()
            register_format(loaded)
        except (ImportError, AttributeError, TypeError) as error:
            warnings.warn(f"format plug-in {entry.name} ({entry.value}) left out: {error}", stacklevel=2)


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
        ImageFileNotFoundError: If there is no file at `key` (a `FileNotFoundError` and a `RuntimeError`).
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
    except FileNotFoundError as error:
        raise ImageFileNotFoundError(error.errno, f"{key}: no such file") from None
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
    key,
    descriptor: ImageDescriptor,
    formats: Iterable[type[Format]] | None = None,
    voxel_size: tuple[float, ...] | None = None,
) -> ImageWriter:
    """Start writing a new file at `key` in the format its extension names.

    Args:
        voxel_size: The size of a pixel in Å, one number or one per axis of an
            image (slowest first); stored by formats that store one.

    Raises:
        FormatError: If no format writes files with that extension (a `ValueError` and a `RuntimeError`).
        ValueError: If `voxel_size` is not positive numbers, one or one per axis.
    """
    key = as_key(key)
    extension = _extension(key)
    sizes = as_voxel_size(voxel_size, descriptor.core_rank, key)
    for candidate in resolve_formats(formats):
        if extension in candidate.write_extensions:
            if sizes is not None and candidate.stores_voxel_size:
                return candidate.create(key, descriptor, voxel_size=sizes)
            return candidate.create(key, descriptor)
    raise FormatError(f"{key}: no format writes files ending {extension or 'without an extension'!r}")
