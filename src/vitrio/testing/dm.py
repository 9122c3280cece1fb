"""DigitalMicrograph files (DM3, DM4) made by hand: tag trees encoded as Gatan's format lays them out.

A tag tree is a list of (label, value) pairs, where a value is a group (a
list of pairs again) or a data tag: (info, payload), the info being the
list of encoded-type words DM writes before the payload (such as `[5]` for
one uint32, `[20, 4, n]` for an array of n uint16). `dm_file` wraps
image entries in the groups DigitalMicrograph writes around them, and
`write_dm` writes an array as a file with a thumbnail before its image.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from vitrio._partial import write_new

__all__ = [
    "DATA_TYPES",
    "dm_file",
    "encode",
    "image_entry",
    "spectrum_entry",
    "text_tag",
    "thumbnail",
    "uint32_tag",
    "write_dm",
]

DATA_TYPES = {
    np.dtype(np.int8): (9, [9]),
    np.dtype(np.uint8): (6, [10]),
    np.dtype(np.int16): (1, [2]),
    np.dtype(np.uint16): (10, [4]),
    np.dtype(np.int32): (7, [3]),
    np.dtype(np.uint32): (11, [5]),
    np.dtype(np.float32): (2, [6]),
    np.dtype(np.float64): (12, [7]),
    np.dtype(np.complex64): (3, [15, 0, 2, 0, 6, 0, 6]),
    np.dtype(np.complex128): (13, [15, 0, 2, 0, 7, 0, 7]),
    np.dtype(np.bool_): (14, [8]),
}
"""For each numpy type a DM image holds: its DM data type and the encoded type of one element."""


def encode(version: int, root: list, little: bool = True) -> bytes:
    """A DM file of tag tree `root`.

    Args:
        version: 3 or 4.
        root: The root group: a list of (label, group or (info, payload)) pairs.
        little: Whether the file says its data is little-endian.

    Returns:
        The bytes of the file.
    """
    width = 4 if version == 3 else 8

    def group(entries: list) -> bytes:
        return b"\x01\x00" + len(entries).to_bytes(width, "big") + b"".join(tag(*e) for e in entries)

    def tag(label: str, value) -> bytes:
        if isinstance(value, list):
            kind, body = 20, group(value)
        else:
            info, payload = value
            parts = b"".join(i.to_bytes(width, "big") for i in info)
            kind, body = 21, b"%%%%" + len(info).to_bytes(width, "big") + parts + payload
        size = len(body).to_bytes(8, "big") if version == 4 else b""
        name = label.encode("latin-1")
        return bytes([kind]) + len(name).to_bytes(2, "big") + name + size + body

    tree = group(root)
    header = (
        version.to_bytes(4, "big") + (len(tree) + 8).to_bytes(width, "big") + int(little).to_bytes(4, "big")
    )
    return header + tree + bytes(8)


def uint32_tag(value: int, little: bool = True) -> tuple[list[int], bytes]:
    """A data tag of one uint32."""
    return [5], value.to_bytes(4, "little" if little else "big")


def text_tag(text: str, little: bool = True) -> tuple[list[int], bytes]:
    """A data tag of text as DM stores it: an array of UTF-16 units."""
    return [20, 4, len(text)], text.encode("utf-16-le" if little else "utf-16-be")


def image_entry(
    values: np.ndarray,
    data_type: int | None = None,
    element: list[int] | None = None,
    little: bool = True,
    units: Sequence[str] = (),
    scales: Sequence[float | None] = (),
    meta_data: Mapping[str, str] | None = None,
) -> tuple[str, list]:
    """An entry of `ImageList` holding `values`.

    Args:
        values: The image, or stack of images, slowest axis first.
        data_type: The DM data type; defaults to the one `DATA_TYPES` gives `values`' type.
        element: The encoded type of one element; defaults as `data_type` does.
        little: The byte order of the data.
        units: The unit of each axis, fastest first.
        scales: The scale of each axis, fastest first; axis `i` gets `0.5 + i` where none is given,
            and no `Scale` tag where it is None.
        meta_data: The text tags of the group `ImageTags/Meta Data`, where Gatan's
            software says what the data are (`Format`, `Signal`); none if None.

    Returns:
        The (label, group) pair.
    """
    if data_type is None or element is None:
        default_type, default_element = DATA_TYPES[values.dtype]
        data_type = default_type if data_type is None else data_type
        element = default_element if element is None else element
    order = "<" if little else ">"
    meta = (
        [] if meta_data is None else [("Meta Data", [(k, text_tag(v, little)) for k, v in meta_data.items()])]
    )
    payload = values.astype(values.dtype.newbyteorder(order)).tobytes()
    dims = list(reversed(values.shape))
    scales = [scales[i] if i < len(scales) else 0.5 + i for i in range(len(units))]
    calibrations = [
        (
            "",
            [("Scale", ([6], np.array(s, dtype=f"{order}f4").tobytes())) for s in [s] if s is not None]
            + [("Units", text_tag(u, little))],
        )
        for s, u in zip(scales, units)
    ]
    return (
        "",
        [
            (
                "ImageData",
                [
                    ("Calibrations", [("Dimension", calibrations)]),
                    ("Data", ([20, *element, values.size], payload)),
                    ("DataType", uint32_tag(data_type, little)),
                    ("Dimensions", [("", uint32_tag(d, little)) for d in dims]),
                ],
            ),
            ("ImageTags", [("Note", ([20, 10, 3], b"abc")), *meta]),
        ],
    )


def spectrum_entry(
    values: np.ndarray,
    signal: str,
    units: Sequence[str],
    scales: Sequence[float],
    fmt: str = "Spectrum image",
    little: bool = True,
) -> tuple[str, list]:
    """An entry of `ImageList` holding spectra as Gatan's software writes them (EELS, EDS, CL).

    A spectrum image of positions (x, y) and channels (energy loss in eV,
    or wavelength in nm for cathodoluminescence) is stored with the
    channels the slowest of DM's dimensions: `values` of shape (channels,
    y, x), `units` and `scales` fastest first, such as ("nm", "nm", "eV").
    Its `ImageTags/Meta Data` say `Format` "Spectrum image" (a single
    spectrum: "Spectrum") and `Signal` (`signal`: "EELS", "EDS", "CL").
    """
    meta_data = {"Format": fmt, "Signal": signal}
    return image_entry(values, little=little, units=units, scales=scales, meta_data=meta_data)


def thumbnail(little: bool = True) -> tuple[str, list]:
    """An entry of `ImageList` like DigitalMicrograph's thumbnails: 2 x 2 RGBA, as uint32."""
    return image_entry(np.zeros((2, 2), np.uint32), 23, [3], little)


