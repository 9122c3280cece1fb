"""Where the frames of an EER file lie and how they are coded: its strips, read from the TIFF structure."""

from __future__ import annotations

import os
import struct
from typing import Any

import numpy as np
import tifffile

from .._contract import FormatError
from ._sniff import EER_COMPRESSIONS

__all__ = ["Layout"]

_FIXED_CODES = {65000: (8, 2, 2), 65001: (7, 2, 2)}
_VARIABLE_CODE = 65002
_CODE_TAGS = (65007, 65008, 65009)
_MAX_SIDE = 1 << 20
_ERRORS = {
    1: "its event stream ends before the end of the frame (the strip is truncated or corrupt)",
    2: "its event stream runs past the end of the image (corrupt codes)",
    3: "it holds more events than its size allows",
}


class Layout:
    """Where the frames of an EER file lie and how they are coded.

    Attributes:
        key: The file's key.
        height, width: The detector's size in pixels.
        rlebits, hbits, vbits: The bits of a run and of the horizontal and vertical sub-pixel position.
        frame_count: How many frames the file holds.
        strips: int64 rows (file offset, byte count, first row, rows), the strips of frame 0, 1, ...
        frame_starts: Where the strips of each frame start in `strips`, and their end.
        strip_frames: The frame of each strip.
        frame_bytes: The bytes of the strips of the frames before each frame, and of all.
        file_end: The end of the last byte of a strip in the file.

    Raises:
        FormatError: If the file is not a TIFF file of EER frames, its frames lie past its end, or
            they claim more data than the file holds (frames that share their data).
    """

    def __init__(self, key: str, fd: int):
        self.key = key
        size = os.fstat(fd).st_size
        try:
            with (
                open(os.dup(fd), "rb") as handle,
                tifffile.TiffFile(handle, name=os.path.basename(key)) as tif,
            ):
                len(tif.pages)  # indexes every page, which cuts a loop of pages before tifffile follows it
                pages = list(tif.pages)
                if not pages:
                    raise FormatError(f"{key}: the TIFF file has no pages")
                # a file may start with an uncompressed integrated image
                first = 1 if len(pages) > 1 and int(pages[0].compression) == 1 else 0
                frames = [self._frame(frame, page) for frame, page in enumerate(pages[first:])]
        except FormatError:
            raise
        except (ValueError, struct.error, IndexError, KeyError, TypeError, OverflowError) as error:
            raise FormatError(f"{key}: not a readable TIFF file: {error}") from error
        self.height, self.width, self.rlebits, self.hbits, self.vbits = frames[0][0]
        for frame, (geometry, _) in enumerate(frames):
            if geometry != frames[0][0]:
                raise FormatError(
                    f"{key}: frame {frame}: its size or code {geometry} differs from frame 0's {frames[0][0]}"
                )
        self.frame_count = len(frames)
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

    def read(self, fd: int, begin: int, end: int, buffer: np.ndarray) -> np.ndarray:
        """Read the strips of frames `begin..end` one after another into `buffer`.

        Returns:
            Their rows of `strips`, with the first column made their offset in `buffer`.

        Raises:
            FormatError: If the file ends before a strip does.
        """
        rows = self.strips[self.frame_starts[begin] : self.frame_starts[end]]
        local = rows.copy()
        local[:, 0] = np.cumsum(rows[:, 1]) - rows[:, 1]
        view = memoryview(buffer)
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
