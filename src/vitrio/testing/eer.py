"""Synthetic EER files, for tests of readers and for benchmarks: an encoder of electron events.

The code stream is the one `vitrio.formats.eer` reads: run lengths of
`rlebits` bits, a run of all ones a skip, every other run followed by the
event's stored sub-pixel bits (the position's top bit flipped), least
significant bit first. Files are BigTIFF whose pages hold the encoded
strips, tagged with an EER compression; the first page holds the
acquisition metadata as EER's XML in tag 65001 (`acquisition_metadata`,
`metadata_xml`). `write_movie` and `random_movie` write whole movies and
keep what they hold, as a `Movie`.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

import numpy as np
import tifffile

__all__ = [
    "FIXED_CODES",
    "METADATA_TAG",
    "Movie",
    "acquisition_metadata",
    "encode_frame",
    "encode_stream",
    "frame_events",
    "metadata_xml",
    "patch_compression",
    "random_events",
    "random_movie",
    "write_eer",
    "write_movie",
]

FIXED_CODES = {65000: (8, 2, 2), 65001: (7, 2, 2)}
"""The (run-length bits, horizontal and vertical sub-pixel bits) of the compressions that fix them."""

METADATA_TAG = 65001
"""The tag of the first page that holds the acquisition metadata (not the compression of that number)."""

Metadata = Mapping[str, tuple[object, str | None]]


def acquisition_metadata(shape: tuple, frames: int, pixel_size_m: float | None = None) -> dict:
    """Items of the acquisition metadata of an EER file, by name as (value, unit or None): the
    camera, the number of frames, the sensor's size (`shape`) and, given `pixel_size_m`, the size
    of its pixels at the specimen in metres, as `sensorPixelSize.height` and `.width`."""
    items: dict = {
        "cameraName": ("BM-Falcon", None),
        "numberOfFrames": (frames, None),
        "sensorImageHeight": (shape[0], "pixel"),
        "sensorImageWidth": (shape[1], "pixel"),
    }
    if pixel_size_m is not None:
        items["sensorPixelSize.height"] = (pixel_size_m, "m")
        items["sensorPixelSize.width"] = (pixel_size_m, "m")
    return items


def metadata_xml(items: Metadata) -> bytes:
    """The XML of EER's acquisition metadata: `<metadata>`, and an `<item name=... unit=...>` of each
    of `items` (name -> (value, unit or None)) on a line of its own."""
    root = ElementTree.Element("metadata")
    root.text = "\n"
    for name, (value, unit) in items.items():
        item = ElementTree.SubElement(root, "item", {"name": name} | ({} if unit is None else {"unit": unit}))
        item.text = str(value)
        item.tail = "\n"
    return ElementTree.tostring(root)


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
    return frame_events(rng.random(shape) < density, code, rng)


def frame_events(hits: np.ndarray, code: tuple, rng: np.random.Generator) -> np.ndarray:
    """The events of a frame with one event in each pixel where `hits` is nonzero, at random
    sub-pixel positions: (y, x) rows on the sub-pixel grid, in stream order."""
    _, hbits, vbits = code
    pixels = np.flatnonzero(hits)
    y, x = np.divmod(pixels, hits.shape[1])
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
    metadata: Metadata | bytes | None = None,
) -> Path:
    """Write frames of strips as a BigTIFF EER file; `code` goes to tags 65007-65009 (for 65002).

    `metadata` goes to tag 65001 of the first page (UNDEFINED bytes), as `metadata_xml` writes
    items, or as given if bytes (none for `b""`); None writes `acquisition_metadata` of the
    frames, without a pixel size.
    """
    if metadata is None:
        metadata = acquisition_metadata(shape, len(frames))
    if not isinstance(metadata, bytes):
        metadata = metadata_xml(metadata)
    first = [(METADATA_TAG, 7, None, metadata, True)] if metadata else []
    codes = (
        [] if code is None else [(tag, 3, 1, bits, True) for tag, bits in zip((65007, 65008, 65009), code)]
    )
    with tifffile.TiffWriter(path, bigtiff=bigtiff) as tiff:
        if integrated is not None:
            tiff.write(integrated, photometric="minisblack", extratags=first)
            first = []
        for page, strips in enumerate(frames):
            extratags = first + codes if page == 0 else codes
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


@dataclass(frozen=True)
class Movie:
    """An EER movie written by `write_movie`: its file, and the events and strips of each frame."""

    path: Path
    events: list[np.ndarray]
    strips: list[list[bytes]]
    code: tuple
    shape: tuple
    rows_per_strip: int

    def counts(self) -> np.ndarray:
        """The events of each frame counted per pixel of the detector, as uint16: from the events the
        movie was written from, not from its file."""
        _, hbits, vbits = self.code
        height, width = self.shape
        frames = np.zeros((len(self.events), height * width), np.uint16)
        for frame, events in zip(frames, self.events):
            y, x = events[:, 0].astype(np.int64) >> vbits, events[:, 1].astype(np.int64) >> hbits
            np.add.at(frame, y * width + x, 1)
        return frames.reshape(len(self.events), height, width)


def write_movie(
    path: Path,
    events: Sequence[np.ndarray],
    shape: tuple,
    compression: int = 65001,
    code: tuple | None = None,
    rows_per_strip: int | None = None,
    metadata: Metadata | bytes | None = None,
) -> Movie:
    """Write an EER movie whose frames hold `events`.

    Args:
        path: The file to write.
        events: Of each frame, (y, x) rows on the sub-pixel grid, as `frame_events` makes them.
        shape: The detector's rows and columns.
        compression: 65000, 65001 or 65002.
        code: The code of compression 65002; the fixed one of 65000 and 65001 by default.
        rows_per_strip: Rows of each strip; a strip per frame by default.
        metadata: The acquisition metadata, as `write_eer` takes it.

    Returns:
        What the movie holds.
    """
    code = code or FIXED_CODES[compression]
    rows_per_strip = rows_per_strip or shape[0]
    strips = [encode_frame(e, shape, code, rows_per_strip) for e in events]
    write_eer(
        path,
        strips,
        shape,
        compression,
        code if compression == 65002 else None,
        rows_per_strip,
        metadata=metadata,
    )
    return Movie(Path(path), list(events), strips, code, tuple(shape), rows_per_strip)


def random_movie(
    path: Path,
    frames: int = 20,
    shape: tuple = (256, 256),
    compression: int = 65001,
    code: tuple | None = None,
    rows_per_strip: int | None = None,
    density: float = 0.05,
    seed: int = 0,
    metadata: Metadata | bytes | None = None,
) -> Movie:
    """Write an EER movie of `frames` frames of events at random pixels, a fraction `density` of them.

    Args:
        path, shape, compression, code, rows_per_strip, metadata: As `write_movie` takes them.
        frames: How many frames.
        density: The chance of an event in each pixel of a frame.
        seed: The seed of the events.

    Returns:
        What the movie holds.
    """
    code = code or FIXED_CODES[compression]
    rng = np.random.default_rng(seed)
    events = [random_events(rng, shape, code, density) for _ in range(frames)]
    return write_movie(path, events, shape, compression, code, rows_per_strip, metadata)
