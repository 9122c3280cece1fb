"""`vitrio demo`: what vitrio is for, on a small synthetic dataset made on the spot.

1. Micrographs with particles of three kinds (a monomer, a dimer and a
   trimer of Gaussian blobs, each turned at random) at known positions, in
   noise, as MRC files; a micrographs STAR file (with data_optics and a
   defocus per micrograph) and a coordinates STAR file (with the kind of
   each particle as rlnClassNumber), as RELION writes them.
2. `vitrio.extract.extract_particles`, what `vitrio extract` runs, crops
   the particles into a stack per micrograph and writes particles.star.
3. A small convolutional network learns to tell the kinds apart, fed by
   vitrio.data: a `Dataset` of `ImageSource(particle_locations(read_particles(...)))`
   and the class column, read by a `DataLoader(output="torch", shuffle=True)`
   on a thread pool, with no worker process. Its accuracy is measured on
   particles held out of training.
4. particles.png (`vitrio montage` of held-out particles, each labelled with
   its true kind, marked where its box is cut by the micrograph's edge, and
   the kind the network predicts) and training.png (the loss, the held-out
   accuracy and chance, all in its legend).

Everything goes under `--out`, replacing the files of an earlier run.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

import vitrio as vio
from vitrio.data import DataLoader, Dataset, ImageSource, particle_locations, read_particles, write_star
from vitrio.extract import extract_particles

from . import build_parser
from ._common import positive, progress, pyplot, save_figure
from ._montage import run as draw_montage

if TYPE_CHECKING:
    import pandas as pd
    import torch
    from torch import nn

__all__ = [
    "DESCRIPTION",
    "HELP",
    "KINDS",
    "add_arguments",
    "cut_at_edge",
    "make_micrographs",
    "run",
    "split",
    "train",
]

KINDS = ("monomer", "dimer", "trimer")
# The blobs of each kind: (y, x) offsets from the centre in pixels, before turning, and their width.
_BLOBS = (
    (np.array([[0.0, 0.0]]), 6.0),
    (np.array([[0.0, -8.0], [0.0, 8.0]]), 4.0),
    (9.0 * np.array([[np.cos(a), np.sin(a)] for a in (0.0, 2 * np.pi / 3, 4 * np.pi / 3)]), 3.5),
)
BOX = 64
SPACING = 72  # particles sit on a grid of this pitch, jittered: they never overlap
NOISE = 0.6
PIXEL_SIZE = 2.0
BATCH = 32


HELP = "extract and train on a small synthetic dataset"
DESCRIPTION = (
    "Make synthetic micrographs with particles of three kinds, extract the particles "
    "with `vitrio extract`, train a small PyTorch classifier on them through vitrio.data, and save "
    "pictures of the particles and of the training under --out. Files of earlier runs there are "
    "replaced."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `vitrio demo`."""
    parser.add_argument("--out", type=Path, default=Path("demo-output"), help="where to write everything")
    parser.add_argument("--micrographs", type=positive, default=6, help=argparse.SUPPRESS)
    parser.add_argument("--size", type=positive, default=1024, help=argparse.SUPPRESS)
    parser.add_argument("--epochs", type=positive, default=3, help=argparse.SUPPRESS)


def _render(image: np.ndarray, centre: np.ndarray, kind: int, angle: float) -> None:
    """Subtract a particle of `kind`, turned by `angle`, centred on `centre` (y, x), from `image`."""
    reach = 20
    y0, x0 = np.maximum(centre - reach, 0)
    y1, x1 = np.minimum(centre + reach + 1, image.shape)
    y, x = np.mgrid[y0:y1, x0:x1].astype(np.float32)
    offsets, width = _BLOBS[kind]
    turn = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    for dy, dx in centre + offsets @ turn.T:
        image[y0:y1, x0:x1] -= np.exp(-((y - dy) ** 2 + (x - dx) ** 2) / (2 * width**2))


