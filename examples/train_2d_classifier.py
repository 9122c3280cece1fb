"""Train a small 2-D classifier of particle images listed in a RELION STAR file, with vitrio.data.

    python examples/train_2d_classifier.py [--star particles.star] [--steps 200] [--batch-size 64]

The STAR file's particles block needs rlnImageName ("index@stack.mrcs", the
index counting from one) and rlnClassNumber (counting from one); rlnDefocusU
and rlnDefocusV, when present, go along as metadata. The stacks are found
as vitrio.data.particle_locations finds them: beside the STAR file or in the
folders above it, as RELION leaves them (Project/Refine3D/job010/run_data.star
naming Extract/job007/...), or under --root, a project or data directory. Without --star, it
writes synthetic particles of a few classes (a disc, a ring, a cross, a bar,
each shifted a little and drowned in noise) and their STAR file to a
temporary directory first.

The images are read on vitrio's thread pool, a few batches ahead, straight
into the arrays PyTorch trains on: no worker process.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import nn

import vitrio as vio
from vitrio.data import DataLoader, Dataset, ImageSource, particle_locations, read_particles, write_star

SHAPES = ("disc", "ring", "cross", "bar")


def shape_image(kind: str, side: int, shift: np.ndarray) -> np.ndarray:
    """One noiseless particle of a kind, its centre shifted by `shift` pixels."""
    y, x = np.mgrid[:side, :side].astype(np.float32) - side / 2 - shift[:, None, None]
    radius = np.hypot(y, x)
    if kind == "disc":
        return (radius < side / 5).astype(np.float32)
    if kind == "ring":
        return ((radius > side / 6) & (radius < side / 3.5)).astype(np.float32)
    if kind == "cross":
        return ((np.abs(y) < 2) | (np.abs(x) < 2)).astype(np.float32) * (radius < side / 3)
    return ((np.abs(y) < side / 3) & (np.abs(x) < 3)).astype(np.float32)


def write_synthetic(
    root: Path, classes: int = 3, per_stack: int = 100, stacks: int = 6, side: int = 32
) -> Path:
    """Stacks of noisy particles of `classes` kinds, and the STAR file listing them; the STAR file's path."""
    rng = np.random.default_rng(0)
    (root / "Particles").mkdir(parents=True, exist_ok=True)
    rows = []
    for number in range(stacks):
        labels = rng.integers(0, classes, per_stack)
        images = np.stack([shape_image(SHAPES[label], side, rng.uniform(-2, 2, 2)) for label in labels])
        images += rng.normal(0, 0.7, images.shape).astype(np.float32)
        name = f"Particles/stack{number:03d}.mrcs"
        vio.write_stack(images.astype(np.float32), root / name)
        defocus = rng.uniform(8000, 25000, per_stack)
        for index, label in enumerate(labels):
            rows.append((f"{index + 1:06d}@{name}", int(label) + 1, defocus[index], defocus[index] + 150.0))
    table = pd.DataFrame(rows, columns=["rlnImageName", "rlnClassNumber", "rlnDefocusU", "rlnDefocusV"])
    path = root / "particles.star"
    write_star({"particles": table}, path)
    return path


def make_dataset(star: Path, root: Path | None) -> tuple[Dataset, int]:
    """The dataset of the particles a STAR file lists, and how many classes there are."""
    particles = read_particles(star)
    fields = {
        "image": ImageSource(particle_locations(particles, star, root=root), data_type="float32"),
        "label": particles["rlnClassNumber"].to_numpy(dtype=np.int64) - 1,
    }
    if {"rlnDefocusU", "rlnDefocusV"} <= set(particles.columns):
        fields["defocus"] = particles[["rlnDefocusU", "rlnDefocusV"]].to_numpy(dtype=np.float32)
    return Dataset(fields), int(fields["label"].max()) + 1


def make_model(classes: int) -> nn.Module:
    """A small CNN: two convolutions, pooled to a 4x4 grid, then a linear layer."""
    return nn.Sequential(
        nn.Conv2d(1, 8, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(4),
        nn.Flatten(),
        nn.Linear(16 * 4 * 4, classes),
    )


def normalized(images: torch.Tensor) -> torch.Tensor:
    """Each image scaled to zero mean and unit deviation, with a channel axis."""
    mean = images.mean(dim=(1, 2), keepdim=True)
    deviation = images.std(dim=(1, 2), keepdim=True) + 1e-6
    return ((images - mean) / deviation)[:, None]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--star", type=Path, help="a RELION STAR file of particles; synthetic ones without it"
    )
    parser.add_argument(
        "--root", type=Path, help="the project or data directory; the folders of the STAR file without it"
    )
    parser.add_argument("--steps", type=int, default=200, help="how many batches to train on")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2, help="threads reading images")
    parser.add_argument("--seed", type=int, default=0)
    arguments = parser.parse_args()
    torch.manual_seed(arguments.seed)

    with tempfile.TemporaryDirectory() as scratch:
        star = arguments.star or write_synthetic(Path(scratch))
        dataset, classes = make_dataset(star, arguments.root)
        print(f"{len(dataset)} particles of {classes} classes from {star}")
        loader = vio.loader(workers=arguments.workers, cache=64)
        batches = DataLoader(
            dataset, arguments.batch_size, shuffle=True, drop_last=True, seed=arguments.seed, loader=loader,
            output="torch", transform=lambda batch: (normalized(batch["image"]), batch["label"]),
        )  # fmt: skip
        model = make_model(classes)
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
        losses: list[float] = []
        step = 0
        while step < arguments.steps:
            for images, labels in batches:
                loss = nn.functional.cross_entropy(model(images), labels)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                losses.append(loss.item())
                step += 1
                if step % 10 == 0 or step == arguments.steps:
                    print(f"step {step}: loss {np.mean(losses[-10:]):.4f}", flush=True)
                if step == arguments.steps:
                    break

        model.eval()
        correct = 0
        with torch.no_grad():
            for batch in DataLoader(dataset, 256, loader=loader, output="torch"):
                correct += int((model(normalized(batch["image"])).argmax(1) == batch["label"]).sum())
        print(f"accuracy {correct / len(dataset):.3f} (chance {1 / classes:.3f})")


if __name__ == "__main__":
    main()
