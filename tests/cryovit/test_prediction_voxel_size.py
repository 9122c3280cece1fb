"""Predictions are written with the voxel size of the tomogram they were made for, as mrcfile reads it;
a tomogram whose files say none gives predictions that say none."""

from __future__ import annotations

from pathlib import Path

import mrcfile
import numpy as np
import pytest
import torch

from cryovit.data import TomogramDataset, collate_tomograms, model_result, write_predictions
from cryovit.types import FileData


def _tomogram(path: Path, shape: tuple[int, int, int], voxel_size: float | tuple | None) -> Path:
    """A float32 volume written by mrcfile at `path`, of `voxel_size` Å ((x, y, z)) where given."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with mrcfile.new(path) as mrc:
        mrc.set_data(np.random.default_rng(2).standard_normal(shape).astype(np.float32))
        if voxel_size is not None:
            mrc.voxel_size = voxel_size
    return path


def _predict(dataset: TomogramDataset, folder: Path) -> list[Path]:
    """Predictions of the dataset's tomograms, in one batch, written as MRC into `folder`."""
    batch = collate_tomograms([dataset[i] for i in range(len(dataset))])
    return write_predictions(model_result(batch, torch.rand(batch.labels.shape)), folder)


def _voxel_size(path: Path) -> tuple[float, float, float]:
    with mrcfile.open(path, permissive=False, header_only=True) as mrc:
        return float(mrc.voxel_size.x), float(mrc.voxel_size.y), float(mrc.voxel_size.z)


@pytest.mark.parametrize("crop", [None, (3, 6)])
def test_predictions_carry_the_voxel_size_of_their_tomogram(tmp_path: Path, crop) -> None:
    sized = _tomogram(tmp_path / "s" / "sized.mrc", (4, 8, 10), (10.0, 10.0, 12.5))
    unknown = _tomogram(tmp_path / "s" / "unknown.mrc", (4, 8, 10), None)
    dataset = TomogramDataset([FileData(sized), FileData(unknown)], crop=crop)
    written = _predict(dataset, tmp_path / "out")
    assert _voxel_size(written[0]) == (10.0, 10.0, 12.5)
    assert _voxel_size(written[1]) == (0.0, 0.0, 0.0)  # unknown, as mrcfile writes it


def test_predictions_of_a_label_at_a_finer_scale_are_of_its_voxels(tmp_path: Path) -> None:
    tomogram = _tomogram(tmp_path / "s" / "tomo.mrc", (4, 8, 10), (10.0, 10.0, 12.5))
    label = tmp_path / "s" / "tomo_labels.mrc"
    with mrcfile.new(label) as mrc:
        mrc.set_data(np.ones((4, 16, 20), np.int8))  # twice the height and width, no size of its own
    dataset = TomogramDataset([FileData(tomogram, label, labels=["mito"])], label="mito")
    written = _predict(dataset, tmp_path / "out")
    assert _voxel_size(written[0]) == (5.0, 5.0, 12.5)
