"""The padding of a batch of tomograms, in buffers that start full of garbage.

Memory fresh from ``torch.empty`` or ``np.empty`` is often zero, so a batch
whose padding was never written can pass a test by chance. Here the modules
that make the buffers see an ``empty`` that fills them with the byte 0xF9
(-7 as int8, a large negative float): padding left unwritten always fails.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import cryovit.collate
import cryovit.dataset
from cryovit.data import LABEL_PADDING, TomogramDataset, collate_tomograms
from cryovit.types import FileData, TomogramData

from .test_data import random_volume, write_tomogram

SENTINEL = 0xF9


class _Garbage:
    """A module whose ``empty`` fills what it makes with `SENTINEL` bytes; all else is the module's."""

    def __init__(self, module: Any):
        self._module = module

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)

    def empty(self, *args: Any, **kwargs: Any) -> Any:
        out = self._module.empty(*args, **kwargs)
        if isinstance(out, torch.Tensor):
            out.view(torch.uint8).fill_(SENTINEL)
        else:
            out.view(np.uint8).fill(SENTINEL)
        return out


@pytest.fixture
def garbage(monkeypatch: pytest.MonkeyPatch) -> None:
    """Buffers of collate and of the dataset start full of garbage."""
    monkeypatch.setattr(cryovit.collate, "torch", _Garbage(torch))
    monkeypatch.setattr(cryovit.dataset, "np", _Garbage(np))


def test_the_garbage_is_there(garbage: None) -> None:
    assert (cryovit.collate.torch.empty(4, dtype=torch.int8) == -7).all()
    assert (cryovit.dataset.np.empty(4, np.int8) == -7).all()


def tomogram(depth: int, dtype: torch.dtype, seed: int) -> TomogramData:
    generator = torch.Generator().manual_seed(seed)
    return TomogramData(
        sample="s",
        tomo_name=f"t{seed}.mrc",
        split_id=None,
        data=torch.rand(1, depth, 4, 5, generator=generator).to(dtype) + 1,
        label=(torch.rand(depth, 4, 5, generator=generator) > 0.5).float(),
        batch_size=[],
    )


def check_padding(batch: Any, depths: list[int]) -> None:
    for i, depth in enumerate(depths):
        assert (batch.tomo_batch[i, depth:] == 0).all(), f"the data of tomogram {i} is not padded with zeros"
        assert (batch.labels[i, depth:] == LABEL_PADDING).all(), f"the labels of tomogram {i} are not padded"


@pytest.mark.parametrize("dtypes", [(torch.float32,), (torch.float32, torch.float64)])
def test_collate_pads_new_buffers(garbage: None, dtypes: tuple[torch.dtype, ...]) -> None:
    depths = [4, 2, 1, 4]
    tomograms = [tomogram(d, dtypes[i % len(dtypes)], i) for i, d in enumerate(depths)]
    batch = collate_tomograms(tomograms)
    assert batch.tomo_batch.shape == (4, 4, 1, 4, 5)
    check_padding(batch, depths)
    for i, item in enumerate(tomograms):
        # data is [C, D, H, W] in an item, [D, C, H, W] in a batch's tomo_batch
        expected = item.data.transpose(0, 1).to(batch.tomo_batch.dtype)
        assert torch.equal(batch.tomo_batch[i, : depths[i]], expected)
        assert torch.equal(batch.labels[i, : depths[i]], item.label.to(batch.labels.dtype))


@pytest.mark.parametrize("labels", [True, False])
def test_the_batch_a_dataset_reads_is_padded(garbage: None, tmp_path: Path, labels: bool) -> None:
    rng = np.random.default_rng(5)
    depths = [4, 6, 2]
    files, volumes = [], []
    for i, depth in enumerate(depths):
        values = random_volume(rng, (depth, 10, 12)) + 1000  # no zeros among the values
        path = write_tomogram(tmp_path / f"t{i}", values, "mrc")
        mito = write_tomogram(tmp_path / f"l{i}", (rng.random(values.shape) > 0.5).astype(np.uint8), "mrc")
        files.append(FileData(path, mito, labels=["mito"]) if labels else FileData(path))
        volumes.append(values)
    dataset = TomogramDataset(files, label="mito" if labels else None)
    batch = collate_tomograms(dataset.__getitems__([0, 1, 2]))
    assert batch.tomo_batch.shape == (3, 6, 1, 10, 12)
    check_padding(batch, depths)
    for i, values in enumerate(volumes):
        np.testing.assert_array_equal(batch.tomo_batch[i, : depths[i], 0].numpy(), values)
