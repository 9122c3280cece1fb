"""cryoSPARC's `.cs` files, read as tables of particles.

A `.cs` file is a numpy structured array saved with `np.save`: a row per
particle, a field per value (`uid`, `blob/path`, `blob/idx`, `blob/psize_A`,
`ctf/df1_A`, ...). It is mapped rather than loaded, so a header that claims
more rows than the file holds is refused instead of allocated (as is a field
of 0 bytes a row, `S0`, whose rows the file could not bound), and it is
never unpickled. It is opened once, as a regular file (a FIFO or a device is
refused, never waited on), of at most `MAX_CS_BYTES`.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np

from .._fs import open_named
from ._extras import missing

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["MAX_CS_BYTES", "read_cs"]

MAX_CS_BYTES = 4 << 30
"""The largest `.cs` file read: each of its columns is copied out of it."""


def read_cs(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Read the particles of a cryoSPARC `.cs` file.

    Byte strings (`blob/path`, ...) are decoded, as file names are
    (`os.fsdecode`); a path keeps the `>` cryoSPARC writes in front of one
    relative to its project directory, which `particle_locations` handles.
    A field with several values a row (`blob/shape`, `alignments3D/pose`)
    is a column holding an array for each row.

    Args:
        path: The `.cs` file.

    Returns:
        The particles, a column for each field, in the order of the file.

    Raises:
        FileNotFoundError: If there is no file at `path`.
        IsADirectoryError: If `path` is a directory.
        OSError: If it is not a regular file (a FIFO, a device).
        ValueError: If the file is not a numpy structured array, holds
            Python objects, or is larger than `MAX_CS_BYTES`.
        ModuleNotFoundError: If pandas is not installed (`pip install 'vitrio[star]'`).
    """
    try:
        import pandas as pd
    except ModuleNotFoundError as error:
        raise missing(error, "read_cs") from None

    with open_named(path, "a .cs file") as file:
        array = _mapped(path, file)
    if array.dtype.names is None or array.ndim != 1:
        raise ValueError(f"{path}: not a cryoSPARC .cs file: it holds no table of fields, one row a particle")
    columns = {}
    for name in array.dtype.names:
        values = np.array(array[name])
        if values.dtype.kind == "S":
            columns[name] = _decoded(values)
        elif values.ndim > 1:
            columns[name] = list(values)
        else:
            columns[name] = values
    return pd.DataFrame(columns)


def _decoded(values: np.ndarray) -> Any:
    """Byte strings decoded as file names are: all at once by pyarrow where they are UTF-8 (a column of
    pandas' own text), else one by one by `os.fsdecode` (a column of Python strings, which may hold
    the surrogates it decodes other bytes to)."""
    import pandas as pd

    try:
        import pyarrow as pa
    except ModuleNotFoundError:
        pa = None
    if pa is not None:
        try:
            return pa.array(values).cast(pa.string()).to_pandas()
        except pa.ArrowInvalid:
            pass
    return pd.Series([os.fsdecode(value) for value in values.tolist()], dtype=object)


def _mapped(path: str | os.PathLike[str], file: BinaryIO) -> np.ndarray:
    """The array of the `.npy` file open as `file`, mapped read-only, without unpickling.

    Raises:
        ValueError: If it is not an `.npy` file of a structured array without objects, larger than
            `MAX_CS_BYTES`, has a field of 0 bytes a row (whose rows would cost nothing to claim), or is
            shorter than its header says.
    """
    size = os.fstat(file.fileno()).st_size
    if size > MAX_CS_BYTES:
        raise ValueError(f"{path}: {size} bytes, more than the {MAX_CS_BYTES} a .cs file may have; not read")
    try:
        version = np.lib.format.read_magic(file)
        read_header = (
            np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        )
        shape, fortran, dtype = read_header(file)
        if dtype.hasobject:
            raise ValueError("it holds Python objects, which are never unpickled")
        empty = [name for name in dtype.names or () if dtype.fields[name][0].itemsize == 0]
        if empty or dtype.itemsize == 0:
            named = ", ".join(empty) or "its rows"
            raise ValueError(f"{named}: 0 bytes a row, so the file cannot bound how many rows it claims")
        rows, held = math.prod(shape), size - file.tell()
        if rows > held // dtype.itemsize:
            raise ValueError(f"the header claims {rows} rows of {dtype.itemsize} bytes; it holds {held}")
        return np.memmap(file, dtype, "r", file.tell(), shape, "F" if fortran else "C")
    except (ValueError, OSError, EOFError) as error:
        raise ValueError(f"{path}: not a cryoSPARC .cs file (a numpy structured array): {error}") from error
