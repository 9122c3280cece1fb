"""Turning parsed metadata into fields: tables into columns, keys and indices or texts into locations.

These parse no metadata file: whoever reads a STAR file (`read_star`, say)
or a cryoSPARC table hands over what it was parsed into. A key that comes
with metadata is a local path: one written as a URL (`http://host/x.zarr`)
is read as the local path `./http://host/x.zarr`, unless the caller allows
remote keys (`allow_remote=True`), so a downloaded STAR file cannot make
the program send requests to a server of its author's choosing.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from .._storage import has_scheme
from .._types import ImageLocation, integer_array

__all__ = ["as_columns", "make_locations", "parse_locations"]


def as_columns(table: Any) -> dict[str, np.ndarray]:
    """Split a table into one array for each of its columns.

    Args:
        table: A pandas DataFrame, a mapping of names to array-likes or a numpy structured array.

    Returns:
        The columns by name, in the order of the table. Each holds a row of
        the table at each index of its first axis: a column of fixed-size
        lists (a field of several values a row, as `read_cs` reads them) is
        an array of an axis more, without a copy where it is one buffer.

    Raises:
        TypeError: If table is none of the above.
        ValueError: If the columns are not all as long.
    """
    pandas = sys.modules.get("pandas")
    if pandas is not None and isinstance(table, pandas.DataFrame):
        columns = {str(name): _column_array(column) for name, column in table.items()}
    elif isinstance(table, Mapping):
        columns = {str(name): np.asarray(column) for name, column in table.items()}
    elif isinstance(table, np.ndarray) and table.dtype.names is not None:
        columns = {name: table[name] for name in table.dtype.names}
    else:
        raise TypeError(
            f"a table is a pandas DataFrame, a mapping of names to arrays or a numpy structured array, "
            f"not {type(table).__name__}"
        )
    scalars = [name for name, column in columns.items() if column.ndim == 0]
    if scalars:
        raise ValueError(f"columns {scalars} hold a single value, not a value for each row")
    lengths = {name: len(column) for name, column in columns.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"the columns are not all as long: {lengths}")
    return columns


def _column_array(column: Any) -> np.ndarray:
    """A column of a DataFrame as an array: fixed-size lists (of Arrow) as an axis more each."""
    import pandas as pd

    dtype = column.dtype
    if not isinstance(dtype, pd.ArrowDtype):
        return column.to_numpy()
    import pyarrow as pa
    import pyarrow.compute as pc

    if not pa.types.is_fixed_size_list(dtype.pyarrow_dtype) or column.hasnans:
        return column.to_numpy()
    values, extents = pa.array(column.array), []
    while pa.types.is_fixed_size_list(values.type):
        extents.append(values.type.list_size)
        values = pc.list_flatten(values)
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    return values.to_numpy(zero_copy_only=False).reshape(len(column), *extents)


def _key_maker(root: Any, strip_project: bool, allow_remote: bool) -> Any:
    """A function turning a key as written into the key of a file, memoized since keys repeat.

    Unless `allow_remote`, a key written as a URL becomes a local path, relative to `root` or to the
    working directory.
    """
    base = os.fspath(root) if root is not None else None
    made: dict[Any, str] = {}

    def make(written: Any) -> str:
        key = made.get(written)
        if key is None:
            key = os.fsdecode(written) if isinstance(written, (bytes, np.bytes_)) else os.fspath(written)
            if strip_project and key.startswith(">"):
                key = key[1:]
            if base is not None and not os.path.isabs(key):
                key = os.path.join(base, key)
            elif not allow_remote and has_scheme(key):
                key = os.path.join(os.curdir, key)
            made[written] = key
        return key

    return make


def make_locations(
    keys: Iterable[Any], indices: Iterable[int] | None = None, root: Any = None, *, allow_remote: bool = False
) -> list[ImageLocation]:
    """Make locations out of keys and the indices in their stacks.

    That is how cryoSPARC states where a particle is: its blob/path and
    blob/idx fields, the index counting from zero. The > that cryoSPARC writes
    in front of a path relative to its project is left out.

    Args:
        keys: The file of each location, as strings, bytes or paths.
        indices: The index of each location in its stack, counting from zero.
            Defaults to locations of whole files.
        root: The directory a relative key is relative to. Defaults to leaving
            it relative, which is to the working directory.
        allow_remote: Whether a key written as a URL (`s3://...`,
            `https://...`) names a remote store. By default it is a local
            path, relative as any other: a key that comes with metadata is
            never a request to a server unless the caller says so.

    Returns:
        The locations, in the order of keys.

    Raises:
        ValueError: If keys and indices are not as long, or an index is negative.
        TypeError: If an index is not an integer.
    """
    make = _key_maker(root, strip_project=True, allow_remote=allow_remote)
    keys = [make(key) for key in keys]
    if indices is None:
        return [ImageLocation(key) for key in keys]
    numbers = integer_array(indices, "indices in stacks are integers").reshape(-1)
    if len(numbers) != len(keys):
        raise ValueError(f"there are {len(numbers)} indices for {len(keys)} keys")
    if numbers.size and numbers.min() < 0:
        raise ValueError(f"an index in a stack cannot be negative: {numbers.min()}")
    return [ImageLocation(key, index) for key, index in zip(keys, numbers.tolist())]


def parse_locations(
    texts: Iterable[Any], root: Any = None, *, allow_remote: bool = False
) -> list[ImageLocation]:
    """Parse locations written as text, as RELION writes them.

    A location is written "index@key", the index counting from one, or "key"
    for a whole file. That is how the rlnImageName and rlnMicrographName
    columns of a STAR file have them.

    Args:
        texts: The locations, as strings or bytes.
        root: The directory a relative key is relative to. Defaults to leaving
            it relative, which is to the working directory.
        allow_remote: Whether a key written as a URL (`1@https://host/x.zarr`)
            names a remote store; by default it is a local path, as in
            `make_locations`.

    Returns:
        The locations, in the order of texts.

    Raises:
        ValueError: If a text is not a location.
    """
    make = _key_maker(root, strip_project=False, allow_remote=allow_remote)
    locations = []
    for text in texts:
        location = ImageLocation.from_string(text)
        key = make(location.key)
        if key != location.key:
            location = ImageLocation(key, location.index_in_stack)
        locations.append(location)
    return locations
