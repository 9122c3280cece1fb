"""`vitrio fractionate`: a synthetic EER movie rendered into fractions, against sums of its events."""

from __future__ import annotations

import os
from pathlib import Path

import mrcfile
import numpy as np
import pytest
import tifffile

import vitrio as vio
from vitrio.testing.eer import random_movie

from .helpers import assert_fails, leftovers


@pytest.fixture(scope="module")
def movie(tmp_path_factory: pytest.TempPathFactory):
    """An EER movie of 10 frames of 64 x 64, made by the encoder of `vitrio.testing.eer`."""
    return random_movie(tmp_path_factory.mktemp("eer") / "movie.eer", frames=10, shape=(64, 64))


def fractions(frames: np.ndarray, count: int) -> np.ndarray:
    bounds = [k * len(frames) // count for k in range(count + 1)]
    return np.stack([frames[a:b].sum(axis=0) for a, b in zip(bounds[:-1], bounds[1:])])


def fractionate(vitrio, movie: Path, output: Path, count: int, *options: object):
    return vitrio("fractionate", movie, "--fractions", count, "-o", output, *options)


def test_fractions_are_sums_of_frames(vitrio, movie, tmp_path: Path):
    result = fractionate(vitrio, movie.path, tmp_path / "movie.mrc", 3)
    assert result.status == 0, result.err
    assert "a stack of 3 images of 64 x 64, uint16" in result.out
    with mrcfile.open(tmp_path / "movie.mrc", permissive=False) as mrc:
        assert mrc.data.dtype == np.uint16
        np.testing.assert_array_equal(mrc.data, fractions(movie.counts(), 3))


def test_threads_sets_the_pool_a_movie_is_rendered_on(vitrio, movie, tmp_path: Path, monkeypatch):
    pools = []
    pool = vio.ThreadPoolExecutor

    def counted(threads: int) -> vio.ThreadPoolExecutor:
        pools.append(threads)
        return pool(threads)

    monkeypatch.setattr(vio, "ThreadPoolExecutor", counted)
    for options, threads in [((), os.cpu_count()), (("--threads", 3), 3), (("-j", 1), 1)]:
        result = fractionate(vitrio, movie.path, tmp_path / "movie.mrc", 3, "--force", *options)
        assert result.status == 0, result.err
        assert pools.pop() == threads
        with mrcfile.open(tmp_path / "movie.mrc", permissive=False) as mrc:
            np.testing.assert_array_equal(mrc.data, fractions(movie.counts(), 3))


def test_binning_gain_and_data_type(vitrio, movie, tmp_path: Path):
    gain = np.random.default_rng(0).uniform(0.5, 2, (64, 64)).astype(np.float32)
    mrcfile.write(tmp_path / "gain.mrc", gain)
    result = fractionate(vitrio, movie.path, tmp_path / "weighed.mrc", 2, "--gain", tmp_path / "gain.mrc")
    assert result.status == 0, result.err
    weighed = mrcfile.read(tmp_path / "weighed.mrc")
    np.testing.assert_allclose(weighed, fractions(movie.counts(), 2) * gain, rtol=1e-5)
    result = fractionate(
        vitrio, movie.path, tmp_path / "binned.tif", 5, "--binning", 2, "--data-type", "float32"
    )
    assert result.status == 0, result.err
    values = tifffile.imread(tmp_path / "binned.tif")
    assert values.dtype == np.float32
    np.testing.assert_array_equal(
        values, fractions(movie.counts(), 5).reshape(5, 32, 2, 32, 2).sum(axis=(2, 4))
    )


def test_bad_inputs(vitrio, movie, tmp_path: Path):
    image, output = tmp_path / "image.mrc", tmp_path / "out.mrc"
    mrcfile.write(image, np.zeros((8, 8), np.float32))
    assert_fails(fractionate(vitrio, image, output, 2), "image.mrc", "not an EER file")
    assert_fails(fractionate(vitrio, movie.path, output, 11), movie.path, "11 fractions of 10 frames")
    assert_fails(fractionate(vitrio, movie.path, output, 2, "--binning", 3), "binning")
    assert_fails(fractionate(vitrio, movie.path, output, 2, "--gain", tmp_path / "gain.mrc"), "gain.mrc")
    assert_fails(fractionate(vitrio, tmp_path / "none.eer", output, 2), "none.eer")
    assert_fails(fractionate(vitrio, movie.path, image, 2), "image.mrc", "--force")
    assert leftovers(tmp_path) == ["image.mrc"]
