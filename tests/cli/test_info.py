"""`vitrio info`: format, shape, type, voxel size and header statistics, as text and as JSON."""

from __future__ import annotations

import json
from pathlib import Path

import mrcfile
import numpy as np
import pytest
import tifffile

from vitrio.testing.dm import dm_file, image_entry
from vitrio.testing.eer import random_movie

from .helpers import assert_fails


@pytest.fixture
def mrc_stack(tmp_path: Path) -> Path:
    """A stack of 5 images of 16 x 20 float32, voxel size 1.25 Å, with statistics, written by mrcfile."""
    path = tmp_path / "stack.mrcs"
    with mrcfile.new(path) as mrc:
        mrc.set_data(np.random.default_rng(0).standard_normal((5, 16, 20)).astype(np.float32))
        mrc.set_image_stack()
        mrc.voxel_size = 1.25
        mrc.update_header_stats()
    return path


def info_json(vitrio, *paths: Path) -> list[dict]:
    result = vitrio("info", "--json", *paths)
    assert result.status == 0, result.err
    return json.loads(result.out)


def test_an_mrc_stack(vitrio, mrc_stack: Path):
    (info,) = info_json(vitrio, mrc_stack)
    with mrcfile.open(mrc_stack) as mrc:
        header = mrc.header
        expected = {"min": header.dmin, "max": header.dmax, "mean": header.dmean, "rms": header.rms}
    assert info["file"] == str(mrc_stack) and info["format"] == "mrc"
    assert info["kind"] == "image stack" and info["count"] == 5
    assert info["shape"] == [5, 16, 20] and info["data_type"] == "float32"
    assert info["voxel_size"] == [1.25, 1.25] and info["voxel_unit"] == "Å"
    assert info["statistics"] == pytest.approx({k: float(v) for k, v in expected.items()})
    assert info["holds"] == "a stack of 5 images of 16 x 20, float32"


def test_an_mrc_volume_with_a_voxel_of_its_own(vitrio, tmp_path: Path):
    with mrcfile.new(tmp_path / "map.mrc") as mrc:
        mrc.set_data(np.zeros((4, 6, 8), np.int16))
        mrc.voxel_size = (1.0, 2.0, 3.0)  # x, y, z
    (info,) = info_json(vitrio, tmp_path / "map.mrc")
    assert info["kind"] == "volume" and info["count"] == 1 and info["data_type"] == "int16"
    assert info["voxel_size"] == [3.0, 2.0, 1.0]  # z, y, x


def test_tiff_eer_and_dm_files(vitrio, tmp_path: Path):
    tifffile.imwrite(
        tmp_path / "volume.tif",
        np.zeros((3, 8, 8), np.uint16),
        photometric="minisblack",
        metadata={"axes": "ZYX"},
    )
    movie = random_movie(tmp_path / "movie.eer", frames=6, shape=(32, 32))
    entry = image_entry(np.zeros((2, 3), np.float32), units=["Å", "nm"])
    (tmp_path / "image.dm4").write_bytes(dm_file(4, [entry]))
    volume, eer, image = info_json(vitrio, tmp_path / "volume.tif", movie.path, tmp_path / "image.dm4")
    assert (volume["format"], volume["kind"], volume["shape"], volume["voxel_size"]) == (
        "tiff",
        "volume",
        [3, 8, 8],
        None,
    )
    assert (eer["format"], eer["kind"], eer["count"], eer["shape"]) == ("eer", "image stack", 6, [6, 32, 32])
    assert (image["format"], image["kind"], image["data_type"]) == ("dm", "image", "float32")
    assert image["voxel_size"] == [15.0, 0.5] and image["voxel_unit"] == "Å"  # 1.5 nm, 0.5 Å
    assert (image["voxel_size_source"], eer["voxel_size_source"]) == ("DM calibration", None)
    assert volume["voxel_size_source"] is None


def test_text(vitrio, mrc_stack: Path):
    result = vitrio("info", mrc_stack)
    assert result.status == 0
    lines = result.out.splitlines()
    assert lines[0] == str(mrc_stack)
    assert "  format      mrc" in lines and "  voxel size  1.25 Å (MRC cell)" in lines
    assert "  holds       a stack of 5 images of 16 x 20, float32" in lines
    assert any(line.startswith("  statistics  min ") for line in lines)


def test_bad_files(vitrio, mrc_stack: Path, tmp_path: Path):
    result = vitrio("info", mrc_stack, tmp_path / "gone.mrc")
    assert_fails(result, "gone.mrc", "no such file")
    assert result.out.startswith(str(mrc_stack))  # the readable file is described all the same
    (tmp_path / "short.mrc").write_bytes(b"MRC" * 10)
    assert_fails(vitrio("info", tmp_path / "short.mrc"), "short.mrc")
    assert_fails(vitrio("info", tmp_path), str(tmp_path), "directory")


def test_a_header_that_breaks_the_rules_warns_in_one_line(vitrio, tmp_path: Path):
    mrcfile.write(tmp_path / "stampless.mrc", np.ones((4, 4), np.float32))
    content = bytearray((tmp_path / "stampless.mrc").read_bytes())
    content[212:216] = bytes(4)
    (tmp_path / "stampless.mrc").write_bytes(content)
    result = vitrio("info", tmp_path / "stampless.mrc")
    assert result.status == 0
    (line,) = result.err.splitlines()
    assert line.startswith(f"vitrio: warning: {tmp_path / 'stampless.mrc'}: machine stamp 00000000")
