"""TIFF pixel sizes come only from metadata that means one (ImageJ, OME-XML, FEI, TVIPS, Zeiss SEM), each
file written with tifffile the way the instrument or program writes it and checked against tifffile's own
parsing of that metadata; resolution tags alone (dots per inch or centimetre) give none."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import tifffile

import vitrio as vio
import vitrio.formats.tiff
from vitrio.cli import main

IMAGE = np.arange(48 * 64, dtype=np.uint16).reshape(48, 64)

# The text of the FEI_HELIOS (34682) or FEI_SFEG (34680) tag, as Helios and Quanta microscopes write it:
# INI sections, lengths in metres. Their TIFFs also carry resolution tags of 72 dots per inch.
FEI_TEXT = """[User]
Date=03/12/2026
Time=09:41:12 AM
User=supervisor
UserText=
[System]
Type=DualBeam
Dnumber=9922638
Software=7.6.2.4004
BuildNr=4004
Source=FEG
Column=Elstar
FinalLens=Elstar
Chamber=xHP-Chamber
Stage=HighPrecision
[Beam]
HV=2000
Spot=3
StigmatorX=-0.241852
StigmatorY=0.542291
BeamShiftX=0
BeamShiftY=0
ScanRotation=0
ImageMode=Normal
Beam=EBeam
Scan=EScan
[EBeam]
HV=2000
BeamCurrent=2.5e-011
WD=0.00415367
[Scan]
InternalScan=1
Dwelltime=3e-006
PixelWidth=3.3724e-009
PixelHeight=3.3724e-009
HorFieldsize=6.90667e-006
VerFieldsize=4.60445e-006
Average=0
Integrate=0
FrameTime=9.43718
[Image]
DigitalContrast=1
DigitalBrightness=0
Zoom=1
"""

# The text of the CZ_SEM tag (34118) of Zeiss SEMs (SmartSEM): values before the first name, then
# NAME lines each followed by "Label = value unit".
ZEISS_TEXT = """0
0
0
AP_IMAGE_PIXEL_SIZE
Image Pixel Size = 2.791 nm
AP_WD
WD = 4.0 mm
DP_DETECTOR_TYPE
Detector = InLens
AP_MAG
Mag = 25.00 K X
"""


def tvips_header(pixel_size_nm: tuple[float, float] | None) -> bytes:
    """The TemData structure of TVIPS EM-MENU that tag 37706 points at: version 1 alone, or with version 2.

    Version 2 gives `PixelSizeX` and `PixelSizeY`, the pixel at the specimen in nm.
    """
    first = np.zeros((), dtype=np.dtype(tifffile.TIFF.TVIPS_HEADER_V1))
    first["Version"] = 1 if pixel_size_nm is None else 2
    first["Magnification"] = 50000
    if pixel_size_nm is None:
        return first.tobytes()
    second = np.zeros((), dtype=np.dtype(tifffile.TIFF.TVIPS_HEADER_V2))
    second["PixelSizeX"], second["PixelSizeY"] = pixel_size_nm
    second["ImageSizeX"], second["ImageSizeY"] = IMAGE.shape[1], IMAGE.shape[0]
    second["TemMagnification"] = 50000
    second["Magic"] = 0xAAAAAAAA
    return first.tobytes() + second.tobytes()


def metadata(path: Path) -> tuple[tuple[float, ...] | None, str | None]:
    found = vio.query_metadata(path)
    return found.voxel_size, found.voxel_size_source


@pytest.mark.parametrize(
    ("resolution", "unit"), [((72, 72), "INCH"), ((300, 300), "INCH"), ((118.11, 118.11), "CENTIMETER")]
)
def test_resolution_tags_alone_give_no_pixel_size(tmp_path, resolution, unit):
    # what image editors and acquisition programs write: 72 or 300 dpi, 300 dpi as 118.11 per cm
    path = tmp_path / "photo.tif"
    tifffile.imwrite(path, IMAGE, resolution=resolution, resolutionunit=unit)
    with tifffile.TiffFile(path) as tiff:
        assert tiff.pages[0].resolution == pytest.approx(resolution)
    assert metadata(path) == (None, None)
    # a volume too, and an ImageJ file whose unit is no length (ImageJ's "inch" of a dpi file, or "pixel")
    volume = np.stack([IMAGE] * 3)
    tifffile.imwrite(
        path,
        volume,
        photometric="minisblack",
        resolution=resolution,
        resolutionunit=unit,
        metadata={"axes": "ZYX"},
    )
    assert vio.query_descriptor(path).core_rank == 3
    assert metadata(path) == (None, None)
    for imagej_unit in ("inch", "pixel"):
        tifffile.imwrite(path, IMAGE, imagej=True, resolution=resolution, metadata={"unit": imagej_unit})
        assert metadata(path) == (None, None)


@pytest.mark.parametrize(("unit", "angstroms"), [("micron", 1e4), ("nm", 10.0), ("um", 1e4), ("mm", 1e7)])
def test_imagej_unit_and_spacing(tmp_path, unit, angstroms):
    path = tmp_path / "volume.tif"
    tifffile.imwrite(
        path,
        np.stack([IMAGE] * 4),
        imagej=True,
        resolution=(4.0, 2.0),
        metadata={"axes": "ZYX", "unit": unit, "spacing": 0.75},
    )
    with tifffile.TiffFile(path) as tiff:
        x, y = tiff.pages[0].resolution
        spacing = tiff.imagej_metadata["spacing"]
        assert tiff.imagej_metadata["unit"] == unit
    size, source = metadata(path)
    assert source == "ImageJ"
    assert size == pytest.approx((spacing * angstroms, angstroms / y, angstroms / x), rel=1e-12)


@pytest.mark.parametrize(("unit", "angstroms"), [(None, 1e4), ("nm", 10.0), ("Å", 1.0), ("pm", 0.01)])
def test_ome_xml_physical_sizes(tmp_path, unit, angstroms):
    path = tmp_path / "image.ome.tif"
    sizes = {"PhysicalSizeX": 0.25, "PhysicalSizeY": 0.5, "PhysicalSizeZ": 2.0}
    units = {} if unit is None else {f"{name}Unit": unit for name in sizes}
    tifffile.imwrite(path, np.stack([IMAGE] * 3), ome=True, metadata={"axes": "ZYX", **sizes, **units})
    with tifffile.TiffFile(path) as tiff:
        pixels = tifffile.xml2dict(tiff.ome_metadata)["OME"]["Image"]["Pixels"]
    # tifffile's reading, in its units (µm, OME's default, where none is written)
    expected = [pixels[f"PhysicalSize{axis}"] * angstroms for axis in "ZYX"]
    assert all(pixels.get(f"PhysicalSize{axis}Unit", "µm") == (unit or "µm") for axis in "ZYX")
    size, source = metadata(path)
    assert source == "OME-XML" and size == pytest.approx(expected, rel=1e-12)
    # an image without a unit OME knows has no pixel size
    tifffile.imwrite(path, IMAGE, ome=True, metadata={"PhysicalSizeX": 1, "PhysicalSizeXUnit": "pixel"})
    assert metadata(path) == (None, None)


def test_ome_xml_that_declares_entities_is_passed_over(tmp_path):
    path = tmp_path / "entities.ome.tif"
    tifffile.imwrite(path, IMAGE, ome=True, metadata={"PhysicalSizeX": 0.5, "PhysicalSizeY": 0.5})
    with tifffile.TiffFile(path) as tiff:
        xml = tiff.ome_metadata
    assert metadata(path) == (pytest.approx((5000.0, 5000.0)), "OME-XML")
    declared = '<?xml version="1.0"?><!DOCTYPE OME [<!ENTITY a "0.5">]>' + xml.split("?>", 1)[1]
    tifffile.imwrite(path, IMAGE, description=declared, metadata=None)
    with tifffile.TiffFile(path) as tiff:
        assert "<!ENTITY" in tiff.ome_metadata
    assert metadata(path) == (None, None)


@pytest.mark.parametrize("tag", [34682, 34680])  # FEI_HELIOS, FEI_SFEG
def test_fei_pixel_width_and_height(tmp_path, tag):
    path = tmp_path / "helios.tif"
    tifffile.imwrite(
        path, IMAGE, resolution=(72, 72), resolutionunit="INCH", extratags=[(tag, "s", 0, FEI_TEXT, True)]
    )
    with tifffile.TiffFile(path) as tiff:
        scan = tiff.fei_metadata["Scan"]
    size, source = metadata(path)
    assert source == "FEI"
    assert size == pytest.approx((scan["PixelHeight"] * 1e10, scan["PixelWidth"] * 1e10), rel=1e-12)
    assert size == pytest.approx((33.724, 33.724))  # 3.3724 nm, not 72 dpi's 3.5e6 Å
    # a section without the sizes, or a size of zero, gives none
    for text in (FEI_TEXT.replace("PixelWidth", "Width"), FEI_TEXT.replace("=3.3724e-009", "=0")):
        tifffile.imwrite(path, IMAGE, resolution=(72, 72), extratags=[(tag, "s", 0, text, True)])
        assert metadata(path) == (None, None)


def test_tvips_version_2_pixel_size(tmp_path):
    path = tmp_path / "tvips.tif"
    extratags = [(37706, "B", len(tvips_header((0.31, 0.29))), tvips_header((0.31, 0.29)), True)]
    tifffile.imwrite(path, IMAGE, resolution=(72, 72), extratags=extratags)
    with tifffile.TiffFile(path) as tiff:
        header = tiff.tvips_metadata
    assert header["Version"] == 2 and header["Magnification"] == 50000
    size, source = metadata(path)
    assert source == "TVIPS"
    assert size == pytest.approx((header["PixelSizeY"] * 10, header["PixelSizeX"] * 10), rel=1e-12)
    assert size == pytest.approx((2.9, 3.1), rel=1e-6)
    # version 1 gives the camera's pixel, not the specimen's: no size
    tifffile.imwrite(
        path, IMAGE, resolution=(72, 72), extratags=[(37706, "B", 168, tvips_header(None), True)]
    )
    with tifffile.TiffFile(path) as tiff:
        assert tiff.tvips_metadata["Version"] == 1
    assert metadata(path) == (None, None)


def test_zeiss_sem_image_pixel_size(tmp_path):
    path = tmp_path / "zeiss.tif"
    tifffile.imwrite(path, IMAGE, resolution=(96, 96), extratags=[(34118, "s", 0, ZEISS_TEXT, True)])
    with tifffile.TiffFile(path) as tiff:
        _, value, unit = tiff.sem_metadata["ap_image_pixel_size"]
    assert unit == "nm"
    size, source = metadata(path)
    assert source == "Zeiss SEM" and size == pytest.approx((value * 10, value * 10), rel=1e-12)


def test_vendor_sizes_are_of_images_not_volumes(tmp_path):
    # a stack of FEI images read as a volume has no section spacing: no size, rather than a made-up one
    path = tmp_path / "stack.tif"
    volume = np.stack([IMAGE] * 3)
    fei = [(34682, "s", 0, FEI_TEXT, True)]
    tifffile.imwrite(path, volume, photometric="minisblack", metadata={"axes": "ZYX"}, extratags=fei)
    assert vio.query_descriptor(path).core_rank == 3
    assert metadata(path) == (None, None)


def test_imagej_wins_over_the_instrument(tmp_path):
    # a FEI image resaved by ImageJ, its scale set there
    path = tmp_path / "resaved.tif"
    extratags = [(34682, "s", 0, FEI_TEXT, True)]
    tifffile.imwrite(
        path, IMAGE, imagej=True, resolution=(2.0, 2.0), metadata={"unit": "nm"}, extratags=extratags
    )
    assert metadata(path) == ((5.0, 5.0), "ImageJ")


def test_vitrio_info_says_where_the_size_comes_from(tmp_path, capsys):
    fei, photo = tmp_path / "fei.tif", tmp_path / "photo.tif"
    tifffile.imwrite(fei, IMAGE, resolution=(72, 72), extratags=[(34682, "s", 0, FEI_TEXT, True)])
    tifffile.imwrite(photo, IMAGE, resolution=(300, 300), resolutionunit="INCH")
    assert main(["info", "--json", str(fei), str(photo)]) == 0
    found, plain = json.loads(capsys.readouterr().out)
    assert (found["voxel_size"], found["voxel_unit"], found["voxel_size_source"]) == (
        pytest.approx([33.724, 33.724]),
        "Å",
        "FEI",
    )
    assert (plain["voxel_size"], plain["voxel_unit"], plain["voxel_size_source"]) == (None, None, None)
    assert main(["info", str(fei), str(photo)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "  voxel size  33.72 Å (FEI)" in lines
    assert sum(line.startswith("  voxel size") for line in lines) == 1


@pytest.mark.parametrize(
    ("shape", "dtype", "source"),
    [
        ((8, 10), "float32", "ImageJ"),
        ((3, 8, 10), "uint16", "ImageJ"),
        ((8, 10), "float64", "OME-XML"),
        ((2, 3, 8, 10), "int32", "OME-XML"),
        ((3, 8, 10), "complex64", "OME-XML"),
        ((8, 10), "int64", None),  # neither ImageJ nor OME holds 64-bit integers
        ((1, 8, 10), "float32", None),  # both would read a volume of one section back as an image
    ],
)
def test_written_files_say_their_voxel_size_in_metadata_that_means_one(tmp_path, shape, dtype, source):
    path = tmp_path / "written.tif"
    values = np.arange(np.prod(shape)).reshape(shape).astype(dtype)
    voxel = (3.0, 1.5, 2.5)[3 - min(len(shape), 3) :]
    (vio.write_stack if len(shape) == 4 else vio.write_single)(values, path, voxel_size=voxel)
    found = vio.query_metadata(path)
    assert found.descriptor.extents == shape and found.voxel_size_source == source
    assert found.voxel_size == (None if source is None else pytest.approx(voxel))
    np.testing.assert_array_equal(vio.read(path), values)
    with tifffile.TiffFile(path) as tiff:  # as tifffile reads the metadata
        assert bool(tiff.imagej_metadata) == (source == "ImageJ")
        assert bool(tiff.ome_metadata) == (source == "OME-XML")


def test_a_bigtiff_says_its_voxel_size_in_ome_xml(tmp_path, monkeypatch):
    # ImageJ's hyperstacks are never BigTIFF: past 4 GiB (here, past 1 KiB) a float32 stack is OME-TIFF
    monkeypatch.setattr(vitrio.formats.tiff, "_BIGTIFF_BYTES", 1024)
    path = tmp_path / "big.tif"
    values = np.arange(3 * 16 * 16, dtype=np.float32).reshape(3, 16, 16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # tifffile warns of a nonconformant BigTIFF ImageJ file
        vio.write_stack(values, path, voxel_size=1.25)
    with tifffile.TiffFile(path) as tiff:
        assert tiff.is_bigtiff and tiff.ome_metadata and not tiff.imagej_metadata
    assert metadata(path) == ((1.25, 1.25), "OME-XML")
    np.testing.assert_array_equal(vio.read(path), values)
