"""The Zarr metadata of a store, read through the store itself: a group's attributes and an array's metadata.

The files (`zarr.json` for Zarr v3; `.zgroup`, `.zattrs` and `.zarray` for
v2) are fetched like chunks, each refused past `METADATA_LIMIT` bytes, and
parsed here, without the zarr package: an array's metadata becomes an
`ArrayMetadata` (its shape, type, regular chunk grid, chunk keys, fill value
and codecs), and what it declares that is not understood is refused.
"""

from __future__ import annotations

import errno
import json
import re
import reprlib
from typing import Any, NamedTuple

import numpy as np

from ..._errors import ImageFileNotFoundError
from ._store import Store

__all__ = ["METADATA_LIMIT", "Codec", "ArrayMetadata", "group_attributes", "array_metadata", "brief"]

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


class Codec(NamedTuple):
    """A codec of an array: its name (numcodecs' id, without `numcodecs.`) and its configuration; a
    `sharding_indexed` codec's `codecs` and `index_codecs` are tuples of `Codec`."""

    name: str
    configuration: dict[str, Any]


class ArrayMetadata(NamedTuple):
    """What an array's metadata declares, as far as reading it goes.

    Attributes:
        zarr_format: 2 or 3.
        shape: Its extents.
        data_type: The type of its values as the metadata names it.
        dtype: The type of its values: as stored for v2 (its byte order kept), native for v3 (whose
            `bytes` codec gives the stored order); None where they are not numbers (not read).
        chunks: The extents of a chunk (of a shard, for sharded arrays).
        order: How a v2 chunk's values lie, "C" or "F" ("C" for v3, whose `transpose` codec reorders).
        fill_value: The value of chunks not stored, of `dtype` (None where that is None).
        codecs: The v2 filters then compressor, or the v3 codecs.
        separator: What joins a chunk's coordinates in its key.
        prefix: What its keys start with ("c" for v3's default encoding, else nothing).
    """

    zarr_format: int
    shape: tuple[int, ...]
    data_type: str
    dtype: np.dtype | None
    chunks: tuple[int, ...]
    order: str
    fill_value: np.ndarray | None
    codecs: tuple[Codec, ...]
    separator: str
    prefix: str

    def encode_chunk_key(self, coords: tuple[int, ...]) -> str:
        """The name of the chunk at `coords` of the chunk grid, relative to the array."""
        parts = [self.prefix] if self.prefix else [] if coords else ["0"]
        return self.separator.join([*parts, *(str(c) for c in coords)])


_V2_TYPE = re.compile(r"^[<>|=]?[biufc]\d{1,2}$")
_V3_TYPES = frozenset(
    {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"}
    | {"float16", "float32", "float64", "complex64", "complex128"}
)
_SPECIAL_FLOATS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}
_BRIEF = reprlib.Repr()
_BRIEF.maxstring = _BRIEF.maxother = 80


def brief(value: Any) -> str:
    """`value` as repr writes it, cut short: what metadata declares, quoted in an error message."""
    return _BRIEF.repr(value)


_SHARD_INDEX_CODECS = (Codec("bytes", {"endian": "little"}), Codec("crc32c", {}))


def array_metadata(store: Store, path: str) -> ArrayMetadata:
    """The metadata of the array at `path` (Zarr v3 `zarr.json`, else v2 `.zarray`).

    Raises:
        ValueError: If there is no array there, or its metadata is malformed, refused, or declares
            what is not read; the message names the metadata file.
    """
    document = _document(store, f"{path}/zarr.json")
    if document is not None:
        name, parse = f"{path}/zarr.json", _v3
    else:
        document = _document(store, f"{path}/.zarray")
        if document is None:
            raise ValueError(f"no array at {path!r} (no zarr.json or .zarray)")
        name, parse = f"{path}/.zarray", _v2
    try:
        return parse(document)
    except KeyError as error:
        raise ValueError(f"{name}: has no {error}") from None
    except (ValueError, TypeError, OverflowError, RecursionError) as error:
        raise ValueError(f"{name}: {error}") from None


def _v2(document: dict[str, Any]) -> ArrayMetadata:
    if document.get("zarr_format") != 2:
        raise ValueError(f"zarr_format {brief(document.get('zarr_format'))}, not 2")
    shape = _extents(document["shape"], "shape", 0)
    chunks = _extents(document["chunks"], "chunks", 1)
    kind = document["dtype"]
    dtype = np.dtype(kind) if isinstance(kind, str) and _V2_TYPE.match(kind) else None
    order = document.get("order", "C")
    if order not in ("C", "F"):
        raise ValueError(f"order {brief(order)}, not 'C' or 'F'")
    separator = document.get("dimension_separator", ".")
    if separator not in (".", "/"):
        raise ValueError(f"dimension_separator {brief(separator)}, not '.' or '/'")
    filters = document.get("filters") or []
    compressor = document.get("compressor")
    if not isinstance(filters, list):
        raise ValueError(f"filters {brief(filters)}, not a list")
    codecs = tuple(_v2_codec(c) for c in [*filters, *([compressor] if compressor is not None else [])])
    fill = _fill(document.get("fill_value"), dtype)
    return ArrayMetadata(2, shape, str(kind), dtype, chunks, order, fill, codecs, separator, "")