def make_micrographs(out: Path, count: int, size: int, seed: int = 0) -> tuple[Path, Path, int]:
    """Write `count` micrographs of `size` x `size` with particles, and the STAR files of both.

    Returns:
        The micrographs STAR file, the coordinates STAR file, and how many particles there are.
    """
    import pandas as pd

    rng = np.random.default_rng(seed)
    (out / "Micrographs").mkdir(parents=True, exist_ok=True)
    cells = size // SPACING
    per_micrograph = max(1, cells * cells * 4 // 5)
    micrographs, picks = [], []
    with progress(count, "micrographs", "micrograph") as bar:
        for number in range(count):
            name = f"Micrographs/micrograph{number:03d}.mrc"
            image = rng.normal(0.0, NOISE, (size, size)).astype(np.float32)
            cell = rng.choice(cells * cells, per_micrograph, replace=False)
            jitter = rng.integers(-14, 15, (per_micrograph, 2))
            centres = np.column_stack(np.divmod(cell, cells)) * SPACING + SPACING // 2 + jitter
            kinds = rng.integers(0, len(KINDS), per_micrograph)
            angles = rng.uniform(0, 2 * np.pi, per_micrograph)
            for centre, kind, angle in zip(centres, kinds.tolist(), angles.tolist()):
                _render(image, centre, kind, angle)
            vio.write_single(image, out / name, voxel_size=PIXEL_SIZE)
            defocus = rng.uniform(8000, 25000)
            micrographs.append((name, 1, defocus, defocus + 200.0, 30.0))
            picks += [
                (name, float(x), float(y), k + 1, np.degrees(a))
                for (y, x), k, a in zip(centres.tolist(), kinds.tolist(), angles.tolist())
            ]
            bar.update()
    optics = pd.DataFrame(
        {
            "rlnOpticsGroupName": ["opticsGroup1"],
            "rlnOpticsGroup": [1],
            "rlnMicrographOriginalPixelSize": [PIXEL_SIZE],
            "rlnVoltage": [300.0],
            "rlnSphericalAberration": [2.7],
            "rlnAmplitudeContrast": [0.1],
            "rlnMicrographPixelSize": [PIXEL_SIZE],
        }
    )
    columns = ["rlnMicrographName", "rlnOpticsGroup", "rlnDefocusU", "rlnDefocusV", "rlnDefocusAngle"]
    micrographs_star, coordinates_star = out / "micrographs.star", out / "coordinates.star"
    write_star(
        {"optics": optics, "micrographs": pd.DataFrame(micrographs, columns=columns)}, micrographs_star
    )
    columns = ["rlnMicrographName", "rlnCoordinateX", "rlnCoordinateY", "rlnClassNumber", "rlnAnglePsi"]
    write_star({"particles": pd.DataFrame(picks, columns=columns)}, coordinates_star)
    return micrographs_star, coordinates_star, len(picks)


def _standardize(images: torch.Tensor) -> torch.Tensor:
    """Each image less its mean, over its standard deviation, with a channel axis."""
    images = images - images.mean(dim=(1, 2), keepdim=True)
    return (images / images.std(dim=(1, 2), keepdim=True).clamp_min(1e-6))[:, None]


def _network() -> nn.Module:
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(1, 8, 5, stride=2, padding=2),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 16, 3, stride=2, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.Conv2d(16, 16, 3, stride=2, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(16 * (BOX // 8) ** 2, len(KINDS)),
    )


def _accuracy(model: nn.Module, batches: DataLoader) -> float:
    import torch

    right = total = 0
    model.eval()
    with torch.no_grad():
        for batch in batches:
            right += int((model(_standardize(batch["image"])).argmax(1) == batch["label"]).sum())
            total += len(batch["label"])
    return right / total


@contextlib.contextmanager
def _torch_threads(count: int) -> Iterator[None]:
    """PyTorch computing on `count` threads within the block, on as many as before after it."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def train(
    dataset: Dataset, held_out: Dataset, epochs: int, loader: vio.ImageLoader
) -> tuple[nn.Module, list[float], list[float]]:
    """Train the network on `dataset` for `epochs`, printing the held-out accuracy and the speed of each.

    Returns:
        The network, the loss of each step, and the held-out accuracy after each epoch.
    """
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = _network()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    batches = DataLoader(dataset, BATCH, shuffle=True, seed=0, loader=loader, output="torch")
    testing = DataLoader(held_out, 256, loader=loader, output="torch")
    losses, accuracies = [], []
    for epoch in range(epochs):
        start, first = time.perf_counter(), len(losses)
        model.train()
        with progress(len(dataset), f"epoch {epoch + 1}/{epochs}", "image") as bar:
            for batch in batches:
                loss = nn.functional.cross_entropy(model(_standardize(batch["image"])), batch["label"])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                losses.append(loss.item())
                bar.update(len(batch["label"]))
                bar.set_postfix(loss=f"{losses[-1]:.3f}")
        rate = len(dataset) / (time.perf_counter() - start)
        accuracies.append(_accuracy(model, testing))
        print(
            f"   epoch {epoch + 1}/{epochs}: loss {np.mean(losses[first:]):.3f}, "
            f"held-out accuracy {accuracies[-1]:.1%}, {rate:,.0f} images/s read and trained on"
        )
    return model, losses, accuracies


def split(count: int) -> tuple[np.ndarray, np.ndarray]:
    """The rows of `count` particles trained on (four in five, drawn at random) and those held out."""
    order = np.random.default_rng(1).permutation(count)
    cut = count * 4 // 5
    return order[:cut], np.sort(order[cut:])


def cut_at_edge(particles: pd.DataFrame, size: int) -> np.ndarray:
    """Whether each particle's box reaches past the edge of its micrograph of `size` x `size` (what lies
    beyond is zero in its image)."""
    centres = particles[["rlnCoordinateX", "rlnCoordinateY"]].to_numpy(dtype=np.float64)
    corners = np.rint(centres).astype(np.int64) - BOX // 2
    return ((corners < 0) | (corners + BOX > size)).any(axis=1)


def _montage(
    particles: pd.DataFrame,
    dataset: Dataset,
    labels: np.ndarray,
    model: nn.Module,
    held_out: np.ndarray,
    size: int,
    out: Path,
) -> None:
    """particles.png, drawn by `vitrio montage` from a STAR file of them (shown.star): eight held-out
    particles of each kind (one cut at an edge among them, where there is one), each labelled with its
    true kind, marked if cut at an edge, over the network's prediction."""
    import torch

    columns = 8
    edge = cut_at_edge(particles, size)
    rows = []
    for kind in range(len(KINDS)):
        mine = held_out[labels[held_out] == kind]
        rows += sorted([*mine[edge[mine]][:1], *mine[~edge[mine]]][:columns])
    rows = np.array(rows, np.int64)
    model.eval()
    with torch.no_grad():
        guesses = model(_standardize(torch.from_numpy(dataset[rows]["image"]))).argmax(1).numpy()
    shown = particles.iloc[rows][["rlnImageName"]].reset_index(drop=True)
    shown["true"] = [f"{KINDS[k]}{', at edge' if e else ''}" for k, e in zip(labels[rows], edge[rows])]
    shown["predicted"] = [KINDS[g] for g in guesses]
    write_star({"particles": shown}, out / "shown.star")
    arguments = ["montage", "--star", str(out / "shown.star"), "--label", "true,predicted"]
    arguments += ["--root", str(out), "--columns", str(columns), "--tile", "128", "-n", str(len(rows))]
    draw_montage(build_parser().parse_args([*arguments, "--force", "-o", str(out / "particles.png")]))


def _curve(losses: list[float], accuracies: list[float], path: Path) -> None:
    plt = pyplot()
    figure, loss_axis = plt.subplots(figsize=(6.5, 3.8))
    steps = len(losses) / len(accuracies)
    loss_axis.plot(np.arange(1, len(losses) + 1) / steps, losses, color="tab:blue", label="training loss")
    loss_axis.set_xlabel("epoch")
    loss_axis.set_ylabel("cross-entropy loss", color="tab:blue")
    accuracy_axis = loss_axis.twinx()
    epochs = np.arange(1, len(accuracies) + 1)
    accuracy_axis.plot(epochs, accuracies, "o-", color="tab:orange", label="held-out accuracy")
    accuracy_axis.axhline(1 / len(KINDS), color="gray", linestyle=":", label="chance")
    accuracy_axis.set_ylim(0, 1)
    accuracy_axis.set_ylabel("held-out accuracy", color="tab:orange")
    curves = loss_axis.get_lines() + accuracy_axis.get_lines()
    accuracy_axis.legend(
        curves, [curve.get_label() for curve in curves], loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3
    )
    figure.tight_layout()
    save_figure(figure, path, 100)
    plt.close(figure)


def run(args: argparse.Namespace) -> None:
    """Make the dataset, extract it, train on it, and draw the pictures, saying what happens."""
    # what it trains and draws with: missing, the command stops before any work
    import matplotlib  # noqa: F401
    import pandas  # noqa: F401
    import torch  # noqa: F401

    out: Path = args.out
    begin = time.perf_counter()
    print(f"vitrio demo, in {out}/")
    micrographs, coordinates, count = make_micrographs(out, args.micrographs, args.size)
    print(
        f"1. made {args.micrographs} micrographs of {args.size} x {args.size} with {count} particles of "
        f"{len(KINDS)} kinds ({', '.join(KINDS)}) in {time.perf_counter() - begin:.1f} s: "
        f"{micrographs.name}, {coordinates.name}"
    )
    output, stacks = out / "particles.star", out / "Particles"
    print(
        f"2. vitrio extract --micrographs {micrographs} --coordinates {coordinates} --box-size {BOX} "
        f"-o {output} --stack-dir {stacks} --root {out}"
    )
    result = extract_particles(micrographs, coordinates, BOX, output, stack_dir=stacks, root=out, force=True)
    print(
        f"   {count} particles of {BOX} x {BOX} into {len(result.stacks)} stacks in {result.seconds:.2f} s "
        f"({count / result.seconds:,.0f} particles/s)"
    )

    particles = read_particles(output)
    labels = particles["rlnClassNumber"].to_numpy(dtype=np.int64) - 1
    dataset = Dataset(
        {
            "image": ImageSource(particle_locations(particles, output, root=out), data_type="float32"),
            "label": labels,
        }
    )
    training, held_out = split(len(dataset))
    loader = vio.loader(workers=2, cache=16)
    start = time.perf_counter()
    for _ in DataLoader(dataset, BATCH, shuffle=True, loader=loader):
        pass
    reading = len(dataset) / (time.perf_counter() - start)
    print(
        f"3. training a small network on {len(training)} particles fed by vitrio.data (threads, no worker "
        f"process), testing on {len(held_out)} held out; its DataLoader alone reads shuffled batches "
        f"of {BATCH} at {reading:,.0f} images/s"
    )
    # PyTorch's threads wait for each other by spinning: they are left the cores the loader's threads
    # do not read on, or on a small machine both slow down many times over.
    with _torch_threads(max(1, (os.cpu_count() or 1) - loader.worker_count)):
        model, losses, accuracies = train(
            dataset.subset(training), dataset.subset(held_out), args.epochs, loader
        )
        _montage(particles, dataset, labels, model, held_out, args.size, out)
    _curve(losses, accuracies, out / "training.png")
    print(
        f"4. saved {out / 'particles.png'} (drawn by vitrio montage from {out / 'shown.star'}: the held-out "
        f"particles shown, with their true and predicted kinds) and {out / 'training.png'}"
    )
    print(
        f"held-out accuracy {accuracies[-1]:.1%} after {args.epochs} epochs (chance {1 / len(KINDS):.0%}); "
        f"done in {time.perf_counter() - begin:.0f} s"
    )
