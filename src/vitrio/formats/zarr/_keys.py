"""Keys of OME-Zarr stores: which keys name one, where the store lies, which scale level is asked for.

A key is the path or URL of an OME-Zarr image group, optionally followed by
`#N` (or `#scale=N`) for scale level `N`, the `N`-th entry of the group's
`multiscales` datasets (0, the finest, by default): `tomo.zarr`,
`tomo.zarr#2`, `s3://bucket/run/tomo.zarr#1`, `https://host/tomo.zarr`,
`tomo.zarr/labels/membrane`. A URL is what `vitrio._storage.is_url` says
is one; a `file://` key names a local store.
"""

from __future__ import annotations

import os
import re
from typing import NamedTuple

from ..._storage import is_url, local_path

__all__ = ["StoreKey", "parse_key", "names_store", "METADATA_FILES"]

METADATA_FILES = ("zarr.json", ".zgroup", ".zattrs", ".zarray")
"""The files whose presence makes a directory a Zarr store (v3, then v2)."""

_LEVEL = re.compile(r"^(?:scale=)?(\d+)$")


class StoreKey(NamedTuple):
    """A key taken apart.

    Attributes:
        store: The path or URL of the image group, without the level.
        level: The scale level the key names, or None where it names none.
        remote: Whether `store` is a URL that fsspec opens.
    """

    store: str
    level: int | None
    remote: bool


def parse_key(key: str) -> StoreKey:
    """Take a key apart into its store, its scale level and whether it is remote.

    Raises:
        ValueError: If the key ends in `#` followed by something that is not a level.
    """
    store, level = key, None
    head, mark, tail = key.rpartition("#")
    if mark:
        match = _LEVEL.match(tail)
        if match is None:
            raise ValueError(f"{key}: '#{tail}' names no scale level; write '#N' or '#scale=N'")
        store, level = head, int(match.group(1))
    if is_url(store):
        return StoreKey(store.rstrip("/"), level, True)
    return StoreKey(local_path(store), level, False)


def names_store(key: str) -> bool:
    """Whether `key` names a Zarr store: a `.zarr` path or URL, a URL without an extension (a file at a
    URL, `s3://bucket/stack.mrcs`, is no store), or a directory holding Zarr metadata.

    Decided by the key's spelling, and for a path without an extension by whether it is a directory
    holding Zarr metadata; nothing is read.
    """
    if "#" not in key and ".zarr" not in key.lower() and os.path.splitext(key.rstrip("/"))[1]:
        return False  # a file's name, as image files have (as `_names_local` finds, at less cost)
    try:
        parsed = parse_key(key)
    except ValueError:
        return "#" in key and _names_local(key.rpartition("#")[0])
    return _names_local(parsed.store)


def _names_local(path: str) -> bool:
    if ".zarr" in path.lower() and any(part.lower().endswith(".zarr") for part in re.split(r"[/\\]", path)):
        return True
    if os.path.splitext(path.rstrip("/"))[1]:  # a file's name, as image files have: not looked at (no stat)
        return False
    if is_url(path):  # a URL without an extension: a store (a file at a URL has its extension)
        return True
    return os.path.isdir(path) and any(os.path.isfile(os.path.join(path, n)) for n in METADATA_FILES)
