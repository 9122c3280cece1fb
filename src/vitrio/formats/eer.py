"""EER files: Thermo Fisher's electron event representation of movies.

An EER file is a TIFF file whose pages are the frames of a movie. A page
holds, instead of pixel values, a stream of codes (TIFF compressions 65000,
65001 and 65002): runs of pixels without an event, each followed by the
sub-pixel position of an electron that hit the pixel after the run.
Compression 65000 codes runs in 8 bits and 65001 in 7, both with 2 + 2
sub-pixel bits (a 4 x 4 grid in each pixel); 65002 takes the three numbers
from tags 65007, 65008 and 65009. The sub-pixel grid is the finest one: 4
times the detector's resolution on each axis for 2 sub-pixel bits.

Opened as a plain format, an EER file is a movie of one uint8 image per
frame (0 or 1 event per pixel) at the detector's resolution.
`EerFormat.configured` makes a format that renders the frames into a few
fractions (sums of consecutive frames), binned or on a finer grid, optionally
weighted by a gain reference. `read_events` reads the events themselves.

Frames are decoded by the C extension `vitrio._native`, without the GIL.
"""

from __future__ import annotations

import operator
import os
import struct
import threading
import weakref
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import tifffile

from .. import _native
from .._types import ImageDescriptor, as_key
from ._contract import Format, FormatError, ImageReader
from ._registry import open_reader, register_format

__all__ = ["DetectorEventTimeline", "EerFormat", "EerReader", "read_events"]

_TIFF_MAGICS = (b"II*\0", b"MM\0*", b"II+\0", b"MM\0+")
_FIXED_CODES = {65000: (8, 2, 2), 65001: (7, 2, 2)}
_VARIABLE_CODE = 65002
_EER_COMPRESSIONS = (65000, 65001, 65002)
_CODE_TAGS = (65007, 65008, 65009)
_MAX_SIDE = 1 << 20
_BATCH_BYTES = 64 << 20
_ERRORS = {
    1: "its event stream ends before the end of the frame (the strip is truncated or corrupt)",
    2: "its event stream runs past the end of the image (corrupt codes)",
    3: "it holds more events than its size allows",
}
_KINDS = {np.dtype(np.uint8): 0, np.dtype(np.uint16): 1, np.dtype(np.uint32): 2, np.dtype(np.float32): 3}
_scratch = threading.local()


def _scratch_bytes(name: str, nbytes: int) -> np.ndarray:
    """A per-thread byte buffer of at least `nbytes`, reused between calls."""
    buffer = getattr(_scratch, name, None)
    if buffer is None or buffer.nbytes < nbytes:
        buffer = np.empty(max(nbytes, 1 << 16), dtype=np.uint8)
        setattr(_scratch, name, buffer)
    return buffer[:nbytes]


def _first_compression(head: bytes) -> int | None:
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


class _Layout:
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
        if compression not in _EER_COMPRESSIONS:
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


def _power_of_two(value: Any, what: str) -> int:
    """`value` as an int if it is a positive power of two."""
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an integer, not {value!r}") from None
    if number < 1 or number & (number - 1):
        raise ValueError(f"{what} must be 1, 2, 4, 8, ...: {value!r}")
    return number


def _load_gain(gain: Any) -> np.ndarray:
    """A gain reference as a read-only float32 image: an array, or the key of an image file."""
    if isinstance(gain, (str, os.PathLike)):
        with open_reader(gain) as reader:
            if reader.image_count != 1 or len(reader.core_extents) != 2:
                raise ValueError(
                    f"{as_key(gain)}: a gain reference is one 2-D image, not {reader.descriptor}"
                )
            array = np.empty(reader.core_extents, dtype=np.float32)
            reader.read_run(0, [array])
    else:
        array = np.array(gain, dtype=np.float32)
        if array.ndim != 2:
            raise ValueError(f"a gain reference is a 2-D image, not of shape {array.shape}")
    array.flags.writeable = False
    return array


