"""MRC2014: the image, stack and volume format of cryo-EM.

Read: modes 0 (int8), 1 (int16), 2 (float32), 3 (complex int16, read as
complex64), 4 (complex64), 6 (uint16) and 12 (float16), either byte order,
extended headers skipped by their declared size, axes permuted by
`mapc mapr maps` so that a volume reads as (z, y, x).

What a file holds, as its header says: `ispg` 0 with `nz != 1`, or the
extension `.mrcs`, is a stack of images (`nz` 0: an empty one);
`ispg` 401..630 is a stack of `nz / mz` volumes; otherwise `nz > 1` is a
volume and `nz == 1` one image.

A reader's `voxel_size` is the cell divided by its sampling (`mx my mz`),
in Å, slowest axis first; its `header_statistics` are `dmin dmax dmean rms`.

Headers as common writers produce them read with a `FormatWarning` (once
per file and problem in a process) where
the data is unambiguous (as mrcfile's permissive mode does): a zero or
unknown machine stamp (the byte order is then inferred), a missing `MAP `
field, an `nsymbt` that points past a missing extended header, axes that
are not a permutation of 1, 2, 3 (taken as 1, 2, 3), a volume stack whose
`mz` does not divide `nz` (read as a volume).

Written files carry a complete MRC2014 header (map ID, machine stamp,
`nversion` 20141, the cell of the voxel size given, or of zero where none
is, which readers take as unknown, as mrcfile writes it; statistics `dmin
dmax dmean rms` of the values written; complex files get `rms` only, and an
empty stack none, as mrcfile does). Types without an MRC mode are widened
or narrowed to one: bool and uint8 to uint16, other integers and float64 to
float32, complex128 to complex64. Since a
`.mrcs` file reads as a stack of images, volumes and stacks of volumes are
not written to one (`ValueError`); nor are images without pixels. An
empty stack is written (`nz` 0) and reads back as one.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Hashable
from typing import Any, BinaryIO, NamedTuple

import numpy as np

from .._storage import ByteSource
from .._types import ImageDescriptor, NumericalType
from ._contract import Format, FormatError, HeaderStatistics, ImageReader, ImageWriter, warn_header
from ._raw import RawArrayReader, check_size
from ._raw_writer import RawArrayWriter, Statistics
from ._remote_raw import raw_reader

__all__ = ["MrcFormat"]

HEADER_BYTES = 1024
_MODES = {
    0: np.dtype(np.int8),
    1: np.dtype(np.int16),
    2: np.dtype(np.float32),
    3: np.dtype([("real", np.int16), ("imag", np.int16)]),
    4: np.dtype(np.complex64),
    6: np.dtype(np.uint16),
    12: np.dtype(np.float16),
}
_READ_TYPES = {3: NumericalType.complex_float32}
_WRITE_MODES = {
    NumericalType.int8: 0,
    NumericalType.int16: 1,
    NumericalType.float32: 2,
    NumericalType.complex_float32: 4,
    NumericalType.uint16: 6,
    NumericalType.float16: 12,
    NumericalType.boolean: 6,
    NumericalType.uint8: 6,
    NumericalType.int32: 2,
    NumericalType.uint32: 2,
    NumericalType.int64: 2,
    NumericalType.uint64: 2,
    NumericalType.float64: 2,
    NumericalType.complex_float64: 4,
}
_STAMPS = {0x44: "<", 0x11: ">"}
_UNDETERMINED = (0.0, -1.0, -2.0, -1.0)
"""`dmin dmax dmean rms` that say the statistics are not known (`dmax < dmin`, `dmean < dmin`, `rms < 0`),
as mrcfile writes them for a file without values."""
_HEADER = np.dtype(
    [
        ("nx", "i4"),
        ("ny", "i4"),
        ("nz", "i4"),
        ("mode", "i4"),
        ("nxstart", "i4"),
        ("nystart", "i4"),
        ("nzstart", "i4"),
        ("mx", "i4"),
        ("my", "i4"),
        ("mz", "i4"),
        ("cella", "f4", 3),
        ("cellb", "f4", 3),
        ("mapc", "i4"),
        ("mapr", "i4"),
        ("maps", "i4"),
        ("dmin", "f4"),
        ("dmax", "f4"),
        ("dmean", "f4"),
        ("ispg", "i4"),
        ("nsymbt", "i4"),
        ("extra1", "V8"),
        ("exttyp", "S4"),
        ("nversion", "i4"),
        ("extra2", "V84"),
        ("origin", "f4", 3),
        ("map", "S4"),
        ("machst", "u1", 4),
        ("rms", "f4"),
        ("nlabl", "i4"),
        ("label", "S80", 10),
    ]
).newbyteorder("<")
"""The fields of the MRC2014 main header (`HEADER_BYTES`), by name, in its order; little endian here."""


_SPANS = {name: (offset, offset + dtype.itemsize) for name, (dtype, offset) in _HEADER.fields.items()}
"""Where each field of the header lies, (start, end) in bytes."""


def _field_bytes(head: bytes, name: str) -> bytes:
    """The bytes of field `name` of a header, however short `head` is."""
    start, end = _SPANS[name]
    return head[start:end]


_READ = ("nx", "ny", "nz", "mode", "mx", "my", "mz", "cella", "mapc", "mapr", "maps")
_READ += ("dmin", "dmax", "dmean", "ispg", "nsymbt", "map", "rms")


def _values_of(name: str) -> int:
    """How many values field `name` holds (the cell's lengths three); text is one."""
    dtype = _HEADER.fields[name][0]
    return 1 if dtype.base.kind == "S" else dtype.itemsize // dtype.base.itemsize


def _header_struct(order: str) -> struct.Struct:
    """The fields of `_READ` as `struct` reads them from a header in byte order `order`, one value each
    (the cell's three lengths three), the bytes between them skipped."""
    codes, at = [order], 0
    for name in _READ:
        dtype, offset = _HEADER.fields[name][:2]
        base = dtype.base
        codes.append(f"{offset - at}x" if offset > at else "")
        codes.append(f"{base.itemsize}s" if base.kind == "S" else f"{_values_of(name)}{base.char}")
        at = offset + dtype.itemsize
    return struct.Struct("".join(codes))


_HEADER_IN = {order: _header_struct(order) for order in "<>"}
"""The fields of the header a reader takes, in each byte order, made once: a file's header is read at
every open, and at every check of its shape."""
_NAMES = tuple(
    name if _values_of(name) == 1 else f"{name}_{i}" for name in _READ for i in range(_values_of(name))
)
"""The names of the values `_HEADER_IN` reads: a field's own, or of a field of several values, its name
and the value's place (`cella_0`, `cella_1`, `cella_2`)."""


def _joined(spans: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """`spans` in order, each joined with the one before it where they touch."""
    joined: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if joined and joined[-1][1] == start:
            start = joined.pop()[0]
        joined.append((start, end))
    return tuple(joined)


_DESCRIBED_BY = _joined(
    [_SPANS[name] for name in (*_READ, "machst") if name not in ("dmin", "dmax", "dmean", "rms")]
)
"""Where the fields lie that what a file holds is read from: those a reader takes, but the statistics,
and the machine stamp."""


def _fields(head: bytes, order: str) -> dict[str, Any]:
    """The fields a reader takes of the header that starts `head` (of at least `HEADER_BYTES`), in byte
    order `order`, as Python values by name (`_NAMES`)."""
    return dict(zip(_NAMES, _HEADER_IN[order].unpack_from(head)))


_UNREAD_MODES = {101: "4-bit"}
"""Modes of MRC2014 that vitrio does not read, by what their values are."""


def _sized(fields: dict[str, Any]) -> bool:
    nx, ny, nz = fields["nx"], fields["ny"], fields["nz"]
    return 0 < nx < 1 << 24 and 0 < ny < 1 << 24 and 0 <= nz < 1 << 31


def _plausible(fields: dict[str, Any]) -> bool:
    return fields["mode"] in _MODES and _sized(fields)


def _byte_order(key: str, head: bytes) -> tuple[str, dict[str, Any]]:
    """The byte order of the header that starts `head`, and its fields read in that order."""
    stamp = _field_bytes(head, "machst")
    order = _STAMPS.get(stamp[0])
    if order is not None and _plausible(fields := _fields(head, order)):
        return order, fields
    for guess in ("<", ">"):
        if _plausible(fields := _fields(head, guess)):
            warn_header(
                f"{key}: machine stamp {stamp.hex()} is not a valid one; "
                f"the header reads as {'little' if guess == '<' else 'big'} endian",
                stacklevel=5,
            )
            return guess, fields
    for guess in ("<", ">"):
        if _sized(fields := _fields(head, guess)) and fields["mode"] in _UNREAD_MODES:
            mode = fields["mode"]
            raise FormatError(f"{key}: MRC mode {mode} ({_UNREAD_MODES[mode]}) is not a mode vitrio reads")
    raise FormatError(f"{key}: not an MRC file: its header gives no valid size and mode in either byte order")


class _Header:
    """The fields of an MRC header a reader needs."""

    def __init__(self, key: str, head: bytes):
        if len(head) < HEADER_BYTES:
            raise FormatError(f"{key}: not an MRC file: {len(head)} bytes, shorter than a header")
        self.order, fields = _byte_order(key, head)
        self.nx, self.ny, self.nz, self.mode = fields["nx"], fields["ny"], fields["nz"], fields["mode"]
        self.mx, self.my, self.mz = fields["mx"], fields["my"], fields["mz"]
        self.cell = fields["cella_0"], fields["cella_1"], fields["cella_2"]
        self.axes = fields["mapc"], fields["mapr"], fields["maps"]
        self.ispg, self.nsymbt = fields["ispg"], fields["nsymbt"]
        self.statistics = HeaderStatistics(fields["dmin"], fields["dmax"], fields["dmean"], fields["rms"])
        self.has_map = fields["map"] == b"MAP "
        if self.nsymbt < 0:
            raise FormatError(f"{key}: extended header size (nsymbt) is negative: {self.nsymbt}")


def _core_axes(key: str, header: _Header) -> tuple[int, ...] | None:
    """How the stored (section, row, column) axes are permuted into (z, y, x)."""
    if tuple(header.axes) in ((1, 2, 3), (0, 0, 0)):
        return None
    if sorted(header.axes) != [1, 2, 3]:
        warn_header(
            f"{key}: mapc, mapr, maps {header.axes} are not a permutation of 1, 2, 3; read as 1, 2, 3",
            stacklevel=5,
        )
        return None
    mapc, mapr, maps = header.axes
    to_read = {3 - mapc: 2, 3 - mapr: 1, 3 - maps: 0}
    return tuple(to_read[i] for i in range(3))


def _layout(key: str, header: _Header) -> tuple[tuple[int, ...], int, tuple[int, ...] | None]:
    """The extents, core rank and axis permutation of the file."""
    nx, ny, nz = header.nx, header.ny, header.nz
    if key.lower().endswith(".mrcs") or (header.ispg == 0 and nz != 1):
        return (nz, ny, nx), 2, None
    axes = _core_axes(key, header)
    count, stored = None, (nz, ny, nx)
    if 401 <= header.ispg <= 630:
        if header.mz > 0 and nz % header.mz == 0:
            count, stored = nz // header.mz, (header.mz, ny, nx)
        else:
            warn_header(
                f"{key}: space group {header.ispg} marks a volume stack, but mz {header.mz} does not "
                f"divide nz {nz}; read as one volume",
                stacklevel=5,
            )
    core = stored if axes is None else tuple(stored[axes[i]] for i in range(3))
    if count is not None:
        return (count, *core), 3, axes
    if nz == 1 and axes is None:
        return (ny, nx), 2, None
    return core, 3, axes


def _voxel_size(header: _Header, core_rank: int) -> tuple[float, ...] | None:
    """The cell over its sampling along z, y, x (the last `core_rank`); None unless all are positive."""
    samples = (header.mz, header.my, header.mx)[3 - core_rank :]
    cell = tuple(reversed(header.cell))[3 - core_rank :]
    if min(samples) <= 0 or min(cell) <= 0:
        return None
    return tuple(float(c) / m for c, m in zip(cell, samples))


def _decode_complex_int16(stored: np.ndarray, out: np.ndarray) -> None:
    values = stored["real"].astype(np.float32) + 1j * stored["imag"].astype(np.float32)
    np.copyto(out, values, casting="unsafe")


class _Plan(NamedTuple):
    """What a reader of an MRC file is made of, as its header and size say."""

    header: _Header
    descriptor: ImageDescriptor
    stored: np.dtype
    offset: int
    data_bytes: int
    axes: tuple[int, ...] | None


def _plan(key: str, head: bytes, size: int) -> _Plan:
    """The plan of a reader of the MRC file at `key` of `size` bytes that starts with `head`.

    Raises:
        FormatError: If the header is not one of a mode vitrio reads.
    """
    header = _Header(key, head)
    if header.mode not in _MODES:
        raise FormatError(f"{key}: MRC mode {header.mode} is not supported")
    if not header.has_map:
        warn_header(f"{key}: the MRC map field is not 'MAP '", stacklevel=4)
    extents, core_rank, axes = _layout(key, header)
    stored = _MODES[header.mode].newbyteorder(header.order)
    descriptor = ImageDescriptor(extents, core_rank, _READ_TYPES.get(header.mode, _MODES[header.mode]))
    data_bytes = header.nx * header.ny * header.nz * stored.itemsize
    offset = HEADER_BYTES + header.nsymbt
    if header.nsymbt and offset + data_bytes > size and HEADER_BYTES + data_bytes == size:
        warn_header(
            f"{key}: nsymbt says an extended header of {header.nsymbt} bytes, but the file has "
            "none; reading the data right after the main header",
            stacklevel=4,
        )
        offset = HEADER_BYTES
    return _Plan(header, descriptor, stored, offset, data_bytes, axes)


class MrcFormat(Format):
    """MRC2014 files: `.mrc .mrcs .map`, and `.st .rec .ali` when reading."""

    name = "mrc"
    read_extensions = (".mrc", ".mrcs", ".map", ".st", ".rec", ".ali")
    write_extensions = (".mrc", ".mrcs", ".map")
    reads_urls = True

    @classmethod
    def recognizes(cls, head: bytes, extension: str) -> bool:
        return _field_bytes(head, "map") == b"MAP " or extension in cls.read_extensions

    @classmethod
    def open(cls, key: str, source: ByteSource, head: bytes) -> ImageReader:
        plan = _plan(key, head, source.size)
        voxel_size = _voxel_size(plan.header, plan.descriptor.core_rank)
        reader = raw_reader(
            RawArrayReader,
            key,
            source,
            plan.descriptor,
            plan.stored,
            plan.offset,
            axes=plan.axes,
            decoder=_decode_complex_int16 if plan.header.mode == 3 else None,
            voxel_size=voxel_size,
            header_statistics=plan.header.statistics,
        )
        reader.voxel_size_source = None if voxel_size is None else "MRC cell"
        return reader

    @classmethod
    def describe(cls, key: str, source: ByteSource, head: bytes) -> ImageDescriptor:
        """What the file holds, from its header and size alone: no map, no reader."""
        plan = _plan(key, head, source.size)
        check_size(key, source.size, plan.offset + plan.data_bytes)
        return plan.descriptor

    @classmethod
    def describes_alike(cls, key: str, head: bytes, size: int) -> Hashable:
        """The header's fields `describe` reads (`_DESCRIBED_BY`), the size, and whether the key names
        a stack of images (`.mrcs`)."""
        return (key.lower().endswith(".mrcs"), size, *[head[start:end] for start, end in _DESCRIBED_BY])

    stores_voxel_size = True

    @classmethod
    def create(
        cls, key: str, descriptor: ImageDescriptor, voxel_size: tuple[float, ...] | None = None
    ) -> ImageWriter:
        mode = _WRITE_MODES.get(descriptor.data_type)
        if mode is None:
            raise ValueError(f"{key}: MRC cannot hold {descriptor.data_type.name} values")
        if 0 in descriptor.core_extents:
            raise ValueError(f"{key}: MRC cannot hold images without pixels ({descriptor})")
        extents = descriptor.extents
        if descriptor.core_rank == 3 and key.lower().endswith(".mrcs"):
            raise ValueError(
                f"{key}: a .mrcs file is a stack of images, it cannot hold volumes ({descriptor})"
            )
        if descriptor.core_rank == 2 and len(extents) == 2:
            (ny, nx), nz, mz, ispg = extents, 1, 1, 0
        elif descriptor.core_rank == 2 and len(extents) == 3:
            (nz, ny, nx), mz, ispg = extents, 1, 0
        elif descriptor.core_rank == 3 and len(extents) == 3:
            (nz, ny, nx), ispg = extents, 1
            mz = nz
        elif descriptor.core_rank == 3 and len(extents) == 4:
            count, mz, ny, nx = extents
            nz, ispg = count * mz, 401
        else:
            raise ValueError(f"{key}: MRC holds images, volumes and stacks of one of them, not {descriptor}")
        dtype = _MODES[mode]
        cell = _cell((mz, ny, nx), voxel_size)
        fields = {"nx": nx, "ny": ny, "nz": nz, "mode": mode, "mx": nx, "my": ny, "mz": mz, "ispg": ispg}
        fields.update(cella=cell, cellb=(90.0, 90.0, 90.0), mapc=1, mapr=2, maps=3)
        data_bytes = nx * ny * nz * dtype.itemsize

        def prepare(file: BinaryIO) -> int:
            file.write(_header_bytes(fields, _UNDETERMINED))
            file.truncate(HEADER_BYTES + data_bytes)
            return HEADER_BYTES

        def complete(fd: int, statistics: Statistics) -> None:
            low, high, mean, rms = statistics.summary()
            if nz == 0:
                values = _UNDETERMINED
            elif dtype.kind == "c":
                values = (*_UNDETERMINED[:3], rms)
            else:
                values = (low, high, mean.real, rms)
            os.pwrite(fd, _header_bytes(fields, values), 0)

        return RawArrayWriter(key, descriptor, dtype, prepare, complete)


def _cell(samples: tuple[int, int, int], voxel_size: tuple[float, ...] | None) -> tuple[float, float, float]:
    """The cell (x, y, z) of `samples` (z, y, x) voxels of `voxel_size` Å (slowest first); zero if None.

    An image's sections are spaced as its columns, as RELION writes them.
    """
    if voxel_size is None:
        return (0.0, 0.0, 0.0)
    sizes = tuple(voxel_size)
    if len(sizes) == 2:
        sizes = (sizes[1], *sizes)
    return tuple(float(n * size) for n, size in zip(reversed(samples), reversed(sizes)))


def _header_bytes(fields: dict[str, object], statistics: tuple[float, float, float, float]) -> bytes:
    """A little-endian MRC2014 header of `fields` and `(dmin, dmax, dmean, rms)`."""
    header = np.zeros((), _HEADER)
    for name, value in fields.items():
        header[name] = value
    header["dmin"], header["dmax"], header["dmean"], header["rms"] = statistics
    header["nversion"], header["map"], header["machst"] = 20141, b"MAP ", (0x44, 0x44, 0, 0)
    header["nlabl"] = 1
    header["label"][0] = f"vitrio {time.strftime('%Y-%m-%d %H:%M:%S')}".encode()
    return header.tobytes()
