"""Synthetic EER files, for tests of readers and for benchmarks: an encoder of electron events.

The code stream is the one `vitrio.formats.eer` reads: run lengths of
`rlebits` bits, a run of all ones a skip, every other run followed by the
event's stored sub-pixel bits (the position's top bit flipped), least
significant bit first. Files are BigTIFF whose pages hold the encoded
strips, tagged with an EER compression.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import tifffile

__all__ = ["encode_stream", "random_events", "encode_frame", "write_eer", "patch_compression"]


def encode_stream(pixels: np.ndarray, hsub: np.ndarray, vsub: np.ndarray, npix: int, code: tuple) -> bytes:
    """The code stream of events at flat `pixels` (ascending) with stored sub-pixel bits, and its end."""
    rlebits, hbits, vbits = code
    skip = (1 << rlebits) - 1
    gaps = np.diff(np.concatenate(([-1], pixels, [npix]))) - 1
    values = (gaps % skip).astype(np.uint64)
    values[:-1] |= (hsub.astype(np.uint64) << rlebits) | (vsub.astype(np.uint64) << (rlebits + hbits))
    per_gap = gaps // skip + 1
    lasts = np.cumsum(per_gap) - 1
    codes = np.full(int(per_gap.sum()), skip, dtype=np.uint64)
    lengths = np.full(len(codes), rlebits, dtype=np.int64)
    codes[lasts] = values
    lengths[lasts] = rlebits + hbits + vbits
    offsets = np.cumsum(lengths) - lengths
    nbytes = -(-int(offsets[-1] + lengths[-1]) // 8)
    nbytes += nbytes % 2  # imagecodecs only decodes streams of an even number of bytes
    shifted = codes << (offsets & 7).astype(np.uint64)
    stream = np.zeros(nbytes + 8, dtype=np.float64)
    for byte in range(5):
        parts = ((shifted >> np.uint64(8 * byte)) & np.uint64(255)).astype(np.float64)
        stream += np.bincount((offsets >> 3) + byte, weights=parts, minlength=len(stream))
    return stream[:nbytes].astype(np.uint8).tobytes()


def random_events(rng: np.random.Generator, shape: tuple, code: tuple, density: float) -> np.ndarray:
    """(y, x) rows on the sub-pixel grid: at most one event in each pixel, in stream order."""
    _, hbits, vbits = code
    pixels = np.flatnonzero(rng.random(shape[0] * shape[1]) < density)
    y, x = np.divmod(pixels, shape[1])
    fine_y = (y << vbits) | rng.integers(0, 1 << vbits, len(pixels))
    fine_x = (x << hbits) | rng.integers(0, 1 << hbits, len(pixels))
    return np.stack([fine_y, fine_x], axis=1).astype(np.uint32)


def encode_frame(events: np.ndarray, shape: tuple, code: tuple, rows_per_strip: int) -> list[bytes]:
    """The strips of one frame of `events`."""
    _, hbits, vbits = code
    y, x = events[:, 0].astype(np.int64) >> vbits, events[:, 1].astype(np.int64) >> hbits
    hsub = (events[:, 1] & ((1 << hbits) - 1)) ^ (1 << hbits >> 1)
    vsub = (events[:, 0] & ((1 << vbits) - 1)) ^ (1 << vbits >> 1)
    strips = []
    for row in range(0, shape[0], rows_per_strip):
        rows = min(rows_per_strip, shape[0] - row)
        inside = (y >= row) & (y < row + rows)
        pixels = (y[inside] - row) * shape[1] + x[inside]
        strips.append(encode_stream(pixels, hsub[inside], vsub[inside], rows * shape[1], code))
    return strips


def write_eer(
    path: Path,
    frames: list[list[bytes]],
    shape: tuple,
    compression: int = 65001,
    code: tuple | None = None,
    rows_per_strip: int | None = None,
    integrated: np.ndarray | None = None,
    bigtiff: bool = True,
) -> Path:
    """Write frames of strips as a BigTIFF EER file; `code` goes to tags 65007-65009 (for 65002)."""
    extratags = [(65001, 7, None, b"<metadata><item key='sensorPixelSize.width'>1</item></metadata>", True)]
    if code is not None:
        extratags += [(tag, 3, 1, bits, True) for tag, bits in zip((65007, 65008, 65009), code)]
    with tifffile.TiffWriter(path, bigtiff=bigtiff) as tiff:
        if integrated is not None:
            tiff.write(integrated, photometric="minisblack")
        for strips in frames:
            # tifffile writes encoded strips as given, but only for a compression it knows: patched below
            tiff.write(
                iter(strips),
                shape=shape,
                dtype=np.uint8,
                compression="zlib",
                photometric="minisblack",
                rowsperstrip=rows_per_strip or shape[0],
                extratags=extratags,
                contiguous=False,
            )
    patch_compression(
        path, range(integrated is not None, len(frames) + (integrated is not None)), compression
    )
    return path


def patch_compression(path: Path, pages, compression: int) -> None:
    """Set the compression tag of `pages` to `compression`."""
    with tifffile.TiffFile(path) as tif:
        offsets = [tif.pages[page].tags[259].valueoffset for page in pages]
    with open(path, "r+b") as handle:
        for offset in offsets:
            handle.seek(offset)
            handle.write(struct.pack("<H", compression))
