"""A pixel size no source gave is never written: unknown stays unknown (0 in an MRC cell, no resolution
in a TIFF, None in Python), and a known one is carried, as mrcfile and tifffile read the files."""

from __future__ import annotations

from pathlib import Path

import mrcfile
import numpy as np
import pandas as pd
import pytest
import starfile
import tifffile

import vitrio as vio
from vitrio.cli._demo import make_micrographs

from .helpers import assert_fails, leftovers


def mrc_voxel_size(path: Path) -> tuple[float, float, float]:
    """The voxel size (x, y, z) mrcfile reads from the header of the MRC file at `path`."""
    with mrcfile.open(path, permissive=False, header_only=True) as mrc:
        size = mrc.voxel_size
        return float(size.x), float(size.y), float(size.z)


@pytest.mark.parametrize("shape", [(20, 24), (3, 20, 24)])
@pytest.mark.parametrize("write", [vio.write_single, vio.write_stack])
def test_an_image_written_without_a_voxel_size_says_none(tmp_path: Path, shape, write):
    if write is vio.write_stack and len(shape) == 2:
        shape = (1, *shape)
    path = tmp_path / ("images.mrcs" if write is vio.write_stack else "image.mrc")
    write(np.ones(shape, np.float32), path)
    with mrcfile.open(path, permissive=False, header_only=True) as mrc:
        assert mrc.header.cella.tolist() == (0.0, 0.0, 0.0)  # as mrcfile writes an unknown size
    assert mrc_voxel_size(path) == (0.0, 0.0, 0.0)
    assert vio.query_metadata(path).voxel_size is None


def test_a_voxel_size_given_is_written(tmp_path: Path):
    vio.write_single(np.ones((4, 20, 24), np.float32), tmp_path / "volume.mrc", voxel_size=(3.0, 2.0, 2.5))
    assert mrc_voxel_size(tmp_path / "volume.mrc") == pytest.approx((2.5, 2.0, 3.0))
    assert vio.query_metadata(tmp_path / "volume.mrc").voxel_size == pytest.approx((3.0, 2.0, 2.5))


def test_convert_of_a_tiff_of_unknown_size_writes_none(vitrio, tmp_path: Path):
    values = np.arange(5 * 20 * 24, dtype=np.float32).reshape(5, 20, 24)
    tifffile.imwrite(tmp_path / "stack.tif", values)  # no resolution, no ImageJ or OME metadata
    assert vitrio("convert", tmp_path / "stack.tif", tmp_path / "stack.mrcs").status == 0
    assert mrc_voxel_size(tmp_path / "stack.mrcs") == (0.0, 0.0, 0.0)
    assert vio.query_metadata(tmp_path / "stack.mrcs").voxel_size is None
    assert vitrio("convert", tmp_path / "stack.mrcs", tmp_path / "back.tif").status == 0
    with tifffile.TiffFile(tmp_path / "back.tif") as tiff:
        # tifffile's baseline resolution of 1 per no unit: no size, and no ImageJ or OME-XML to give one
        assert tiff.pages[0].resolutionunit == tifffile.RESUNIT.NONE
        assert not tiff.is_imagej and not tiff.is_ome
    np.testing.assert_array_equal(tifffile.imread(tmp_path / "back.tif"), values)


def test_convert_carries_a_known_size(vitrio, tmp_path: Path):
    values = np.ones((5, 20, 24), np.float32)
    tifffile.imwrite(
        tmp_path / "stack.tif", values, imagej=True, resolution=(1 / 0.25, 1 / 0.25), metadata={"unit": "nm"}
    )
    assert vitrio("convert", tmp_path / "stack.tif", tmp_path / "stack.mrcs").status == 0
    assert mrc_voxel_size(tmp_path / "stack.mrcs") == pytest.approx((2.5, 2.5, 2.5))


