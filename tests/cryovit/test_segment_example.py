"""Runs examples/segment_tomograms.py on small tomograms for a few steps, as a user would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import mrcfile

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "segment_tomograms.py"


def test_segment_tomograms_example(tmp_path: Path) -> None:
    sizes = ["--tomograms", "3", "--depth", "8", "--side", "16", "--crop-depth", "6", "--crop-side", "12"]
    command = [sys.executable, str(EXAMPLE), "--out", str(tmp_path), *sizes, "--steps", "3", "--batch", "2"]
    run = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    predictions = sorted((tmp_path / "predictions").glob("*/*.mrc"))
    assert [p.name for p in predictions] == ["tomo0.mrc", "tomo1.mrc", "tomo2.mrc"]
    assert run.stdout.count("Dice") == 3
    for path, depth in zip(predictions, [8, 6, 8]):
        with mrcfile.open(path) as mrc:
            assert mrc.data.shape == (depth, 16, 16)
            assert mrc.data.min() >= 0 and mrc.data.max() <= 1
