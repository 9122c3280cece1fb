"""The registry of formats, and opening a file with the format that claims it.

`open_reader(key, storage, formats)` opens a file with the first format that
claims it: by its key alone for a format that opens stores
(`Format.claims_key`), then by its contents where the format can tell, by its
extension otherwise; its bytes are read through the `ByteSource` the storage
opens.
`create_writer(key, descriptor, formats)` picks the format by extension.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import threading
import warnings
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .._errors import redact, redact_error
from .._fs import read_head
from .._storage import ByteSource, Storage
from .._types import ImageDescriptor, as_key, as_voxel_size
from ._contract import Format, FormatError, ImageReader, ImageWriter, header_warnings_noted

if TYPE_CHECKING:
    from .._storage import Storage

__all__ = [
    "load_plugin_formats",
    "register_format",
    "registered_formats",
    "resolve_formats",
    "formats_configuration",
    "describe_file",
    "describe_files",
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


def formats_configuration(formats: Iterable[type[Format]], storage: Storage | None = None) -> str:
    """A stable description of what `formats` make of a file, for a cache kept across programs to tell
    readers apart: each format, in order, by its class and its settings (its public class attributes,
    those of `configured` formats included: EER fractions, binning, gain by its contents...), and the
    digest of `storage`'s options where it has any."""
    described = "; ".join(_format_configuration(candidate) for candidate in formats)
    if storage is None or not storage.options:
        return described
    return f"{described}; storage {storage.digest()}"


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
    key: str, candidates: tuple[type[Format], ...], storage: Storage, describe: bool
) -> ImageReader | ImageDescriptor | None:
    """A reader of the store at `key` from the first of `candidates` that claims it by key alone (with
    `describe`, its descriptor, the reader closed)."""
    for candidate in candidates:
        if candidate.claims_key(key):
            reader = candidate.open_key(key, storage)
            if describe:
                with reader:
                    return reader.descriptor
            reader.format_name = candidate.name
            return reader
    return None


_Described = dict[tuple[type[Format], Hashable], ImageDescriptor]
"""Descriptions already made, by format and what its `describes_alike` says of the files."""


def _recognizing(
    key: str,
    source: ByteSource,
    head: bytes,
    candidates: tuple[type[Format], ...],
    described: _Described | None,
) -> ImageReader | ImageDescriptor | None:
    """A reader of `source` from the first of `candidates` that recognizes its `head` (with `described`,
    what that format's `describe` says of it, taken from there for a file described alike)."""
    extension = _extension(key)
    for candidate in candidates:
        if candidate.recognizes(head, extension):
            if described is not None:
                return _describe_alike(candidate, key, source, head, described)
            reader = candidate.open(key, source, head)
            reader.format_name = candidate.name
            return reader
    return None


def _describe_alike(
    chosen: type[Format], key: str, source: ByteSource, head: bytes, described: _Described
) -> ImageDescriptor:
    """What `chosen` describes the file as: the description of a file it described alike, else its
    own, kept for the files alike where it made it without a warning (which names its file)."""
    alike = chosen.describes_alike(key, head, source.size)
    if alike is None:
        return chosen.describe(key, source, head)
    found = described.get((chosen, alike))
    if found is None:
        with header_warnings_noted() as warned:
            found = chosen.describe(key, source, head)
        if not warned:
            described[chosen, alike] = found
    return found


def open_reader(
    key,
    storage: Storage | Mapping[str, Any] | None = None,
    formats: Iterable[type[Format]] | None = None,
    *,
    storage_options: Mapping[str, Any] | None = None,
) -> ImageReader:
    """Open the file at `key` with the first of `formats` that claims it.

    Without `formats`, every registered format is tried, and where none claims the file the
    plug-ins are loaded (`load_plugin_formats`) and tried. The reader's `format_name` is that
    format's `name`. The file is read through `storage` (a `Storage`, or fsspec's storage options
    for one): a key that is a URL (`s3://`, `https://`, ...) by the formats that read URLs
    (`Format.reads_urls`). As earlier versions took them, `formats` may come second
    (`open_reader(key, formats)`) and the options as `storage_options=`.

    Raises:
        ImageFileNotFoundError: If there is no file at `key` (a `FileNotFoundError` and a `RuntimeError`).
        FormatError: If no format claims the file, or the one that does finds it malformed.
        TypeError: If both `storage` and `storage_options` are given.
    """
    key = as_key(key)
    if storage is not None and not isinstance(storage, (Storage, Mapping)):
        storage, formats = formats, storage  # open_reader(key, formats[, storage_options])
    if storage_options is not None:
        if storage is not None:
            raise TypeError(f"{redact(key)}: give storage or storage_options, not both")
        storage = storage_options
    return _first_format(key, Storage.of(storage), formats, None)


