"""Runs examples/segment_tomograms.py on small tomograms for a few steps, as a user would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "segment_tomograms.py"


def test_segment_tomograms_example(tmp_path: Path) -> None:
    sizes = ["--tomograms", "3", "--depth", "8", "--side", "16", "--crop-depth", "6", "--crop-side", "12"]
    command = [sys.executable, str(EXAMPLE), "--out", str(tmp_path), *sizes, "--steps", "3", "--batch", "2"]
    run = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    predictions = sorted((tmp_path / "predictions").glob("*/*.hdf5"))
    names = [str(p.relative_to(tmp_path / "predictions")) for p in predictions]
    assert names == ["sample_a/tomo0.hdf5", "sample_b/tomo1.hdf5", "sample_b/tomo2.hdf5"]
    dice = [line.split(", Dice")[0] for line in run.stdout.splitlines() if "Dice" in line]
    assert dice == [
        "sample_a/tomo0.hdf5: 8 slices",
        "sample_b/tomo1.mrc: 6 slices",
        "sample_b/tomo2.hdf5: 8 slices",
    ]
    with h5py.File(tmp_path / "tomograms" / "sample_a" / "tomo0.hdf5", "r") as file:
        tomogram = file["data"][()]
    for path, depth in zip(predictions, [8, 6, 8]):
        with h5py.File(path, "r") as file:
            preds, data = file["preds"][()], file["data"][()]
        assert preds.shape == data.shape == (depth, 16, 16)
        assert preds.min() >= 0 and preds.max() <= 1
        assert data.dtype == np.float32 and data.min() >= 0 and data.max() <= 1
    with h5py.File(predictions[0], "r") as file:  # the input, written beside the predictions, scaled
        np.testing.assert_array_equal(file["data"][()], tomogram.astype(np.float32) / 255)
