"""cryoSPARC's `.cs` files, read as tables of particles, only the fields asked for.

A `.cs` file is one of two formats, told by its first bytes:

- a numpy structured array saved with `np.save` (`\\x93NUMPY`): a row per
  particle, a field per value (`uid`, `blob/path`, `blob/idx`, `ctf/df1_A`,
  ...). Its rows are read a part at a time into memory of their own and each
  field asked for copied out, so a header that claims more rows than the
  file holds is refused instead of allocated (as is a field of 0 bytes a
  row, `S0`, whose rows the file could not bound), and it is never unpickled;
- the compressed stream of recent cryoSPARC (`\\x95CSDAT`): a little-endian
  u32 and that many bytes of a JSON header (`length`, the rows; `dtype`, a
  `[name, type]` or `[name, type, shape]` a field; `compression`, null or
  "lz4"; `compressed_fields`), then for each field of `dtype` a u32 and its
  column in that many bytes, an LZ4 block (`vitrio._native.lz4_decode`) if
  it is compressed, and last the heap of texts: each ended by a NUL, a text
  field (type `|O`) holding the offset of each row's text in it, as a u64.
  A column is allocated only once its bytes are read and found able to hold
  it (an LZ4 block makes at most `MAX_LZ4_RATIO` bytes of each of its own).

Either is opened once, as a regular file (a FIFO or a device is refused,
never waited on), of at most `MAX_CS_BYTES`. A field of several values a
row (`alignments3D/pose`) is a column of fixed-size lists held as one
buffer (Arrow's, with pyarrow), which `as_columns` hands out as a 2-D
array; a text field is a categorical column, each distinct text once.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np

from .. import _native
from .._config import configuration
from .._fs import open_named
from ._extras import missing

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["MAX_CS_BYTES", "read_cs"]

MAX_CS_BYTES = 4 << 30
"""The largest `.cs` file read."""

MAX_CS_HEADER_BYTES = 1 << 20
"""The largest JSON header of a compressed stream (a field takes tens of bytes)."""

MAX_LZ4_RATIO = 255
"""The most bytes an LZ4 block makes of each of its own (a run's length grows 255 a byte)."""

_NUMPY, _STREAM = b"\x93NUMPY", b"\x95CSDAT"


def read_cs(path: str | os.PathLike[str], fields: Iterable[str] | None = None) -> pd.DataFrame:
    """Read the particles of a cryoSPARC `.cs` file, of either format cryoSPARC writes.

    Texts (`blob/path`, ...) are decoded as file names are (`os.fsdecode`),
    into a categorical column (each distinct text once); a path keeps the
    `>` cryoSPARC writes in front of one relative to its project directory,
    which `particle_locations` handles. A field with several values a row
    (`blob/shape`, `alignments3D/pose`) is a column of fixed-size lists held
    in one buffer: `as_columns` gives it as an array of shape `(rows, 3)`.

    Args:
        path: The `.cs` file: a numpy structured array, or cryoSPARC's compressed stream.
        fields: The fields to read, in the order of the file. Defaults to all.

    Returns:
        The particles, a column for each field, in the order of the file.

    Raises:
        FileNotFoundError: If there is no file at `path`.
        IsADirectoryError: If `path` is a directory.
        OSError: If it is not a regular file (a FIFO, a device).
        ValueError: If the file is of neither format, holds Python objects, is
            shorter than its header says or larger than `MAX_CS_BYTES`, or lacks a field asked for.
        ModuleNotFoundError: If pandas is not installed (`pip install 'vitrio[star]'`).
    """
    try:
        import pandas as pd
    except ModuleNotFoundError as error:
        raise missing(error, "read_cs") from None

    wanted = None if fields is None else [fields] if isinstance(fields, str) else list(fields)
    with open_named(path, "a .cs file") as file:
        size = os.fstat(file.fileno()).st_size
        if size > MAX_CS_BYTES:
            raise ValueError(
                f"{path}: {size} bytes, more than the {MAX_CS_BYTES} a .cs file may have; not read"
            )
        start = os.pread(file.fileno(), len(_STREAM), 0)
        try:
            columns = _stream(file, size, wanted) if start == _STREAM else _numpy(file, size, wanted)
        except ValueError as error:
            kind = "a compressed stream" if start == _STREAM else "a numpy structured array"
            raise ValueError(f"{path}: not a cryoSPARC .cs file ({kind}): {error}") from error
        except KeyError as error:
            raise ValueError(f"{path}: {error.args[0]}") from None
    return pd.DataFrame({name: _column(values) for name, values in columns.items()}, copy=False)


def _chosen(names: list[str], wanted: list[str] | None) -> list[str]:
    """The fields of `names` to read: all, or those `wanted`, in the order of `names`."""
    if wanted is None:
        return names
    absent = [name for name in wanted if name not in names]
    if absent:
        raise KeyError(f"no field {', '.join(absent)}; it has {', '.join(names)}")
    return [name for name in names if name in wanted]


def _numpy(file: BinaryIO, size: int, wanted: list[str] | None) -> dict[str, Any]:
    """The fields `wanted` of the `.npy` file open as `file`, read a part of its rows at a time."""
    try:
        version = np.lib.format.read_magic(file)
        read_header = (
            np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        )
        shape, _, dtype = read_header(file)
    except (OSError, EOFError) as error:
        raise ValueError(str(error)) from error
    if dtype.hasobject:
        raise ValueError("it holds Python objects, which are never unpickled")
    if dtype.names is None or len(shape) != 1:
        raise ValueError("it holds no table of fields, one row a particle")
    empty = [name for name in dtype.names if dtype.fields[name][0].itemsize == 0]
    if empty or dtype.itemsize == 0:
        named = ", ".join(empty) or "its rows"
        raise ValueError(f"{named}: 0 bytes a row, so the file cannot bound how many rows it claims")
    rows, offset = math.prod(shape), file.tell()
    if rows > (size - offset) // dtype.itemsize:
        raise ValueError(f"the header claims {rows} rows of {dtype.itemsize} bytes; it holds {size - offset}")
    chosen = _chosen(list(dtype.names), wanted)
    fields = {name: dtype.fields[name][0] for name in chosen}
    numbers = {
        name: np.empty((rows, *field.shape), field.base.newbyteorder("="))
        for name, field in fields.items()
        if field.base.kind != "S"
    }
    texts = {name: _Texts(rows) for name, field in fields.items() if field.base.kind == "S"}
    step = max(1, configuration().cs_part_bytes // dtype.itemsize)
    part = np.empty(min(rows, step) * dtype.itemsize, np.uint8)
    for start in range(0, rows, step):
        count = min(step, rows - start)
        read = part[: count * dtype.itemsize]
        if os.preadv(file.fileno(), [read], offset + start * dtype.itemsize) < read.nbytes:
            raise ValueError("the file was cut short while it was read")
        records = read.view(dtype)
        for name, out in numbers.items():
            out[start : start + count] = records[name]
        for name, held in texts.items():
            held.add(start, records[name])
    return {name: numbers[name] if name in numbers else texts[name] for name in chosen}


def _stream(file: BinaryIO, size: int, wanted: list[str] | None) -> dict[str, Any]:
    """The fields `wanted` of the compressed stream open as `file`, each column allocated once its
    bytes are read and found able to hold it."""

    def within(start: int, count: int, what: str) -> None:
        if count > size - start:
            raise ValueError(f"{what} of {count} bytes at byte {start} runs past the end of the file")

    def read(start: int, count: int, what: str) -> bytes:
        within(start, count, what)
        return os.pread(file.fileno(), count, start)

    position = len(_STREAM) + 4
    (length,) = np.frombuffer(read(len(_STREAM), 4, "the header's size"), "<u4").tolist()
    if length > MAX_CS_HEADER_BYTES:
        raise ValueError(f"a header of {length} bytes, more than the {MAX_CS_HEADER_BYTES} one may have")
    try:
        header = json.loads(read(position, length, "the header"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"its header is not JSON: {error}") from None
    rows, fields, compressed = _stream_header(header)
    position += length
    chosen = set(_chosen(list(fields), wanted))
    columns: dict[str, Any] = {}
    for name, (dtype, shape, _) in fields.items():
        held = rows * dtype.itemsize * math.prod(shape)
        if not rows:  # a stream of no rows holds no columns
            columns[name] = np.empty((0, *shape), dtype.newbyteorder("="))
            continue
        (count,) = np.frombuffer(read(position, 4, f"the size of {name}"), "<u4").tolist()
        within(position + 4, count, name)
        start, position = position + 4, position + 4 + count
        if name not in chosen:
            continue
        if held > (count * MAX_LZ4_RATIO + 16 if name in compressed else count) or (
            name not in compressed and held != count
        ):
            raise ValueError(f"{name}: {count} bytes cannot hold {rows} rows of {dtype} {shape}")
        out = np.empty(held, np.uint8)
        if name not in compressed:
            if os.preadv(file.fileno(), [out], start) < held:
                raise ValueError("the file was cut short while it was read")
        else:
            try:
                _native.lz4_decode(os.pread(file.fileno(), count, start), out)
            except ValueError as error:
                raise ValueError(f"{name}: {error}") from None
        columns[name] = out.view(dtype).reshape(rows, *shape).astype(dtype.newbyteorder("="), copy=False)
    texts = [name for name in columns if fields[name][2]]
    heap = read(position, size - position, "the heap of texts") if texts else b""
    for name in texts:
        held = _Texts(rows)
        held.add_offsets(columns[name], heap)
        columns[name] = held
    return {name: columns[name] for name in fields if name in chosen}


def _stream_header(header: Any) -> tuple[int, dict[str, tuple[np.dtype, tuple[int, ...], bool]], set[str]]:
    """The rows, fields (their types, shapes, and whether they are texts) and compressed fields a
    stream's header declares, each checked."""
    if not isinstance(header, dict) or not isinstance(header.get("length"), int) or header["length"] < 0:
        raise ValueError("its header does not give its rows as a length of 0 or more")
    fields = {}
    for field in header.get("dtype") if isinstance(header.get("dtype"), list) else ():
        if not (
            isinstance(field, list) and 2 <= len(field) <= 3 and all(isinstance(f, str) for f in field[:2])
        ):
            raise ValueError(f"a field of its header is not [name, type] or [name, type, shape]: {field!r}")
        shape = tuple(field[2]) if len(field) == 3 else ()
        if not all(isinstance(extent, int) and 1 <= extent <= 65535 for extent in shape) or len(shape) > 3:
            raise ValueError(f"{field[0]}: a shape of 1 to 3 extents of 1 to 65535, not {field[2]!r}")
        text = field[1] == "|O"
        try:
            dtype = np.dtype("<u8" if text else field[1])
        except (TypeError, ValueError):
            raise ValueError(f"{field[0]}: not a type of numbers: {field[1]!r}") from None
        if dtype.kind not in "biufc" or dtype.fields is not None or dtype.shape:
            raise ValueError(f"{field[0]}: not a type of numbers or texts: {field[1]!r}")
        fields[field[0]] = (dtype, shape, text)
    if not fields:
        raise ValueError("its header declares no field")
    if header.get("compression") not in (None, "lz4"):
        raise ValueError(f"a compression other than LZ4: {header.get('compression')!r}")
    compressed = header.get("compressed_fields") or []
    if not isinstance(compressed, list) or not all(isinstance(name, str) for name in compressed):
        raise ValueError("its header's compressed_fields is not a list of names")
    if compressed and header.get("compression") is None:
        raise ValueError("its header names compressed fields, but no compression")
    return header["length"], fields, set(compressed)


class _Texts:
    """The texts of a field, each distinct one once, and the number of each row's among them."""

    def __init__(self, rows: int):
        self.codes = np.empty(rows, np.int32)
        self.distinct: dict[bytes, int] = {}

    def _runs(self, start: int, values: np.ndarray, text: Any) -> None:
        """Number rows `start` on, of `values` (texts or what stands for them), whose text
        `text(value)` gives: once a run of equal values, as rows of one micrograph are."""
        if not len(values):
            return
        starts = np.flatnonzero(np.concatenate(([True], values[1:] != values[:-1])))
        numbers = [
            self.distinct.setdefault(text(value), len(self.distinct)) for value in values[starts].tolist()
        ]
        lengths = np.diff(np.append(starts, len(values)))
        self.codes[start : start + len(values)] = np.repeat(np.asarray(numbers, np.int32), lengths)

    def add(self, start: int, values: np.ndarray) -> None:
        """Number rows `start` on, fixed-size byte strings (numpy's `S`, NULs at their end left out)."""
        self._runs(start, values, lambda value: value)

    def add_offsets(self, offsets: np.ndarray, heap: bytes) -> None:
        """Number every row, by the offset of its text in `heap`, where a NUL (or the heap's end) ends it."""
        if len(offsets) and offsets.max() > max(len(heap) - 1, 0):
            raise ValueError(f"an offset of a text, {offsets.max()}, past the heap of {len(heap)} bytes")

        def text(offset: int) -> bytes:
            end = heap.find(b"\0", offset)
            return heap[offset : len(heap) if end < 0 else end]

        self._runs(0, offsets, text)

    def column(self) -> Any:
        """The texts as a categorical column, decoded as file names are."""
        import pandas as pd

        written = list(self.distinct)
        try:
            decoded = [text.decode() for text in written]
        except UnicodeDecodeError:
            decoded = [os.fsdecode(text) for text in written]
        return pd.Categorical.from_codes(self.codes, pd.Index(decoded, dtype=object))


def _column(values: Any) -> Any:
    """What a field read becomes in the table: texts categorical, several values a row fixed-size lists
    in one Arrow buffer (a list of arrays a row without pyarrow), one value a row as it is."""
    if isinstance(values, _Texts):
        return values.column()
    if values.ndim == 1:
        return values
    try:
        import pandas as pd
        import pyarrow as pa
    except ModuleNotFoundError:
        return list(values)
    lists = pa.array(values.reshape(-1))
    for extent in reversed(values.shape[1:]):
        lists = pa.FixedSizeListArray.from_arrays(lists, extent)
    return pd.arrays.ArrowExtensionArray(lists)
