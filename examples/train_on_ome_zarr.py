"""Train a small 3-D segmentation network on random crops of an OME-Zarr tomogram and its label volume.

    python examples/train_on_ome_zarr.py [--tomogram T.zarr --labels L.zarr] [--level 0]
        [--storage-options '{"anon": true}'] [--steps 100] [--batch-size 8]

The tomogram and the label volume are OME-Zarr images of one shape, local
paths or URLs (`s3://...`, `https://...`: the CryoET Data Portal serves its
tomograms and segmentations so, readable with `{"anon": true}`); a voxel is in
the label where the label volume is not zero. `--level` picks a scale level
(0 the finest; a key may also end in `#N`). Without --tomogram, it writes a
synthetic tomogram (noisy spheres in a 64 x 128 x 128 volume) and its labels
as OME-Zarr stores to a temporary directory first.

Crops are `vitrio.data.PatchSource` rows at random centres: each batch reads
only the chunks its crops touch, on vitrio's threads, a few batches ahead.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
import torch
from torch import nn

import vitrio as vio
from vitrio.data import DataLoader, Dataset, PatchSource
from vitrio.formats.zarr import OmeZarrFormat

CROP = (16, 32, 32)


def write_synthetic(root: Path, shape=(64, 128, 128), spheres: int = 40) -> tuple[str, str]:
    """A noisy tomogram of dark spheres and its label volume, as OME-Zarr stores; their paths."""
    rng = np.random.default_rng(0)
    grid = np.indices(shape, dtype=np.float32)
    labels = np.zeros(shape, np.uint8)
    for _ in range(spheres):
        centre = rng.uniform(0, shape)[:, None, None, None]
        radius = rng.uniform(4, 9)
        labels[((grid - centre) ** 2).sum(axis=0) < radius**2] = 1
    tomogram = rng.normal(0, 0.8, shape).astype(np.float32) - labels
    written = OmeZarrFormat.configured(levels=2, chunks=32, voxel_size=10.0)
    vio.write_single(tomogram, root / "tomogram.zarr", formats=[written])
    vio.write_single(labels, root / "labels.zarr", formats=[written])
    return str(root / "tomogram.zarr"), str(root / "labels.zarr")


def make_dataset(
    tomogram: str, labels: str, readers: vio.ImageReaderProvider, rows: int, seed: int
) -> Dataset:
    """Rows of crops at random centres: the tomogram's, as float32, and the label volume's."""
    shape = vio.query_descriptor(tomogram, readers).extents
    if vio.query_descriptor(labels, readers).extents != shape:
        raise ValueError(f"{tomogram} and {labels} differ in shape")
    rng = np.random.default_rng(seed)
    centres = np.stack([rng.integers(0, n, rows) for n in shape], axis=1)
    image = PatchSource([tomogram] * rows, centres, CROP, data_type="float32", readers=readers, check=False)
    label = PatchSource([labels] * rows, centres, CROP, data_type="float32", readers=readers, check=False)
    return Dataset({"image": image, "label": label})


def make_model() -> nn.Module:
    """Three 3-D convolutions: a logit per voxel."""
    return nn.Sequential(
        nn.Conv3d(1, 8, 3, padding=1),
        nn.ReLU(),
        nn.Conv3d(8, 8, 3, padding=1),
        nn.ReLU(),
        nn.Conv3d(8, 1, 1),
    )


def normalized(crops: torch.Tensor) -> torch.Tensor:
    """Each crop scaled to zero mean and unit deviation, with a channel axis."""
    mean = crops.mean(dim=(1, 2, 3), keepdim=True)
    return ((crops - mean) / (crops.std(dim=(1, 2, 3), keepdim=True) + 1e-6))[:, None]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tomogram", help="an OME-Zarr tomogram, path or URL; synthetic without it")
    parser.add_argument("--labels", help="its OME-Zarr label volume")
    parser.add_argument("--level", type=int, default=0, help="the scale level read")
    parser.add_argument("--storage-options", default="{}", help="fsspec's options for URLs, as JSON")
    parser.add_argument("--steps", type=int, default=100, help="how many batches to train on")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2, help="threads reading crops")
    parser.add_argument("--seed", type=int, default=0)
    arguments = parser.parse_args()
    if (arguments.tomogram is None) != (arguments.labels is None):
        parser.error("give --tomogram and --labels together")
    torch.manual_seed(arguments.seed)
    zarr_format = OmeZarrFormat.configured(
        level=arguments.level, storage_options=json.loads(arguments.storage_options)
    )
    formats = [zarr_format, *vio.formats.registered_formats()]
    loader = vio.loader(workers=arguments.workers, cache=4, formats=formats)

    with tempfile.TemporaryDirectory() as scratch:
        if arguments.tomogram is None:
            tomogram, labels = write_synthetic(Path(scratch))
        else:
            tomogram, labels = arguments.tomogram, arguments.labels
        rows = arguments.steps * arguments.batch_size
        dataset = make_dataset(tomogram, labels, loader.readers, rows, arguments.seed)
        print(f"{rows} crops of {CROP} from {tomogram} (level {arguments.level})")
        batches = DataLoader(
            dataset, arguments.batch_size, shuffle=True, drop_last=True, seed=arguments.seed, loader=loader,
            output="torch", transform=lambda batch: (normalized(batch["image"]), batch["label"][:, None] > 0),
        )  # fmt: skip
        model = make_model()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        losses: list[float] = []
        for step, (crops, masks) in enumerate(batches, start=1):
            loss = nn.functional.binary_cross_entropy_with_logits(model(crops), masks.float())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            if step % 10 == 0 or step == arguments.steps:
                print(f"step {step}: loss {np.mean(losses[-10:]):.4f}", flush=True)
            if step == arguments.steps:
                break


if __name__ == "__main__":
    main()
