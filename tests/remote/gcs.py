"""A fake of Google Cloud Storage's JSON API on 127.0.0.1, as much of it as gcsfs reads objects through.

- `GET storage/v1/b/<bucket>/o/<name>`: the object's resource (size, generation, etag, updated);
- `GET storage/v1/b/<bucket>/o?prefix=P&delimiter=/`: a listing, which gcsfs asks beside the resource;
- `GET download/storage/v1/b/<bucket>/o/<name>?alt=media`: the object's bytes, by `Range`.

A `RangeServer` answers them: it counts the requests and keeps each one's path and `Range` (`asked`).
gcsfs's default filesystem for gs:// (`ExtendedGcsFileSystem`) first asks a bucket's layout over gRPC,
which the fake does not speak (each question would wait out a minute of retries), then reads a bucket
of plain objects through `GCSFileSystem`'s JSON API: while the fake runs, gs:// is that filesystem.
"""

from __future__ import annotations

import base64
import itertools
import json
import re
import time
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import fsspec
from gcsfs.core import GCSFileSystem

from .http import RangeServer

__all__ = ["LocalGCS"]

_PATH = re.compile(r"/(download/)?storage/v1/b/([^/]+)/o(?:/([^/]+))?")


class LocalGCS:
    """Objects put with `put` (each rewrite a new generation), reached with the storage options `options`."""

    def __init__(self) -> None:
        self._objects: dict[tuple[str, str], tuple[bytes, int, str]] = {}
        self._generations = itertools.count(1_700_000_000_000_000)
        self.server = RangeServer(self)
        self.options = {"endpoint_url": self.server.url, "token": "anon"}
        self._default = fsspec.get_filesystem_class("gs")
        fsspec.register_implementation("gs", GCSFileSystem, clobber=True)

    def put(self, local: Path, name: str, bucket: str = "remote-files") -> str:
        """Write the bytes of the local file as object `name`; its `gs://` URL."""
        updated = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
        self._objects[bucket, name] = (Path(local).read_bytes(), next(self._generations), updated)
        return f"gs://{bucket}/{name}"

    def mark(self) -> int:
        """The number of requests so far, to see those after it with `media`."""
        return len(self.server.asked)

    def media(self, mark: int) -> list[str | None]:
        """The `Range` of each download of an object's bytes asked after `mark`."""
        return [asked for path, asked in self.server.asked[mark:] if path.startswith("download/")]

    def get(self, request: str) -> bytes | None:
        """The body answering a GET of `request` (a path and query), or None for 404."""
        parts = urlsplit("/" + request)
        match = _PATH.fullmatch(parts.path)
        if match is None:
            return None
        media, bucket, name = match.group(1), match.group(2), match.group(3)
        if name is None:
            query = {k: v[0] for k, v in parse_qs(parts.query).items()}
            return None if media else self._listing(bucket, query.get("prefix", ""), query.get("delimiter"))
        found = self._objects.get((bucket, unquote(name)))
        if found is None:
            return None
        return found[0] if media else json.dumps(self._resource(bucket, unquote(name))).encode()

    def _resource(self, bucket: str, name: str) -> dict:
        body, generation, updated = self._objects[bucket, name]
        return {
            "kind": "storage#object",
            "id": f"{bucket}/{name}/{generation}",
            "bucket": bucket,
            "name": name,
            "size": str(len(body)),
            "generation": str(generation),
            "metageneration": "1",
            "etag": base64.b64encode(f"{generation}:1".encode()).decode(),
            "timeCreated": updated,
            "updated": updated,
        }

    def _listing(self, bucket: str, prefix: str, delimiter: str | None) -> bytes:
        items, prefixes = [], set()
        for b, name in sorted(self._objects):
            rest = name[len(prefix) :]
            if b != bucket or not name.startswith(prefix):
                continue
            if delimiter and delimiter in rest:
                prefixes.add(prefix + rest[: rest.index(delimiter) + 1])
            else:
                items.append(self._resource(bucket, name))
        return json.dumps({"kind": "storage#objects", "items": items, "prefixes": sorted(prefixes)}).encode()

    def stop(self) -> None:
        """Stop serving, and give gs:// back to gcsfs's default filesystem."""
        fsspec.register_implementation("gs", self._default, clobber=True)
        self.server.stop()
