"""Where the frames of an EER file lie and how they are coded: its strips, read from the TIFF structure."""

from __future__ import annotations

import math
import os
import struct
from typing import Any
from xml.etree import ElementTree

import numpy as np
import tifffile

from ..._native import EER_FULL, EER_PAST_END, EER_TRUNCATED
from ..._storage import ByteSource
from ..._types import ANGSTROMS_PER_UNIT
from .._contract import FormatError
from ._sniff import EER_COMPRESSIONS

__all__ = ["Layout"]

_FIXED_CODES = {65000: (8, 2, 2), 65001: (7, 2, 2)}
_VARIABLE_CODE = 65002
_CODE_TAGS = (65007, 65008, 65009)
_MAX_SIDE = 1 << 20
_METADATA_TAG = 65001  # also the number of a compression, in the compression tag (259)
_METADATA_START = b"<metadata>"
_MAX_METADATA = 1 << 20
_ERRORS = {
    EER_TRUNCATED: "its event stream ends before the end of the frame (the strip is truncated or corrupt)",
    EER_PAST_END: "its event stream runs past the end of the image (corrupt codes)",
    EER_FULL: "it holds more events than its size allows",
}


class Layout:
    """Where the frames of an EER file lie and how they are coded.

    Attributes:
        key: The file's key.
        height, width: The detector's size in pixels.
        rlebits, hbits, vbits: The bits of a run and of the horizontal and vertical sub-pixel position.
        code: (height, width, rlebits, hbits, vbits), as `vitrio._native`'s decoders take them.
        frame_count: How many frames the file holds.
        strips: int64 rows (file offset, byte count, first row, rows), the strips of frame 0, 1, ...
        frame_starts: Where the strips of each frame start in `strips`, and their end.
        strip_frames: The frame of each strip.
        frame_bytes: The bytes of the strips of the frames before each frame, and of all.
        file_end: The end of the last byte of a strip in the file.
        pixel_size: The size of a pixel of the frames at the specimen, (height, width) in Å, from the
            acquisition metadata of the first page (see `_pixel_size`); None where it gives none.

    Raises:
        FormatError: If the file is not a TIFF file of EER frames, its frames lie past its end, or
            they claim more data than the file holds (frames that share their data).
    """

    def __init__(self, key: str, source: ByteSource):
        self.key = key
        size = source.size
        try:
            with (
                source.open_blocks() as handle,
                tifffile.TiffFile(handle, name=os.path.basename(key)) as tif,
            ):
                len(tif.pages)  # indexes every page, which cuts a loop of pages before tifffile follows it
                pages = list(tif.pages)
                if not pages:
                    raise FormatError(f"{key}: the TIFF file has no pages")
                # a file may start with an uncompressed integrated image
                first = 1 if len(pages) > 1 and int(pages[0].compression) == 1 else 0
                frames = [self._frame(frame, page) for frame, page in enumerate(pages[first:])]
                metadata = _metadata_items(pages[0])
        except FormatError:
            raise
        except (ValueError, struct.error, IndexError, KeyError, TypeError, OverflowError) as error:
            raise FormatError(f"{key}: not a readable TIFF file: {error}") from error
        self.code: tuple[int, int, int, int, int] = frames[0][0]
        self.height, self.width, self.rlebits, self.hbits, self.vbits = self.code
        for frame, (geometry, _) in enumerate(frames):
            if geometry != frames[0][0]:
                raise FormatError(
                    f"{key}: frame {frame}: its size or code {geometry} differs from frame 0's {frames[0][0]}"
                )
        self.frame_count = len(frames)
        self.pixel_size = _pixel_size(metadata, self.height, self.width)
        self.strips = np.concatenate([strips for _, strips in frames])
        counts = np.array([len(strips) for _, strips in frames], dtype=np.int64)
        self.frame_starts = np.concatenate(([0], np.cumsum(counts)))
        self.strip_frames = np.repeat(np.arange(self.frame_count), counts)
        byte_counts = self.strips[:, 1]
        self.frame_bytes = np.concatenate(
            ([0], np.cumsum(np.add.reduceat(byte_counts, self.frame_starts[:-1])))
        )
        offsets = self.strips[:, 0]
        # compared without adding, which could overflow int64 for an offset near 2**63
        beyond = np.flatnonzero((offsets < 0) | (byte_counts < 0) | (offsets > size - byte_counts))
        if len(beyond):
            strip = int(beyond[0])
            raise FormatError(
                f"{key}: frame {self.strip_frames[strip]}: its data ({byte_counts[strip]} bytes at "
                f"{offsets[strip]}) lie past the end of the file ({size} bytes); the file is truncated"
            )
        self.file_end = int((offsets + byte_counts).max())
        if int(self.frame_bytes[-1]) > size:  # frames that share their data would render more than it holds
            raise FormatError(
                f"{key}: its frames claim {int(self.frame_bytes[-1])} bytes of data, more than the file's "
                f"{size}: frames share their data"
            )
        # a stream of n bits codes at most n // rlebits runs, each of fewer than 2**rlebits pixels
        codable = (byte_counts * 8 // self.rlebits) * ((1 << self.rlebits) - 1)
        short = np.flatnonzero(self.strips[:, 3] * self.width > codable)
        if len(short):
            strip = int(short[0])
            raise FormatError(
                f"{key}: frame {self.strip_frames[strip]}: a strip of {byte_counts[strip]} bytes cannot code "
                f"{self.strips[strip, 3]} rows of {self.width} pixels"
            )

    def _frame(self, frame: int, page: Any) -> tuple[tuple[int, ...], np.ndarray]:
        """The size and code of one frame's page, and its strips."""
        key = self.key
        compression = int(page.compression)
        if compression not in EER_COMPRESSIONS:
            raise FormatError(
                f"{key}: frame {frame}: compression {compression} is not an EER compression (65000-65002)"
            )
        if compression == _VARIABLE_CODE:
            rlebits, hbits, vbits = (
                int(page.tags.valueof(tag, default)) for tag, default in zip(_CODE_TAGS, (7, 2, 2))
            )
        else:
            rlebits, hbits, vbits = _FIXED_CODES[compression]
        if not (1 <= rlebits <= 16 and 0 <= hbits <= 8 and 0 <= vbits <= 8):
            raise FormatError(f"{key}: frame {frame}: unsupported code of {rlebits}, {hbits}, {vbits} bits")
        height, width = int(page.imagelength), int(page.imagewidth)
        if not (1 <= height <= _MAX_SIDE and 1 <= width <= _MAX_SIDE):
            raise FormatError(f"{key}: frame {frame}: unsupported size {height} x {width}")
        if page.is_tiled:
            raise FormatError(f"{key}: frame {frame}: tiled EER frames are not supported")
        rows_per_strip = max(1, min(int(page.rowsperstrip), height))
        offsets, byte_counts = page.dataoffsets, page.databytecounts
        if len(offsets) != -(-height // rows_per_strip) or len(byte_counts) != len(offsets):
            raise FormatError(
                f"{key}: frame {frame}: {len(offsets)} strips do not fit {height} rows of {rows_per_strip}"
            )
        first_rows = np.arange(len(offsets), dtype=np.int64) * rows_per_strip
        strips = np.stack(
            [
                np.asarray(offsets, dtype=np.int64),
                np.asarray(byte_counts, dtype=np.int64),
                first_rows,
                np.minimum(rows_per_strip, height - first_rows),
            ],
            axis=1,
        )
        return (height, width, rlebits, hbits, vbits), strips

    def most_events(self, begin: int, end: int) -> int:
        """The most events frames `begin..end` can hold, by their strips' bits and pixels.

        An event takes a whole code, so a strip of n bits holds at most
        `n // (rlebits + hbits + vbits)`; and each pixel takes one event at
        most, so a strip holds no more events than its rows have pixels.
        """
        strips = self.strips[self.frame_starts[begin] : self.frame_starts[end]]
        coded = strips[:, 1] * 8 // (self.rlebits + self.hbits + self.vbits)
        return int(np.minimum(coded, strips[:, 3] * self.width).sum())

    def read(self, source: ByteSource, begin: int, end: int, buffer: np.ndarray) -> np.ndarray:
        """Read the strips of frames `begin..end` one after another into `buffer` (of a file at a URL,
        fetched at once, those that touch in one request; of a local file, read into it in place).

        Returns:
            Their rows of `strips`, with the first column made their offset in `buffer`.

        Raises:
            FormatError: If the file ends before a strip does.
        """
        rows = self.strips[self.frame_starts[begin] : self.frame_starts[end]]
        local = rows.copy()
        local[:, 0] = np.cumsum(rows[:, 1]) - rows[:, 1]
        view = memoryview(buffer)
        fd = source.fileno()
        if fd is None:
            bodies = source.read_ranges([(offset, offset + count) for offset, count, _, _ in rows.tolist()])
            for start, body in zip(local[:, 0].tolist(), bodies):
                view[start : start + len(body)] = body
            return local
        for strip, (offset, count, _, _) in enumerate(rows.tolist()):
            start = int(local[strip, 0])
            target = view[start : start + count]
            while len(target):
                read = os.preadv(fd, [target], offset)
                if read == 0:
                    frame = self.strip_frames[self.frame_starts[begin] + strip]
                    raise FormatError(f"{self.key}: frame {frame}: the file is truncated at byte {offset}")
                target = target[read:]
                offset += read
        return local

    def failure(self, begin: int, status: tuple[int, int]) -> FormatError:
        """The error for a decoder's `(strip, code)` status, the strip counted from frame `begin`'s first."""
        strip, code = status
        frame = self.strip_frames[self.frame_starts[begin] + strip]
        return FormatError(f"{self.key}: frame {frame}: {_ERRORS.get(code, f'decoding error {code}')}")


def _metadata_items(page: Any) -> dict[str, tuple[str, str | None]] | None:
    """The items of the acquisition metadata in tag 65001 of a page: text and unit by name.

    EER files hold it as XML, `<metadata><item name="..." unit="...">text</item>...</metadata>`,
    as BYTE, ASCII or UNDEFINED values. The tag is read only if it holds at most 1 MiB, and its
    XML parsed only if it starts with `<metadata>` and declares no document type or entity (so
    that no entity is expanded). Items without a name or text are left out.

    Returns:
        The items, the last of each name; None where the tag is missing, too large, not such XML
        or malformed.
    """
    tag = page.tags.get(_METADATA_TAG)
    if tag is None or int(tag.dtype) not in (1, 2, 7):
        return None
    try:
        if tag.valuebytecount > _MAX_METADATA:
            return None
        value = tag.value
        if isinstance(value, str):
            value = value.encode("utf-8", "surrogateescape")
        elif isinstance(value, (tuple, list)):
            value = bytes(value)
        if not isinstance(value, bytes):
            return None
        value = value.rstrip(b"\0 \t\r\n")
        if not value.startswith(_METADATA_START) or b"<!DOCTYPE" in value or b"<!ENTITY" in value:
            return None
        root = ElementTree.fromstring(value)
    except (ElementTree.ParseError, ValueError, TypeError, OSError, struct.error):
        return None
    items = {}
    for item in root.iterfind("item"):
        name, text = item.get("name"), item.text
        if name and text is not None:
            items[name] = (text.strip(), item.get("unit"))
    return items


def _number(text: str) -> float | None:
    """`text` as a positive finite number, or None."""
    try:
        number = float(text)
    except ValueError:
        return None
    return number if math.isfinite(number) and number > 0 else None


def _pixel_size(
    metadata: dict[str, tuple[str, str | None]] | None, height: int, width: int
) -> tuple[float, float] | None:
    """The size of a pixel of frames of `height` x `width`, (height, width) in Å, from the metadata.

    The items `sensorPixelSize.height` and `sensorPixelSize.width` are the size of a pixel of the
    sensor at the specimen, in a unit of length (m in EER files; nm, pm and Å are read too).
    The frames cover the sensor: where `sensorImageHeight` and `sensorImageWidth` (its pixels)
    differ from the frames' size, a pixel of the frames is the sensor's times the sensor's pixels
    over the frames' on that axis.

    Returns:
        The sizes; None where either pixel size is missing, has no unit of length, or is not a
        positive number, or where a sensor image size is given but is not a positive number.
    """
    if metadata is None:
        return None
    sizes = []
    for axis, frame_pixels in (("height", height), ("width", width)):
        text, unit = metadata.get(f"sensorPixelSize.{axis}", ("", None))
        size = _number(text)
        if size is None or unit is None or unit.strip() not in ANGSTROMS_PER_UNIT:
            return None
        size *= ANGSTROMS_PER_UNIT[unit.strip()]
        if f"sensorImage{axis.title()}" in metadata:
            sensor_pixels = _number(metadata[f"sensorImage{axis.title()}"][0])
            if sensor_pixels is None:
                return None
            size *= sensor_pixels / frame_pixels
        if not (math.isfinite(size) and size > 0):  # overflowed, or underflowed to 0
            return None
        sizes.append(size)
    return sizes[0], sizes[1]
