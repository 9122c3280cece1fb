"""`vitrio demo` at a tiny size, and `vitrio bench` on tiny workloads."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import starfile
import torch


def test_the_demo_extracts_trains_and_draws(vitrio, tmp_path: Path):
    threads = torch.get_num_threads()
    out = tmp_path / "demo"
    result = vitrio("demo", "--out", out, "--micrographs", 2, "--size", 384, "--epochs", 2)
    assert result.status == 0, result.err
    assert torch.get_num_threads() == threads
    accuracies = [float(a) for a in re.findall(r"held-out accuracy ([0-9.]+)%,", result.out)]
    assert len(accuracies) == 2 and all(0 <= a <= 100 for a in accuracies)
    assert (out / "particles.png").stat().st_size > 1000 and (out / "training.png").stat().st_size > 1000
    particles = starfile.read(out / "particles.star", always_dict=True)["particles"]
    coordinates = starfile.read(out / "coordinates.star", always_dict=True)["particles"]
    assert len(particles) == len(coordinates) == 2 * 20  # 80% of a grid of 5 x 5 places
    assert np.array_equal(particles["rlnClassNumber"], coordinates["rlnClassNumber"])
    assert sorted(p.name for p in (out / "Particles").iterdir()) == [
        "micrograph000.mrcs",
        "micrograph001.mrcs",
    ]
    # a second run replaces the files of the first
    assert vitrio("demo", "--out", out, "--micrographs", 1, "--size", 384, "--epochs", 1).status == 0


def test_the_benchmarks_run_and_draw(vitrio, tmp_path: Path):
    result = vitrio("bench", "--tiny", "--data", tmp_path / "data", "--plot", tmp_path / "bench.png")
    assert result.status == 0, result.err
    rows = [line for line in result.out.splitlines() if line.startswith("W")]
    assert [row.split("  ")[0] for row in rows] == [
        "W1 one stack",
        "W1 one stack, data",
        "W2 stacks of 20",
        "W2 stacks of 20, data",
        "W3 patches 64",
        "W3 patches 64, data",
    ]
    assert (tmp_path / "bench.png").stat().st_size > 1000
