"""The example that trains a 2-D classifier on a STAR file's particles, run for a few steps."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).parents[2] / "examples" / "train_2d_classifier.py"


def test_the_classifier_learns_from_synthetic_particles():
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), "--steps", "40", "--batch-size", "32"],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    losses = [float(loss) for loss in re.findall(r"loss ([0-9.]+)", result.stdout)]
    accuracy, chance = map(
        float, re.search(r"accuracy ([0-9.]+) \(chance ([0-9.]+)\)", result.stdout).groups()
    )
    assert len(losses) == 4
    assert losses[-1] < losses[0] or accuracy > chance + 0.15, result.stdout
    assert accuracy > chance, result.stdout
