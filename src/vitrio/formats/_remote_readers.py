"""The readers of files at URLs a provider has opened: each opened once, kept with its header.

A reader of a file at a URL holds no descriptor, only what its header said
and the byte source it fetches ranges of; so a provider keeps it, as it
keeps the layouts of local raw files, and later batches fetch images alone.
"""

from __future__ import annotations

import threading
import zlib
from collections import OrderedDict
from collections.abc import Iterable

from .._errors import redact_error
from .._storage import Storage
from ._contract import Format, ImageReader
from ._registry import open_reader

__all__ = ["RemoteReaders"]


class RemoteReaders:
    """The readers of the last files at URLs opened from `storage`, as many as its configuration's
    `remote_readers_kept`; safe from many threads."""

    def __init__(self, storage: Storage):
        self._storage = storage
        self._kept = storage.configuration.remote_readers_kept
        self._readers: OrderedDict[str, ImageReader] = OrderedDict()
        self._opening: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()

    def acquire(self, key: str, formats: Iterable[type[Format]] | None) -> ImageReader:
        """The reader of the file at the URL `key`, opened by the first thread that asks; an error opening it
        says the URL as `redact` gives it."""
        with self._lock:
            reader = self._kept_reader(key)
            if reader is not None:
                return reader
            opening = self._opening.setdefault(key, threading.Lock())
        with opening:
            with self._lock:
                reader = self._kept_reader(key)
                if reader is not None:
                    self._opening.pop(key, None)
                    return reader
            try:
                reader = open_reader(key, self._storage, formats)
            except Exception as error:  # a format names the file by its key, the URL as given
                redact_error(error)
                raise
            with self._lock:
                self._readers[key] = reader
                if len(self._readers) > self._kept:
                    self._readers.popitem(last=False)
                self._opening.pop(key, None)
        return reader

    def _kept_reader(self, key: str) -> ImageReader | None:
        reader = self._readers.get(key)
        if reader is None or reader.stale:
            return None
        self._readers.move_to_end(key)
        return reader

    def holds(self, key: str) -> bool:
        """Whether the reader of the file at `key` is kept: acquiring it fetches nothing."""
        with self._lock:
            reader = self._readers.get(key)
        return reader is not None and not reader.stale

    def stamp(self, key: str) -> tuple[int, int] | None:
        """(size, a CRC-32 of the version) of the file at `key` as the server says now; None if it cannot."""
        try:
            with self._storage.open(key) as file:
                version = file.stamp()
        except OSError:
            return None
        return file.size, -1 if version is None else zlib.crc32(str(version).encode())
