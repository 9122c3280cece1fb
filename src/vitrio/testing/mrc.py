"""MRC files made by hand, byte by byte from the MRC2014 specification: an oracle independent of vitrio.

Headers with any byte order, machine stamp, space group, axis order or
extended header, including the malformed ones common writers produce.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from vitrio._partial import write_new

__all__ = ["MODE_DTYPES", "STAMP_BIG", "STAMP_LITTLE", "mrc_header", "read_header_field", "write_mrc_by_hand"]

MODE_DTYPES = {
    0: np.dtype(np.int8),
    1: np.dtype(np.int16),
    2: np.dtype(np.float32),
    4: np.dtype(np.complex64),
    6: np.dtype(np.uint16),
    12: np.dtype(np.float16),
}
"""The numpy type of each MRC mode but 3 (complex int16, stored as pairs of int16)."""

STAMP_LITTLE = b"\x44\x44\x00\x00"
"""The machine stamp of a little-endian file."""

STAMP_BIG = b"\x11\x11\x00\x00"
"""The machine stamp of a big-endian file."""


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
    """The 1024 bytes of an MRC2014 header.

    Args:
        nx, ny, nz: Columns, rows and sections.
        mode: The MRC mode of the values.
        order: The byte order, "<" or ">".
        ispg: The space group: 0 for images and stacks, 1 for a volume, 401 for a stack of volumes.
        mz: Sections per volume; defaults to 1 for space group 0, `nz` otherwise.
        axes: MAPC, MAPR, MAPS.
        nsymbt: Bytes of extended header.
        stamp: The machine stamp; defaults to the one of `order`.
        map_field: The 4 bytes of the MAP field.
        statistics: DMIN, DMAX, DMEAN and RMS.

    Returns:
        The header.
    """
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
    """Write `stored` after a hand-made header.

    Args:
        path: The file to write.
        stored: The values, (sections, rows, columns), or 2-D for one
            section. For mode 3, int16 pairs with a last axis of 2 (real, imaginary).
        mode: The MRC mode to store them as.
        order: The byte order, "<" or ">".
        extended: The extended header.
        nsymbt: What the header says the extended header takes; defaults to its length.
        **fields: More fields of `mrc_header`.
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
    write_new(path, header + extended + values.tobytes())


def read_header_field(path: str | Path, fmt: str, offset: int) -> tuple:
    """The little-endian fields `fmt` (a `struct` format) at `offset` of the header of the file at `path`."""
    with open(path, "rb") as file:
        head = file.read(1024)
    return struct.unpack_from("<" + fmt, head, offset)
