"""`vitrio fractionate --dose-per-fraction`: fractions of whole frames by dose, their grouping beside them."""

from __future__ import annotations

from pathlib import Path

import mrcfile
import numpy as np
import pytest

from vitrio.testing.eer import random_movie

from .helpers import assert_fails


@pytest.fixture(scope="module")
def movie(tmp_path_factory: pytest.TempPathFactory):
    """An EER movie of 11 frames of 32 x 32."""
    return random_movie(tmp_path_factory.mktemp("eer") / "movie.eer", frames=11, shape=(32, 32))


def test_fractionate_by_dose_writes_the_sums_and_the_grouping(vitrio, movie, tmp_path: Path):
    output = tmp_path / "movie.mrc"
    result = vitrio("fractionate", movie.path, "--dose-per-fraction", 6, "--total-dose", 22, "-o", output)
    assert result.status == 0, result.err
    counts = movie.counts()  # 2 e/Å² a frame: 3 frames a fraction, the last 5
    expected = np.stack([counts[0:3].sum(0), counts[3:6].sum(0), counts[6:11].sum(0)])
    np.testing.assert_array_equal(mrcfile.read(output), expected)
    rows = np.loadtxt(tmp_path / "movie.fractions.txt", skiprows=2)
    np.testing.assert_array_equal(rows, [[1, 0, 3, 6], [2, 3, 3, 6], [3, 6, 5, 10]])


def test_fractionate_refuses_doses_that_make_no_fractionation(vitrio, movie, tmp_path: Path):
    output = tmp_path / "out.mrc"
    assert_fails(vitrio("fractionate", movie.path, "--dose-per-fraction", 1, "-o", output), "--total-dose")
    options = ["--fractions", 2, "--total-dose", 3]
    assert_fails(vitrio("fractionate", movie.path, *options, "-o", output), "--dose-per-fraction")
    assert not output.exists()
