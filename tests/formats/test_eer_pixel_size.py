"""The pixel size of EER files: the acquisition metadata of the first page (tag 65001), checked
against tifffile's reading of it, scaled by binning and super-resolution; metadata missing, malformed,
hostile or too large gives no pixel size and the frames read all the same."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
import tifffile

import vitrio as vio
from vitrio.cli import main
from vitrio.formats import open_reader
from vitrio.testing.eer import (
    METADATA_TAG,
    acquisition_metadata,
    encode_frame,
    metadata_xml,
    random_movie,
    write_eer,
)

SHAPE = (64, 64)
FRAMES = 8
HEIGHT_M, WIDTH_M = 9.1e-11, 8.2e-11  # unequal, so that the axes cannot be swapped unseen


def items(height=(HEIGHT_M, "m"), width=(WIDTH_M, "m"), **more) -> dict:
    """Acquisition metadata of the tests' movies with the sensor's pixel sizes given as (value, unit)."""
    metadata = acquisition_metadata(SHAPE, FRAMES)
    metadata["sensorPixelSize.height"], metadata["sensorPixelSize.width"] = height, width
    metadata.update(more)
    return metadata


def movie(path: Path, metadata=None):
    return random_movie(path, frames=FRAMES, shape=SHAPE, density=0.1, metadata=metadata)


def tifffile_angstroms(path: Path) -> tuple[float, float]:
    """The sensor's pixel size in Å, (height, width), as tifffile reads the metadata."""
    with tifffile.TiffFile(path) as tif:
        metadata = tif.eer_metadata
    assert metadata["sensorPixelSize.height.unit"] == metadata["sensorPixelSize.width.unit"] == "m"
    return metadata["sensorPixelSize.height"] * 1e10, metadata["sensorPixelSize.width"] * 1e10


def tifffile_items(path: Path) -> dict:
    with tifffile.TiffFile(path) as tif:
        return tif.eer_metadata or {}


@pytest.fixture
def sized(tmp_path):
    """A movie whose metadata gives a sensor pixel of 0.91 x 0.82 Å."""
    return movie(tmp_path / "movie.eer", items())


def test_the_pixel_size_is_the_metadata_s_in_angstroms(sized):
    expected = tifffile_angstroms(sized.path)
    assert expected == pytest.approx((0.91, 0.82))
    metadata = vio.query_metadata(sized.path)
    assert metadata.format_name == "eer"
    assert metadata.voxel_size == pytest.approx(expected, rel=1e-12)
    with open_reader(sized.path) as reader:
        assert reader.voxel_size == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("binning", [2, 4])
