"""The particles of RELION and cryoSPARC, as the files of each have them, and where their images are.

`read_particles` reads either kind of file into a table; `particle_locations`
turns its image columns (RELION's rlnImageName, cryoSPARC's blob/path and
blob/idx) into the locations an ImageSource reads, their paths resolved the
way the metadata means them (`PathResolver`). A table at a URL is fetched
into a private temporary folder (no larger than a local one may be) and read
there; its relative paths resolve against its URL.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import _native
from .._errors import redact
from .._remote import is_url, local_copy
from .._types import ImageLocation
from ._cs import MAX_CS_BYTES, read_cs
from ._paths import PathResolver
from ._star import MAX_STAR_BYTES, read_star_particles
from ._tables import as_columns, make_locations

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["particle_locations", "read_particles"]


def read_particles(
    path: str | os.PathLike[str], storage_options: Mapping[str, Any] | None = None
) -> pd.DataFrame:
    """Read the particles of a RELION STAR file or a cryoSPARC `.cs` file into a table.

    A file ending `.cs` is read as cryoSPARC's (`read_cs`), any other as a
    STAR file of any RELION version (`read_star_particles`: the optics
    group's columns, such as rlnImagePixelSize, merged into each row).

    Args:
        path: The file, or its URL (`s3://...`, `https://...`).
        storage_options: What fsspec takes to reach a URL (`{"anon": True}`...).

    Returns:
        The particles, a row each, in the order of the file.

    Raises:
        FileNotFoundError: If there is no file at `path`.
        ValueError: If the file is not of its kind, or holds no particles.
        ModuleNotFoundError: If pandas or starfile is not installed (`pip install 'vitrio[star]'`).
    """
    if is_url(os.fspath(path)):
        return _read_remote(os.fspath(path), storage_options)
    if os.fspath(path).lower().endswith(".cs"):
        return read_cs(path)
    return read_star_particles(path)


def _read_remote(url: str, storage_options: Mapping[str, Any] | None) -> pd.DataFrame:
    """The particles of the table at `url`, fetched into a private folder and read there."""
    limit = MAX_CS_BYTES if url.lower().endswith(".cs") else MAX_STAR_BYTES
    with local_copy(url, storage_options, limit) as local:
        return read_particles(local)


def particle_locations(
    table: Any,
    metadata: str | os.PathLike[str],
    root: str | os.PathLike[str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> list[ImageLocation]:
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
        The locations, a row each.

    Raises:
        ValueError: If the table has neither rlnImageName nor blob/path and
            blob/idx, or an rlnImageName is not a location.
        FileNotFoundError: If a file is nowhere to be found, naming the paths tried.
    """
    pandas = sys.modules.get("pandas")
    columns = table if pandas is not None and isinstance(table, pandas.DataFrame) else as_columns(table)
    resolve = PathResolver(metadata, root, storage_options)
    if "rlnImageName" in columns:
        return _relion_locations(columns["rlnImageName"], resolve)
    if "blob/path" in columns and "blob/idx" in columns:
        return make_locations(_resolved(columns["blob/path"], resolve), columns["blob/idx"])
    raise ValueError(
        f"{redact(str(metadata))}: the particles have neither rlnImageName nor blob/path and blob/idx"
    )


def _relion_locations(names: Any, resolve: PathResolver) -> list[ImageLocation]:
    """The locations of rlnImageName's "index@path": split by the C extension where every name is one
    of digits, `@` and a path without spaces, each distinct path resolved once, the locations made
    in bulk; else name by name, as `ImageLocation.from_string` parses them."""
    split = _split(names)
    if split is not None:
        indices, codes, paths = split
        found = [resolve(path) for path in paths]
        # as ImageLocation(found[code], index) makes them: a str key, an index of 0 or more
        return _native.new_locations(
            ImageLocation, ImageLocation._key, ImageLocation._index, found, codes, indices
        )
    locations = []
    for text in np.asarray(names).tolist():
        written = ImageLocation.from_string(text)
        locations.append(ImageLocation(resolve(written.key), written.index_in_stack))
    return locations


def _split(names: Any) -> tuple[np.ndarray, np.ndarray, list[str]] | None:
    """Of each "index@path" of `names`, its index counting from zero and the number of its path among
    the distinct paths; and those paths. None if a name is not one `vitrio._native.split_image_names`
    takes, or pyarrow is not installed."""
    try:
        import pyarrow as pa
    except ModuleNotFoundError:
        return None
    try:
        texts = pa.array(names)
        texts = pa.chunked_array([texts]) if isinstance(texts, pa.Array) else texts
        texts = texts.cast(pa.large_string()).combine_chunks()
    except (pa.ArrowException, TypeError, ValueError):
        return None
    if texts.null_count:
        return None
    _, offsets, data = texts.buffers()
    offsets = np.frombuffer(offsets, np.int64)[texts.offset : texts.offset + len(texts) + 1]
    indices, codes = np.empty(len(texts), np.int64), np.empty(len(texts), np.int64)
    paths = _native.split_image_names(offsets, data or b"", indices, codes)
    return None if paths is None else (indices, codes, paths)


def _resolved(paths: Any, resolve: PathResolver) -> list[str]:
    """Each of `paths` resolved, each distinct one once."""
    try:
        import pandas as pd
    except ModuleNotFoundError:
        return [resolve(path) for path in np.asarray(paths).tolist()]
    codes, distinct = pd.factorize(np.asarray(paths) if not isinstance(paths, pd.Series) else paths)
    found = np.array([resolve(path) for path in distinct.tolist()] or [""], dtype=object)
    return found[codes].tolist()
