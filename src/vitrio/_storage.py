"""Where bytes come from: a `Storage` resolves a key to a `ByteSource`, local or at a URL alike.

A format reads a file through a `ByteSource` (`pread`, `size`, ranges read at
once, a `stamp` that says whether it changed, a file object for parsers that
take one) and never learns where its bytes live; `fileno()` gives the
descriptor of a local file, for maps and the native batch path, and None at
a URL. A `Storage` holds what reaching them takes: fsspec's storage options
(credentials, `anon`, `endpoint_url`) and the `Configuration` whose limits
bound each read at a URL. It is given once, at a public entry
(`Storage.of(storage_options)`), and passed down whole, to a cluster's
workers too: it pickles with its options, which neither its `repr` nor its
`digest` shows, and which its pickled bytes hold masked, not in clear, where
they are text, numbers and mappings (as JSON: nothing is unpickled of them).

`is_url` is the one test of a key's scheme; code with a storage at hand asks
`storage.is_remote(key)`.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import types
from collections.abc import Hashable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from . import _config
from ._config import Configuration
from ._errors import no_such_file
from ._fs import open_readonly
from ._remote import RemoteFile, local_copy, read_many

__all__ = ["ByteSource", "LocalFile", "Storage", "has_scheme", "is_url", "local_path"]


_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")


def has_scheme(key: str) -> bool:
    """Whether `key` begins with a scheme (`s3://`, `file://`, ...): a URL of any kind."""
    return _SCHEME.match(key) is not None


def is_url(key: str) -> bool:
    """Whether `key` is a URL fsspec reads (`s3://`, `https://`, ...), not a local path (nor `file://`)."""
    match = _SCHEME.match(key)
    return match is not None and match.group(1).lower() not in ("file", "local")


class ByteSource(Protocol):
    """The bytes of one file, local or at a URL: what a format reads. The reader that is given one owns it.

    Attributes:
        key: The file's path or URL.
        size: Its size in bytes, asked once, when it was opened.
    """

    key: str
    size: int

    def pread(self, size: int, offset: int) -> bytes:
        """Up to `size` bytes at `offset`: fewer only where the file ends first."""

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[memoryview]:
        """The bytes of each (start, end) of `ranges`, read at once."""

    def stamp(self) -> Hashable | None:
        """What tells whether the file changed since it was opened; None where nothing does."""

    def fileno(self) -> int | None:
        """The descriptor of a local file; None for a file at a URL."""

    def open_blocks(self) -> io.BufferedReader:
        """A file object over the file, for parsers that take one; closing it leaves the source open."""

    def close(self) -> None:
        """Let the file go."""

    def __enter__(self) -> ByteSource: ...

    def __exit__(self, *exc: Any) -> None: ...


class LocalFile:
    """A local regular file, opened by `vitrio._fs.open_readonly` (never blocking on a FIFO).

    Raises:
        ImageFileNotFoundError: If there is no file at `key`.
        IsADirectoryError: If `key` is a directory.
        OSError: If it is not a regular file (a FIFO, a device, a socket).
    """

    def __init__(self, key: str):
        try:
            self._fd = open_readonly(key)
        except FileNotFoundError as error:
            raise no_such_file(key, error.errno) from None
        except IsADirectoryError:
            raise IsADirectoryError(f"{key}: is a directory, not an image file") from None
        self.key = key
        self.size = os.fstat(self._fd).st_size

    def __repr__(self) -> str:
        return f"<LocalFile {self.key!r} {self.size} bytes>"

    def pread(self, size: int, offset: int) -> bytes:
        return os.pread(self._descriptor(), size, offset)

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[memoryview]:
        return [memoryview(self.pread(end - start, start)) for start, end in ranges]

    def stamp(self) -> Hashable | None:
        """The device, inode, size and times of modification and change of the open file."""
        info = os.fstat(self._descriptor())
        return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)

    def fileno(self) -> int | None:
        return self._descriptor()

    def open_blocks(self) -> io.BufferedReader:
        return open(self._descriptor(), "rb", closefd=False)

    def _descriptor(self) -> int:
        if self._fd < 0:
            raise ValueError(f"{self.key}: read after it was closed")
        return self._fd

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def __enter__(self) -> LocalFile:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Storage:
    """Where the bytes of keys come from: local files, or files at URLs reached with fsspec's `options`.

    Args:
        options: fsspec's storage options for keys that are URLs (credentials, `anon`, `endpoint_url`).
        configuration: The limits of reads at URLs; the configuration in force (`vitrio.configuration()`)
            when the storage is made, by default.

    Raises:
        TypeError: If `options` is not a mapping, or `configuration` not a `Configuration`.
    """

    def __init__(self, options: Mapping[str, Any] | None = None, configuration: Configuration | None = None):
        if options is not None and not isinstance(options, Mapping):
            raise TypeError(
                f'storage_options is a mapping such as {{"anon": True}}, not a {type(options).__name__}'
            )
        if configuration is not None and not isinstance(configuration, Configuration):
            raise TypeError(f"configuration is a vitrio Configuration, not a {type(configuration).__name__}")
        self._options = types.MappingProxyType(dict(options or {}))
        self._configuration = configuration if configuration is not None else _config.configuration()

    @classmethod
    def of(cls, given: Storage | Mapping[str, Any] | None) -> Storage:
        """`given` if it is a `Storage`; else a `Storage` of the storage options `given` (a mapping or None).

        Raises:
            TypeError: If `given` is neither.
        """
        return given if isinstance(given, Storage) else cls(given)

    @property
    def options(self) -> Mapping[str, Any]:
        """fsspec's storage options, read only (for stores that fsspec reaches, such as OME-Zarr's)."""
        return self._options

    @property
    def configuration(self) -> Configuration:
        """The limits of reads at URLs."""
        return self._configuration

    def is_remote(self, key: str) -> bool:
        """Whether `key` is a URL, read through fsspec, rather than a local path."""
        return is_url(key)

    def open(self, key: str) -> ByteSource:
        """The bytes of the file at `key`: a `LocalFile`, or a `RemoteFile` at a URL.

        Raises:
            ImageFileNotFoundError: If there is nothing at `key`.
            ImportError: If `key`'s scheme needs a module not installed, naming the extra that brings it.
            OSError: If it cannot be read (at a URL, naming it and the cause, after the attempts allowed).
        """
        if self.is_remote(key):
            return RemoteFile(key, self._options, self._configuration)
        return LocalFile(key)

    def read_many(
        self, requests: Sequence[tuple[ByteSource, Sequence[tuple[int, int]]]]
    ) -> list[list[memoryview]]:
        """The bytes of the (start, end) ranges of each (source, ranges) of `requests`: those of files at
        URLs fetched all at once (`vitrio._remote.read_many`), the others read in turn."""
        remote = [n for n, (source, _) in enumerate(requests) if isinstance(source, RemoteFile)]
        fetched = dict(zip(remote, read_many([requests[n] for n in remote]))) if remote else {}
        return [
            fetched[n] if n in fetched else source.read_ranges(r) for n, (source, r) in enumerate(requests)
        ]

    @contextlib.contextmanager
    def local_copy(self, key: str, limit: int) -> Iterator[str]:
        """A local path of the file at `key` while the block runs: `key` itself, or a private copy of a
        file at a URL (`vitrio._remote.local_copy`).

        Raises:
            ValueError: If a file at a URL holds more than `limit` bytes (none are fetched).
        """
        if not self.is_remote(key):
            yield key
            return
        with local_copy(key, self._options, limit, self._configuration) as local:
            yield local

    def digest(self) -> str:
        """A digest of the options, which stand for them where a reader's settings are described (the
        configuration's limits change how bytes are fetched, not which)."""
        text = json.dumps(dict(self._options), sort_keys=True, default=repr)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def __repr__(self) -> str:
        return f"<Storage options {self.digest()}>" if self._options else "<Storage>"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Storage):
            return NotImplemented
        return self.digest() == other.digest() and self._configuration == other._configuration

    def __hash__(self) -> int:
        return hash((self.digest(), self._configuration))

    def __getstate__(self) -> dict[str, Any]:
        try:  # options of text, numbers and mappings travel masked; objects as the pickle holds them
            packed = json.dumps(dict(self._options)).encode()
        except (TypeError, ValueError):
            return {"options": dict(self._options), "configuration": self._configuration}
        mask = os.urandom(len(packed))
        return {"masked": (mask, _xor(packed, mask)), "configuration": self._configuration}

    def __setstate__(self, state: dict[str, Any]) -> None:
        if "masked" in state:
            mask, masked = state["masked"]
            options = json.loads(_xor(masked, mask))
        else:
            options = state["options"]
        self._options = types.MappingProxyType(options)
        self._configuration = state["configuration"]


def local_path(key: str) -> str:
    """The path a key that is not a URL names: a `file://` URL's path, else the key itself."""
    scheme, mark, path = key.partition("://")
    return path if mark and scheme.lower() == "file" else key


def _xor(data: bytes, mask: bytes) -> bytes:
    return (int.from_bytes(data, "little") ^ int.from_bytes(mask, "little")).to_bytes(len(data), "little")
