"""What a reader says of its file's header: `format_name`, `voxel_size` and `header_statistics`."""

from __future__ import annotations

from pathlib import Path

import mrcfile
import numpy as np
import pytest
import tifffile

import vitrio as vio
from vitrio.formats import HeaderStatistics, ImageReader, open_reader
from vitrio.testing.dm import dm_file, image_entry
from vitrio.testing.eer import random_movie


def header(path: Path) -> tuple[str | None, tuple[float, ...] | None, HeaderStatistics | None]:
    with open_reader(path) as reader:
        return reader.format_name, reader.voxel_size, reader.header_statistics


def test_mrc_voxel_size_is_the_cell_over_the_sampling_slowest_first(tmp_path):
    with mrcfile.new(tmp_path / "map.mrc") as mrc:
        mrc.set_data(np.arange(4 * 6 * 8, dtype=np.float32).reshape(4, 6, 8))
        mrc.voxel_size = (1.0, 2.0, 3.0)  # x, y, z
        mrc.update_header_stats()
        stats = mrc.header.dmin, mrc.header.dmax, mrc.header.dmean, mrc.header.rms
    name, voxel, statistics = header(tmp_path / "map.mrc")
    assert name == "mrc" and voxel == (3.0, 2.0, 1.0)
    assert statistics == pytest.approx(tuple(float(v) for v in stats))
    assert statistics.max == 4 * 6 * 8 - 1 and statistics.min == 0


def test_mrc_stack_voxel_size_is_per_image_axis(tmp_path):
    with mrcfile.new(tmp_path / "stack.mrcs") as mrc:
        mrc.set_data(np.zeros((3, 5, 7), np.float32))
        mrc.set_image_stack()
        mrc.voxel_size = (1.5, 2.5, 1.0)
    assert header(tmp_path / "stack.mrcs")[1] == (2.5, 1.5)


def test_mrc_without_a_cell_has_no_voxel_size(tmp_path):
    mrcfile.write(tmp_path / "plain.mrc", np.zeros((5, 7), np.float32))
    with mrcfile.open(tmp_path / "plain.mrc", mode="r+") as mrc:
        mrc.header.cella = (0.0, 0.0, 0.0)
    assert header(tmp_path / "plain.mrc")[1] is None


def test_files_vitrio_writes_say_their_statistics(tmp_path):
    values = np.array([[1.0, 3.0], [5.0, 7.0]], np.float32)
    vio.write_single(values, tmp_path / "image.mrc")
    statistics = header(tmp_path / "image.mrc")[2]
    assert statistics == pytest.approx((1.0, 7.0, 4.0, float(np.sqrt(5.0))))


def test_tiff_resolution_in_centimetres_alone_is_no_voxel_size(tmp_path):
    tifffile.imwrite(
        tmp_path / "image.tif", np.zeros((8, 8), np.uint16), resolution=(1e7, 2e7), resolutionunit=3
    )
    assert header(tmp_path / "image.tif") == ("tiff", None, None)


def test_tiff_voxel_size_from_imagej_unit_and_spacing(tmp_path):
    tifffile.imwrite(
        tmp_path / "volume.tif",
        np.zeros((3, 8, 8), np.uint16),
        imagej=True,
        resolution=(4.0, 2.0),
        metadata={"spacing": 2.0, "unit": "nm", "axes": "ZYX"},
    )
    assert header(tmp_path / "volume.tif")[1] == (20.0, 5.0, 2.5)


def test_tiff_compressed_pages_say_their_voxel_size_too(tmp_path):
    tifffile.imwrite(
        tmp_path / "image.tif",
        np.zeros((8, 8), np.uint16),
        compression="zlib",
        imagej=True,
        resolution=(10.0, 10.0),  # pixels per nm
        metadata={"unit": "nm"},
    )
    assert header(tmp_path / "image.tif")[1] == (1.0, 1.0)


@pytest.mark.parametrize("metadata", [{"axes": "ZYX"}, {"axes": "ZYX", "unit": "pixel"}])
def test_tiff_without_a_length_has_no_voxel_size(tmp_path, metadata):
    imagej = "unit" in metadata
    tifffile.imwrite(
        tmp_path / "volume.tif",
        np.zeros((3, 8, 8), np.uint16),
        imagej=imagej,
        photometric="minisblack",
        metadata=metadata,
    )
    assert header(tmp_path / "volume.tif") == ("tiff", None, None)


def test_dm_voxel_size_is_its_calibration_in_angstroms(tmp_path):
    entry = image_entry(np.zeros((2, 3), np.float32), 2, [6], units=["Å", "nm"])
    (tmp_path / "image.dm4").write_bytes(dm_file(4, [entry]))
    name, voxel, statistics = header(tmp_path / "image.dm4")
    assert name == "dm" and voxel == pytest.approx((15.0, 0.5)) and statistics is None


def test_dm_calibration_in_other_units_is_no_voxel_size(tmp_path):
    entry = image_entry(np.zeros((2, 3), np.float32), 2, [6], units=["1/nm", "1/nm"])
    (tmp_path / "image.dm3").write_bytes(dm_file(3, [entry]))
    assert header(tmp_path / "image.dm3")[1] is None


def test_eer_says_its_format_and_no_voxel_size(tmp_path):
    movie = random_movie(tmp_path / "movie.eer", frames=2, shape=(16, 16))
    assert header(movie.path) == ("eer", None, None)


def test_a_reader_not_opened_by_the_registry_has_the_defaults(tmp_path):
    class Plain(ImageReader):
        def read_run(self, start, outs):
            pass

    reader = Plain("x", vio.ImageDescriptor((2, 2), 2, "float32"))
    assert (reader.format_name, reader.voxel_size, reader.header_statistics) == (None, None, None)