def test_binning_multiplies_the_pixel_size(sized, binning):
    readers = vio.detector_event_image_reader_provider(4, binning=binning)
    metadata = vio.query_metadata(sized.path, readers=readers)
    expected = tifffile_angstroms(sized.path)
    assert metadata.voxel_size == pytest.approx((expected[0] * binning, expected[1] * binning), rel=1e-12)
    images = vio.read(sized.path, readers=readers)
    assert images.shape == (4, SHAPE[0] // binning, SHAPE[1] // binning)
    # the images span the same field of view as the frames
    assert np.multiply(images.shape[1:], metadata.voxel_size) == pytest.approx(np.multiply(SHAPE, expected))


@pytest.mark.parametrize("superres", [2, 4])
def test_super_resolution_divides_the_pixel_size(sized, superres):
    readers = vio.detector_event_image_reader_provider(2, superres=superres)
    metadata = vio.query_metadata(sized.path, readers=readers)
    expected = tifffile_angstroms(sized.path)
    assert metadata.voxel_size == pytest.approx((expected[0] / superres, expected[1] / superres), rel=1e-12)
    images = vio.read(sized.path, readers=readers)
    assert images.shape == (2, SHAPE[0] * superres, SHAPE[1] * superres)


@pytest.mark.parametrize(
    ("value", "unit", "angstroms"),
    [(8.2e-11, "m", 1e10), (0.082, "nm", 10.0), (82.0, "pm", 0.01), (0.82, "Å", 1.0), (0.82, "A", 1.0)],
)
def test_units_of_length_are_converted_to_angstroms(tmp_path, value, unit, angstroms):
    path = movie(tmp_path / "movie.eer", items(height=(value, unit), width=(value, unit))).path
    read = tifffile_items(path)
    assert read["sensorPixelSize.width.unit"] == unit
    expected = read["sensorPixelSize.width"] * angstroms
    assert expected == pytest.approx(0.82)
    assert vio.query_metadata(path).voxel_size == pytest.approx((expected, expected), rel=1e-12)


def test_a_sensor_larger_than_the_frames_makes_their_pixels_larger(tmp_path):
    """Frames of 64 x 64 of a sensor of 64 x 128 pixels: a pixel of the frames covers two of the
    sensor's along x."""
    metadata = items(sensorImageWidth=(SHAPE[1] * 2, "pixel"))
    path = movie(tmp_path / "movie.eer", metadata).path
    assert tifffile_items(path)["sensorImageWidth"] == 128
    height, width = tifffile_angstroms(path)
    assert vio.query_metadata(path).voxel_size == pytest.approx((height, width * 2), rel=1e-12)


# --- no pixel size, and the frames read all the same -------------------------------------------------


def assert_no_pixel_size_and_frames_read(movie) -> None:
    metadata = vio.query_metadata(movie.path)
    assert metadata.voxel_size is None
    assert metadata.descriptor.extents == (FRAMES, *SHAPE)
    assert np.array_equal(vio.read(movie.path), movie.counts())
    readers = vio.detector_event_image_reader_provider(2, binning=2)
    assert vio.query_metadata(movie.path, readers=readers).voxel_size is None


def test_no_metadata_tag(tmp_path):
    made = movie(tmp_path / "movie.eer", b"")
    with tifffile.TiffFile(made.path) as tif:
        assert METADATA_TAG not in tif.pages[0].tags
    assert_no_pixel_size_and_frames_read(made)


def test_metadata_without_a_pixel_size(tmp_path):
    made = movie(tmp_path / "movie.eer")  # the encoder's default metadata: no sensorPixelSize
    assert "sensorImageWidth" in tifffile_items(made.path)
    assert "sensorPixelSize.width" not in tifffile_items(made.path)
    assert_no_pixel_size_and_frames_read(made)


def test_only_one_axis_of_pixel_size(tmp_path):
    metadata = items()
    del metadata["sensorPixelSize.height"]
    made = movie(tmp_path / "movie.eer", metadata)
    assert "sensorPixelSize.width" in tifffile_items(made.path)
    assert_no_pixel_size_and_frames_read(made)


@pytest.mark.parametrize(
    "width",
    [
        (0.0, "m"),
        (-8.2e-11, "m"),
        ("nan", "m"),
        ("inf", "m"),
        ("1e300", "m"),
        ("eight", "m"),
        (8.2e-11, None),
        (1, "pixel"),
    ],
)
def test_a_pixel_size_that_is_no_length(tmp_path, width):
    made = movie(tmp_path / "movie.eer", items(width=width))
    assert "sensorPixelSize.width" in tifffile_items(made.path)
    assert_no_pixel_size_and_frames_read(made)


@pytest.mark.parametrize(
    ("width", "sensor_width"),
    [((WIDTH_M, "m"), "-64"), ((WIDTH_M, "m"), "0"), ((WIDTH_M, "m"), "wide"), ((-WIDTH_M, "m"), "-64")],
)
def test_a_sensor_size_that_is_no_number(tmp_path, width, sensor_width):
    made = movie(tmp_path / "movie.eer", items(width=width, sensorImageWidth=(sensor_width, "pixel")))
    assert "sensorPixelSize.width" in tifffile_items(made.path)
    assert_no_pixel_size_and_frames_read(made)


def test_malformed_xml(tmp_path):
    xml = metadata_xml(items())
    made = movie(tmp_path / "movie.eer", xml[: -len(b"</metadata>")] + b"<item name='x'></metadata>")
    assert b"sensorPixelSize.width" in made.path.read_bytes()
    assert_no_pixel_size_and_frames_read(made)


def test_items_named_by_another_attribute(tmp_path):
    xml = metadata_xml(items()).replace(b"<item name=", b"<item key=")
    made = movie(tmp_path / "movie.eer", xml)
    assert "sensorPixelSize.width" not in tifffile_items(made.path)
    assert_no_pixel_size_and_frames_read(made)


ENTITIES = b"""<!DOCTYPE metadata [
<!ENTITY size "8.2e-11">
<!ENTITY a "&size;&size;&size;&size;&size;&size;&size;&size;&size;&size;">
<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">
]>
"""
PIXEL_ITEMS = (
    b'<item name="sensorPixelSize.height" unit="m">&size;</item>'
    b'<item name="sensorPixelSize.width" unit="m">&size;</item>'
    b'<item name="cameraName">&b;</item>'
)


@pytest.mark.parametrize(
    "xml",
    [
        ENTITIES + b"<metadata>" + PIXEL_ITEMS + b"</metadata>",  # a document type before the metadata
        b"<metadata>" + ENTITIES + PIXEL_ITEMS + b"</metadata>",  # and inside it, after the first bytes
    ],
    ids=["before", "inside"],
)
def test_a_document_type_with_entities_is_not_parsed(tmp_path, xml):
    made = movie(tmp_path / "movie.eer", xml)
    assert "sensorPixelSize.width" not in tifffile_items(made.path)
    assert_no_pixel_size_and_frames_read(made)


def test_metadata_of_two_mib_is_not_read(tmp_path):
    metadata = items(comment=("x" * (2 << 20), None))
    made = movie(tmp_path / "movie.eer", metadata)
    # tifffile reads the whole tag and finds the pixel size; the reader does not read so much
    assert tifffile_items(made.path)["sensorPixelSize.width"] == pytest.approx(WIDTH_M)
    assert_no_pixel_size_and_frames_read(made)


@pytest.mark.parametrize(("size", "read"), [(1 << 20, True), ((1 << 20) + 1, False)], ids=["1MiB", "more"])
def test_metadata_of_up_to_one_mib_is_read(tmp_path, size, read):
    xml = metadata_xml(items(comment=("x", None)))
    xml = xml.replace(b">x<", b">" + b"x" * (1 + size - len(xml)) + b"<")
    made = movie(tmp_path / "movie.eer", xml)
    with tifffile.TiffFile(made.path) as tif:
        assert tif.pages[0].tags[METADATA_TAG].count == size
    expected = tifffile_angstroms(made.path)  # tifffile reads a tag of any size
    if read:
        assert vio.query_metadata(made.path).voxel_size == pytest.approx(expected, rel=1e-12)
    else:
        assert_no_pixel_size_and_frames_read(made)


# --- how the tag is stored -------------------------------------------------------------------------------


def set_metadata_type(path: Path, dtype: int) -> None:
    """Change the TIFF type of the first page's metadata tag (BigTIFF: code, type, count, value)."""
    with tifffile.TiffFile(path) as tif:
        offset = tif.pages[0].tags[METADATA_TAG].offset
    with open(path, "r+b") as handle:
        handle.seek(offset + 2)
        handle.write(struct.pack("<H", dtype))


@pytest.mark.parametrize("dtype", [1, 2], ids=["BYTE", "ASCII"])
def test_metadata_of_byte_or_ascii_type(sized, dtype):
    expected = tifffile_angstroms(sized.path)
    set_metadata_type(sized.path, dtype)
    with tifffile.TiffFile(sized.path) as tif:
        assert int(tif.pages[0].tags[METADATA_TAG].dtype) == dtype
    assert vio.query_metadata(sized.path).voxel_size == pytest.approx(expected, rel=1e-12)


def test_metadata_of_another_type_is_not_read(sized):
    set_metadata_type(sized.path, 3)  # SHORT: not text
    assert_no_pixel_size_and_frames_read(sized)


def test_metadata_on_an_integrated_image_first(tmp_path):
    """A file that starts with an integrated image holds the metadata on that first page."""
    strips = [encode_frame(np.zeros((0, 2), np.uint32), (4, 4), (7, 2, 2), 4) for _ in range(2)]
    path = write_eer(
        tmp_path / "integrated.eer",
        strips,
        (4, 4),
        integrated=np.zeros((4, 4), np.uint16),
        metadata=items(sensorImageHeight=(4, "pixel"), sensorImageWidth=(4, "pixel")),
    )
    with tifffile.TiffFile(path) as tif:
        assert int(tif.pages[0].compression) == 1 and METADATA_TAG in tif.pages[0].tags
    assert vio.query_descriptor(path).extents == (2, 4, 4)
    assert not vio.read(path).any()
    assert vio.query_metadata(path).voxel_size == pytest.approx(tifffile_angstroms(path), rel=1e-12)


# --- vitrio info -----------------------------------------------------------------------------------------


def test_vitrio_info_shows_the_voxel_size(sized, capsys):
    assert main(["info", "--json", str(sized.path)]) == 0
    (info,) = json.loads(capsys.readouterr().out)
    assert (info["format"], info["voxel_unit"], info["voxel_size_source"]) == (
        "eer",
        "Å",
        "EER acquisition metadata",
    )
    assert info["voxel_size"] == pytest.approx(list(tifffile_angstroms(sized.path)), rel=1e-12)
    assert main(["info", str(sized.path)]) == 0
    assert "  voxel size  0.91 x 0.82 Å (EER acquisition metadata)" in capsys.readouterr().out.splitlines()


def test_vitrio_info_of_an_eer_file_without_a_pixel_size(tmp_path, capsys):
    made = movie(tmp_path / "movie.eer")
    assert main(["info", "--json", str(made.path)]) == 0
    (info,) = json.loads(capsys.readouterr().out)
    assert info["voxel_size"] is None and info["voxel_unit"] is None
