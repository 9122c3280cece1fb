"""Telling an EER file by its first bytes: a TIFF file whose first page has an EER compression."""

from __future__ import annotations

import struct

__all__ = ["EER_COMPRESSIONS", "TIFF_MAGICS", "first_compression"]

TIFF_MAGICS = (b"II*\0", b"MM\0*", b"II+\0", b"MM\0+")
EER_COMPRESSIONS = (65000, 65001, 65002)


def first_compression(head: bytes) -> int | None:
    """The compression of the first page of the TIFF file starting with `head`, if `head` holds it."""
    order = {b"II": "<", b"MM": ">"}.get(head[:2])
    if order is None or len(head) < 16:
        return None
    version = struct.unpack_from(order + "H", head, 2)[0]
    if version == 42:
        ifd, count_format, entry_size, value_at = struct.unpack_from(order + "I", head, 4)[0], "H", 12, 8
    elif version == 43:
        ifd, count_format, entry_size, value_at = struct.unpack_from(order + "Q", head, 8)[0], "Q", 20, 12
    else:
        return None
    count_size = struct.calcsize(count_format)
    if ifd + count_size > len(head):
        return None
    count = struct.unpack_from(order + count_format, head, ifd)[0]
    for entry in range(ifd + count_size, min(len(head), ifd + count_size + count * entry_size), entry_size):
        if entry + entry_size > len(head):
            break
        tag, kind = struct.unpack_from(order + "HH", head, entry)
        if tag == 259 and kind in (3, 4):  # SHORT or LONG
            return struct.unpack_from(order + ("H" if kind == 3 else "I"), head, entry + value_at)[0]
    return None
