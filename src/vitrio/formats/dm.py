"""Gatan DigitalMicrograph DM3 and DM4 files: the first image, read in place.

A DM file is a short header and a tree of tags: groups of named or numbered
tags, and data tags holding a simple value, a string, a struct or an array.
DM3 counts and sizes in 32 bits; DM4 in 64 bits, and gives each tag its size
in bytes too. The images are the entries of the group `ImageList`; the
values of entry N are one array tag, `ImageList/N/ImageData/Data`, stored
uncompressed in the byte order the header names, x fastest.

Read:

- DM3 and DM4 files, data of either byte order.
- One image: the first `ImageList` entry that no `Thumbnails/M/ImageIndex`
  names (DigitalMicrograph stores its thumbnail, an RGBA image, as entry 0).
  The other images of a file of several are not read.
- The image data types int8, uint8, int16, uint16, int32, uint32, float32,
  float64, complex64, complex128 and binary (read as bool: zero or not).
- 2-D data as one image (y, x); 3-D and higher as a stack of 2-D images
  (z, y, x), DM's dimensions (x, y, z) turned slowest first.
- The spatial calibration, as the reader's `pixel_size` and `pixel_units`,
  and as its `voxel_size` in Å where the units are lengths (Å, pm, nm, µm).

Refused (`FormatError` naming the file and what it holds): spectra and
spectrum images (EELS, EDS, cathodoluminescence), which
`ImageTags/Meta Data` says (`Format` "Spectrum image", "Spectrum") or an
axis in units of energy does; data whose image axes are not spatial (units
neither blank, nor of length, nor both of inverse length as a diffraction
pattern's); RGB and RGBA images, packed complex (half-plane FFT) images,
64-bit integer images, 1-D data (profiles). Not read: every other tag, the
metadata of microscope and acquisition, annotations, the calibration of
brightness and the origins.

Only the tags that locate the image are decoded; the data of every other
tag is skipped by its size, and in DM4 whole groups are. The tree is parsed
with bounded reads; one that is truncated, nests groups deeper than 64,
holds more than 4,000,000 tags, or declares counts or sizes that the file
cannot hold raises `FormatError` naming the file and the tag.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field

import numpy as np

from .._storage import ByteSource
from .._types import ANGSTROMS_PER_UNIT, ImageDescriptor, NumericalType, numpy_dtype
from ._contract import Format, FormatError
from ._raw import RawArrayReader
from ._remote_raw import raw_reader

__all__ = ["DigitalMicrographFormat", "DigitalMicrographReader"]

_MAX_DEPTH = 64
_MAX_TAGS = 4_000_000
_MAX_INFO = 4096
_MAX_RANK = 16
_MAX_UNITS = 256
_WINDOW = 1 << 16

_GROUP, _DATA = 20, 21
_STRUCT, _STRING, _ARRAY = 15, 18, 20
_SIMPLE = {2: "h", 3: "i", 4: "H", 5: "I", 6: "f", 7: "d", 8: "?", 9: "b", 10: "B", 11: "q", 12: "Q"}
_INTEGERS = {2, 3, 4, 5, 9, 10, 11, 12}
_UTF16 = 4

_IMAGE_TYPES = {
    1: NumericalType.int16,
    2: NumericalType.float32,
    3: NumericalType.complex_float32,
    6: NumericalType.uint8,
    7: NumericalType.int32,
    9: NumericalType.int8,
    10: NumericalType.uint16,
    11: NumericalType.uint32,
    12: NumericalType.float64,
    13: NumericalType.complex_float64,
    14: NumericalType.boolean,
}
_RGB_TYPES = {8, 23}
_PACKED_COMPLEX = 5
_META_DATA = ("ImageTags", "Meta Data")
# Units of energy, of the spectral axis of EELS and EDS data.
_ENERGY_UNITS = {"eV", "keV", "meV", "MeV"}


def _where(path: tuple[str, ...]) -> str:
    return f"tag {'/'.join(path)}" if path else "the root tag group"


@dataclass
class _Image:
    """What the tags of one `ImageList` entry say of its image."""

    data: tuple[int, int] | None = None
    data_type: int | None = None
    dimensions: list[int] = field(default_factory=list)
    scales: dict[str, float] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)
    kind: dict[str, str] = field(default_factory=dict)  # `ImageTags/Meta Data`'s Format and Signal


class _TagTree:
    """The tags of a DM file that locate its images, parsed with bounded reads.

    Args:
        key: The file's key, for messages.
        source: The file's bytes.

    Attributes:
        little_endian: Whether the tag data and the images are little endian.
        entries: The labels of the `ImageList` entries, in order ("0", "1", ...
            for the usual unnamed ones).
        images: What the tags of each entry say of its image, by label.
        thumbnails: The indices of `ImageList` entries that are thumbnails.

    Raises:
        FormatError: If the header or the tag tree is malformed or truncated.
    """

    def __init__(self, key: str, source: ByteSource):
        self._key = key
        self._source = source
        self._size = source.size
        self._window = b""
        self._window_start = 0
        self._tags = 0
        self.entries: list[str] = []
        self.images: dict[str, _Image] = {}
        self.thumbnails: set[int] = set()
        version = int.from_bytes(self._read(0, 4, ()), "big")
        if version not in (3, 4):
            raise FormatError(f"{key}: not a DM3 or DM4 file: version {version}")
        self._width = 4 if version == 3 else 8
        self._sized = version == 4
        self._min_tag = 9 if version == 3 else 21
        order_at = 4 + self._width
        order = int.from_bytes(self._read(order_at, 4, ()), "big")
        if order not in (0, 1):
            raise FormatError(f"{key}: the byte order flag is {order}, neither 0 (big) nor 1 (little endian)")
        self.little_endian = order == 1
        self._order = "<" if self.little_endian else ">"
        self._group(order_at + 4, (), 0)

    def _read(self, pos: int, count: int, path: tuple[str, ...]) -> bytes:
        """`count` bytes at `pos`, through a window of the file; `path` names the tag being read."""
        end = pos + count
        if end > self._size:
            raise FormatError(
                f"{self._key}: the file is truncated: {_where(path)} needs bytes up to {end}, "
                f"the file has {self._size}"
            )
        start = pos - self._window_start
        if start < 0 or end > self._window_start + len(self._window):
            self._window = self._source.pread(max(count, _WINDOW), pos)
            self._window_start, start = pos, 0
            if len(self._window) < count:
                raise FormatError(f"{self._key}: the file is truncated at byte {pos + len(self._window)}")
        return self._window[start : start + count]

    def _unsigned(self, pos: int, path: tuple[str, ...]) -> int:
        return int.from_bytes(self._read(pos, self._width, path), "big")

    def _group(self, pos: int, path: tuple[str, ...], depth: int) -> int:
        """Parse the tag group at `pos` (its flags, count and tags); return where it ends."""
        if depth > _MAX_DEPTH:
            raise FormatError(f"{self._key}: {_where(path)}: tag groups nest deeper than {_MAX_DEPTH}")
        count = self._unsigned(pos + 2, path)
        pos += 2 + self._width
        if count * self._min_tag > self._size - pos:
            raise FormatError(
                f"{self._key}: {_where(path)} declares {count} tags, more than the "
                f"{self._size - pos} bytes left in the file can hold"
            )
        for index in range(count):
            pos = self._tag(pos, path, index, depth)
        return pos

    def _tag(self, pos: int, parent: tuple[str, ...], index: int, depth: int) -> int:
        """Parse tag `index` of group `parent` at `pos`; return where it ends."""
        self._tags += 1
        if self._tags > _MAX_TAGS:
            raise FormatError(f"{self._key}: {_where(parent)}: the file holds more than {_MAX_TAGS} tags")
        head = self._read(pos, 3, (*parent, str(index)))
        kind, label_length = head[0], int.from_bytes(head[1:], "big")
        label = self._read(pos + 3, label_length, (*parent, str(index))).decode("latin-1")
        path = (*parent, label or str(index))
        pos += 3 + label_length
        end = None
        if self._sized:
            declared = self._unsigned(pos, path)
            pos += self._width
            if declared > self._size - pos:
                raise FormatError(
                    f"{self._key}: {_where(path)} declares {declared} bytes, past the end of the "
                    f"file at {self._size}"
                )
            end = pos + declared
        if parent == ("ImageList",):
            self.entries.append(path[-1])
        if kind == _GROUP:
            if end is not None and not _group_wanted(path):
                return end
            after = self._group(pos, path, depth + 1)
        elif kind == _DATA:
            if end is not None and not _data_wanted(path):
                return end
            after = self._data(pos, path)
        else:
            raise FormatError(
                f"{self._key}: {_where(path)} is of kind {kind}, neither group ({_GROUP}) nor data ({_DATA})"
            )
        if end is not None and after != end:
            raise FormatError(
                f"{self._key}: {_where(path)} declares {end - pos} bytes, its contents take {after - pos}"
            )
        return after

    def _data(self, pos: int, path: tuple[str, ...]) -> int:
        """Parse the data tag at `pos` (its marker, encoded type and data); return where it ends."""
        if self._read(pos, 4, path) != b"%%%%":
            raise FormatError(f"{self._key}: {_where(path)} lacks the %%%% that starts a data tag")
        count = self._unsigned(pos + 4, path)
        pos += 4 + self._width
        if not 1 <= count <= _MAX_INFO:
            raise FormatError(f"{self._key}: {_where(path)} declares a type of {count} parts")
        raw = self._read(pos, count * self._width, path)
        info = [int.from_bytes(raw[i : i + self._width], "big") for i in range(0, len(raw), self._width)]
        pos += len(raw)
        size = self._layout(info, path)
        if size > self._size - pos:
            raise FormatError(
                f"{self._key}: {_where(path)} declares {size} bytes of data, past the end of the file "
                f"at {self._size}"
            )
        self._note(pos, size, info, path)
        return pos + size

    def _layout(self, info: list[int], path: tuple[str, ...]) -> int:
        """The bytes the data of a tag of encoded type `info` takes.

        A string (type 18; DigitalMicrograph usually stores text as an array
        of UTF-16 units instead) is taken as UTF-16 too: two bytes a character.
        """
        code, parts = info[0], len(info)
        if code in _SIMPLE and parts == 1:
            return struct.calcsize(_SIMPLE[code])
        if code == _STRING and parts == 2:
            return 2 * info[1]
        if code == _STRUCT and parts >= 3 and parts == 3 + 2 * info[2]:
            return self._fields(info[4::2], path)
        if code == _ARRAY and parts == 3 and info[1] in _SIMPLE:
            return struct.calcsize(_SIMPLE[info[1]]) * info[2]
        if code == _ARRAY and parts >= 5 and info[1] == _STRUCT and parts == 5 + 2 * info[3]:
            return self._fields(info[5:-1:2], path) * info[-1]
        raise FormatError(
            f"{self._key}: {_where(path)} has an encoded type {info[:8]} that DM does not write"
        )

    def _fields(self, codes: list[int], path: tuple[str, ...]) -> int:
        if any(c not in _SIMPLE for c in codes):
            raise FormatError(f"{self._key}: {_where(path)} has a struct of fields of types {codes[:8]}")
        return sum(struct.calcsize(_SIMPLE[c]) for c in codes)

    def _note(self, pos: int, size: int, info: list[int], path: tuple[str, ...]) -> None:
        """Keep the value of a tag that locates an image."""
        if len(path) == 3 and path[0] == "Thumbnails" and path[2] == "ImageIndex":
            self.thumbnails.add(self._integer(pos, info, path))
            return
        if len(path) < 4 or path[0] != "ImageList" or path[2] not in ("ImageData", _META_DATA[0]):
            return
        image = self.images.setdefault(path[1], _Image())
        if path[2] != "ImageData":
            if _data_wanted(path):  # `ImageTags/Meta Data`'s Format or Signal
                image.kind[path[4]] = self._text(pos, size, info, path) or ""
            return
        rest = path[3:]
        if rest == ("Data",):
            image.data = (pos, size)
        elif rest == ("DataType",):
            image.data_type = self._integer(pos, info, path)
        elif len(rest) == 2 and rest[0] == "Dimensions":
            if len(image.dimensions) >= _MAX_RANK:
                raise FormatError(f"{self._key}: {_where(path)}: more than {_MAX_RANK} dimensions")
            image.dimensions.append(self._integer(pos, info, path))
        elif len(rest) == 4 and rest[:2] == ("Calibrations", "Dimension"):
            if rest[3] == "Scale" and len(info) == 1 and info[0] in _SIMPLE:
                image.scales[rest[2]] = float(self._value(pos, info[0], path))
            elif rest[3] == "Units":
                text = self._text(pos, size, info, path)
                if text is not None:
                    image.units[rest[2]] = text

    def _text(self, pos: int, size: int, info: list[int], path: tuple[str, ...]) -> str | None:
        """The text of a tag stored as DigitalMicrograph stores text (UTF-16 units); None for another kind."""
        if info[:2] != [_ARRAY, _UTF16] or size > 2 * _MAX_UNITS:
            return None
        encoding = "utf-16-le" if self.little_endian else "utf-16-be"
        return self._read(pos, size, path).decode(encoding, "replace")

    def _value(self, pos: int, code: int, path: tuple[str, ...]) -> int | float | bool:
        fmt = self._order + _SIMPLE[code]
        return struct.unpack(fmt, self._read(pos, struct.calcsize(fmt), path))[0]

    def _integer(self, pos: int, info: list[int], path: tuple[str, ...]) -> int:
        if len(info) != 1 or info[0] not in _INTEGERS:
            raise FormatError(f"{self._key}: {_where(path)} is not an integer but of encoded type {info[:8]}")
        return int(self._value(pos, info[0], path))


def _group_wanted(path: tuple[str, ...]) -> bool:
    """Whether a group may hold a tag that locates or describes an image; DM4 skips the others unread."""
    if path[0] == "Thumbnails":
        return len(path) <= 2
    if path[0] != "ImageList":
        return False
    if len(path) <= 2:
        return True
    if path[2] == "ImageTags":
        return path[3:] in ((), _META_DATA[1:])
    rest = path[3:] if path[2] == "ImageData" else None
    return rest is not None and (
        rest in ((), ("Dimensions",), ("Calibrations",), ("Calibrations", "Dimension"))
        or (len(rest) == 3 and rest[:2] == ("Calibrations", "Dimension"))
    )


def _data_wanted(path: tuple[str, ...]) -> bool:
    """Whether a data tag locates or describes an image; DM4 skips the others unread."""
    if len(path) > 3 and path[2] == "ImageTags":
        return path[2:4] == _META_DATA and len(path) == 5 and path[4] in ("Format", "Signal")
    return len(path) > 1 and _group_wanted(path[:-1])


def _check_spatial(key: str, where: str, image: _Image) -> None:
    """Raise `FormatError` if `image` is a spectrum or its image axes are not spatial (see the module)."""
    units = [image.units.get(str(axis), "") for axis in range(len(image.dimensions))]
    fmt, signal = image.kind.get("Format", ""), image.kind.get("Signal", "")
    kinds = [_unit_kind(unit) for unit in units]
    spectrum = "spectrum" in fmt.lower()
    reason = ""
    if spectrum:
        said = f"Format {fmt!r}" + (f", Signal {signal!r}" if signal else "")
        reason = f"a {fmt.lower()} (its Meta Data say {said})"
    elif "energy" in kinds:
        reason = f"spectra: an axis is in {units[kinds.index('energy')]}, a unit of energy"
    elif "other" in kinds[:2] or {"length", "inverse length"} <= set(kinds[:2]):
        reason = "data whose axes are not all spatial"
    if reason:
        shape = " x ".join(str(d) for d in image.dimensions)
        axes = ", ".join(unit or "(blank)" for unit in units)
        raise FormatError(
            f"{key}: {where} holds {reason}; {shape} values along axes in {axes} (fastest first). "
            "vitrio reads images, stacks and volumes, not spectra"
        )


def _unit_kind(unit: str) -> str:
    """What an axis in `unit` measures: "" (blank), "length", "inverse length", "energy" or "other"."""
    unit = unit.strip()
    if not unit:
        return ""
    if unit in ANGSTROMS_PER_UNIT:
        return "length"
    if unit.startswith("1/") and unit[2:] in ANGSTROMS_PER_UNIT:
        return "inverse length"
    return "energy" if unit in _ENERGY_UNITS else "other"


def _nonzero(stored: np.ndarray, out: np.ndarray) -> None:
    np.copyto(out, stored != 0, casting="unsafe")


class DigitalMicrographReader(RawArrayReader):
    """The first image of a DM3 or DM4 file, with its spatial calibration.

    Made as `RawArrayReader`, then given the attributes below by `DigitalMicrographFormat.open`.

    Attributes:
        pixel_size: The size of a pixel along each axis of the descriptor's
            extents, slowest first, in `pixel_units`; 1.0 where the file
            gives none.
        pixel_units: The unit of each size, such as "nm" or "µm"; "" where
            the file gives none.
        voxel_size: The sizes of the image's axes in Å, where their units are
            lengths; None otherwise.
        image_path: The tag group of the image read, such as "ImageList/1".
    """

    voxel_size_source: str | None
    pixel_size: tuple[float, ...]
    pixel_units: tuple[str, ...]
    image_path: str


class DigitalMicrographFormat(Format):
    """Gatan DigitalMicrograph DM3 and DM4 files, read only; see the module's notes."""

    name = "dm"
    read_extensions = (".dm3", ".dm4")
    reads_urls = True

    @classmethod
    def recognizes(cls, head: bytes, extension: str) -> bool:
        """Whether `head` starts a DM3 or DM4 header: its version, byte order flag and root group."""
        version = int.from_bytes(head[:4], "big") if len(head) >= 4 else 0
        if version not in (3, 4):
            return False
        width = 4 if version == 3 else 8
        root = 8 + width
        if len(head) < root + 2 + width:
            return False
        order = int.from_bytes(head[root - 4 : root], "big")
        count = int.from_bytes(head[root + 2 : root + 2 + width], "big")
        return order in (0, 1) and head[root] in (0, 1) and head[root + 1] in (0, 1) and count > 0

    @classmethod
    def open(cls, key: str, source: ByteSource, head: bytes) -> DigitalMicrographReader:
        """Parse the tag tree of the file and open a reader of its first image.

        Raises:
            FormatError: If the tag tree is malformed or truncated, the file has
                no image besides its thumbnail, or the image is of a kind not
                read (RGB, packed complex, 1-D).
        """
        tree = _TagTree(key, source)
        thumbnails = {tree.entries[i] for i in tree.thumbnails if 0 <= i < len(tree.entries)}
        label = next((e for e in tree.entries if e not in thumbnails), None)
        if not tree.entries:
            raise FormatError(f"{key}: the file holds no image: its ImageList is empty or missing")
        if label is None:
            raise FormatError(f"{key}: the file holds no image besides its thumbnail")
        where = f"ImageList/{label}"
        image = tree.images.get(label, _Image())
        if image.data is None or image.data_type is None:
            missing = "Data" if image.data is None else "DataType"
            raise FormatError(f"{key}: tag {where}/ImageData/{missing} is missing")
        data_type = image.data_type
        if data_type in _RGB_TYPES:
            raise FormatError(
                f"{key}: {where} is an RGB image (DM data type {data_type}), which vitrio does not read"
            )
        if data_type == _PACKED_COMPLEX:
            raise FormatError(f"{key}: {where} is a packed complex image, which vitrio does not read")
        if data_type not in _IMAGE_TYPES:
            raise FormatError(f"{key}: {where} is of DM data type {data_type}, which vitrio does not read")
        numerical = _IMAGE_TYPES[data_type]
        _check_spatial(key, where, image)
        dimensions = image.dimensions
        if len(dimensions) < 2:
            raise FormatError(f"{key}: {where} holds {len(dimensions)}-D data, not an image")
        if min(dimensions) <= 0:
            raise FormatError(f"{key}: {where} has dimensions {dimensions}, not all positive")
        offset, size = image.data
        need = math.prod(dimensions) * numerical.itemsize
        if size != need:
            raise FormatError(
                f"{key}: tag {where}/ImageData/Data holds {size} bytes, but {dimensions} values "
                f"of {numerical.name} take {need}"
            )
        if numerical is NumericalType.boolean:
            file_dtype, decoder = np.dtype(np.uint8), _nonzero
        else:
            file_dtype = numpy_dtype(numerical).newbyteorder("<" if tree.little_endian else ">")
            decoder = None
        axes = [str(i) for i in reversed(range(len(dimensions)))]
        sizes = tuple(image.scales.get(a, 1.0) for a in axes)
        units = tuple(image.units.get(a, "") for a in axes)
        lengths = all(unit in ANGSTROMS_PER_UNIT for unit in units[-2:]) and all(
            a in image.scales for a in axes[-2:]
        )
        voxel = tuple(s * ANGSTROMS_PER_UNIT[u] for s, u in zip(sizes[-2:], units[-2:])) if lengths else None
        held = ImageDescriptor(reversed(dimensions), 2, numerical)
        reader = raw_reader(
            DigitalMicrographReader, key, source, held, file_dtype, offset, decoder=decoder, voxel_size=voxel
        )
        reader.voxel_size_source = "DM calibration" if lengths else None
        reader.pixel_size, reader.pixel_units, reader.image_path = sizes, units, where
        return reader
