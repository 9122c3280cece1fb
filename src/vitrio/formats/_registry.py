"""The registry of formats, and opening a file with the format that claims it.

`open_reader(key, formats)` opens a file with the first format that claims
it: by its key alone for a format that opens stores (`Format.claims_key`),
then by its contents where the format can tell, by its extension otherwise.
`create_writer(key, descriptor, formats)` picks the format by extension.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import threading
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from .._errors import redact, redact_error
from .._fs import open_readonly
from .._remote import RemoteFile, is_url
from .._types import ImageDescriptor, as_key, as_voxel_size, no_such_file
from ._contract import Format, FormatError, ImageReader, ImageWriter

__all__ = [
    "load_plugin_formats",
    "register_format",
    "registered_formats",
    "resolve_formats",
    "formats_configuration",
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
    """The registered formats, in the order they are tried, the plug-ins' included (`load_plugin_formats`)."""
    load_plugin_formats()
    return _registered()


def _registered() -> tuple[type[Format], ...]:
    with _REGISTRY_LOCK:
        return tuple(_REGISTRY)


_PLUGIN_GROUP = "vitrio.formats"
_PLUGIN_LOCK = threading.RLock()
_plugins_loaded = False
_plugins_missing: list[str] = []
"""For each plug-in left out because a module it needs is not installed, what to install."""


def load_plugin_formats() -> None:
    """Register the formats that installed packages declare under the entry point group `vitrio.formats`.

    Each entry point names a `Format` subclass (`hdf5 = "cryovit.hdf5:Hdf5Format [cryovit]"`, the
    extra naming what it needs); it is imported and registered once per process, by the first call.
    The library calls this itself the first time a file is claimed by no registered format, and
    from `registered_formats()`. A plug-in whose module cannot be imported (a dependency of an
    extra not installed) is left out silently: a file that no format claims then says what to
    install. One that is no format is left out with a warning.
    """
    global _plugins_loaded
    with _PLUGIN_LOCK:  # other threads wait for the plug-ins; one that imports asks no more
        if _plugins_loaded:
            return
        _plugins_loaded = True
        for entry in importlib.metadata.entry_points(group=_PLUGIN_GROUP):
            try:
                register_format(entry.load())
            except ImportError as error:
                _plugins_missing.append(_what_to_install(entry, error))
            except (AttributeError, TypeError) as error:
                warnings.warn(f"format plug-in {entry.name} ({entry.value}) left out: {error}", stacklevel=2)


def _what_to_install(entry: importlib.metadata.EntryPoint, error: ImportError) -> str:
    """What a plug-in left out for a missing module needs: its extra, where its entry point names one."""
    left_out = f"the format plug-in {entry.name} needs {error.name or error}, which is not installed"
    if entry.extras and entry.dist is not None:
        return f"{left_out}: pip install '{entry.dist.name}[{','.join(entry.extras)}]'"
    return left_out


def _plugins_added(tried: tuple[type[Format], ...]) -> tuple[type[Format], ...]:
    """The formats that loading the plug-ins registers besides those `tried` (none after the first time)."""
    return tuple(f for f in registered_formats() if f not in tried)


_HEAD_BYTES = 4096


def resolve_formats(formats: Iterable[type[Format]] | None) -> tuple[type[Format], ...]:
    """The formats to try: those given, in order, or every registered one (the plug-ins' not loaded).

    Raises:
        TypeError: If an element is not a `Format` subclass.
        ValueError: If `formats` is empty.
    """
    if formats is None:
        return _registered()
    resolved = tuple(formats)
    for candidate in resolved:
        if not (isinstance(candidate, type) and issubclass(candidate, Format)):
            raise TypeError(f"a format is a subclass of vitrio.formats.Format, not {candidate!r}")
    if not resolved:
        raise ValueError("formats is empty: no format to read or write with")
    return resolved


def formats_configuration(formats: Iterable[type[Format]]) -> str:
    """A stable description of what `formats` make of a file, for a cache kept across programs to tell
    readers apart: each format, in order, by its class and its settings (its public class attributes,
    those of `configured` formats included: EER fractions, binning, gain by its contents...)."""
    return "; ".join(_format_configuration(candidate) for candidate in formats)


def _format_configuration(candidate: type[Format]) -> str:
    settings: dict[str, Any] = {}
    for klass in candidate.__mro__:
        if klass is not Format and issubclass(klass, Format):
            for name, value in vars(klass).items():
                if not name.startswith("_") and not callable(value) and not hasattr(value, "__get__"):
                    settings.setdefault(name, value)
    described = ", ".join(f"{name}={_setting(settings[name])}" for name in sorted(settings))
    return f"{candidate.__module__}.{candidate.__qualname__}({described})"


