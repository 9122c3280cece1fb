"""Reader providers (which reader serves a key, how many stay open), the EER one, and the writer provider.

A reader provider hands out a reader for a key with `acquire(key)` and takes
it back with `release(reader)`; between the two the reader is in use and is
never closed. Every provider is safe to use from many threads at once.
"""

from __future__ import annotations

import threading
import warnings
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any

from ._types import ImageDescriptor, as_key
from .formats import Format, ImageReader, ImageWriter, create_writer, open_reader, resolve_formats
from .formats.eer import EerFormat

__all__ = [
    "ImageReaderProvider",
    "FileImageReaderProvider",
    "CachingImageReaderProvider",
    "FileImageWriterProvider",
    "detector_event_image_reader_provider",
]


class ImageReaderProvider:
    """What hands out readers by key. Subclasses implement `acquire` and `release`."""

    def acquire(self, key) -> ImageReader:
        """A reader of the file at `key`, in use until `release`d."""
        raise NotImplementedError

    def release(self, reader: ImageReader) -> None:
        """Hand back a reader `acquire` gave."""
        raise NotImplementedError

    def query_descriptor(self, key) -> ImageDescriptor:
        """The descriptor of the file at `key`."""
        reader = self.acquire(key)
        try:
            return reader.descriptor
        finally:
            self.release(reader)


class FileImageReaderProvider(ImageReaderProvider):
    """Opens the file at the path a key is, each time it is asked, and closes it when released.

    Args:
        formats: The formats to try, in order. Defaults to every registered one.
    """

    def __init__(self, formats: Iterable[type[Format]] | None = None):
        self._formats = resolve_formats(formats)

    @property
    def formats(self) -> tuple[type[Format], ...]:
        """The formats tried, in order."""
        return self._formats

    def acquire(self, key) -> ImageReader:
        return open_reader(key, self._formats)

    def release(self, reader: ImageReader) -> None:
        reader.close()

    def __repr__(self) -> str:
        return f"FileImageReaderProvider(formats={[f.name for f in self._formats]})"


class _Entry:
    __slots__ = ("reader", "users", "ready", "error")

    def __init__(self) -> None:
        self.reader: ImageReader | None = None
        self.users = 0
        self.ready = threading.Event()
        self.error: BaseException | None = None


class CachingImageReaderProvider(ImageReaderProvider):
    """Keeps up to `capacity` readers of `backing` open, closing the least recently used first.

    A reader in use is never closed; while more than `capacity` are in use,
    more stay open until they are released. A file is opened once even when
    many threads ask for it at the same time.

    Args:
        backing: The provider that opens and closes readers.
        capacity: How many readers to keep open.

    Raises:
        ValueError: If `capacity` is not positive.
    """

    def __init__(self, backing: ImageReaderProvider, capacity: int):
        if int(capacity) < 1:
            raise ValueError(f"capacity must be positive: {capacity}")
        self._backing = backing
        self._capacity = int(capacity)
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
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

    @property
    def backing(self) -> ImageReaderProvider:
        """The provider that opens and closes readers."""
        return self._backing

    def acquire(self, key) -> ImageReader:
        key = as_key(key)
        with self._lock:
            entry = self._entries.get(key)
            opening = entry is None
            if opening:
                entry = self._entries[key] = _Entry()
            else:
                self._entries.move_to_end(key)
            entry.users += 1
        if opening:
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
        else:
            if not entry.ready.is_set():
                entry.ready.wait()
            if entry.error is not None:
                with self._lock:
                    entry.users -= 1
                raise entry.error
        return entry.reader

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
                entry = next((e for e in self._entries.values() if e.reader is reader and e.users > 0), None)
            if entry is None:
                raise ValueError(f"{reader.key}: this reader was not acquired from this provider")
            entry.users -= 1
            dropped = reader.stale and entry.users == 0
            if dropped:
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
        for entry in getattr(self, "_entries", {}).values():
            if entry.reader is not None:
                entry.reader.close()

    def __repr__(self) -> str:
        return f"CachingImageReaderProvider({self._backing!r}, capacity={self._capacity})"


