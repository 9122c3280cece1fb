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
    losses, accuracies = _progress(result.out)
    assert len(accuracies) == 2 and all((a * 8 / 100).is_integer() for a in accuracies)  # of 8 held out
    assert losses[1] < losses[0]
    assert (out / "particles.png").stat().st_size > 1000 and (out / "training.png").stat().st_size > 1000
    assert f"from {out / 'shown.star'}: the held-out particles shown" in result.out  # what it leaves, said
    particles = starfile.read(out / "particles.star", always_dict=True)["particles"]
    coordinates = starfile.read(out / "coordinates.star", always_dict=True)["particles"]
    assert len(particles) == len(coordinates) == 2 * 20  # 80% of a grid of 5 x 5 places
    assert np.array_equal(particles["rlnClassNumber"], coordinates["rlnClassNumber"])
    assert sorted(p.name for p in (out / "Particles").iterdir()) == [
        "micrograph000.mrcs",
        "micrograph001.mrcs",
    ]
    # a second run, longer, replaces the files of the first, and learns: better than chance (1 in 3)
    result = vitrio("demo", "--out", out, "--micrographs", 4, "--size", 384, "--epochs", 6)
    assert result.status == 0, result.err
    losses, accuracies = _progress(result.out)
    assert losses[-1] < losses[0] / 2 and accuracies[-1] > 100 / 3, result.out
    assert len(starfile.read(out / "particles.star", always_dict=True)["particles"]) == 4 * 20
    assert len(list((out / "Particles").iterdir())) == 4


def _progress(out: str) -> tuple[list[float], list[float]]:
    """The loss and the held-out accuracy (in %) of each epoch, as the demo prints them."""
    epochs = re.findall(r"loss ([0-9.]+), held-out accuracy ([0-9.]+)%,", out)
    return [float(loss) for loss, _ in epochs], [float(accuracy) for _, accuracy in epochs]


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