def dm_file(
    version: int, entries: list, thumbnails: Sequence[int] = (), little: bool = True, extra: Sequence = ()
) -> bytes:
    """A DM file whose `ImageList` holds `entries`.

    Args:
        version: 3 or 4.
        entries: The entries of `ImageList`, as `image_entry` and `thumbnail` make them.
        thumbnails: The indices of the entries that are thumbnails.
        little: Whether the file says its data is little-endian.
        extra: More (label, value) pairs of the root group, before `ImageList`.

    Returns:
        The bytes of the file.
    """
    root = [
        ("DocumentTags", [("Flag", ([8], b"\x01"))]),
        *extra,
        ("ImageList", entries),
        ("Thumbnails", [("", [("ImageIndex", uint32_tag(i, little))]) for i in thumbnails]),
    ]
    return encode(version, root, little)


def write_dm(path: str | Path, values: np.ndarray, version: int = 4, little: bool = True) -> Path:
    """Write `values` (an image, or a stack of images) as a DM file whose first entry is a thumbnail.

    Args:
        path: The file to write.
        values: Of a type `DATA_TYPES` holds.
        version: 3 or 4.
        little: The byte order of the data.

    Returns:
        `path`, as a `Path`.

    Raises:
        ValueError: If `values` is not 2-D or 3-D, or of a type DM images do not hold.
    """
    values = np.asarray(values)
    if values.ndim not in (2, 3):
        raise ValueError(
            f"{path}: DM files hold images and stacks of images, not arrays of shape {values.shape}"
        )
    if values.dtype not in DATA_TYPES:
        raise ValueError(f"{path}: DM images do not hold values of type {values.dtype}")
    path = Path(path)
    write_new(path, dm_file(version, [thumbnail(little), image_entry(values, little=little)], [0], little))
    return path
