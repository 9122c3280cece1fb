"""Files built by hand, byte by byte from the MRC2014 specification, for the tests of the core.

These are an implementation independent of vitrio's writer: headers with
any byte order, machine stamp, space group, axis order or extended header,
including the malformed ones common writers produce.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

NUMPY_TYPES = (
    "int8",
    "uint8",
    "int16",
    "uint16",
    "int32",
    "uint32",
    "int64",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
)
"""Every numeric numpy type, by name: what TIFF holds and vitrio reads into."""

MODE_DTYPES = {
    0: np.dtype(np.int8),
    1: np.dtype(np.int16),
    2: np.dtype(np.float32),
    4: np.dtype(np.complex64),
    6: np.dtype(np.uint16),
    12: np.dtype(np.float16),
}
STAMP_LITTLE = b"\x44\x44\x00\x00"
STAMP_BIG = b"\x11\x11\x00\x00"


def mrc_header(
    nx: int,
    ny: int,
    nz: int,
    mode: int,
    *,
    order: str = "<",
    ispg: int = 0,
    mz: int | None = None,
    axes: tuple[int, int, int] = (1, 2, 3),
    nsymbt: int = 0,
    stamp: bytes | None = None,
    map_field: bytes = b"MAP ",
    statistics: tuple[float, float, float, float] = (0.0, -1.0, -2.0, -1.0),
) -> bytes:
    """The 1024 bytes of an MRC2014 header, in byte order `order` ("<" or ">")."""
    if mz is None:
        mz = 1 if ispg == 0 else nz
    dmin, dmax, dmean, rms = statistics
    header = bytearray(1024)
    struct.pack_into(order + "10i", header, 0, nx, ny, nz, mode, 0, 0, 0, nx, ny, mz)
    struct.pack_into(order + "6f", header, 40, float(nx), float(ny), float(mz), 90.0, 90.0, 90.0)
    struct.pack_into(order + "3i", header, 64, *axes)
    struct.pack_into(order + "3f", header, 76, dmin, dmax, dmean)
    struct.pack_into(order + "2i", header, 88, ispg, nsymbt)
    struct.pack_into(order + "i", header, 108, 20141)
    header[208:212] = map_field
    if stamp is None:
        stamp = STAMP_LITTLE if order == "<" else STAMP_BIG
    header[212:216] = stamp
    struct.pack_into(order + "f", header, 216, rms)
    return bytes(header)


def write_mrc_by_hand(
    path: str | Path,
    stored: np.ndarray,
    mode: int,
    *,
    order: str = "<",
    extended: bytes = b"",
    nsymbt: int | None = None,
    **fields,
) -> None:
    """Write `stored` (sections, rows, columns) after a hand-made header, in byte order `order`.

    `stored` may be 2-D (one section). For mode 3, `stored` holds int16
    pairs with a last axis of 2 (real, imaginary).
    """
    if mode == 3:
        values = np.ascontiguousarray(stored, dtype=np.dtype(np.int16).newbyteorder(order))
        shape = values.shape[:-1]
    else:
        values = np.ascontiguousarray(stored, dtype=MODE_DTYPES[mode].newbyteorder(order))
        shape = values.shape
    if len(shape) == 2:
        shape = (1, *shape)
    nz, ny, nx = shape
    header = mrc_header(
        nx, ny, nz, mode, order=order, nsymbt=len(extended) if nsymbt is None else nsymbt, **fields
    )
    Path(path).write_bytes(header + extended + values.tobytes())


def read_header_field(path: str | Path, fmt: str, offset: int) -> tuple:
    """Unpack little-endian fields of a header at `offset`."""
    with open(path, "rb") as file:
        head = file.read(1024)
    return struct.unpack_from("<" + fmt, head, offset)
