"""Segment synthetic tomograms with a small 3-D CNN, from files to predictions, through cryovit.data.

    python examples/segment_tomograms.py [--out DIR] [--tomograms N] [--depth D] [--side S] [--steps N]

It writes tomograms of noise with bright blobs, labelled "mito", the way the CryoViT pipeline stores
them: half as HDF5 files (the volume as uint8 under ``data``, read scaled to [0, 1], the label as int8
under ``labels/mito``), half as MRC files with an int8 MRC label volume (value 1 is "mito"); in both,
a band of each tomogram is -1, not annotated. The tomograms are of differing depths. It trains the
CNN for a few steps on padded batches of random crops with a loss that leaves out ``labels > -1`` as
the pipeline's losses do, then, as the pipeline's test step does, predicts each whole tomogram, names
it by ``samples, tomo_names = batch.metadata.identifiers``, reports its Dice score over the annotated
voxels, and writes the predictions beside the input (``batch.aux_data["data"]``) as HDF5 files
``DIR/predictions/<sample>/<tomogram>.hdf5`` (datasets ``data`` and ``preds``).
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
        label = np.zeros(shape, dtype=np.int8)
        for _ in range(6):
            centre = rng.uniform(0, shape)
            radius = rng.uniform(side / 8, side / 4)
            inside = ((grid - centre) ** 2).sum(axis=1) < radius**2
            label.reshape(-1)[inside] = 1
        data = (rng.standard_normal(shape) + 2.0 * label).astype(np.float32)
        data = np.clip((data + 3) * 32, 0, 255).astype(np.uint8)
        label[:, : side // 8] = -1  # a band not annotated
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
                mrc.set_data(data.astype(np.float32) / 255)
            with mrcfile.new(label_path, overwrite=True) as mrc:
                mrc.set_data(label)
            files.append(FileData(tomo_path=path, label_path=label_path, labels=["mito"]))
    return files


class SmallCnn(torch.nn.Module):
    """Three 3-D convolutions, from a batch's ``tomo_batch`` ``[B, D, 1, H, W]`` to logits ``[B, D, H, W]``.

    Tomograms come scaled to [0, 1]; each is standardised first.
    """

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
        x = tomograms.transpose(1, 2)  # [B, C, D, H, W]
        dims = tuple(range(1, x.ndim))
        x = (x - x.mean(dims, keepdim=True)) / (x.std(dims, keepdim=True) + 1e-6)
        return self.layers(x)[:, 0]


def masked_loss(logits: torch.Tensor, batch: BatchedTomogramData) -> torch.Tensor:
    """Binary cross-entropy over the annotated voxels of a batch (``labels > -1``), as the pipeline's
    losses take them: padding and voxels not annotated are -1, the labels float32."""
    y_true = batch.labels
    mask = y_true > -1
    return torch.nn.functional.binary_cross_entropy_with_logits(logits[mask], y_true[mask])


def dice(preds: torch.Tensor, label: torch.Tensor) -> float:
    """The Dice score over the annotated voxels of predictions thresholded at 0.5 (1 when both are empty)."""
    mask = label > -1
    found, truth = preds[mask] > 0.5, label[mask] > 0
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
            preds = torch.sigmoid(logits)
            samples, tomo_names = batch.metadata.identifiers
            for i, (sample, name) in enumerate(zip(samples, tomo_names)):
                n = int(batch.tomo_sizes[i])
                score = dice(preds[i, :n], batch.labels[i, :n])
                print(f"{sample}/{name}: {n} slices, Dice {score:.3f}")
            # model_result takes each input from batch.aux_data["data"], the names from identifiers
            result = model_result(batch, preds, losses={"bce": masked_loss(logits, batch).item()})
            written += write_predictions(result, args.out / "predictions", "hdf5")
    print(f"wrote {len(written)} predictions to {args.out / 'predictions'}")


if __name__ == "__main__":
    main()
