"""Zarr stores as the OME-Zarr reader sees them: the bytes of their metadata and chunks, by path.

A local store is a directory; its files are read with plain reads, each
opened from the store's root down without following a link (a link, a
FIFO or a device in a store is refused, never read through). A
remote store is a URL fsspec opens (`s3://`, `gs://`, `https://`...), with
the `storage_options` fsspec takes (credentials, `anon=True`, an
`endpoint_url`...); its chunks are fetched with one GET each, many at once
on fsspec's event loop. Every fetch is bounded: a chunk's object larger
than its limit is refused. Over HTTP the bodies are asked and read
uncompressed, as a stream cut at the limit, and checked against the
length their headers announce (`_http`); each request is bounded in time,
and headers given are never sent where a redirect leads to another host
(`vitrio._remote.client_options`, which bounds an S3 store's connecting too). Errors name a store at a URL as
`vitrio._errors.redact` gives it, without the secrets it may hold.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from ..._config import Configuration
from ..._errors import ImageFileNotFoundError, redact
from ..._fs import open_beneath
from ..._remote import client_options, is_http, missing_backend, transient
from ._http import fetch_bounded

__all__ = ["Store", "LocalStore", "RemoteStore", "open_store"]

ChunkBytes = bytes | None | BaseException
"""A chunk fetched: its bytes, None where there is none (it holds the fill value), or what failed."""


class Store:
    """Where a Zarr hierarchy lies.

    Attributes:
        name: The path or URL, as errors name the store.
        token: What tells this store from others in a shared cache.
    """

    name: str
    token: Hashable

    def get_many(self, paths: Sequence[str], limit: int) -> list[ChunkBytes]:
        """The objects at `paths` (relative to the store), each refused past `limit` bytes."""
        raise NotImplementedError

    def stamp(self, path: str) -> Hashable:
        """What changes when the object at `path` is rewritten (None for stores taken as unchanging)."""
        return None


class LocalStore(Store):
    """A store in a local directory, read through no link: its files are opened from its root down,
    each folder and file without following a link, and only regular files are read."""

    def __init__(self, root: str):
        self.name = root
        self.root = os.path.abspath(root)
        self.token = ("file", self.root)
        if not os.path.exists(self.root):
            raise ImageFileNotFoundError(errno.ENOENT, f"{root}: no such Zarr store")
        if not os.path.isdir(self.root):
            raise NotADirectoryError(f"{root}: not a Zarr store: a file, not a directory")

    def get_many(self, paths: Sequence[str], limit: int) -> list[ChunkBytes]:
        return [self._get(path, limit) for path in paths]

    def _get(self, path: str, limit: int) -> ChunkBytes:
        try:
            fd = open_beneath(self.root, path)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as error:
            return error
        try:
            size = os.fstat(fd).st_size
            if size > limit:
                return ValueError(f"{size} bytes stored, more than the {limit} it may take")
            data = os.read(fd, size)
            while len(data) < size:  # a large read may come in parts
                part = os.read(fd, size - len(data))
                if not part:
                    break
                data += part
            return data
        except OSError as error:
            return error
        finally:
            os.close(fd)

    def stamp(self, path: str) -> Hashable:
        try:  # a change is all this tells: what is read is opened through no link
            status = os.lstat(os.path.join(self.root, path))
        except FileNotFoundError:
            return None
        return (status.st_ino, status.st_mtime_ns, status.st_size)


class RemoteStore(Store):
    """A store at a URL fsspec opens, with its `storage_options`, bounded in time by `configuration`."""

    def __init__(self, url: str, storage_options: Mapping[str, Any], configuration: Configuration):
        try:
            import fsspec
        except ImportError:
            raise missing_backend(url) from None
        self.name = redact(url)
        self.http = is_http(url)
        self.options = client_options(url, storage_options, configuration)
        try:
            self.fs, self.root = fsspec.core.url_to_fs(url, **self.options)
        except ImportError:
            raise missing_backend(url) from None
        self.token = (url, repr(sorted(self.options.items())))
        self.configuration = configuration

    def get_many(self, paths: Sequence[str], limit: int) -> list[ChunkBytes]:
        """The chunks at `paths`, fetched at once; those whose fetch failed as a timeout or a lost
        connection does (`transient`) asked again, up to `remote_attempts` tries with `remote_backoff`
        doubling, as a `RemoteFile`'s ranges are."""
        got = self._fetch(paths, limit)
        for attempt in range(1, self.configuration.remote_attempts):
            again = [n for n, value in enumerate(got) if transient(value)]
            if not again:
                break
            time.sleep(self.configuration.remote_backoff * 2 ** (attempt - 1))
            for n, value in zip(again, self._fetch([paths[n] for n in again], limit)):
                got[n] = value
        return got

    def _fetch(self, paths: Sequence[str], limit: int) -> list[ChunkBytes]:
        full = [f"{self.root}/{path}" for path in paths]
        if self.http:
            return fetch_bounded(self.fs, full, limit)
        if len(full) == 1:  # `cat` of one path raises rather than returns
            try:
                got = {full[0]: self.fs.cat_file(full[0], start=0, end=limit + 1)}
            except Exception as error:  # noqa: BLE001 - handed back, named by the caller
                got = {full[0]: error}
        else:
            got = self.fs.cat(full, on_error="return", start=0, end=limit + 1)
        return [_checked(path, got.get(path, got.get(self.fs._strip_protocol(path))), limit) for path in full]


def _checked(path: str, value: Any, limit: int) -> ChunkBytes:
    """What fsspec fetched at `path` as `get_many` hands it back: None if not found, refused past `limit`."""
    if isinstance(value, FileNotFoundError):
        return None
    if value is None:
        return OSError(f"{redact(path)}: no answer fetching it")
    if isinstance(value, bytes) and len(value) > limit:
        return ValueError(f"more than the {limit} bytes a chunk may take (sent by {redact(path)})")
    return value


def open_store(
    store: str, remote: bool, storage_options: Mapping[str, Any], configuration: Configuration
) -> Store:
    """The store at a path or URL.

    Raises:
        FileNotFoundError: If there is no local store at `store`.
        NotADirectoryError: If the local path is a file.
    """
    return RemoteStore(store, storage_options, configuration) if remote else LocalStore(store)