def describe_file(
    key, storage: Storage | Mapping[str, Any] | None = None, formats: Iterable[type[Format]] | None = None
) -> ImageDescriptor:
    """What the file at `key` holds, as the reader `open_reader` gives says, checked as it checks it:
    from the header alone where the format can tell (`Format.describe`), with no reader made.

    Raises:
        As `open_reader`.
    """
    return _first_format(as_key(key), Storage.of(storage), formats, {})


def describe_files(
    keys: Sequence,
    storage: Storage | Mapping[str, Any] | None = None,
    formats: Iterable[type[Format]] | None = None,
) -> Iterator[ImageDescriptor]:
    """What the file at each of `keys` holds, one after another, as `describe_file` says of each: files
    their format says are alike (`Format.describes_alike`) are described once.

    A local file's head is read first (`read_head`), and a file alike one described before takes its
    description; any other goes `describe_file`'s way, which opens it again: once for each kind of
    file alike, and for the first file of an extension whose format tells no files alike, after which
    the files of that extension go that way at once.

    Raises:
        As `open_reader`, for the first file that raises, when it is reached.
    """
    storage, formats = Storage.of(storage), None if formats is None else resolve_formats(formats)
    candidates = resolve_formats(formats)
    claiming = [c for c in candidates if c.claims_key.__func__ is not Format.claims_key.__func__]
    described: _Described = {}
    unlike: set[str] = set()  # extensions of files whose format tells no files alike
    for key in map(as_key, keys):
        found, extension = None, _extension(key)
        if (
            extension not in unlike
            and not storage.is_remote(key)
            and not any(c.claims_key(key) for c in claiming)
        ):
            found = _alike_from_head(key, extension, candidates, described, unlike)
        yield found if found is not None else _first_format(key, storage, formats, described)


def _alike_from_head(
    key: str, extension: str, candidates: tuple[type[Format], ...], described: _Described, unlike: set[str]
) -> ImageDescriptor | None:
    """The description of a file described before that the first of `candidates` that recognizes the
    local file at `key` says is alike (as `_first_format` would take it); None where there is none,
    nothing said of the file, for `_first_format` to describe it (or say what is wrong). Where that
    format tells no files alike, or none recognizes the file, its extension is added to `unlike`."""
    read = read_head(key, _HEAD_BYTES)
    if read is None:
        return None
    head, size = read
    chosen = next((c for c in candidates if c.recognizes(head, extension)), None)
    alike = None if chosen is None else chosen.describes_alike(key, head, size)
    if alike is None:
        unlike.add(extension)
        return None
    return described.get((chosen, alike))


def _first_format(
    key: str, storage: Storage, formats: Iterable[type[Format]] | None, described: _Described | None
) -> ImageReader | ImageDescriptor:
    """A reader of the file at `key` from the first of `formats` that claims it, or, given `described`,
    what that format says the file holds, as `open_reader` and `describe_file` say."""
    describe = described is not None
    candidates = resolve_formats(formats)
    found = _claiming(key, candidates, storage, describe)
    if found is not None:
        return found
    remote = storage.is_remote(key)
    try:
        source = storage.open(key)
    except FileNotFoundError:
        plugins = _plugins_added(candidates) if formats is None and not remote else ()
        if plugins and (found := _claiming(key, plugins, storage, describe)) is not None:
            return found
        raise
    try:
        head = source.pread(_HEAD_BYTES, 0)
        if remote:
            candidates += _plugins_added(candidates) if formats is None else ()
            candidates = tuple(c for c in candidates if c.reads_urls)
        found = _recognizing(key, source, head, candidates, described)
        if found is None and formats is None and not remote:
            plugins = _plugins_added(candidates)
            candidates += plugins
            found = _recognizing(key, source, head, plugins, described)
        if found is not None:
            if describe:
                source.close()
            return found
        names = ", ".join(c.name for c in candidates)
        if remote:
            raise FormatError(f"{redact(key)}: not a file of any format read from URLs ({names})")
        missing = "".join(f"; {needs}" for needs in _plugins_missing if formats is None)
        raise FormatError(f"{key}: not a file of any known format ({names}){missing}")
    except BaseException as error:
        source.close()
        if remote:
            redact_error(error)
        raise


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