def _setting(value: Any) -> str:
    """A setting as its value says it; an array by its contents, a mapping by a digest of its items (which
    may hold credentials), an object of another kind by its `configuration()` or else its class."""
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return repr(value)
    if isinstance(value, (tuple, list)):
        return f"[{', '.join(map(_setting, value))}]"
    if isinstance(value, Mapping):
        items = sorted((repr(k), _setting(v)) for k, v in value.items())
        return f"mapping {hashlib.sha256(repr(items).encode()).hexdigest()}"
    if hasattr(value, "__array_interface__"):
        array = np.ascontiguousarray(value)
        digest = hashlib.sha256(array.reshape(-1).view(np.uint8)).hexdigest()
        return f"array {array.dtype.str} {np.shape(value)} {digest}"
    if hasattr(value, "configuration"):
        return value.configuration()
    return type(value).__qualname__


def _extension(key: str) -> str:
    return os.path.splitext(key)[1].lower()


def _claiming(
    key: str, candidates: tuple[type[Format], ...], storage_options: Mapping[str, Any] | None = None
) -> ImageReader | None:
    """A reader of the store at `key` from the first of `candidates` that claims it by key alone."""
    for candidate in candidates:
        if candidate.claims_key(key):
            reader = candidate.open_key(key, storage_options)
            reader.format_name = candidate.name
            return reader
    return None


def _recognizing(
    key: str, fd: int | RemoteFile, head: bytes, candidates: tuple[type[Format], ...]
) -> ImageReader | None:
    """A reader of the open file `fd` from the first of `candidates` that recognizes its `head`."""
    extension = _extension(key)
    for candidate in candidates:
        if candidate.recognizes(head, extension):
            reader = candidate.open(key, fd, head)
            reader.format_name = candidate.name
            return reader
    return None


def open_reader(
    key, formats: Iterable[type[Format]] | None = None, storage_options: Mapping[str, Any] | None = None
) -> ImageReader:
    """Open the file at `key` with the first of `formats` that claims it.

    Without `formats`, every registered format is tried, and where none claims the file the
    plug-ins are loaded (`load_plugin_formats`) and tried. The reader's `format_name` is that
    format's `name`. A key that is a URL (`s3://`, `https://`, ...) is read through fsspec with
    `storage_options`, by the formats that read URLs (`Format.reads_urls`).

    Raises:
        ImageFileNotFoundError: If there is no file at `key` (a `FileNotFoundError` and a `RuntimeError`).
        FormatError: If no format claims the file, or the one that does finds it malformed.
    """
    key = as_key(key)
    candidates = resolve_formats(formats)
    reader = _claiming(key, candidates, storage_options)
    if reader is not None:
        return reader
    if is_url(key):
        return _open_url(key, candidates, formats is None, storage_options)
    try:
        fd = open_readonly(key)
    except FileNotFoundError as error:
        plugins = _plugins_added(candidates) if formats is None else ()
        if plugins and (reader := _claiming(key, plugins)) is not None:
            return reader
        raise no_such_file(key, error.errno) from None
    except IsADirectoryError:
        raise IsADirectoryError(f"{key}: is a directory, not an image file") from None
    try:
        head = os.pread(fd, _HEAD_BYTES, 0)
        reader = _recognizing(key, fd, head, candidates)
        if reader is None and formats is None:
            plugins = _plugins_added(candidates)
            candidates += plugins
            reader = _recognizing(key, fd, head, plugins)
        if reader is not None:
            return reader
        names = ", ".join(c.name for c in candidates)
        missing = "".join(f"; {needs}" for needs in _plugins_missing if formats is None)
        raise FormatError(f"{key}: not a file of any known format ({names}){missing}")
    except BaseException:
        os.close(fd)
        raise


def _open_url(
    key: str, candidates: tuple[type[Format], ...], plugins: bool, storage_options: Mapping[str, Any] | None
) -> ImageReader:
    """Open the file at the URL `key` with the first of `candidates` (the plug-ins' too) that reads URLs."""
    file = RemoteFile(key, storage_options)
    head = file.pread(_HEAD_BYTES, 0)
    candidates += _plugins_added(candidates) if plugins else ()
    readable = tuple(c for c in candidates if c.reads_urls)
    try:
        reader = _recognizing(key, file, head, readable)
    except Exception as error:
        redact_error(error)
        raise
    if reader is not None:
        return reader
    names = ", ".join(c.name for c in readable)
    raise FormatError(f"{redact(key)}: not a file of any format read from URLs ({names})")


def create_writer(
    key,
    descriptor: ImageDescriptor,
    formats: Iterable[type[Format]] | None = None,
    voxel_size: tuple[float, ...] | None = None,
) -> ImageWriter:
    """Start writing a new file at `key` in the format its extension names (a plug-in's, as `open_reader`).

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
    candidates = resolve_formats(formats)
    if formats is None and not any(extension in c.write_extensions for c in candidates):
        candidates += _plugins_added(candidates)
    for candidate in candidates:
        if extension in candidate.write_extensions:
            if sizes is not None and candidate.stores_voxel_size:
                return candidate.create(key, descriptor, voxel_size=sizes)
            return candidate.create(key, descriptor)
    raise FormatError(f"{key}: no format writes files ending {extension or 'without an extension'!r}")
