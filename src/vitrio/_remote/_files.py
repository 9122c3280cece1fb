"""Files at URLs read by byte ranges: `RemoteFile`, `read_many`, `local_copy`, and the retries.

A `RemoteFile` asks its size and version (ETag, else modification time) once,
when opened. `read_ranges` reads many byte ranges at once: sorted, merged
where the gap between two is under `remote_gap` bytes (and a merged span
under `remote_part`; a longer range is cut into parts), and fetched
concurrently, at most `remote_in_flight` requests at a time, through
fsspec's async API; `read_many` fetches the ranges of many files so, at once.
One request that times out, cannot connect, loses its connection, is
answered 5xx (S3's "slow down" too) or with a body of the wrong length is
asked again, after a pause that doubles, up to `remote_attempts` times in
all; then the read fails with one `OSError` naming the URL and the range
(the open, the URL) and the cause, chained to nothing ("cannot connect to
URL: ..." where no connection could be made). A server whose TLS
certificate is not trusted fails at once: nothing is read unverified.
The limits are those of the `Configuration` a file is given.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import errno
import io
import os
import posixpath
import tempfile
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from .. import _config
from .._config import Configuration
from .._counters import add_count
from .._errors import no_such_file, redact
from ._http import (
    Redirected,
    ServerError,
    ShortBody,
    checked_length,
    client_options,
    http_range,
    is_http,
    is_s3,
)

__all__ = ["RemoteFile", "local_copy", "merge_ranges", "missing_backend", "read_many"]


def merge_ranges(ranges: Sequence[tuple[int, int]], gap: int, part: int) -> list[tuple[int, int]]:
    """The spans (start, end) fetched for `ranges` (start, end): sorted and apart, each byte of a range in
    one. Ranges are taken in order of their start, each added to the span before it where the gap between
    them is under `gap` bytes and the span stays within `part` bytes; else its bytes past that span start
    one of their own. A span over `part` bytes is cut into parts."""
    spans: list[list[int]] = []
    for start, end in sorted(r for r in ranges if r[1] > r[0]):
        if spans and end <= spans[-1][1]:
            continue
        if spans and start - spans[-1][1] < gap and end - spans[-1][0] <= part:
            spans[-1][1] = end
        else:
            spans.append([max(start, spans[-1][1]) if spans else start, end])
    return [(a, min(a + part, end)) for start, end in spans for a in range(start, end, part)]


class RemoteFile:
    """A file at a URL, read by byte ranges; safe to use from many threads.

    Args:
        url: Its URL.
        storage_options: What fsspec takes to reach it (credentials, `anon=True`, `endpoint_url`).
        configuration: The limits of its reads (`remote_*`); the configuration in force by default.

    Attributes:
        url, key, size: The URL (twice: a `ByteSource`'s key) and the size in bytes.
        version: The ETag, else the modification time, when opened; None where the server gives neither.
        limits: The configuration whose `remote_*` fields bound its reads: how ranges are merged and
            fetched (see the module), and the seconds a request may take to connect
            (`remote_connect_timeout`) and wait for each piece of its answer (`remote_timeout`) before
            it fails and is asked again; over HTTP unless `storage_options` give
            `client_kwargs={"timeout": ...}`, over S3 unless their `config_kwargs` give
            `connect_timeout` and `read_timeout`. An `s3://` filesystem keeps `remote_connections`
            connections open at most, unless `storage_options` say
            (`config_kwargs={"max_pool_connections": n}`).

    Raises:
        ImageFileNotFoundError: If there is nothing at `url`.
        ImportError: If the scheme needs a module not installed, naming the extra that brings it.
        OSError: If the server does not say the size, or cannot be reached after `remote_attempts` tries.
    """

    def __init__(
        self,
        url: str,
        storage_options: Mapping[str, Any] | None = None,
        configuration: Configuration | None = None,
    ):
        try:
            import fsspec
        except ImportError:
            raise missing_backend(url) from None

        self.url = self.key = url
        self.limits = limits = configuration if configuration is not None else _config.configuration()
        self.http = is_http(url)
        try:
            self.fs, self.path = fsspec.core.url_to_fs(
                url, **client_options(url, storage_options or {}, limits)
            )
        except ImportError:
            raise missing_backend(url) from None
        if is_s3(url):
            self.fs.retries = 1  # s3fs asks again 5 times unless told; `remote_attempts` count them here
        try:
            info = self._retried(self._info, "")
        except FileNotFoundError:
            missing = no_such_file(redact(url), errno.ENOENT)
            missing.key = url
            raise missing from None
        if info.get("type") == "directory" or info.get("size") is None:
            raise OSError(errno.EIO, f"{redact(url)}: the server does not say its size (not a file?)")
        self.size = int(info["size"])
        self.version = next(
            (str(info[k]) for k in ("ETag", "etag", "LastModified", "Last-Modified", "mtime") if info.get(k)),
            None,
        )

    def __repr__(self) -> str:
        return f"<RemoteFile {redact(self.url)!r} {self.size} bytes>"

    def _info(self) -> dict[str, Any]:
        try:
            return self.fs.info(self.path)
        except FileNotFoundError as error:
            cause = error.__cause__  # fsspec's HTTP says "not found" of any failure: the failure, if one
            if self.http and (transient(cause) or _unreached(cause) or isinstance(cause, Redirected)):
                raise cause from None
            raise

    def _retried(self, call: Any, where: str) -> Any:
        """What `call()` gives, asked again while it fails as `transient` says, up to `remote_attempts`
        times; then what failed, as `_named` names it with the URL and `where`."""
        for attempt in range(1, self.limits.remote_attempts + 1):
            try:
                return call()
            except Exception as error:
                if not transient(error) or attempt == self.limits.remote_attempts:
                    raise _named(error, self.url, where, attempt) from None
                time.sleep(self.limits.remote_backoff * 2 ** (attempt - 1))
        raise AssertionError("unreachable")  # pragma: no cover

    def pread(self, size: int, offset: int) -> bytes:
        """Up to `size` bytes from `offset`: fewer only where the file ends first, as `os.pread` reads."""
        end = min(self.size, offset + size)
        return bytes(self.read_ranges([(offset, end)])[0]) if end > offset else b""

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[memoryview]:
        """The bytes of each (start, end) of `ranges`, fetched as `merge_ranges` plans them.

        Raises:
            OSError: If a range lies past the end of the file, or a span could not be fetched as asked
                after `remote_attempts` tries, naming the URL and the range.
        """
        return read_many([(self, ranges)])[0]

    def _spans(self, ranges: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
        """The merged spans that hold `ranges`, counted as requests; an `OSError` for a range past the end."""
        for start, end in ranges:
            if start < 0 or end > self.size or end < start:
                raise OSError(
                    errno.EIO, f"{redact(self.url)}: bytes {start}-{end} asked of a file of {self.size}"
                )
        spans = merge_ranges(ranges, self.limits.remote_gap, self.limits.remote_part)
        add_count("remote_requests", len(spans))
        return spans

    def _fetch_one_blocking(self, start: int, end: int) -> bytes:
        def get() -> bytes:
            return checked_length(self.fs.cat_file(self.path, start=start, end=end), self.url, start, end)

        return self._retried(get, _bytes(start, end))

    async def _fetch_one(self, session: Any, start: int, end: int) -> bytes:
        for attempt in range(1, self.limits.remote_attempts + 1):
            try:
                if session is not None:
                    return await http_range(self.fs, session, self.url, start, end)
                body = await self.fs._cat_file(self.path, start=start, end=end)
                return checked_length(body, self.url, start, end)
            except Exception as error:
                if not transient(error) or attempt == self.limits.remote_attempts:
                    raise _named(error, self.url, _bytes(start, end), attempt) from None
                await asyncio.sleep(self.limits.remote_backoff * 2 ** (attempt - 1))
        raise AssertionError("unreachable")  # pragma: no cover

    def open_blocks(self, block: int = 1 << 16) -> io.BufferedReader:
        """A file object over the file, read `block` bytes at a time, the last 16 blocks kept."""
        return io.BufferedReader(_Blocks(self, block), buffer_size=block)

    def stamp(self) -> str | None:
        """The version asked when the file was opened."""
        return self.version

    def fileno(self) -> None:
        """None: a file at a URL has no descriptor."""
        return None

    def close(self) -> None:
        """Nothing to let go: the filesystem is fsspec's, shared."""

    def __enter__(self) -> RemoteFile:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def read_many(requests: Sequence[tuple[RemoteFile, Sequence[tuple[int, int]]]]) -> list[list[memoryview]]:
    """What `RemoteFile.read_ranges` gives for each (file, ranges) of `requests`: the spans of all the
    files fetched at once, as one file's are: at most `remote_in_flight` requests at a time (the most
    of their limits).

    Raises:
        OSError: As `RemoteFile.read_ranges` raises it, naming the URL and the range (its `key`, the URL).
    """
    ranges = [list(r) for _, r in requests]
    planned = [(file, file._spans(r)) for (file, _), r in zip(requests, ranges)]
    bodies: list[list[bytes]] = [[] for _ in planned]
    together: dict[Any, list[int]] = {}
    for n, (file, spans) in enumerate(planned):
        if getattr(file.fs, "async_impl", False):
            together.setdefault(file.fs.loop, []).append(n)
        else:
            bodies[n] = [file._fetch_one_blocking(a, b) for a, b in spans]
    if together:
        from fsspec.asyn import sync

        for loop, numbers in together.items():
            fetched = sync(loop, _fetch_all, [planned[n] for n in numbers])
            for n, got in zip(numbers, fetched):
                bodies[n] = got
    return [_cut(r, spans, got) for r, (_, spans), got in zip(ranges, planned, bodies)]


async def _fetch_all(planned: list[tuple[RemoteFile, list[tuple[int, int]]]]) -> list[list[bytes]]:
    limit = asyncio.Semaphore(max(file.limits.remote_in_flight for file, _ in planned))
    sessions = {}
    for file, _ in planned:
        if file.http and id(file.fs) not in sessions:
            sessions[id(file.fs)] = await file.fs.set_session()

    async def one(file: RemoteFile, start: int, end: int) -> bytes:
        async with limit:
            return await file._fetch_one(sessions.get(id(file.fs)), start, end)

    flat = iter(await asyncio.gather(*(one(f, a, b) for f, spans in planned for a, b in spans)))
    return [[next(flat) for _ in spans] for _, spans in planned]


def _cut(
    ranges: list[tuple[int, int]], spans: list[tuple[int, int]], bodies: list[bytes]
) -> list[memoryview]:
    """The bytes of each of `ranges` out of the `bodies` fetched of `spans` (sorted and apart, as
    `merge_ranges` plans them): a view of one body, or the pieces of the spans it crosses joined."""
    starts = [a for a, _ in spans]
    views = []
    for start, end in ranges:
        i = bisect.bisect_right(starts, start) - 1
        pieces = []
        at = start
        while at < end:  # the spans that hold a range follow one another without a hole
            first, last = spans[i]
            pieces.append(memoryview(bodies[i])[at - first : min(end, last) - first])
            at, i = min(end, last), i + 1
        views.append(pieces[0] if len(pieces) == 1 else memoryview(b"".join(pieces)))
    return views


def transient(error: BaseException | None) -> bool:
    """Whether a failed request is worth asking again: a timeout, a lost connection, a 5xx (S3's too, which
    s3fs gives as `EBUSY`), a short body."""
    if isinstance(error, (ShortBody, ServerError, TimeoutError, asyncio.TimeoutError, ConnectionError)):
        return True
    if isinstance(error, OSError) and error.errno == errno.EBUSY:
        return True
    if isinstance(error, (FileNotFoundError, PermissionError, ValueError, TypeError)):
        return False
    try:
        import aiohttp
    except ImportError:  # pragma: no cover - fsspec's HTTP and s3fs need it
        return False
    if isinstance(error, aiohttp.ClientResponseError):
        return error.status >= 500
    if isinstance(error, aiohttp.ClientSSLError):  # a certificate refused stays refused
        return False
    if isinstance(error, (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError)):
        return True
    name = type(error).__name__  # botocore's, without importing it
    return name in (
        "ReadTimeoutError",
        "ConnectTimeoutError",
        "EndpointConnectionError",
        "ConnectionClosedError",
    )


def _unreached(error: BaseException | None) -> bool:
    """Whether `error` is a connection that failed: refused, dropped, timed out, its certificate refused."""
    import aiohttp

    return isinstance(error, (aiohttp.ClientConnectionError, TimeoutError))


def _unconnected(error: BaseException) -> bool:
    """Whether `error` is a connection that could not be made: refused, unresolved, timed out."""
    import aiohttp

    if isinstance(
        error, (ConnectionRefusedError, aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)
    ):
        return True
    return type(error).__name__ in ("ConnectTimeoutError", "EndpointConnectionError")  # botocore's


def _bytes(start: int, end: int) -> str:
    return f" (bytes {start}-{end - 1})"


def _named(error: BaseException, url: str, where: str, attempts: int) -> OSError:
    """What failed at `url` (the range `where`), after `attempts` tries, as an `OSError` naming them."""
    if isinstance(error, FileNotFoundError):
        named: OSError = FileNotFoundError(errno.ENOENT, f"{redact(url)}{where}: not found")
    else:
        tried = f" after {attempts} attempts" if attempts > 1 else ""
        what = redact(f"{type(error).__name__}: {error}")
        failed = "cannot connect to " if _unconnected(error) else ""
        named = OSError(errno.EIO, f"{failed}{redact(url)}{where}: {what}{tried}")
    named.key = url  # type: ignore[attr-defined] - the file it concerns, as `concerning` gives it
    return named


def missing_backend(url: str) -> ImportError:
    """The error of a URL whose scheme needs a module not installed (fsspec, s3fs, aiohttp, gcsfs): the
    extra that brings it, and gcsfs, which no extra brings, for Google Cloud Storage."""
    scheme = url.partition("://")[0].lower()
    also = " gcsfs" if scheme in ("gs", "gcs") else ""
    return ImportError(
        f"{redact(url)}: install vitrio[remote] to read {scheme}:// keys (pip install 'vitrio[remote]'{also})"
    )


class _Blocks(io.RawIOBase):
    """The raw file under `RemoteFile.open_blocks`: blocks read once, the last `kept` of them kept."""

    def __init__(self, file: RemoteFile, block: int, kept: int = 16):
        self._file, self._block, self._kept, self._pos = file, block, kept, 0
        self._blocks: OrderedDict[int, bytes] = OrderedDict()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = (0, self._pos, self._file.size)[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: Any) -> int:
        size = self._file.size
        end = min(size, self._pos + len(buffer))
        if end <= self._pos:
            return 0
        numbers = range(self._pos // self._block, (end - 1) // self._block + 1)
        have = {b: self._blocks[b] for b in numbers if b in self._blocks}
        wanted = [b for b in numbers if b not in have]
        spans = [(b * self._block, min(size, (b + 1) * self._block)) for b in wanted]
        have.update(zip(wanted, (bytes(body) for body in self._file.read_ranges(spans))))
        for b in numbers:
            self._blocks[b] = have[b]
            self._blocks.move_to_end(b)
        while len(self._blocks) > self._kept:
            self._blocks.popitem(last=False)
        data = b"".join(have[b] for b in numbers)
        skip, count = self._pos - numbers[0] * self._block, end - self._pos
        memoryview(buffer)[:count] = data[skip : skip + count]
        self._pos = end
        return count


@contextlib.contextmanager
def local_copy(
    url: str,
    storage_options: Mapping[str, Any] | None,
    limit: int,
    configuration: Configuration | None = None,
) -> Iterator[str]:
    """The path of a copy of the file at `url`, under its name in a private temporary folder, while the
    block runs; a `ValueError` of the block names `url`, not the copy.

    Raises:
        ValueError: If the file holds more than `limit` bytes (none are fetched).
    """
    file = RemoteFile(url, storage_options, configuration)
    if file.size > limit:
        raise ValueError(f"{redact(url)}: {file.size} bytes, more than the {limit} a table may have")
    with tempfile.TemporaryDirectory(prefix="vitrio-table-") as folder:  # mode 0700
        local = os.path.join(folder, posixpath.basename(url.split("?")[0]) or "table")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        with open(os.open(local, flags, 0o600), "wb") as out:
            for start in range(0, file.size, file.limits.remote_part):
                out.write(file.read_ranges([(start, min(file.size, start + file.limits.remote_part))])[0])
        try:
            yield local
        except ValueError as error:
            raise ValueError(str(error).replace(local, redact(url))) from None
