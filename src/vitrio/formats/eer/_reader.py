"""The EER format and its reader: frames, or fractions of them, rendered into images by the C extension."""

from __future__ import annotations

import operator
import os
import threading
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from ... import _native
from ..._storage import ByteSource
from ..._types import ImageDescriptor
from .._contract import Format, FormatError, ImageReader
from ._gain import load_gain
from ._layout import Layout
from ._render import DetectorEventFractionation
from ._sniff import EER_COMPRESSIONS, TIFF_MAGICS, first_compression
from ._timeline import EerTimelineReader

__all__ = ["EerFormat", "EerReader"]

_KINDS = {
    np.dtype(np.uint8): _native.RENDER_U8,
    np.dtype(np.uint16): _native.RENDER_U16,
    np.dtype(np.uint32): _native.RENDER_U32,
    np.dtype(np.float32): _native.RENDER_F32,
}
_scratch = threading.local()


def _scratch_bytes(name: str, nbytes: int) -> np.ndarray:
    """A per-thread byte buffer of at least `nbytes`, reused between calls."""
    buffer = getattr(_scratch, name, None)
    if buffer is None or buffer.nbytes < nbytes:
        buffer = np.empty(max(nbytes, 1 << 16), dtype=np.uint8)
        setattr(_scratch, name, buffer)
    return buffer[:nbytes]


def _power_of_two(value: Any, what: str) -> int:
    """`value` as an int if it is a positive power of two."""
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an integer, not {value!r}") from None
    if number < 1 or number & (number - 1):
        raise ValueError(f"{what} must be 1, 2, 4, 8, ...: {value!r}")
    return number


class EerReader(ImageReader):
    """The images of an EER file: its frames, or fractions of them, rendered at some resolution.

    Args:
        key: The file's key.
        source: The file's bytes, which the reader owns.
        layout: Where the frames lie.
        fractions: How many images to cut the frames into, or None for one per frame.
        binning: Pixels of the detector that make one pixel of the images on each axis (1, 2, 4, ...).
        superres: Pixels of the images that make one pixel of the detector on each axis (1, 2, 4, ...).
        gain: A float32 gain reference at the detector's or a super-resolution size, or None.

    Attributes:
        voxel_size: The size of a pixel of the images at the specimen, (height, width) in Å: the
            file's pixel size (its metadata's `sensorPixelSize`, see `Layout.pixel_size`) times
            `binning`, divided by `superres`; None where the metadata gives no usable pixel size.

    Raises:
        ValueError: If the fractions outnumber the frames, the binning does not divide the detector's
            size, the file has too few sub-pixel bits for `superres`, or the gain's size fits neither
            the detector nor its super-resolution grids.
    """

    def __init__(
        self,
        key: str,
        source: ByteSource,
        layout: Layout,
        fractions: int | None,
        binning: int,
        superres: int,
        gain: np.ndarray | None,
    ):
        frames, height, width = layout.frame_count, layout.height, layout.width
        if fractions is None:
            self._bounds = np.arange(frames + 1, dtype=np.int64)
        elif isinstance(fractions, DetectorEventFractionation):  # by dose
            count = fractions.count_for(frames)
            self._bounds = np.array([fractions.get_fraction_begin(i, frames) for i in range(count + 1)])
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
        stack = () if fractions is not None and len(self._bounds) == 2 else (len(self._bounds) - 1,)
        super().__init__(key, ImageDescriptor((*stack, out_height, out_width), 2, dtype))
        if layout.pixel_size is not None:
            self.voxel_size = tuple(size * binning / superres for size in layout.pixel_size)
            self.voxel_size_source = "EER acquisition metadata"
        self._source: ByteSource | None = source
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
        if self._source is None:
            raise ValueError(f"{self.key}: the reader is closed")
        begin, end = int(self._bounds[index]), int(self._bounds[index + 1])
        data = _scratch_bytes("data", int(layout.frame_bytes[end] - layout.frame_bytes[begin]))
        try:
            strips = layout.read(self._source, begin, end, data)
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
            layout.code,
            self._shifts,
            shape,
            gain,
            gain.shape if gain is not None else (0, 0),
            self._gain_shifts,
        )
        if status is not None:
            raise layout.failure(begin, status)
        if not direct:
            np.copyto(out, target, casting="unsafe")

    def check_unchanged(self) -> None:
        """Raise `OSError` if the file has become shorter than its frames need."""
        if self._source is None:
            raise ValueError(f"{self.key}: the reader is closed")
        fd = self._source.fileno()  # a file at a URL is as it was when opened
        size = self._source.size if fd is None else os.fstat(fd).st_size
        if size < self._layout.file_end:
            self.stale = True
            raise OSError(
                f"{self.key}: the file shrank to {size} bytes; its frames need {self._layout.file_end}"
            )

    def close(self) -> None:
        """Close the file."""
        source, self._source = self._source, None
        if source is not None:
            source.close()


class EerFormat(Format):
    """Thermo Fisher's EER movies, read as one uint8 image per frame at the detector's resolution.

    A TIFF file is recognized as EER by the extension ".eer" or by its first
    page's compression (65000, 65001 or 65002). `configured` makes formats
    that render fractions of the movie instead.
    """

    name = "eer"
    read_extensions = (".eer",)
    reads_urls = True
    events = True
    fractions: ClassVar[int | DetectorEventFractionation | None] = None
    binning: ClassVar[int] = 1
    superres: ClassVar[int] = 1
    gain: ClassVar[np.ndarray | None] = None

    @classmethod
    def recognizes(cls, head: bytes, extension: str) -> bool:
        """Whether the file is a TIFF file named .eer or whose first page is an EER frame."""
        if head[:4] not in TIFF_MAGICS:
            return False
        return extension in cls.read_extensions or first_compression(head) in EER_COMPRESSIONS

    @classmethod
    def open(cls, key: str, source: ByteSource, head: bytes) -> EerReader:
        """Open a reader of the EER file at `key`, read from `source`, which the reader then owns.

        Raises:
            FormatError: If the file is not a TIFF file of EER frames, or is truncated.
            ValueError: If the file does not fit the configuration (see `configured`).
        """
        return EerReader(key, source, Layout(key, source), cls.fractions, cls.binning, cls.superres, cls.gain)

    @classmethod
    def open_events(cls, key: str, source: ByteSource, head: bytes) -> EerTimelineReader:
        """Open a reader of the events of the EER file at `key`, read from `source`, which it then owns.

        Raises:
            FormatError: If the file is not a TIFF file of EER frames, or is truncated.
        """
        return EerTimelineReader(key, source)

    @classmethod
    def configured(
        cls, fractions: int, binning: int = 1, superres: int = 1, gain: Any = None
    ) -> type[EerFormat]:
        """A format (not registered) that reads an EER file as `fractions` rendered images.

        Fraction k is the per-pixel count of the events of frames
        `k * F // fractions` to `(k + 1) * F // fractions` of the file's F
        frames. Counts are uint16 (uint32 if a fraction could hold more than
        65535 events in one pixel), which MRC files hold as they are; with a
        gain, float32. One fraction is a single 2-D image, more a stack of them.

        Args:
            fractions: How many images to cut the frames into, at most the number of frames; or a
                `DetectorEventFractionation` by dose, whose grouping of frames it follows.
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
        if isinstance(fractions, DetectorEventFractionation):
            fractions = fractions if fractions.fraction_count is None else fractions.fraction_count
        else:
            fractions = operator.index(fractions)
        if isinstance(fractions, int) and fractions < 1:
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
            "gain": None if gain is None else load_gain(gain),
        }
        return type(cls)("ConfiguredEerFormat", (cls,), namespace)
