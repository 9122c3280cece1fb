"""`vitrio convert` and `vitrio extract` with --fourier-crop, --normalize and --invert: the images as the
transforms make them, the pixel size grown by the crop's ratio in the MRC header and the STAR file."""

from __future__ import annotations

from pathlib import Path

import mrcfile
import numpy as np
import pytest
import starfile

from vitrio.data import Compose, FourierCrop, Invert, Normalize

from .conftest import Picked
from .helpers import assert_fails
from .test_extract import crop, extract, particles_of


def test_convert_prepares_the_images_and_grows_the_pixel_size(vitrio, tmp_path: Path):
    stack = np.random.default_rng(3).normal(5.0, 2.0, size=(7, 40, 40)).astype(np.float32)
    with mrcfile.new(tmp_path / "in.mrcs") as mrc:
        mrc.set_data(stack)
        mrc.voxel_size = 1.25
    options = ["--fourier-crop", 20, "--normalize", 8, "--invert", "--data-type", "float16"]
    result = vitrio("convert", tmp_path / "in.mrcs", tmp_path / "out.mrcs", *options)
    assert result.status == 0, result.err
    with mrcfile.open(tmp_path / "out.mrcs", permissive=False) as mrc:
        assert mrc.data.dtype == np.float16 and mrc.data.shape == (7, 20, 20)
        assert (float(mrc.voxel_size.x), float(mrc.voxel_size.y)) == (2.5, 2.5)
        written = mrc.data.astype(np.float32)
    expected = Compose(FourierCrop(20), Normalize(8), Invert())(stack)
    np.testing.assert_allclose(written, expected, atol=2e-3 * np.abs(expected).max())


def test_convert_refuses_transforms_it_cannot_apply(vitrio, tmp_path: Path):
    mrcfile.write(tmp_path / "volume.mrc", np.zeros((4, 8, 8), np.float32))
    mrcfile.write(tmp_path / "image.mrc", np.zeros((8, 8), np.float32))
    assert_fails(vitrio("convert", tmp_path / "volume.mrc", tmp_path / "a.mrc", "--invert"), "2-D images")
    assert_fails(
        vitrio("convert", tmp_path / "image.mrc", tmp_path / "b.mrc", "--fourier-crop", 9), "shrinks"
    )
    assert not (tmp_path / "a.mrc").exists() and not (tmp_path / "b.mrc").exists()


def test_extract_writes_prepared_particles_and_their_pixel_size(vitrio, picked: Picked):
    result = extract(vitrio, picked, "--fourier-crop", 10, "--normalize", 3.5, box=16)
    assert result.status == 0, result.err
    optics, particles = particles_of(Path("particles.star"))
    assert optics["rlnImageSize"].tolist() == [10] and optics["rlnImagePixelSize"].tolist() == [2.4]
    steps = Compose(FourierCrop(10), Normalize(3.5))
    for row in particles.itertuples():
        index, stack = row.rlnImageName.split("@")
        with mrcfile.open(stack, permissive=False) as mrc:
            assert float(mrc.voxel_size.x) == pytest.approx(2.4)
            particle = mrc.data[int(index) - 1]
        box = crop(picked.images[row.rlnMicrographName], row.rlnCoordinateX, row.rlnCoordinateY, 16)
        np.testing.assert_allclose(particle, steps(box[None])[0], atol=1e-5)
    assert starfile.read("particles.star", always_dict=True)["optics"]["rlnImageSize"].tolist() == [10]
