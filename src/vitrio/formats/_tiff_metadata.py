"""Where a TIFF file says the size of its pixels, and how a written one says it.

A pixel size is taken only from metadata that means one, in this order:

- ImageJ: the resolution tags in pixels per the description's `unit` (a
  length), and `spacing`, the distance between the sections of a volume.
- OME-XML: `PhysicalSizeX`, `PhysicalSizeY` (and `PhysicalSizeZ` of a
  volume) of the first image, in their units (µm where none is named); an
  OME-XML that declares a document type or entities is passed over.
- FEI / Thermo Fisher (Helios, SFEG and other FEI instruments, tags 34680
  and 34682): `PixelWidth` and `PixelHeight` of the `[Scan]` section, in m.
- TVIPS EM-MENU (tag 37706, version 2): `PixelSizeX` and `PixelSizeY`, in nm.
- Zeiss SEM (tag 34118): `AP_IMAGE_PIXEL_SIZE`, in its unit.

The vendors' tags are read as tifffile parses them. They give the size of
a 2-D image only: a volume's section spacing comes from ImageJ or OME-XML.
The resolution tags alone (pixels per inch or centimetre, which image
editors and acquisition programs set to 72-300 dpi for printing) give no
pixel size.

Written files say their voxel size as ImageJ does where ImageJ reads the
values (uint8, uint16, int16, float32) and the file is not a BigTIFF (which
ImageJ's hyperstacks are not), else in OME-XML (in Å), and not at
all where neither holds the file as written: values of another type
(float16, 64-bit integers), or a stack of one image or a volume of
one section, which both would read back without that axis.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable
from typing import Any

import numpy as np
import tifffile

from .._numerical import NumericalType, numpy_dtype
from .._types import ANGSTROMS_PER_UNIT

__all__ = ["pixel_size", "written_layout"]

# ImageJ writes micrometres as "micron"; a few programs as "microns".
_IMAGEJ_UNITS = {**ANGSTROMS_PER_UNIT, "micron": 1e4, "microns": 1e4}
_IMAGEJ_TYPES = tuple(np.dtype(t) for t in ("uint8", "uint16", "int16", "float32"))
_OME_TYPES = tuple(
    numpy_dtype(t)
    for t in NumericalType
    if t.name not in ("boolean", "int64", "uint64", "float16", "complex_float16")
)
"""The types OME-XML names: every numerical type but booleans, 64-bit integers and half floats."""

Sizes = list[float] | None


def _imagej(tiff: tifffile.TiffFile, page: tifffile.TiffPage, core_rank: int) -> Sizes:
    imagej = tiff.imagej_metadata or {}
    scale = _IMAGEJ_UNITS.get(str(imagej.get("unit", "")).strip())
    if scale is None or 282 not in page.tags or 283 not in page.tags:
        return None
    x, y = (float(value) for value in page.resolution)
    sizes = [scale / y, scale / x] if x > 0 and y > 0 else []
    if core_rank == 3:
        spacing = imagej.get("spacing")
        sizes = [scale * float(spacing), *sizes] if isinstance(spacing, (int, float)) else []
    return sizes


def _ome(tiff: tifffile.TiffFile, page: tifffile.TiffPage, core_rank: int) -> Sizes:
    text = tiff.ome_metadata
    if not text or "<!DOCTYPE" in text or "<!ENTITY" in text:  # entities could expand without bound
        return None
    pixels = next((e for e in ElementTree.fromstring(text).iter() if e.tag.endswith("}Pixels")), None)
    if pixels is None:
        return None
    sizes = []
    for axis in "ZYX"[3 - core_rank :]:
        value = pixels.get(f"PhysicalSize{axis}")
        scale = ANGSTROMS_PER_UNIT.get(pixels.get(f"PhysicalSize{axis}Unit", "µm"))
        if value is None or scale is None:
            return None
        sizes.append(float(value) * scale)
    return sizes


def _fei(tiff: tifffile.TiffFile, page: tifffile.TiffPage, core_rank: int) -> Sizes:
    scan = (tiff.fei_metadata or {}).get("Scan")
    if core_rank != 2 or not isinstance(scan, dict):
        return None
    return [float(scan["PixelHeight"]) * 1e10, float(scan["PixelWidth"]) * 1e10]


def _tvips(tiff: tifffile.TiffFile, page: tifffile.TiffPage, core_rank: int) -> Sizes:
    header = tiff.tvips_metadata or {}
    if core_rank != 2 or header.get("Version") != 2:
        return None
    return [float(header["PixelSizeY"]) * 10, float(header["PixelSizeX"]) * 10]


def _zeiss_sem(tiff: tifffile.TiffFile, page: tifffile.TiffPage, core_rank: int) -> Sizes:
    entry = (tiff.sem_metadata or {}).get("ap_image_pixel_size")
    if core_rank != 2 or not isinstance(entry, tuple) or len(entry) != 3:
        return None
    scale = ANGSTROMS_PER_UNIT.get(str(entry[2]))
    return None if scale is None else [float(entry[1]) * scale] * 2


_SOURCES: tuple[tuple[str, Callable[[tifffile.TiffFile, tifffile.TiffPage, int], Sizes]], ...] = (
    ("ImageJ", _imagej),
    ("OME-XML", _ome),
    ("FEI", _fei),
    ("TVIPS", _tvips),
    ("Zeiss SEM", _zeiss_sem),
)


def pixel_size(
    tiff: tifffile.TiffFile, page: tifffile.TiffPage, core_rank: int
) -> tuple[tuple[float, ...], str] | tuple[None, None]:
    """The size of a pixel (or voxel) in Å, slowest axis first, and the metadata it comes from.

    The first source (see the module) that gives a positive finite size for
    each of the `core_rank` axes wins; metadata missing or malformed is
    passed over, and none gives `(None, None)`.
    """
    for name, read in _SOURCES:
        try:
            sizes = read(tiff, page, core_rank)
        except (ArithmeticError, ValueError, TypeError, KeyError, ElementTree.ParseError):
            continue
        if sizes and len(sizes) == core_rank and all(math.isfinite(s) and s > 0 for s in sizes):
            return tuple(float(s) for s in sizes), name
    return None, None


def written_layout(
    axes: str, dtype: np.dtype, extents: tuple[int, ...], voxel_size: tuple[float, ...] | None, bigtiff: bool
) -> dict[str, Any]:
    """tifffile's arguments for the metadata of a written file: its axes, and its voxel size if it holds one.

    A file of `extents` along `axes` ("YX", "IYX", "ZYX", "IZYX") says its
    voxel size as an ImageJ hyperstack (resolution in pixels per nm,
    `spacing` in nm; not if `bigtiff`) or in OME-XML, stacks as their time
    axis; else (see the module) its axes alone, as tifffile's shaped
    description.
    """
    shaped = {"metadata": {"axes": axes}}
    if voxel_size is None or 1 in extents[: len(extents) - 2]:
        return shaped
    hyperstack = axes.replace("I", "T")
    y, x = voxel_size[-2:]
    if dtype in _IMAGEJ_TYPES and not bigtiff:
        metadata: dict[str, Any] = {"axes": hyperstack, "unit": "nm"}
        if len(voxel_size) == 3:
            metadata["spacing"] = voxel_size[0] / 10
        return {"imagej": True, "metadata": metadata, "resolution": (10 / x, 10 / y)}
    if dtype in _OME_TYPES:
        metadata = {"axes": hyperstack}
        for axis, size in zip("ZYX"[3 - len(voxel_size) :], voxel_size):
            metadata[f"PhysicalSize{axis}"] = size
            metadata[f"PhysicalSize{axis}Unit"] = "Å"
        return {"ome": True, "metadata": metadata}
    return shaped
