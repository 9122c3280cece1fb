"""The Zarr metadata of a store, read through the store itself: a group's attributes and an array's metadata.

The files (`zarr.json` for Zarr v3; `.zgroup`, `.zattrs` and `.zarray` for
v2) are fetched like chunks, each refused past `METADATA_LIMIT` bytes, and
parsed here; zarr only turns an array's JSON into its metadata object, and
never opens the store itself.
"""

from __future__ import annotations

import errno
import json
from typing import Any

from ..._errors import ImageFileNotFoundError
from ._store import Store

__all__ = ["METADATA_LIMIT", "group_attributes", "array_metadata"]

METADATA_LIMIT = 16 << 20
"""The largest metadata file read: 16 MiB."""


def _document(store: Store, path: str) -> dict[str, Any] | None:
    """The JSON object of the file at `path`, None where there is none.

    Raises:
        ValueError: If the file is too large, refused by the store, or not a JSON object.
        OSError: If it cannot be read.
    """
    (found,) = store.get_many([path], METADATA_LIMIT)
    if found is None:
        return None
    if isinstance(found, ValueError):
        raise ValueError(f"{path}: {found}") from found
    if isinstance(found, OSError) and found.errno is not None:  # its class and errno kept
        found.add_note(f"{store.name}: {path}")
        raise found
    if isinstance(found, BaseException):
        raise OSError(f"{store.name}: {path}: {type(found).__name__}: {found}") from found
    try:
        document = json.loads(found)
    except (ValueError, RecursionError) as error:
        raise ValueError(f"{path}: not JSON ({error})") from None
    if not isinstance(document, dict):
        raise ValueError(f"{path}: not a JSON object")
    return document


def group_attributes(store: Store) -> dict[str, Any]:
    """The attributes of the group at the root of `store` (Zarr v3, else v2).

    Raises:
        ImageFileNotFoundError: If the store holds no group metadata (a `FileNotFoundError`, errno ENOENT).
        ValueError: If its metadata is malformed or refused.
    """
    document = _document(store, "zarr.json")
    if document is not None:
        if document.get("node_type") != "group":
            raise ValueError(f"zarr.json: a {document.get('node_type')!r}, not a group")
        attributes = document.get("attributes", {})
    else:
        if _document(store, ".zgroup") is None:
            raise ImageFileNotFoundError(
                errno.ENOENT, f"{store.name}: no such Zarr store (no zarr.json or .zgroup)"
            )
        attributes = _document(store, ".zattrs") or {}
    if not isinstance(attributes, dict):
        raise ValueError(f"the group's attributes are {type(attributes).__name__}, not an object")
    return attributes


def array_metadata(store: Store, path: str) -> Any:
    """The metadata of the array at `path` (Zarr v3, else v2): zarr's `ArrayV3Metadata` or `ArrayV2Metadata`.

    Raises:
        ValueError: If there is no array there, or its metadata is malformed or refused.
    """
    from zarr.core.metadata import ArrayV2Metadata, ArrayV3Metadata

    document = _document(store, f"{path}/zarr.json")
    if document is not None:
        if document.get("node_type") != "array":
            raise ValueError(f"{path}/zarr.json: a {document.get('node_type')!r}, not an array")
        if document.get("storage_transformers"):
            raise ValueError(f"{path}/zarr.json: storage transformers, not read")
        parse, name = ArrayV3Metadata.from_dict, f"{path}/zarr.json"
    else:
        document = _document(store, f"{path}/.zarray")
        if document is None:
            raise ValueError(f"no array at {path!r} (no zarr.json or .zarray)")
        parse, name = ArrayV2Metadata.from_dict, f"{path}/.zarray"
    try:
        return parse(document)
    except Exception as error:  # zarr's errors for metadata it cannot parse
        raise ValueError(f"{name}: {type(error).__name__}: {error}") from error
