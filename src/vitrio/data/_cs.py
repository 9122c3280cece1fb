"""cryoSPARC's `.cs` files, read as tables of particles.

A `.cs` file is a numpy structured array saved with `np.save`: a row per
particle, a field per value (`uid`, `blob/path`, `blob/idx`, `blob/psize_A`,
`ctf/df1_A`, ...). It is mapped rather than loaded, so a header that claims
more rows than the file holds is refused instead of allocated, and it is
never unpickled.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np

from ._extras import missing

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["read_cs"]


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
        ValueError: If the file is not a numpy structured array, or holds
            Python objects.
        ModuleNotFoundError: If pandas is not installed (`pip install 'vitrio[star]'`).
    """
    try:
        import pandas as pd
    except ModuleNotFoundError as error:
        raise missing(error, "read_cs") from None

    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such file")
    if os.path.isdir(path):
        raise IsADirectoryError(f"{path}: is a directory, not a .cs file")
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as error:
        raise ValueError(f"{path}: not a cryoSPARC .cs file (a numpy structured array): {error}") from error
    if not isinstance(array, np.ndarray) or array.dtype.names is None or array.ndim != 1:
        raise ValueError(f"{path}: not a cryoSPARC .cs file: it holds no table of fields, one row a particle")
    columns = {}
    for name in array.dtype.names:
        values = np.array(array[name])
        if values.dtype.kind == "S":
            columns[name] = [os.fsdecode(value) for value in values.tolist()]
        elif values.ndim > 1:
            columns[name] = list(values)
        else:
            columns[name] = values
    return pd.DataFrame(columns)
