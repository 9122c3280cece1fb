"""Fixtures of the tests of the `vitrio` command: a run of it, and micrographs with picks and STAR files."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import mrcfile
import numpy as np
import pandas as pd
import pytest
import starfile
import tifffile

from .helpers import Result, run


@pytest.fixture
def vitrio(capsys: pytest.CaptureFixture[str]) -> Callable[..., Result]:
    """Run `vitrio ARGS...` in this process: `vitrio("info", path)`."""
    return lambda *args: run(capsys, *args)


@dataclass
class Picked:
    """Micrographs with particles picked on them, and their STAR files, in the working directory.

    Attributes:
        micrographs: The micrographs STAR file (data_optics and data_micrographs).
        coordinates: The coordinates STAR file (one block, as RELION's pickers write it).
        images: The values of each micrograph, by its name in the STAR files.
        picks: The table of the coordinates STAR file.
    """

    micrographs: Path
    coordinates: Path
    images: dict[str, np.ndarray]
    picks: pd.DataFrame


@pytest.fixture
def picked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Picked:
    """Three micrographs with picks (two MRC, one TIFF, of different sizes) and one without, in tmp_path.

    The picks are listed interleaved across micrographs, include centres on
    every edge and corner, and coordinates that are not whole numbers.
    """
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(7)
    shapes = {
        "Micrographs/a.mrc": (100, 120),
        "Micrographs/b.tif": (90, 90),
        "Micrographs/c.mrc": (128, 96),
        "Micrographs/unpicked.mrc": (64, 64),
    }
    Path("Micrographs").mkdir()
    images = {}
    for name, shape in shapes.items():
        images[name] = rng.standard_normal(shape).astype(np.float32)
        if name.endswith(".tif"):
            tifffile.imwrite(name, images[name])
        else:
            with mrcfile.new(name) as mrc:
                mrc.set_data(images[name])
                mrc.voxel_size = 1.5
    rows = []
    for name in list(shapes)[:3]:
        height, width = shapes[name]
        rows += [
            (name, 0.0, 0.0),
            (name, width - 1.0, height - 1.0),
            (name, 10.4, height - 3.6),
            (name, width - 2.0, 5.0),
        ]
        rows += [(name, float(x), float(y)) for y, x in rng.integers(0, (height, width), (6, 2))]
    order = rng.permutation(len(rows))
    picks = pd.DataFrame(
        [rows[i] for i in order], columns=["rlnMicrographName", "rlnCoordinateX", "rlnCoordinateY"]
    )
    picks["rlnAutopickFigureOfMerit"] = rng.uniform(0, 1, len(picks))
    optics = pd.DataFrame(
        {
            "rlnOpticsGroupName": ["opticsGroup1"],
            "rlnOpticsGroup": [1],
            "rlnMicrographOriginalPixelSize": [0.75],
            "rlnVoltage": [300.0],
            "rlnSphericalAberration": [2.7],
            "rlnAmplitudeContrast": [0.1],
            "rlnMicrographPixelSize": [1.5],
        }
    )
    micrographs = pd.DataFrame(
        {
            "rlnMicrographName": list(shapes),
            "rlnOpticsGroup": 1,
            "rlnDefocusU": [10000.0, 12000.0, 14000.0, 16000.0],
        }
    )
    starfile.write({"optics": optics, "micrographs": micrographs}, "micrographs.star")
    starfile.write(picks, "coords.star")
    return Picked(tmp_path / "micrographs.star", tmp_path / "coords.star", images, picks)
