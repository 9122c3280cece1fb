"""The example that trains a 2-D classifier on a STAR file's particles, run for a few steps: on its
synthetic particles, and on a RELION project's, its stacks found as the library finds them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

import vitrio as vio
from vitrio.data import write_star

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


def test_the_classifier_finds_the_stacks_of_a_relion_project_as_the_library_does(tmp_path: Path):
    project = tmp_path / "Project"
    (project / "Extract/job007/Movies").mkdir(parents=True)
    (project / "Refine3D/job010").mkdir(parents=True)
    rng = np.random.default_rng(0)
    names = []
    for stack in ("Extract/job007/Movies/mic001.mrcs", "Extract/job007/Movies/mic002.mrcs"):
        vio.write_stack(rng.normal(0, 1, (16, 32, 32)).astype(np.float32), project / stack)
        names += [f"{i + 1:06d}@{stack}" for i in range(16)]
    table = pd.DataFrame({"rlnImageName": names, "rlnClassNumber": rng.integers(1, 3, len(names))})
    write_star({"particles": table}, project / "Refine3D/job010/run_data.star")
    command = [
        sys.executable,
        str(EXAMPLE),
        "--star",
        "Project/Refine3D/job010/run_data.star",
        "--steps",
        "2",
    ]
    result = subprocess.run(
        [*command, "--batch-size", "8"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "32 particles of 2 classes from Project/Refine3D/job010/run_data.star" in result.stdout
