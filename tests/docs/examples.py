"""The world the code examples of README.md and docs/ run in, as a pytest plugin of pytest-markdown-docs.

`tests/docs/test_examples.py` runs `pytest --markdown-docs -p tests.docs.examples README.md docs`: each
Python block of those files is a test, run in a fresh working directory that holds small files of
the names the examples use (`files` below). The examples name what they would find on a user's
disk (a RELION project, an EER movie and its gain, tomograms), and these stand in for it:

- `Refine3D/job010/run_data.star`: 24 particles of 32 x 32 in two stacks under `Extract/job007/`,
  RELION 3.1 (data_optics and data_particles, with defocus and class numbers);
- `stacks.txt`: the two stacks, one per line;
- `stack.mrcs`, `image.mrc`, `micrograph.mrc`, `tomogram.mrc` (2.5 Å voxels): a stack of 100 images
  of 64 x 64, a 64 x 64 image, a micrograph of 256 x 256, a volume of 32 x 64 x 64;
- `movie.eer` (40 frames of 64 x 64) and `gain.mrc` (its gain reference);
- `tomograms/*.hdf5`: two tomograms of 16 x 64 x 64 with a `labels/mito` dataset.

Two names are defined in every example, as an example's reader would have them: `tomogram_paths`,
the two tomograms, and `model`, a small 3-D network that maps a batch of tomograms `[B, D, C, H, W]`
to one logit per voxel `[B, D, H, W]`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h5py
import mrcfile
import numpy as np
import pandas as pd
import pytest

import vitrio as vio
from vitrio.data import write_star
from vitrio.testing.eer import random_movie

TOMOGRAMS = ["tomograms/cell_01.hdf5", "tomograms/cell_02.hdf5"]


def _particles(rng: np.random.Generator) -> None:
    stacks = ["Extract/job007/Movies/mic001.mrcs", "Extract/job007/Movies/mic002.mrcs"]
    Path("Extract/job007/Movies").mkdir(parents=True)
    names = []
    for stack in stacks:
        vio.write_stack(rng.normal(0, 1, (12, 32, 32)).astype(np.float32), stack)
        names += [f"{i + 1:06d}@{stack}" for i in range(12)]
    optics = pd.DataFrame(
        {
            "rlnOpticsGroupName": ["opticsGroup1"],
            "rlnOpticsGroup": [1],
            "rlnMicrographOriginalPixelSize": [1.0],
            "rlnVoltage": [300.0],
            "rlnSphericalAberration": [2.7],
            "rlnAmplitudeContrast": [0.1],
            "rlnImagePixelSize": [2.0],
            "rlnImageSize": [32],
            "rlnImageDimensionality": [2],
        }
    )
    particles = pd.DataFrame(
        {
            "rlnImageName": names,
            "rlnOpticsGroup": 1,
            "rlnDefocusU": rng.uniform(8000, 20000, len(names)),
            "rlnDefocusV": rng.uniform(8000, 20000, len(names)),
            "rlnClassNumber": rng.integers(1, 4, len(names)),
        }
    )
    Path("Refine3D/job010").mkdir(parents=True)
    write_star({"optics": optics, "particles": particles}, "Refine3D/job010/run_data.star")
    Path("stacks.txt").write_text("\n".join(stacks) + "\n")


def _tomograms(rng: np.random.Generator) -> None:
    Path("tomograms").mkdir()
    for path in TOMOGRAMS:
        with h5py.File(path, "w") as file:
            file["data"] = rng.integers(0, 256, (16, 64, 64), dtype=np.uint8)
            mito = rng.integers(-1, 2, (16, 64, 64)).astype(np.int8)
            file["labels/mito"] = mito


@pytest.fixture(autouse=True)
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh working directory holding the files the examples read (see the module's docstring)."""
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    _particles(rng)
    vio.write_stack(rng.normal(0, 1, (100, 64, 64)).astype(np.float32), "stack.mrcs")
    vio.write_single(rng.normal(0, 1, (64, 64)).astype(np.float32), "image.mrc")
    vio.write_single(rng.normal(0, 1, (256, 256)).astype(np.float32), "micrograph.mrc")
    with mrcfile.new("tomogram.mrc") as mrc:
        mrc.set_data(rng.normal(0, 1, (32, 64, 64)).astype(np.float32))
        mrc.voxel_size = 2.5
    random_movie(Path("movie.eer"), frames=40, shape=(64, 64), density=0.05)
    vio.write_single(rng.uniform(0.9, 1.1, (64, 64)).astype(np.float32), "gain.mrc")
    _tomograms(rng)
    return tmp_path


def _model() -> Any:
    import torch
    from torch import nn

    class Segmenter(nn.Module):
        """[B, D, C, H, W] -> [B, D, H, W]: a 3-D convolution over depth, height and width."""

        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv3d(1, 1, 3, padding=1)

        def forward(self, tomograms: torch.Tensor) -> torch.Tensor:
            return self.conv(tomograms.float().transpose(1, 2)).squeeze(1)

    torch.manual_seed(0)
    return Segmenter()


def pytest_markdown_docs_globals() -> dict[str, Any]:
    """The names every example may use as if the reader had defined them."""
    return {"tomogram_paths": list(TOMOGRAMS), "model": _model()}
