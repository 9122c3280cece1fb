"""Reader providers: which reader serves a key, and how many stay open.

A reader provider hands out a reader for a key with `acquire(key)` and takes
it back with `release(reader)`; between the two the reader is in use and is
never closed. Every provider is safe to use from many threads at once.

A provider that opens files also keeps the layout of each raw file it has
opened (`layout(key)`), apart from its open readers and many more of them,
so that a batch reads such a file with one native call, open to close,
whether its reader is open or not; of a file it opened that holds none, it
says so (`NO_LAYOUT`), and None of a file it has not opened. A layout found
out of date (the file changed) is forgotten (`forget_layout`), and the file
is read through its reader, which a caching provider may still hold open: it
checks the file as it always does, and the file is parsed anew when it is
opened next.

A provider that keeps files open checks, once a batch (`begin_batch`), that
the file at a key is still the one it opened before it serves it again.

A provider in front of another (`WrappingImageReaderProvider`: the caching
one, a scratch's) passes on to it every optional method it does not change.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Final

from ._counters import add_count
from ._errors import redact
from ._storage import ByteSource, Storage, is_url
from ._types import ImageDescriptor, as_key
from .formats import (
    Format,
    ImageReader,
    open_reader,
    registered_formats,
    resolve_formats,
)
from .formats._raw_layout import RawLayout
from .formats._registry import describe_file, describe_files, formats_configuration
from .formats._remote_readers import RemoteReaders

__all__ = [
    "NO_LAYOUT",
    "ImageReaderProvider",
    "FileImageReaderProvider",
    "CachingImageReaderProvider",
    "WrappingImageReaderProvider",
]


class _NoLayout:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NO_LAYOUT"


NO_LAYOUT: Final[Any] = _NoLayout()
"""What `ImageReaderProvider.layout` says of a file known to hold no layout: read through its reader."""


class ImageReaderProvider:
    """What hands out readers by key. Subclasses implement `acquire` and `release`."""

    def acquire(self, key) -> ImageReader:
        """A reader of the file at `key`, in use until `release`d."""
        raise NotImplementedError

    def release(self, reader: ImageReader) -> None:
        """Hand back a reader `acquire` gave."""
        raise NotImplementedError

    def layout(self, key: str) -> RawLayout | Any | None:
        """The layout of the raw file at `key` as parsed when it was last opened; `NO_LAYOUT` where the
        file is known to hold none (its images are read through its reader); None where it is unknown
        (the file not opened yet): opening it tells."""
        return None

    def forget_layout(self, key: str) -> None:
        """Forget the layout of the file at `key`, found out of date."""

    def opened(self, key: str) -> bool:
        """Whether acquiring `key` now opens nothing, its reader being kept open; False if unknown."""
        return False

    def will_read(self, key: str, start: int = 0, length: int = 0) -> None:
        """Tell the kernel that `length` bytes from `start` of the file at `key` (0: all after it) are
        read soon, where this provider reads them from the file; nothing by default."""

    def stamp(self, key: str) -> tuple[int, int] | None:
        """(size, version) of the file at the URL `key` now, for a scratch to see a change; None if local."""
        return None

    def read_many(self, requests: Sequence[tuple[ByteSource, Sequence[tuple[int, int]]]]) -> list[Any]:
        """The (start, end) ranges of each (source, ranges) of `requests`, of readers whose
        `fetches_ranges` is true, read at once (those at URLs fetched together)."""
        return [source.read_ranges(ranges) for source, ranges in requests]

    def begin_batch(self) -> None:
        """A batch begins: a provider that keeps files open checks each once more before it serves it."""

    def configuration(self) -> str | None:
        """A stable description of what decides the images this provider hands out (its formats and
        their settings), for a cache kept across programs to tell providers apart; a provider that
        passes on another's images describes that one. None (the default) where it cannot tell: such
        a cache then keeps nothing for a later program."""
        return None

    def query_descriptor(self, key) -> ImageDescriptor:
        """The descriptor of the file at `key`."""
        reader = self.acquire(key)
        try:
            return reader.descriptor
        finally:
            self.release(reader)

    def query_descriptors(self, keys: Sequence) -> Iterator[ImageDescriptor]:
        """The descriptor of the file at each of `keys`, one after another, as `query_descriptor` gives
        it; a provider that can asks for many at less than the cost of each alone."""
        return map(self.query_descriptor, keys)


class WrappingImageReaderProvider(ImageReaderProvider):
    """A provider in front of `backing`, which passes on to it every optional method it does not override.

    A subclass implements `acquire` and `release`, and overrides only what it changes, so that a
    method `ImageReaderProvider` gains later reaches `backing` through every wrapper.

    Args:
        backing: The provider behind this one.
    """

    def __init__(self, backing: ImageReaderProvider):
        self._backing = backing

    @property
    def backing(self) -> ImageReaderProvider:
        """The provider behind this one."""
        return self._backing

    def layout(self, key: str) -> RawLayout | None:
        return self._backing.layout(key)

    def forget_layout(self, key: str) -> None:
        self._backing.forget_layout(key)

    def opened(self, key: str) -> bool:
        return self._backing.opened(key)

    def will_read(self, key: str, start: int = 0, length: int = 0) -> None:
        self._backing.will_read(key, start, length)

    def stamp(self, key: str) -> tuple[int, int] | None:
        return self._backing.stamp(key)

    def read_many(self, requests: Sequence[tuple[ByteSource, Sequence[tuple[int, int]]]]) -> list[Any]:
        return self._backing.read_many(requests)

    def begin_batch(self) -> None:
        self._backing.begin_batch()

    def configuration(self) -> str | None:
        return self._backing.configuration()

    def query_descriptor(self, key) -> ImageDescriptor:
        return self._backing.query_descriptor(key)

    def query_descriptors(self, keys: Sequence) -> Iterator[ImageDescriptor]:
        return self._backing.query_descriptors(keys)


class FileImageReaderProvider(ImageReaderProvider):
    """Opens the file at the path a key is, each time it is asked, and closes it when released.

    It keeps the layouts of the last `layouts_kept` files it opened (of its storage's configuration),
    and readers of files at URLs (RemoteReaders).

    Args:
        formats: The formats to try, in order. Defaults to every registered one when a file is
            opened, and the plug-ins' where none of those claims it (`load_plugin_formats`).
        storage: Where the bytes of keys come from: a `vitrio.Storage`, or the storage options fsspec
            takes to reach files at URLs (`{"anon": True}`, credentials...), made into one.
    """

    def __init__(
        self, formats: Iterable[type[Format]] | None = None, storage: Storage | Mapping | None = None
    ):
        self._formats = None if formats is None else resolve_formats(formats)
        self._storage = Storage.of(storage)
        self._layouts: dict[str, Any] = {}
        self._layouts_lock = threading.Lock()
        self._remote = RemoteReaders(self._storage)

    @property
    def storage(self) -> Storage:
        """Where the bytes of keys come from."""
        return self._storage

    @property
    def formats(self) -> tuple[type[Format], ...]:
        """The formats tried, in order."""
        return registered_formats() if self._formats is None else self._formats

    def acquire(self, key) -> ImageReader:
        if self._storage.is_remote(key := as_key(key)):
            return self._remote.acquire(key, self._formats)
        reader = open_reader(key, self._storage, self._formats)
        add_count("files_opened")
        layout = reader.layout()
        with self._layouts_lock:
            self._layouts.pop(key, None)
            self._layouts[key] = NO_LAYOUT if layout is None else layout
            if len(self._layouts) > self._storage.configuration.layouts_kept:
                del self._layouts[next(iter(self._layouts))]
        return reader

    def release(self, reader: ImageReader) -> None:
        if not self._storage.is_remote(reader.key):
            reader.close()

    def layout(self, key: str) -> RawLayout | Any | None:
        return self._layouts.get(key)

    def forget_layout(self, key: str) -> None:
        with self._layouts_lock:
            self._layouts.pop(key, None)

    def opened(self, key: str) -> bool:
        return self._storage.is_remote(key) and self._remote.holds(key)

    def will_read(self, key: str, start: int = 0, length: int = 0) -> None:
        """Open the local file at `key` through the storage, as a reader does (a FIFO or a device is not
        waited on), and tell the kernel (`posix_fadvise` WILLNEED); nothing for a URL or a file that does
        not open, which the read that follows names."""
        if self._storage.is_remote(key):
            return
        with contextlib.suppress(OSError, ValueError), self._storage.open(key) as source:
            add_count("files_opened")
            fd = source.fileno()
            if fd is not None:
                os.posix_fadvise(fd, start, length, os.POSIX_FADV_WILLNEED)

    def stamp(self, key: str) -> tuple[int, int] | None:
        return self._remote.stamp(key) if self._storage.is_remote(key) else None

    def query_descriptor(self, key) -> ImageDescriptor:
        """The descriptor of the file at `key`: of a local file from its header where its format can tell
        (`describe_file`, no reader made); of one at a URL from the reader kept for its reads."""
        if self._storage.is_remote(key := as_key(key)):
            return ImageReaderProvider.query_descriptor(self, key)
        add_count("files_opened")
        return describe_file(key, self._storage, self._formats)

    def query_descriptors(self, keys: Sequence) -> Iterator[ImageDescriptor]:
        """The descriptor of the file at each of `keys`, as `query_descriptor` gives it: the local files
        through `describe_files`, which describes files alike once."""
        keys = [(key, self._storage.is_remote(key)) for key in map(as_key, keys)]
        local = describe_files([key for key, remote in keys if not remote], self._storage, self._formats)
        for key, remote in keys:
            if remote:
                yield ImageReaderProvider.query_descriptor(self, key)
            else:
                add_count("files_opened")
                yield next(local)

    def read_many(self, requests: Sequence[tuple[ByteSource, Sequence[tuple[int, int]]]]) -> list[Any]:
        return self._storage.read_many(requests)

    def configuration(self) -> str:
        """The formats tried, in order, with their settings (`formats_configuration`), and the digest of
        the storage's options where it has any."""
        return formats_configuration(self.formats, self._storage)

    def __repr__(self) -> str:
        return f"FileImageReaderProvider(formats={[f.name for f in self.formats]})"


class _Entry:
    __slots__ = ("reader", "users", "ready", "error", "identity", "checked")

    def __init__(self, identity: Hashable | None, batch: int) -> None:
        self.reader: ImageReader | None = None
        self.users = 0
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self.identity = identity
        self.checked = batch


def _identity(key: str) -> Hashable | None:
    """What the local file at `key` is now: device, inode, size, times of modification and change; None
    for a URL or where nothing is at `key`."""
    if is_url(key):
        return None
    try:
        info = os.stat(key)
    except (OSError, ValueError):
        return None
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


class CachingImageReaderProvider(WrappingImageReaderProvider):
    """Keeps up to `capacity` readers of `backing` open, closing the least recently used first.

    A reader in use is never closed; while more than `capacity` are in use,
    more stay open until they are released. A file is opened once even when
    many threads ask for it at the same time. A kept reader of a local file is
    served again only once its path is found to be the file it opened (device,
    inode, size and times, by a `stat` at most once a batch, `begin_batch`):
    a file replaced or changed is opened anew.

    Args:
        backing: The provider that opens and closes readers.
        capacity: How many readers to keep open.

    Raises:
        ValueError: If `capacity` is not positive.
    """

    def __init__(self, backing: ImageReaderProvider, capacity: int):
        if int(capacity) < 1:
            raise ValueError(f"capacity must be positive: {capacity}")
        super().__init__(backing)
        self._capacity = int(capacity)
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._replaced: list[_Entry] = []
        self._batch = 0
        self._lock = threading.Lock()

    @property
    def capacity(self) -> int:
        """How many readers are kept open."""
        return self._capacity

    @property
    def reader_count(self) -> int:
        """How many readers are open now."""
        with self._lock:
            return sum(1 for entry in self._entries.values() if entry.reader is not None)

    def begin_batch(self) -> None:
        """A batch begins: each kept reader is checked against its path before it is served again."""
        with self._lock:
            self._batch += 1
        self._backing.begin_batch()

    def acquire(self, key) -> ImageReader:
        key = as_key(key)
        replaced = None
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry.checked != self._batch and entry.ready.is_set():
                entry.checked = self._batch  # one stat a batch, under the lock: no one is served meanwhile
                if entry.identity is not None and _identity(key) != entry.identity:
                    del self._entries[key]
                    if entry.users:
                        self._replaced.append(entry)  # closed when the last user releases it
                    else:
                        replaced = entry.reader
                    entry = None
            opening = entry is None
            if opening:
                entry = self._entries[key] = _Entry(None, self._batch)
            else:
                self._entries.move_to_end(key)
                add_count("readers_reused")
            entry.users += 1
        if replaced is not None:
            self._backing.release(replaced)
        if opening:
            return self._open(key, entry)
        if not entry.ready.is_set():
            entry.ready.wait()
        if entry.error is not None:
            with self._lock:
                entry.users -= 1
            raise entry.error
        return entry.reader

    def _open(self, key: str, entry: _Entry) -> ImageReader:
        entry.identity = _identity(key)  # before it opens: a file replaced between the two is opened again
        try:
            entry.reader = self._backing.acquire(key)
        except BaseException as error:
            entry.error = error
            with self._lock:
                entry.users -= 1
                if self._entries.get(key) is entry:
                    del self._entries[key]
            entry.ready.set()
            raise
        entry.ready.set()
        self._evict()
        return entry.reader

    def opened(self, key: str) -> bool:
        with self._lock:
            entry = self._entries.get(key)
        if entry is not None and entry.reader is not None:
            return True
        return self._backing.opened(key)

    def query_descriptor(self, key) -> ImageDescriptor:
        """The descriptor of the file at `key`, from the reader kept open (which is then kept for a read)."""
        return ImageReaderProvider.query_descriptor(self, key)

    def query_descriptors(self, keys: Sequence) -> Iterator[ImageDescriptor]:
        """The descriptor of the file at each of `keys`, from the readers kept open, one at a time."""
        return ImageReaderProvider.query_descriptors(self, keys)

    def release(self, reader: ImageReader) -> None:
        """Hand back a reader `acquire` gave; it stays open until it is the least recently used.

        A `stale` reader (its file changed under it) is closed once no one
        uses it, so that the file is opened anew the next time it is asked for.
        The backing provider may name its readers otherwise than the key they
        were asked for (a provider that resolves links, say), so a reader is
        found by identity when its key does not find it.

        Raises:
            ValueError: If the reader is not one this provider handed out.
        """
        with self._lock:
            entry = self._entries.get(reader.key)
            if entry is None or entry.reader is not reader:
                held = (*self._entries.values(), *self._replaced)
                entry = next((e for e in held if e.reader is reader and e.users > 0), None)
            if entry is None:
                raise ValueError(f"{redact(reader.key)}: this reader was not acquired from this provider")
            entry.users -= 1
            replaced = entry in self._replaced
            dropped = (reader.stale or replaced) and entry.users == 0
            if dropped and replaced:
                self._replaced.remove(entry)
            elif dropped:
                key = next(k for k, e in self._entries.items() if e is entry)
                del self._entries[key]
        if dropped:
            self._backing.release(reader)
        elif len(self._entries) > self._capacity:
            self._evict()

    def _evict(self) -> None:
        closing = []
        with self._lock:
            excess = len(self._entries) - self._capacity
            if excess > 0:
                for key, entry in list(self._entries.items()):
                    if excess == 0:
                        break
                    if entry.users == 0 and entry.reader is not None:
                        del self._entries[key]
                        closing.append(entry.reader)
                        excess -= 1
        for reader in closing:
            self._backing.release(reader)

    def clear(self) -> None:
        """Close every reader not in use."""
        closing = []
        with self._lock:
            for key, entry in list(self._entries.items()):
                if entry.users == 0 and entry.reader is not None:
                    del self._entries[key]
                    closing.append(entry.reader)
        for reader in closing:
            self._backing.release(reader)

    def __del__(self) -> None:
        for entry in (*getattr(self, "_entries", {}).values(), *getattr(self, "_replaced", ())):
            if entry.reader is not None:
                entry.reader.close()

    def __repr__(self) -> str:
        return f"CachingImageReaderProvider({self._backing!r}, capacity={self._capacity})"