def _micrographs_without_sizes(folder: Path) -> tuple[Path, Path]:
    """Two micrographs written without a pixel size, picks on them, and a micrographs STAR file with no
    data_optics block."""
    (folder / "Micrographs").mkdir()
    names = ["Micrographs/a.mrc", "Micrographs/b.mrc"]
    for name in names:
        vio.write_single(np.random.default_rng(1).standard_normal((64, 64)).astype(np.float32), folder / name)
    starfile.write(pd.DataFrame({"rlnMicrographName": names}), folder / "micrographs.star")
    picks = [(name, 30.0, 32.0) for name in names]
    table = pd.DataFrame(picks, columns=["rlnMicrographName", "rlnCoordinateX", "rlnCoordinateY"])
    starfile.write(table, folder / "coords.star")
    return folder / "micrographs.star", folder / "coords.star"


def test_extract_asks_for_the_pixel_size_no_header_or_optics_gives(vitrio, tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    micrographs, coordinates = _micrographs_without_sizes(tmp_path)
    files = ["--micrographs", micrographs, "--coordinates", coordinates, "--box-size", 16]
    before = leftovers(tmp_path)
    assert_fails(vitrio("extract", *files, "-o", "particles.star"), "Micrographs/a.mrc", "--pixel-size")
    assert leftovers(tmp_path) == before
    result = vitrio("extract", *files, "-o", "particles.star", "--pixel-size", 1.25)
    assert result.status == 0, result.err
    optics = starfile.read("particles.star", always_dict=True)["optics"]
    assert optics["rlnImagePixelSize"].tolist() == [1.25]
    assert mrc_voxel_size(tmp_path / "a.mrcs")[:2] == (1.25, 1.25)


def test_the_demo_micrographs_say_the_pixel_size_of_their_star_file(tmp_path: Path):
    micrographs, _, _ = make_micrographs(tmp_path, 1, 160)
    blocks = starfile.read(micrographs, always_dict=True)
    size = float(blocks["optics"]["rlnMicrographPixelSize"].iloc[0])
    name = blocks["micrographs"]["rlnMicrographName"].iloc[0]
    assert mrc_voxel_size(tmp_path / name)[:2] == (size, size)


@pytest.mark.parametrize("size", ["0", "-2", "nan"])
def test_extract_refuses_a_pixel_size_that_is_no_size(vitrio, tmp_path: Path, monkeypatch, size):
    monkeypatch.chdir(tmp_path)
    micrographs, coordinates = _micrographs_without_sizes(tmp_path)
    files = ["--micrographs", micrographs, "--coordinates", coordinates, "--box-size", 16]
    before = leftovers(tmp_path)
    assert_fails(vitrio("extract", *files, "-o", "particles.star", "--pixel-size", size), "pixel size", size)
    assert leftovers(tmp_path) == before


def test_an_empty_stack_says_its_statistics_are_unknown(tmp_path: Path):
    vio.write_stack(np.empty((0, 4, 4), np.float32), tmp_path / "empty.mrcs")
    with mrcfile.new(tmp_path / "reference.mrcs") as mrc:
        mrc.set_data(np.empty((0, 4, 4), np.float32))
    fields = ("dmin", "dmax", "dmean", "rms")
    with (
        mrcfile.open(tmp_path / "empty.mrcs", permissive=False) as ours,
        mrcfile.open(tmp_path / "reference.mrcs", permissive=False) as reference,
    ):
        assert [float(ours.header[f]) for f in fields] == [float(reference.header[f]) for f in fields]
        assert float(ours.header.dmax) < float(ours.header.dmin)  # not determined


def test_extract_refuses_micrographs_whose_headers_differ(vitrio, tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    micrographs, coordinates = _micrographs_without_sizes(tmp_path)
    for name, size in (("a", 1.5), ("b", 3.0)):  # b binned twice, as a and b might be
        with mrcfile.open(f"Micrographs/{name}.mrc", "r+") as mrc:
            mrc.voxel_size = size
    files = ["--micrographs", micrographs, "--coordinates", coordinates, "--box-size", 16]
    result = vitrio("extract", *files, "-o", "particles.star")
    assert_fails(result, "Micrographs/a.mrc", "Micrographs/b.mrc", "1.5 Å", "3 Å", "--pixel-size")
    with mrcfile.open("Micrographs/b.mrc", "r+") as mrc:
        mrc.voxel_size = 1.5
    assert vitrio("extract", *files, "-o", "particles.star").status == 0
    optics = starfile.read("particles.star", always_dict=True)["optics"]
    assert optics["rlnImagePixelSize"].tolist() == [1.5]
