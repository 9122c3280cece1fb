"""Segment synthetic tomograms with a small 3-D CNN, from files to predictions, through cryovit.data.

    python examples/segment_tomograms.py [--out DIR] [--tomograms N] [--depth D] [--side S] [--steps N]

It writes tomograms of noise with bright blobs, labelled "mito": half as HDF5 files (the volume under
``data``, the label under ``labels/mito``), half as MRC files with an MRC label volume (value 1 is
"mito"), the tomograms of differing depths. It trains the CNN for a few steps on padded batches of
random crops, predicts each whole tomogram, reports the Dice score of each through a
``BatchedModelResult``, and writes the predictions as MRC files under ``DIR/predictions``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import h5py
import mrcfile
import numpy as np
import torch
from torch.utils.data import DataLoader

from cryovit.data import TomogramDataset, collate_tomograms, model_result, write_predictions
from cryovit.types import BatchedTomogramData, FileData


def make_tomograms(
    folder: Path, count: int, depth: int, side: int, rng: np.random.Generator
) -> list[FileData]:
    """Writes ``count`` tomograms of noise with bright blobs and their labels; returns their files."""
    files = []
    for i in range(count):
        shape = (depth - 2 * (i % 2), side, side)
        grid = np.indices(shape).reshape(3, -1).T
        label = np.zeros(shape, dtype=np.uint8)
        for _ in range(6):
            centre = rng.uniform(0, shape)
            radius = rng.uniform(side / 8, side / 4)
            inside = ((grid - centre) ** 2).sum(axis=1) < radius**2
            label.reshape(-1)[inside] = 1
        data = (rng.standard_normal(shape) + 2.0 * label).astype(np.float32)
        sample = folder / ("sample_a" if i < count // 2 else "sample_b")
        sample.mkdir(parents=True, exist_ok=True)
        if i % 2 == 0:
            path = sample / f"tomo{i}.hdf5"
            with h5py.File(path, "w") as file:
                file["data"] = data
                file["labels/mito"] = label
            files.append(FileData(tomo_path=path, label_path=path))
        else:
            path, label_path = sample / f"tomo{i}.mrc", sample / f"tomo{i}_labels.mrc"
            with mrcfile.new(path, overwrite=True) as mrc:
                mrc.set_data(data)
            with mrcfile.new(label_path, overwrite=True) as mrc:
                mrc.set_data(label.astype(np.int8))
            files.append(FileData(tomo_path=path, label_path=label_path, labels=["mito"]))
    return files


class SmallCnn(torch.nn.Module):
    """Three 3-D convolutions, from a tomogram ``[B, D, 1, H, W]`` to logits ``[B, D, H, W]``."""

    def __init__(self, width: int = 8):
        super().__init__()
        self.layers = torch.nn.Sequential(
            torch.nn.Conv3d(1, width, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.Conv3d(width, width, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.Conv3d(width, 1, 1),
        )

    def forward(self, tomograms: torch.Tensor) -> torch.Tensor:
        return self.layers(tomograms.transpose(1, 2))[:, 0]


def masked_loss(logits: torch.Tensor, batch: BatchedTomogramData) -> torch.Tensor:
    """Binary cross-entropy over the real slices of a batch, leaving out its padding."""
    real = batch.labels >= 0
    return torch.nn.functional.binary_cross_entropy_with_logits(logits[real], batch.labels[real].float())


def dice(preds: np.ndarray, label: np.ndarray) -> float:
    """The Dice score of predictions thresholded at 0.5 against a label (1 when both are empty)."""
    found, truth = preds > 0.5, label > 0
    total = found.sum() + truth.sum()
    return 1.0 if total == 0 else float(2 * (found & truth).sum() / total)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=Path("segment-output"), help="where files are written")
    parser.add_argument("--tomograms", type=int, default=4)
    parser.add_argument("--depth", type=int, default=24)
    parser.add_argument("--side", type=int, default=48)
    parser.add_argument("--crop-depth", type=int, default=16)
    parser.add_argument("--crop-side", type=int, default=32)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    files = make_tomograms(
        args.out / "tomograms", args.tomograms, args.depth, args.side, np.random.default_rng(args.seed)
    )
    train = TomogramDataset(files, label="mito", crop=(args.crop_depth, args.crop_side), seed=args.seed)
    model = SmallCnn()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-2)
    step = 0
    while step < args.steps:
        for batch in DataLoader(train, batch_size=args.batch, shuffle=True, collate_fn=collate_tomograms):
            loss = masked_loss(model(batch.tomo_batch), batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if step % 10 == 0 or step == args.steps:
                print(f"step {step}: loss {loss.item():.4f}")
            if step == args.steps:
                break

    model.eval()
    whole = TomogramDataset(files, label="mito")
    written = []
    with torch.no_grad():
        for batch in DataLoader(whole, batch_size=args.batch, collate_fn=collate_tomograms):
            logits = model(batch.tomo_batch)
            result = model_result(
                batch, torch.sigmoid(logits), losses={"bce": masked_loss(logits, batch).item()}
            )
            for sample, name, preds, label in zip(
                result.samples, result.tomo_names, result.preds, result.label
            ):
                print(f"{sample}/{name}: {preds.shape[0]} slices, Dice {dice(preds, label):.3f}")
            written += write_predictions(result, args.out / "predictions", "mrc")
    print(f"wrote {len(written)} predictions to {args.out / 'predictions'}")


if __name__ == "__main__":
    main()