class EerReader(ImageReader):
    """The images of an EER file: its frames, or fractions of them, rendered at some resolution.

    Args:
        key: The file's key.
        fd: The open file, which the reader owns.
        layout: Where the frames lie.
        fractions: How many images to cut the frames into, or None for one per frame.
        binning: Pixels of the detector that make one pixel of the images on each axis (1, 2, 4, ...).
        superres: Pixels of the images that make one pixel of the detector on each axis (1, 2, 4, ...).
        gain: A float32 gain reference at the detector's or a super-resolution size, or None.

    Raises:
        ValueError: If the fractions outnumber the frames, the binning does not divide the detector's
            size, the file has too few sub-pixel bits for `superres`, or the gain's size fits neither
            the detector nor its super-resolution grids.
    """

    def __init__(
        self,
        key: str,
        fd: int,
        layout: _Layout,
        fractions: int | None,
        binning: int,
        superres: int,
        gain: np.ndarray | None,
    ):
        frames, height, width = layout.frame_count, layout.height, layout.width
        if fractions is None:
            self._bounds = np.arange(frames + 1, dtype=np.int64)
        elif fractions > frames:
            raise ValueError(
                f"{key}: {fractions} fractions of {frames} frames: at most one fraction per frame"
            )
        else:
            self._bounds = np.arange(fractions + 1, dtype=np.int64) * frames // fractions
        if height % binning or width % binning:
            raise ValueError(f"{key}: binning {binning} does not divide the detector's {height} x {width}")
        level, bin_level = superres.bit_length() - 1, binning.bit_length() - 1
        if level > min(layout.hbits, layout.vbits):
            raise ValueError(
                f"{key}: super-resolution {superres} needs {level} sub-pixel bits per axis; "
                f"the file has {layout.hbits} and {layout.vbits}"
            )
        self._shifts = (layout.vbits - level + bin_level, layout.hbits - level + bin_level)
        out_height, out_width = height * superres // binning, width * superres // binning
        self._gain_shifts = (0, 0)
        if gain is not None:
            levels = [
                g
                for g in range(min(layout.hbits, layout.vbits) + 1)
                if gain.shape == (height << g, width << g)
            ]
            if not levels:
                raise ValueError(
                    f"{key}: a gain reference of {gain.shape[0]} x {gain.shape[1]} fits neither the detector "
                    f"({height} x {width}) nor its super-resolution grids"
                )
            self._gain_shifts = (layout.vbits - levels[0], layout.hbits - levels[0])
        # the most events one pixel of an image can count: one per detector pixel and frame
        most = int(np.diff(self._bounds).max()) * binning * binning
        if gain is not None:
            dtype = np.dtype(np.float32)
            self._direct = {dtype}
        else:
            if fractions is None and most <= 0xFF:
                dtype = np.dtype(np.uint8)
            else:
                dtype = np.dtype(np.uint16 if most <= 0xFFFF else np.uint32)
            self._direct = {t for t in _KINDS if t.kind == "f" or np.iinfo(t).max >= most}
        super().__init__(key, ImageDescriptor((len(self._bounds) - 1, out_height, out_width), 2, dtype))
        self._fd = fd
        self._layout = layout
        self._gain = gain
        self._dtype = dtype

    def read_run(self, start: int, outs: Sequence[np.ndarray]) -> None:
        """Render images `start, start + 1, ...` into `outs`, converting to each out's type.

        Raises:
            IndexError: If an image is past the end.
            FormatError: If a frame is malformed or the file is truncated.
        """
        self.check_run(start, len(outs))
        for offset, out in enumerate(outs):
            self._render(start + offset, out)

    def _render(self, index: int, out: np.ndarray) -> None:
        layout = self._layout
        if self._fd < 0:
            raise ValueError(f"{self.key}: the reader is closed")
        begin, end = int(self._bounds[index]), int(self._bounds[index + 1])
        data = _scratch_bytes("data", int(layout.frame_bytes[end] - layout.frame_bytes[begin]))
        try:
            strips = layout.read(self._fd, begin, end, data)
        except FormatError:  # the file ends before a frame does: it was truncated while open
            self.stale = True
            raise
        shape = self.core_extents
        direct = (
            out.dtype in self._direct
            and out.dtype.isnative
            and out.shape == shape
            and out.flags.c_contiguous
            and out.flags.writeable
        )
        if direct:
            target = out
        else:
            target = _scratch_bytes("image", self._dtype.itemsize * shape[0] * shape[1]).view(self._dtype)
            target = target.reshape(shape)
        gain = self._gain
        status = _native.render(
            data,
            strips,
            target,
            _KINDS[target.dtype],
            True,
            layout.height,
            layout.width,
            layout.rlebits,
            layout.hbits,
            layout.vbits,
            *self._shifts,
            *shape,
            gain,
            *(gain.shape if gain is not None else (0, 0)),
            *self._gain_shifts,
        )
        if status is not None:
            raise layout.failure(begin, status)
        if not direct:
            np.copyto(out, target, casting="unsafe")

    def check_unchanged(self) -> None:
        """Raise `OSError` if the file has become shorter than its frames need."""
        size = os.fstat(self._fd).st_size
        if size < self._layout.file_end:
            self.stale = True
            raise OSError(
                f"{self.key}: the file shrank to {size} bytes; its frames need {self._layout.file_end}"
            )

    def close(self) -> None:
        """Close the file."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)


@register_format
class EerFormat(Format):
    """Thermo Fisher's EER movies, read as one uint8 image per frame at the detector's resolution.

    A TIFF file is recognized as EER by the extension ".eer" or by its first
    page's compression (65000, 65001 or 65002). `configured` makes formats
    that render fractions of the movie instead.
    """

    name = "eer"
    read_extensions = (".eer",)
    fractions: ClassVar[int | None] = None
    binning: ClassVar[int] = 1
    superres: ClassVar[int] = 1
    gain: ClassVar[np.ndarray | None] = None

    @classmethod
    def recognizes(cls, head: bytes, extension: str) -> bool:
        """Whether the file is a TIFF file named .eer or whose first page is an EER frame."""
        if head[:4] not in _TIFF_MAGICS:
            return False
        return extension in cls.read_extensions or _first_compression(head) in _EER_COMPRESSIONS

    @classmethod
    def open(cls, key: str, fd: int, head: bytes) -> EerReader:
        """Open a reader of the EER file at `key`, open as `fd`, which the reader then owns.

        Raises:
            FormatError: If the file is not a TIFF file of EER frames, or is truncated.
            ValueError: If the file does not fit the configuration (see `configured`).
        """
        return EerReader(key, fd, _Layout(key, fd), cls.fractions, cls.binning, cls.superres, cls.gain)

    @classmethod
    def configured(
        cls, fractions: int, binning: int = 1, superres: int = 1, gain: Any = None
    ) -> type[EerFormat]:
        """A format (not registered) that reads an EER file as `fractions` rendered images.

        Fraction k is the per-pixel count of the events of frames
        `k * F // fractions` to `(k + 1) * F // fractions` of the file's F
        frames. Counts are uint16 (uint32 if a fraction could hold more than
        65535 events in one pixel); with a gain, float32.

        Args:
            fractions: How many images to cut the frames into; at most the number of frames.
            binning: 1, 2, 4, ...: the images have the detector's size divided by `binning`, each
                pixel the events of `binning` x `binning` detector pixels. It must divide the size.
            superres: 1, 2, 4, ...: the images have the detector's size times `superres`, placing
                events by their sub-pixel bits (2 gives the 2x grid, 4 the 4x grid of standard
                files). Only one of `binning` and `superres` may be above 1.
            gain: A gain reference: a 2-D array, or the key of an image file (MRC, TIFF, DM) of
                one image, at the detector's size or a super-resolution size (2x, 4x), in the
                orientation of the frames as read here. Each event then adds the gain of the
                pixel it hit (on the gain's grid) instead of one: an image is counts x gain,
                summed over its pixels, as motion correction programs apply gains.

        Raises:
            ValueError: If an argument is out of range, or the gain is not one 2-D image.
            TypeError: If `fractions`, `binning` or `superres` is not an integer.
        """
        fractions = operator.index(fractions)
        if fractions < 1:
            raise ValueError(f"fractions must be positive: {fractions}")
        binning = _power_of_two(binning, "binning")
        superres = _power_of_two(superres, "superres")
        if binning > 1 and superres > 1:
            raise ValueError(f"binning {binning} and superres {superres}: choose one")
        namespace = {
            "__doc__": f"EER movies read as {fractions} fractions (binning {binning}, superres {superres}).",
            "__module__": __name__,
            "fractions": fractions,
            "binning": binning,
            "superres": superres,
            "gain": None if gain is None else _load_gain(gain),
        }
        return type(cls)("ConfiguredEerFormat", (cls,), namespace)


class _ViewOwner:
    """The owner of the memory of one read-only view of a timeline, so that the timeline can count views."""

    __slots__ = ("__array_interface__", "_array", "__weakref__")

    def __init__(self, array: np.ndarray):
        self._array = array
        interface = dict(array.__array_interface__)
        interface["data"] = (interface["data"][0], True)
        self.__array_interface__ = interface


class DetectorEventTimeline:
    """Detector events in groups, each group with a timestamp: the events of the frames of a movie.

    A position is a row of uint32 coordinates, slowest axis first: (y, x) on
    the sub-pixel grid for EER files. The arrays handed out (`timestamps`,
    `get_positions`) are read-only views of the timeline's memory; while any
    of them, or an array made from one, is alive, the timeline cannot change:
    `add_group`, `clear` and `reserve` raise `BufferError`. Not safe to change
    from several threads at once.
    """

    def __init__(self) -> None:
        self._timestamps = np.empty(0, dtype=np.int64)
        self._ends = np.empty(0, dtype=np.int64)
        self._positions = np.empty((0, 2), dtype=np.uint32)
        self._groups = 0
        self._events = 0
        self._views: weakref.WeakSet[_ViewOwner] = weakref.WeakSet()

    @property
    def group_count(self) -> int:
        """How many groups the timeline holds."""
        return self._groups

    @property
    def event_count(self) -> int:
        """How many events the timeline holds, in all groups."""
        return self._events

    @property
    def view_count(self) -> int:
        """How many views handed out are alive."""
        return len(self._views)

    @property
    def timestamps(self) -> np.ndarray:
        """The timestamp of each group (for EER files, the frame index): a read-only int64 view."""
        return self._view(self._timestamps[: self._groups])

    def get_positions(self, group: int | None = None) -> np.ndarray:
        """The positions of the events of one group, or of all: a read-only uint32 view, a row each.

        Raises:
            IndexError: If there is no group `group`.
        """
        if group is None:
            return self._view(self._positions[: self._events])
        index = operator.index(group)
        if not -self._groups <= index < self._groups:
            raise IndexError(f"group {group} of a timeline of {self._groups}")
        index %= self._groups
        start = int(self._ends[index - 1]) if index else 0
        return self._view(self._positions[start : self._ends[index]])

    def add_group(self, timestamp: int, positions: Any) -> None:
        """Append a group of events.

        Args:
            timestamp: The group's timestamp, an integer.
            positions: The events' positions, rows of 2 non-negative integers below 2**32.

        Raises:
            BufferError: If a view is alive.
            TypeError: If a timestamp or position is not an integer.
            ValueError: If the positions are not rows of 2 or one is out of range.
        """
        timestamp = operator.index(timestamp)
        rows = np.asarray(positions)
        if rows.size == 0:
            rows = rows.reshape(0, 2)
        if rows.ndim != 2 or rows.shape[1] != 2:
            raise ValueError(f"positions are rows of 2 coordinates, not of shape {rows.shape}")
        if rows.size and rows.dtype.kind not in "iu":
            raise TypeError(f"positions are integers, not {rows.dtype}")
        if rows.size and (rows.min() < 0 or rows.max() > 0xFFFFFFFF):
            raise ValueError("positions must be within 0 and 2**32 - 1")
        self._grow(1, len(rows))
        self._positions[self._events : self._events + len(rows)] = rows
        self._events += len(rows)
        self._timestamps[self._groups] = timestamp
        self._ends[self._groups] = self._events
        self._groups += 1

    def clear(self) -> None:
        """Remove every group, keeping the memory.

        Raises:
            BufferError: If a view is alive.
        """
        self._check_unshared()
        self._groups = self._events = 0

    def reserve(self, groups: int, events: int) -> None:
        """Make room for `groups` groups and `events` events in all.

        Raises:
            BufferError: If a view is alive.
        """
        self._check_unshared()
        groups, events = operator.index(groups), operator.index(events)
        if groups > len(self._timestamps):
            self._timestamps = self._resized(self._timestamps, groups, self._groups)
            self._ends = self._resized(self._ends, groups, self._groups)
        if events > len(self._positions):
            self._positions = self._resized(self._positions, events, self._events)

    def __repr__(self) -> str:
        return f"<DetectorEventTimeline: {self._groups} groups, {self._events} events>"

    @staticmethod
    def _resized(array: np.ndarray, length: int, used: int) -> np.ndarray:
        grown = np.empty((length, *array.shape[1:]), dtype=array.dtype)
        grown[:used] = array[:used]
        return grown

    def _check_unshared(self) -> None:
        if len(self._views):
            raise BufferError(
                f"the timeline has {len(self._views)} live views; delete them before changing it"
            )

    def _grow(self, groups: int, events: int) -> None:
        """Make room for `groups` and `events` more, growing geometrically."""
        groups += self._groups
        events += self._events
        self.reserve(
            max(groups, 2 * len(self._ends)) if groups > len(self._ends) else 0,
            max(events, 2 * len(self._positions)) if events > len(self._positions) else 0,
        )

    def _view(self, array: np.ndarray) -> np.ndarray:
        owner = _ViewOwner(array)
        self._views.add(owner)
        return np.asarray(owner)

    def _commit(self, timestamps: np.ndarray, counts: np.ndarray) -> None:
        """Append groups whose positions were written past the last event already."""
        groups = len(timestamps)
        self._timestamps[self._groups : self._groups + groups] = timestamps
        self._ends[self._groups : self._groups + groups] = self._events + np.cumsum(counts)
        self._groups += groups
        self._events += int(counts.sum())

    def _truncate(self, groups: int, events: int) -> None:
        self._groups, self._events = groups, events


def read_events(
    key: Any, begin: int | None = None, end: int | None = None, events: DetectorEventTimeline | None = None
) -> DetectorEventTimeline:
    """The events of frames `begin..end` of the EER file at `key`, a group per frame.

    Each group's timestamp is its frame's index; positions are (y, x) on the
    sub-pixel grid (4 times the detector's resolution per axis for 2
    sub-pixel bits, as in files of compression 65000 and 65001).

    Args:
        key: The file.
        begin, end: The frames to read; None for the first and past the last.
        events: A timeline to append to (reusing its memory); None for a new one.

    Returns:
        The timeline, `events` if given.

    Raises:
        FileNotFoundError: If there is no file at `key`.
        IndexError: If the frames are not within the file's.
        FormatError: If the file is not an EER file or a frame is malformed; the timeline is
            then as it was.
        BufferError: If `events` has a live view.
    """
    key = as_key(key)
    timeline = DetectorEventTimeline() if events is None else events
    timeline._check_unshared()
    try:
        fd = os.open(key, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise FileNotFoundError(f"{key}: no such file") from None
    groups, count = timeline.group_count, timeline.event_count
    try:
        layout = _Layout(key, fd)
        begin = 0 if begin is None else operator.index(begin)
        end = layout.frame_count if end is None else operator.index(end)
        if not 0 <= begin <= end <= layout.frame_count:
            raise IndexError(f"{key}: frames {begin} to {end} are not within its {layout.frame_count} frames")
        # an event takes a whole code: a strip of n bits holds at most n // code_bits
        code_bits = layout.rlebits + layout.hbits + layout.vbits
        strip_bytes = layout.strips[layout.frame_starts[begin] : layout.frame_starts[end], 1]
        timeline._grow(end - begin, int((strip_bytes * 8 // code_bits).sum()))
        frame = begin
        while frame < end:
            batch_end = np.searchsorted(layout.frame_bytes, layout.frame_bytes[frame] + _BATCH_BYTES, "right")
            stop = min(max(frame + 1, int(batch_end) - 1), end)
            data = np.empty(int(layout.frame_bytes[stop] - layout.frame_bytes[frame]), dtype=np.uint8)
            strips = layout.read(fd, frame, stop, data)
            strip_counts = np.empty(len(strips), dtype=np.int64)
            status = _native.events(
                data,
                strips,
                timeline._positions[timeline.event_count :],
                strip_counts,
                layout.height,
                layout.width,
                layout.rlebits,
                layout.hbits,
                layout.vbits,
            )
            if status is not None:
                raise layout.failure(frame, status)
            starts = layout.frame_starts[frame:stop] - layout.frame_starts[frame]
            timeline._commit(np.arange(frame, stop, dtype=np.int64), np.add.reduceat(strip_counts, starts))
            frame = stop
    except BaseException:
        timeline._truncate(groups, count)
        raise
    finally:
        os.close(fd)
    return timeline
