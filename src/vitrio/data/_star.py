"""STAR files as RELION writes them: their blocks read as tables, written whole, and the optics of particles.

Reading is `parse_star`'s (pandas' parser over the loops, fed a chunk at a
time), rendering starfile's: the `star` extra, imported only when used. What
is added here is errors that name the file, the choice of a block by the
columns it has, and a write that cannot be redirected: the text goes into a
new private file beside the path (`vitrio._partial.new_file`), moved onto it only
once complete.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .._fs import open_named
from .._partial import new_file
from ._extras import missing
from ._star_text import Keep, parse_star

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["read_star", "read_star_particles", "star_table", "write_star", "particle_optics"]

MAX_STAR_BYTES = 4 << 30
"""The largest STAR file read: its table takes about as much memory as its text."""

# The block of particles as RELION names it: 3.1 and later, some tools of 3.1, 3.0's unnamed block.
_PARTICLE_BLOCKS = ("particles", "images", "")


def read_star(path: str | os.PathLike[str]) -> dict[str, pd.DataFrame]:
    """Read the data blocks of a STAR file.

    Args:
        path: The STAR file.

    Returns:
        Each block by its name (without `data_`), as a table; a block of
        single values is a table of one row.

    Raises:
        FileNotFoundError: If there is no file at `path`.
        IsADirectoryError: If `path` is a directory.
        OSError: If it is not a regular file (a FIFO, a device: never waited on).
        ValueError: If the file is not a STAR file (it has no data_ block), cannot be parsed as one (a
            row of a loop with more or fewer values than it has columns, naming the line), or is larger
            than `MAX_STAR_BYTES`.
        ModuleNotFoundError: If pandas is not installed (`pip install 'vitrio[star]'`).
    """
    return _read_blocks(path, None)


def _read_blocks(path: str | os.PathLike[str], keep: Keep | None) -> dict[str, pd.DataFrame]:
    """The data blocks of a STAR file as `read_star` gives them, the columns of its loops `keep` chooses."""
    try:
        import pandas as pd
    except ModuleNotFoundError as error:
        raise missing(error, "read_star") from None

    with open_named(path, "a STAR file") as file:
        blocks = parse_star(path, file, MAX_STAR_BYTES, keep)
    if not blocks:
        raise ValueError(f"{path}: not a STAR file: it has no data_ block")
    return {
        name: block if isinstance(block, pd.DataFrame) else pd.DataFrame([block])
        for name, block in blocks.items()
    }


def read_star_particles(path: str | os.PathLike[str], columns: Iterable[str] | None = None) -> pd.DataFrame:
    """Read the particles of a RELION STAR file of any version, each row with its optics group's columns.

    The particles are the block named `particles` (RELION 3.1 and later),
    `images`, or the unnamed `data_` block of RELION 3.0, else the first
    block, whichever of them has rlnImageName. Where there is a data_optics block, each
    particle gets the columns of the optics group its rlnOpticsGroup names
    (rlnImagePixelSize, rlnVoltage, ...) that it does not have itself.

    Args:
        path: The STAR file.
        columns: The columns to read, a particle's own or its optics group's; the others are passed
            over, never converted nor kept. Defaults to all.

    Returns:
        The particles, in the order of the file, their rows numbered from zero; with `columns`,
        those columns in the order the whole table has them.

    Raises:
        FileNotFoundError: If there is no file at `path`.
        ValueError: If the file is not a STAR file, no block has
            rlnImageName (naming the blocks it has), a particle's optics
            group is not in data_optics, or a column asked for is in neither.
    """
    asked = None if columns is None else dict.fromkeys([columns] if isinstance(columns, str) else columns)
    read = None if asked is None else {*asked, "rlnImageName", "rlnOpticsGroup"}
    particles = _particles(path, _read_blocks(path, None if read is None else lambda names: read))
    if asked is None:
        return particles
    absent = [c for c in asked if c not in particles.columns]
    if absent:
        raise ValueError(
            f"{path}: no column {', '.join(absent)} among the particles' or their optics groups' "
            f"({', '.join(particles.columns)})"
        )
    return particles[[c for c in particles.columns if c in asked]]


def _particles(path: str | os.PathLike[str], blocks: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """The particles of a STAR file's blocks, each row with its optics group's columns."""
    named = (n for n in (*_PARTICLE_BLOCKS, *blocks) if n in blocks and n != "optics")
    name = next((n for n in named if "rlnImageName" in blocks[n].columns), None)
    if name is None:
        held = ", ".join(f"data_{n}" for n in blocks) or "no data block"
        raise ValueError(f"{path}: holds no particles: no block has rlnImageName (it has {held})")
    particles = blocks[name].reset_index(drop=True)
    optics = blocks.get("optics")
    if optics is None or "rlnOpticsGroup" not in particles.columns:
        return particles
    if "rlnOpticsGroup" not in optics.columns:
        raise ValueError(f"{path}: no column rlnOpticsGroup in data_optics")
    wanted = particles["rlnOpticsGroup"].to_numpy(dtype=np.int64)
    rows = _optics_rows(optics["rlnOpticsGroup"].to_numpy(dtype=np.int64), wanted)
    if len(rows) and rows.min() < 0:
        missing = np.unique(wanted[rows < 0]).tolist()
        raise ValueError(f"{path}: optics groups {missing} of particles are not in data_optics")
    columns = {column: particles[column] for column in particles.columns}  # not copied
    for column in optics.columns:
        if column not in columns:
            columns[column] = optics[column].array.take(rows)  # text stays in Arrow strings
    return type(particles)(columns, copy=False)


def _optics_rows(groups: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """The row of data_optics (whose groups are `groups`) of each particle's group (`wanted`), the first
    of a group named twice; -1 where the group is not there. Without a sort of the particles: a table of
    the group numbers they name where those span fewer than 65536, else a search among the groups."""
    named, first = np.unique(groups, return_index=True)
    if not len(named) or not len(wanted):
        return np.full(len(wanted), -1, np.intp)
    low, high = int(wanted.min()), int(wanted.max())
    if high - low < 1 << 16:
        low = min(low, 0) if high < 1 << 16 else low  # from 0 where it can: no shifted copy of the groups
        table = np.full(high - low + 1, -1, np.intp)
        inside = (named >= low) & (named <= high)
        table[named[inside] - low] = first[inside]
        return table[wanted - low if low else wanted]
    found = np.searchsorted(named, wanted).clip(0, len(named) - 1)
    return np.where(named[found] == wanted, first[found], -1)


def star_table(
    path: str | os.PathLike[str],
    blocks: Mapping[str, pd.DataFrame],
    columns: Sequence[str],
    prefer: str = "",
) -> pd.DataFrame:
    """Choose the block of a STAR file that has some columns.

    Args:
        path: The STAR file the blocks were read from, to name in errors.
        blocks: Its blocks, as `read_star` returns them.
        columns: The columns the block must have.
        prefer: The block to take if it has them (such as "particles"); else
            the first block that has them is taken.

    Returns:
        The block, its rows numbered from zero.

    Raises:
        ValueError: If no block has all of `columns`, naming those the
            preferred block (or the first) lacks.
    """
    if prefer in blocks and set(columns) <= set(blocks[prefer].columns):
        return blocks[prefer].reset_index(drop=True)
    for block in blocks.values():
        if set(columns) <= set(block.columns):
            return block.reset_index(drop=True)
    if not blocks:
        raise ValueError(f"{path}: holds no data block (is it a STAR file?)")
    name = prefer if prefer in blocks else next(iter(blocks))
    missing = ", ".join(c for c in columns if c not in blocks[name].columns)
    raise ValueError(f"{path}: no column {missing} in data_{name}")


def write_star(blocks: Mapping[str, pd.DataFrame], path: str | os.PathLike[str]) -> None:
    """Write tables as the data blocks of a STAR file, replacing any file at `path`.

    The file is written beside `path` under a private, unguessable name,
    without following symbolic links, and moved onto `path` once complete:
    a failure leaves nothing, and a link planted where it is written cannot
    redirect it. Every number is written in the shortest form that reads
    back as the same value (Python's `str` of a float, as `1.929012e-06`),
    never rounded to a fixed count of decimals.

    Args:
        blocks: Each block's table by its name (without `data_`), in the
            order they are to be written.
        path: The STAR file to write.

    Raises:
        FileNotFoundError: If the folder of `path` does not exist.
        ModuleNotFoundError: If starfile is not installed (`pip install 'vitrio[star]'`).
    """
    try:
        import starfile
    except ModuleNotFoundError as error:
        raise missing(error, "write_star") from None

    text = starfile.to_string(dict(blocks), float_format=str).encode()
    with new_file(path) as partial, partial.file() as file:
        file.write(text)


def particle_optics(
    path: str | os.PathLike[str],
    micrographs: pd.DataFrame,
    optics: pd.DataFrame | None,
    box: int,
    pixel_size: float | None = None,
) -> pd.DataFrame:
    """The data_optics block of particles cropped out of micrographs, as RELION writes it.

    The optics groups are those of the micrographs, with rlnImagePixelSize
    (the micrographs' rlnMicrographPixelSize), rlnImageSize and
    rlnImageDimensionality. Without `optics`, there is a group for each
    rlnOpticsGroup of `micrographs` (or group 1), of `pixel_size`.

    Args:
        path: The micrographs STAR file, to name in errors.
        micrographs: Its table of micrographs.
        optics: Its data_optics block, or None if it has none.
        box: The side of the particles' boxes, in pixels.
        pixel_size: The pixel size in Å when there is no `optics`.

    Returns:
        The table, one row per optics group.

    Raises:
        ValueError: If `optics` lacks rlnOpticsGroup or the pixel size, or
            there is neither `optics` nor `pixel_size`.
        ModuleNotFoundError: If pandas is not installed (`pip install 'vitrio[star]'`).
    """
    try:
        import pandas as pd
    except ModuleNotFoundError as error:
        raise missing(error, "particle_optics") from None

    if optics is not None:
        if "rlnOpticsGroup" not in optics.columns:
            raise ValueError(f"{path}: no column rlnOpticsGroup in data_optics")
        size = next((c for c in ("rlnMicrographPixelSize", "rlnImagePixelSize") if c in optics.columns), None)
        if size is None:
            raise ValueError(f"{path}: no column rlnMicrographPixelSize in data_optics")
        result = optics.drop(columns=["rlnMicrographPixelSize"], errors="ignore").reset_index(drop=True)
        result["rlnImagePixelSize"] = optics[size].to_numpy(dtype=np.float64)
    elif pixel_size is None:
        raise ValueError(f"{path}: no data_optics block gives the pixel size, and none was given")
    else:
        groups: Any = [1]
        if "rlnOpticsGroup" in micrographs.columns:
            groups = np.unique(micrographs["rlnOpticsGroup"].to_numpy(dtype=np.int64))
        result = pd.DataFrame(
            {
                "rlnOpticsGroup": groups,
                "rlnOpticsGroupName": [f"opticsGroup{g}" for g in groups],
                "rlnImagePixelSize": float(pixel_size),
            }
        )
    result["rlnImageSize"] = box
    result["rlnImageDimensionality"] = 2
    return result