class FileImageWriterProvider:
    """Files being written a batch at a time: declared first, created on the first write, finished on close.

    A file is written beside its path and moved onto it when closed, so an
    unfinished file never stands at its path. Used as a context manager, it
    closes every file at the end of the block, or discards them all if the
    block raised.

    Args:
        formats: The formats to write with, chosen by extension. Defaults to
            every registered one.
    """

    def __init__(self, formats: Iterable[type[Format]] | None = None):
        self._formats = resolve_formats(formats)
        self._declared: dict[str, ImageDescriptor] = {}
        self._writers: dict[str, ImageWriter] = {}
        self._creating: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()

    def declare(self, key, descriptor: ImageDescriptor) -> None:
        """Say what the file at `key` will hold.

        Raises:
            RuntimeError: If `key` is declared already.
            TypeError: If `descriptor` is not an `ImageDescriptor`.
        """
        key = as_key(key)
        if not isinstance(descriptor, ImageDescriptor):
            raise TypeError(f"{key}: a descriptor is an ImageDescriptor, not {type(descriptor).__name__}")
        with self._lock:
            if key in self._declared:
                raise RuntimeError(f"{key}: is declared already")
            self._declared[key] = descriptor
            self._creating[key] = threading.Lock()

    def writer(self, key) -> ImageWriter:
        """The writer of a declared file, creating the file on first use.

        Raises:
            IndexError: If `key` is not declared.
        """
        key = as_key(key)
        writer = self._writers.get(key)
        if writer is not None:
            return writer
        with self._lock:
            if key not in self._declared:
                raise IndexError(f"{key}: is not declared")
            creating = self._creating[key]
        with creating:
            writer = self._writers.get(key)
            if writer is None:
                with self._lock:
                    descriptor = self._declared.get(key)
                if descriptor is None:  # closed or discarded meanwhile
                    raise IndexError(f"{key}: is not declared")
                writer = create_writer(key, descriptor, self._formats)
                self._writers[key] = writer
        return writer

    def close(self, key) -> None:
        """Finish the file at `key` (header statistics included) and forget it.

        A declared file never written is made, holding zeros.

        Raises:
            IndexError: If `key` is not declared.
        """
        key = as_key(key)
        writer = self.writer(key)
        with self._lock:
            del self._declared[key], self._creating[key]
            self._writers.pop(key, None)
        writer.finish()

    def discard(self, key) -> None:
        """Forget the file at `key` and remove what was written of it.

        Raises:
            IndexError: If `key` is not declared.
        """
        key = as_key(key)
        with self._lock:
            if key not in self._declared:
                raise IndexError(f"{key}: is not declared")
            del self._declared[key], self._creating[key]
            writer = self._writers.pop(key, None)
        if writer is not None:
            writer.discard()

    def flush(self) -> None:
        """Hand what was written to every open file so far to the operating system."""
        for writer in list(self._writers.values()):
            writer.flush()

    @property
    def file_count(self) -> int:
        """How many files are declared and not closed."""
        with self._lock:
            return len(self._declared)

    def __enter__(self) -> FileImageWriterProvider:
        return self

    def __exit__(self, kind, error, trace) -> None:
        for key in list(self._declared):
            if kind is None:
                self.close(key)
            else:
                self.discard(key)

    def __del__(self) -> None:
        writers = getattr(self, "_writers", {})
        if writers:
            warnings.warn(
                f"{len(writers)} files were never closed; what was written of them is removed: "
                + ", ".join(list(writers)[:3]),
                ResourceWarning,
                stacklevel=2,
            )
        for writer in writers.values():
            writer.discard()

    def __repr__(self) -> str:
        return f"<FileImageWriterProvider of {self.file_count} files>"


def detector_event_image_reader_provider(
    fractions: int,
    binning: int = 1,
    cache: Any = None,
    formats: Sequence[type[Format]] | None = None,
    *,
    superres: int = 1,
    gain: Any = None,
) -> ImageReaderProvider:
    """A reader provider that reads EER files as `fractions` rendered images, other files with `formats`.

    Args:
        fractions, binning, superres, gain: As `EerFormat.configured` takes them.
        cache: How many files to keep open, as `vitrio.reader_provider` takes it.
        formats: The formats of the other files; None for every registered one.

    Returns:
        A provider like `vitrio.reader_provider`'s.

    Raises:
        ValueError, TypeError: As `EerFormat.configured` raises them.
    """
    configured = EerFormat.configured(fractions, binning, superres, gain)
    provider: ImageReaderProvider = FileImageReaderProvider([configured, *resolve_formats(formats)])
    return provider if cache is None else CachingImageReaderProvider(provider, cache)
