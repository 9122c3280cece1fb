"""How files at URLs are reached: fsspec's options as vitrio sets them, and ranges asked over HTTP.

`client_options` bounds a request's connecting and each wait for its answer
(`remote_connect_timeout`, `remote_timeout`), over HTTP through aiohttp's
time limits and over S3 through botocore's, whose own retries it turns off
so that vitrio's attempts are the only ones. Over HTTP every body is asked
uncompressed and read as a stream, no further than the range asked
(`http_range`): a server that ignores `Range` or sends more is refused,
never read whole; and where the options give headers, credentials or
cookies, a redirect to another scheme, host or port is refused, so that
they go nowhere else.
"""

from __future__ import annotations

import errno
import functools
import re
from collections.abc import Mapping
from typing import Any

from .._config import Configuration

__all__ = [
    "Redirected",
    "ServerError",
    "ShortBody",
    "checked_length",
    "client_options",
    "http_options",
    "http_range",
    "is_http",
    "is_s3",
]


class ShortBody(OSError):
    """A body of another length than asked: asked again, as a dropped connection is."""


class ServerError(OSError):
    """A 5xx answer: asked again."""


class Redirected(PermissionError):
    """A redirect to another scheme, host or port where headers or credentials were given: refused."""


_IDENTITY = {"Accept-Encoding": "identity"}


def is_http(url: str) -> bool:
    """Whether the URL `url` is read over HTTP (`http://`, `https://`), by fsspec's HTTP filesystem."""
    return url.lower().startswith(("http://", "https://"))


def is_s3(url: str) -> bool:
    return url.lower().startswith(("s3://", "s3a://"))


def client_options(url: str, options: Mapping[str, Any], configuration: Configuration) -> dict[str, Any]:
    """fsspec's `options` for `url` as vitrio reaches it, bounded by `configuration`: over HTTP as
    `http_options` makes them; over S3, botocore's pool of connections, its time limits to connect and
    to read, and one attempt (vitrio's attempts are the only ones), unless `options`' `config_kwargs` say."""
    if is_http(url):
        return http_options(options, configuration.remote_timeout, configuration.remote_connect_timeout)
    if not is_s3(url):
        return dict(options)
    config = dict(
        options.get("config_kwargs", {})
    )  # botocore keeps 10 connections, waits a minute, asks again
    config.setdefault("max_pool_connections", configuration.remote_connections)
    config.setdefault("connect_timeout", configuration.remote_connect_timeout)
    config.setdefault("read_timeout", configuration.remote_timeout)
    config.setdefault("retries", {"total_max_attempts": 1})
    return {**options, "config_kwargs": config}


def http_options(options: Mapping[str, Any], timeout: float, connect_timeout: float) -> dict[str, Any]:
    """The `storage_options` of fsspec's HTTP filesystem as vitrio uses them: bodies asked and kept
    uncompressed; a request's connecting bounded by `connect_timeout` seconds, and each wait for its
    answer by `timeout` (unless `client_kwargs` give a `timeout`); and where they give headers,
    credentials or cookies, a redirect to another scheme, host or port refused (the client drops only
    `Authorization` and `Cookie`)."""
    import aiohttp

    client = dict(options.get("client_kwargs", {}), auto_decompress=False)
    client.setdefault(
        "timeout", aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout, sock_read=timeout)
    )
    given = ("headers", "auth", "cookies")
    if any(options.get(k) for k in given) or any(client.get(k) for k in given):
        client["trace_configs"] = [*client.get("trace_configs", []), _same_origin_redirects()]
    return {**options, "client_kwargs": client, "headers": {**options.get("headers", {}), **_IDENTITY}}


@functools.cache
def _same_origin_redirects() -> Any:
    """An aiohttp `TraceConfig` that refuses a redirect to another origin (one, so that fsspec's cache of
    filesystems, keyed by their options, keeps one of each)."""
    import aiohttp

    async def refuse_other_origins(session: Any, context: Any, params: Any) -> None:
        headers = params.response.headers
        location = headers.get("Location") or headers.get("URI")
        try:
            target = params.url.join(type(params.url)(location))  # yarl's URL, which aiohttp uses
            other = target.origin() != params.url.origin()
        except (TypeError, ValueError):  # no or no valid location: the client refuses it itself
            return
        if other:
            raise Redirected(
                errno.EACCES,
                f"redirected to {target.origin()}, another scheme, host or port than the one the headers "
                "of storage_options are for; refused",
            )

    config = aiohttp.TraceConfig()
    config.on_request_redirect.append(refuse_other_origins)
    return config


def checked_length(body: bytes, url: str, start: int, end: int) -> bytes:
    if len(body) != end - start:
        raise ShortBody(errno.EIO, f"{len(body)} bytes received where {end - start} were asked")
    return body


_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")


async def http_range(fs: Any, session: Any, url: str, start: int, end: int) -> bytes:
    """Bytes `start..end` of `url`, asked uncompressed, read no further than asked."""
    options = dict(fs.kwargs)
    headers = {**options.pop("headers", {}), **_IDENTITY, "Range": f"bytes={start}-{end - 1}"}
    async with session.get(fs.encode_url(url), headers=headers, auto_decompress=False, **options) as answer:
        if answer.status == 404:
            raise FileNotFoundError(errno.ENOENT, "not found")
        if answer.status >= 500:
            raise ServerError(errno.EIO, f"HTTP {answer.status} {answer.reason}")
        if answer.status not in (200, 206):
            raise OSError(errno.EIO, f"HTTP {answer.status} {answer.reason}")
        encoding = answer.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding != "identity":
            raise OSError(errno.EIO, f"sent as {encoding!r} where identity was asked; refused unread")
        if answer.status == 200:
            if start != 0 or answer.content_length not in (None, end - start):
                raise OSError(errno.EIO, "the server ignored the range asked; refused unread")
        else:
            match = _CONTENT_RANGE.match(answer.headers.get("Content-Range", ""))
            if match is None or (int(match.group(1)), int(match.group(2))) != (start, end - 1):
                raise OSError(errno.EIO, f"sent {answer.headers.get('Content-Range')!r}, not the range asked")
        body = bytearray()
        while len(body) <= end - start:
            piece = await answer.content.read(end - start + 1 - len(body))
            if not piece:
                break
            body += piece
    return checked_length(bytes(body), url, start, end)