def _v2_codec(entry: Any) -> Codec:
    if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
        raise ValueError(f"a codec {brief(entry)} without an id")
    return Codec(entry["id"], {k: v for k, v in entry.items() if k != "id"})


def _v3(document: dict[str, Any]) -> ArrayMetadata:
    if document.get("zarr_format") != 3 or document.get("node_type") != "array":
        node, version = brief(document.get("node_type")), brief(document.get("zarr_format"))
        raise ValueError(f"a {node} of zarr_format {version}, not an array")
    if document.get("storage_transformers"):
        raise ValueError("storage transformers, not read")
    shape = _extents(document["shape"], "shape", 0)
    kind = document["data_type"]
    dtype = np.dtype(kind) if isinstance(kind, str) and kind in _V3_TYPES else None
    grid_name, grid = _named(document["chunk_grid"], "chunk_grid")
    if grid_name != "regular":
        raise ValueError(f"a chunk grid {brief(grid_name)}, not read (only regular grids)")
    chunks = _extents(grid["chunk_shape"], "chunk_shape", 1)
    encoding, keys = _named(document["chunk_key_encoding"], "chunk_key_encoding")
    if encoding not in ("default", "v2"):
        raise ValueError(f"a chunk key encoding {brief(encoding)}, not read (only 'default' and 'v2')")
    separator = keys.get("separator", "/" if encoding == "default" else ".")
    if separator not in (".", "/"):
        raise ValueError(f"a chunk key separator {brief(separator)}, not '.' or '/'")
    codecs = _v3_codecs(document["codecs"])
    fill = _fill(document["fill_value"], dtype)
    prefix = "c" if encoding == "default" else ""
    return ArrayMetadata(3, shape, str(kind), dtype, chunks, "C", fill, codecs, separator, prefix)


def _named(entry: Any, what: str) -> tuple[str, dict[str, Any]]:
    """The name and configuration of a v3 extension point, given as a name or an object."""
    if isinstance(entry, str):
        return entry, {}
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        raise ValueError(f"{what} {brief(entry)}, not a name or an object with one")
    configuration = entry.get("configuration", {})
    if not isinstance(configuration, dict):
        raise ValueError(f"{what} {brief(entry['name'])} configured as {brief(configuration)}, not an object")
    return entry["name"], configuration


def _v3_codecs(entries: Any) -> tuple[Codec, ...]:
    if not isinstance(entries, list):
        raise ValueError(f"codecs {entries!r}, not a list")
    codecs = []
    for entry in entries:
        name, configuration = _named(entry, "a codec")
        name = name.removeprefix("numcodecs.")
        if name == "sharding_indexed":
            configuration = {
                **configuration,
                "codecs": _v3_codecs(configuration["codecs"]),
                "index_codecs": _v3_codecs(configuration["index_codecs"])
                if "index_codecs" in configuration
                else _SHARD_INDEX_CODECS,
            }
        codecs.append(Codec(name, configuration))
    return tuple(codecs)


def _extents(value: Any, what: str, least: int) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(type(n) is int and least <= n < 1 << 63 for n in value):
        raise ValueError(f"{what} {brief(value)}, not a list of integers of at least {least}")
    return tuple(value)


def _fill(value: Any, dtype: np.dtype | None) -> np.ndarray | None:
    """The fill value `value` declares (null: 0), as a value of `dtype` (None where that is None)."""
    if dtype is None:
        return None
    if value is None:
        value = 0
    elif isinstance(value, list) and len(value) == 2 and dtype.kind == "c":
        value = complex(_float(value[0], dtype), _float(value[1], dtype))
    elif dtype.kind in "fc":
        value = _float(value, dtype)
    elif isinstance(value, float) and value.is_integer() and dtype.kind in "biu":
        value = int(value)
    elif not isinstance(value, int) or isinstance(value, bool) and dtype.kind != "b":
        raise ValueError(f"a fill value {brief(value)} for values of type {dtype}")
    return np.array(value, dtype)


def _float(value: Any, dtype: np.dtype) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str) and value in _SPECIAL_FLOATS:
        return _SPECIAL_FLOATS[value]
    size = dtype.itemsize // (2 if dtype.kind == "c" else 1)
    if isinstance(value, str) and re.fullmatch(rf"0x[0-9a-fA-F]{{{2 * size}}}", value):
        return float(np.frombuffer(bytes.fromhex(value[2:]), f">f{size}")[0])
    raise ValueError(f"a fill value {brief(value)} for values of type {dtype}")
