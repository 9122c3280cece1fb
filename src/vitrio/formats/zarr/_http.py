"""Chunks of a store served over HTTP: bodies asked and taken as sent, bounded, and checked for length.

fsspec's HTTP client asks for compressed bodies and inflates them, and reads
a body whole whatever its `Range` asked for: a server that ignores `Range`
and answers in gzip makes a megabyte a gigabyte. Here every request asks for
`Accept-Encoding: identity` and the first `limit + 1` bytes; an answer in any
other encoding is refused before its body is read, a body is read as a
stream and refused past `limit` bytes, and one shorter or longer than its
headers announce is an error naming the URL and the range, never data.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from typing import Any

from ..._errors import redact
from ..._remote import ServerError, transient

__all__ = ["fetch_bounded"]

_IDENTITY = {"Accept-Encoding": "identity"}
_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")


def fetch_bounded(fs: Any, urls: Sequence[str], limit: int) -> list[bytes | None | BaseException]:
    """The objects at `urls` of fsspec's HTTP filesystem `fs`, at once; None for one not found.

    Each is its bytes, None, or what failed: a `ValueError` for one larger
    than `limit` bytes, an `OSError` naming the URL and the range for an
    answer that is not the object as asked.
    """
    import fsspec.asyn

    async def fetch_all() -> list[bytes | None | BaseException]:
        session = await fs.set_session()
        return await asyncio.gather(*(_fetch(fs, session, url, limit) for url in urls))

    return fsspec.asyn.sync(fs.loop, fetch_all)


async def _fetch(fs: Any, session: Any, url: str, limit: int) -> bytes | None | BaseException:
    span = f"{redact(url)} (bytes 0-{limit})"
    options = dict(fs.kwargs)
    headers = {**options.pop("headers", {}), **_IDENTITY, "Range": f"bytes=0-{limit}"}
    try:
        asked = session.get(fs.encode_url(url), headers=headers, auto_decompress=False, **options)
        async with asked as answer:
            if answer.status == 404:
                return None
            if answer.status not in (200, 206):
                kind = ServerError if answer.status >= 500 else OSError  # a 5xx is asked again
                return kind(f"{span}: HTTP {answer.status} {answer.reason}")
            encoding = answer.headers.get("Content-Encoding", "identity").strip().lower()
            if encoding != "identity":
                return OSError(f"{span}: sent as {encoding!r} where identity was asked; refused unread")
            announced = _announced(answer, limit, span)
            if isinstance(announced, BaseException):
                return announced
            body = await _read_at_most(answer.content, limit + 1)
    except Exception as error:  # noqa: BLE001 - handed back, named by the caller
        # a failure worth asking again stays one (a ConnectionError) once named, and keeps no cause that
        # could show the URL unredacted
        kind = ConnectionError if transient(error) else OSError
        return kind(f"{span}: {redact(f'{type(error).__name__}: {error}')}")
    if len(body) > limit:
        return ValueError(f"more than the {limit} bytes a chunk may take (sent by {redact(url)})")
    if announced is not None and len(body) != announced:
        return OSError(f"{span}: {len(body)} bytes received where {announced} were announced")
    return body


def _announced(answer: Any, limit: int, span: str) -> int | None | BaseException:
    """How long the body of `answer` must be (None where it does not say), or why it is refused unread."""
    length = answer.headers.get("Content-Length")
    if answer.status == 200:  # the whole object, Range ignored
        if length is not None and int(length) > limit:
            return ValueError(f"{length} bytes stored, more than the {limit} a chunk may take")
        return None if length is None else int(length)
    match = _CONTENT_RANGE.match(answer.headers.get("Content-Range", ""))
    if match is None:
        return OSError(f"{span}: a partial answer without a valid Content-Range")
    first, last, total = int(match.group(1)), int(match.group(2)), match.group(3)
    if first != 0 or last > limit or last < first:
        return OSError(f"{span}: bytes {first}-{last} sent, not the range asked")
    if total != "*" and int(total) > limit:
        return ValueError(f"{total} bytes stored, more than the {limit} a chunk may take")
    if total != "*" and int(total) != last + 1:  # the whole object fits the range, so all of it is due
        return OSError(f"{span}: bytes 0-{last} of {total} sent; the object was asked whole")
    return last + 1


async def _read_at_most(stream: Any, count: int) -> bytes:
    """The first `count` bytes of `stream`, or all of it if shorter; nothing past them is read."""
    body = bytearray()
    while len(body) < count:
        part = await stream.read(count - len(body))
        if not part:
            break
        body += part
    return bytes(body)
