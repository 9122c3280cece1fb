"""The particles of RELION and cryoSPARC, as the files of each have them, and where their images are.

`read_particles` reads either kind of file into a table; `particle_locations`
turns its image columns (RELION's rlnImageName, cryoSPARC's blob/path and
blob/idx) into the locations an ImageSource reads, their paths resolved the
way the metadata means them (`PathResolver`), each distinct path once; the
locations stay columns (`LocationColumns`: the files once, an array of their
numbers and one of the indices), never an object a row. A table at a URL is fetched
into a private temporary folder (no larger than a local one may be) and read
there; its relative paths resolve against its URL.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import _native
from .._errors import redact
from .._locations import LocationColumns
from .._storage import Storage
from .._types import ImageLocation, integer_array
from ._cs import MAX_CS_BYTES, read_cs
from ._paths import PathResolver
from ._star import MAX_STAR_BYTES, read_star_particles
from ._tables import as_columns

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["particle_locations", "read_particles"]


def read_particles(
    path: str | os.PathLike[str],
    storage_options: Mapping[str, Any] | None = None,
    columns: Iterable[str] | None = None,
) -> pd.DataFrame:
    """Read the particles of a RELION STAR file or a cryoSPARC `.cs` file into a table.

    A file ending `.cs` is read as cryoSPARC's (`read_cs`), any other as a
    STAR file of any RELION version (`read_star_particles`: the optics
    group's columns, such as rlnImagePixelSize, merged into each row).

    Args:
        path: The file, or its URL (`s3://...`, `https://...`).
        storage_options: What fsspec takes to reach a URL (`{"anon": True}`...).
        columns: The columns (a `.cs` file's fields) to read, such as `["rlnImageName",
            "rlnDefocusU", "rlnDefocusV"]`; the others are passed over, never converted nor kept, which
            makes a table of millions of rows faster to read and takes less than half its memory.
            Defaults to all.

    Returns:
        The particles, a row each, in the order of the file.

    Raises:
        FileNotFoundError: If there is no file at `path`.
        ValueError: If the file is not of its kind, or holds no particles.
        ModuleNotFoundError: If pandas or starfile is not installed (`pip install 'vitrio[star]'`).
    """
    key = os.fspath(path)
    storage = Storage.of(storage_options)
    cs = key.lower().endswith(".cs")
    if not storage.is_remote(key):
        return read_cs(path, columns) if cs else read_star_particles(path, columns)
    with storage.local_copy(key, MAX_CS_BYTES if cs else MAX_STAR_BYTES) as local:  # a private copy, read
        return read_cs(local, columns) if cs else read_star_particles(local, columns)


def particle_locations(
    table: Any,
    metadata: str | os.PathLike[str],
    root: str | os.PathLike[str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> LocationColumns:
    """Where the image of each particle is, its path resolved the way the metadata means it.

    RELION's rlnImageName reads "index@path", the index counting from one;
    cryoSPARC's blob/path and blob/idx give the path (bytes or text, maybe
    with a `>` in front) and the index counting from zero. Each distinct
    path is looked for as docs/paths-and-types.md says: in the folder of
    `metadata` and the two above it, or under `root` as written and then by
    its bare name.

    Args:
        table: The particles, as `read_particles` gives them (or any table
            `as_columns` takes).
        metadata: The file the table was read from.
        root: The data directory, as cryoDRGN's `--datadir`, or the project
            directory of RELION. Defaults to the folders of `metadata`.
        storage_options: What fsspec takes to reach `metadata` where it is a URL: its
            paths are then looked for beside it, at URLs (one request per distinct path).

    Returns:
        The locations, a row each: a sequence of `ImageLocation` held as
        columns (each distinct file once, an array of the numbers of the
        files and one of the indices), which `ImageSource` reads as they
        are. An index past the end of its stack is reported naming
        `metadata`, the row, and the image as the metadata counts it.

    Raises:
        ValueError: If the table has neither rlnImageName nor blob/path and
            blob/idx, an rlnImageName is not a location, or a blob/idx is negative.
        FileNotFoundError: If a file is nowhere to be found, naming the paths tried.
    """
    pandas = sys.modules.get("pandas")
    columns = table if pandas is not None and isinstance(table, pandas.DataFrame) else as_columns(table)
    resolve = PathResolver(metadata, root, storage_options)
    origin = redact(os.fspath(metadata))
    if "rlnImageName" in columns:
        indices, codes, written = _relion_names(columns["rlnImageName"])
        keys, codes = _resolved(written, codes, resolve)
        return LocationColumns(keys, codes, indices, origin=origin, counts_from=1)
    if "blob/path" in columns and "blob/idx" in columns:
        indices = integer_array(columns["blob/idx"], f"{origin}: blob/idx holds integers").reshape(-1)
        if indices.size and indices.min() < 0:
            raise ValueError(f"{origin}: blob/idx holds a negative index, {indices.min()}")
        codes, written = _distinct(columns["blob/path"])
        if len(codes) != len(indices):
            raise ValueError(f"{origin}: {len(indices)} values of blob/idx for {len(codes)} of blob/path")
        keys, codes = _resolved(written, codes, resolve)
        return LocationColumns(keys, codes, indices, origin=origin, counts_from=0)
    raise ValueError(f"{origin}: the particles have neither rlnImageName nor blob/path and blob/idx")


def _relion_names(names: Any) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Of each "index@path" of rlnImageName (or "path", a whole file), its index counting from zero
    (-1 for a whole file) and the number of its path among the distinct paths; and those paths, in
    the order they first appear. Split by the C extension where every name is one of digits, `@` and a
    path without spaces, else name by name, as `ImageLocation.from_string` parses them."""
    split = _split(names)
    if split is not None:
        return split
    paths: dict[str, int] = {}
    codes, indices = [], []
    for text in np.asarray(names).tolist():
        written = ImageLocation.from_string(text)
        codes.append(paths.setdefault(written.key, len(paths)))
        indices.append(written.index_in_stack)
    return np.asarray(indices, dtype=np.int64), np.asarray(codes, dtype=np.int64), list(paths)


def _split(names: Any) -> tuple[np.ndarray, np.ndarray, list[str]] | None:
    """As `_relion_names`, by `vitrio._native.split_image_names`, an Arrow chunk of names at a time (no
    copy of them); None if a name is not one it takes, or pyarrow is not installed."""
    try:
        import pyarrow as pa
    except ModuleNotFoundError:
        return None
    try:
        texts = pa.array(names)
        texts = pa.chunked_array([texts]) if isinstance(texts, pa.Array) else texts
        texts = texts.cast(pa.large_string())
    except (pa.ArrowException, TypeError, ValueError):
        return None
    if texts.null_count:
        return None
    indices, codes = np.empty(len(texts), np.int64), np.empty(len(texts), np.int64)
    numbers: dict[str, int] = {}
    start = 0
    for chunk in texts.chunks:
        if not len(chunk):
            continue
        _, offsets, data = chunk.buffers()
        offsets = np.frombuffer(offsets, np.int64)[chunk.offset : chunk.offset + len(chunk) + 1]
        stop = start + len(chunk)
        paths = _native.split_image_names(offsets, data or b"", indices[start:stop], codes[start:stop])
        if paths is None:
            return None
        renumbered = np.asarray([numbers.setdefault(path, len(numbers)) for path in paths], np.int64)
        if (renumbered != np.arange(len(paths))).any():  # a path of an earlier chunk
            codes[start:stop] = renumbered[codes[start:stop]]
        start = stop
    return indices, codes, list(numbers)


def _distinct(paths: Any) -> tuple[np.ndarray, list[Any]]:
    """The number of each of `paths` among the distinct ones, and those, in the order they first appear
    (in sorted order where pandas is not installed)."""
    try:
        import pandas as pd
    except ModuleNotFoundError:
        distinct, codes = np.unique(np.asarray(paths).reshape(-1), return_inverse=True)
        return codes.astype(np.int64), distinct.tolist()
    codes, distinct = pd.factorize(paths if isinstance(paths, pd.Series) else np.asarray(paths).reshape(-1))
    return codes.astype(np.int64, copy=False), list(distinct.tolist())


def _resolved(written: list[Any], codes: np.ndarray, resolve: PathResolver) -> tuple[list[str], np.ndarray]:
    """The files the distinct paths `written` mean, each once, and the number of each row's file among
    them, given `codes`, the number of each row's path in `written`: two paths may mean one file."""
    found = resolve.resolve_all(written)
    keys = list(dict.fromkeys(found))
    if len(keys) == len(found):
        return keys, codes
    numbers = {key: number for number, key in enumerate(keys)}
    return keys, np.asarray([numbers[key] for key in found], dtype=np.int64)[codes]
