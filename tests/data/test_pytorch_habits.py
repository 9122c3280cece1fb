"""DataLoader takes the arguments of PyTorch's that map, says the way here for those that do not, and has
set_epoch; an output whose library is missing names the extra to install."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from torch.utils.data import BatchSampler as TorchBatchSampler
from torch.utils.data import DistributedSampler

from vitrio.data import BatchSampler, DataLoader, Dataset


@pytest.fixture
def rows() -> Dataset:
    return Dataset({"x": np.arange(20)}, index=None)


def _orders(loader: DataLoader) -> list[list[int]]:
    return [batch["x"].tolist() for batch in loader]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            {"num_workers": 4},
            r"DataLoader takes no num_workers: reads run on threads: pass loader=vio.loader\(",
        ),
        ({"worker_init_fn": print}, r"no worker_init_fn: no worker process starts"),
        ({"timeout": 5}, "no timeout: a batch has no time limit"),
        ({"multiprocessing_context": "spawn"}, "no multiprocessing_context"),
        ({"num_wokers": 4}, "unexpected keyword argument 'num_wokers'"),
    ],
)
def test_arguments_of_worker_processes_say_the_way_here(rows, arguments, message):
    with pytest.raises(TypeError, match=message):
        DataLoader(rows, 4, **arguments)


def test_what_maps_as_pytorch_users_write_it(rows):
    # num_workers=0 and persistent_workers mean what happens anyway
    loader = DataLoader(rows, 8, num_workers=0, persistent_workers=True, prefetch_factor=2)
    assert _orders(loader) == [list(range(8)), list(range(8, 16)), list(range(16, 20))]
    with pytest.raises(ValueError, match="prefetch must be positive: 0"):
        DataLoader(rows, 8, prefetch_factor=0)  # prefetch_factor is prefetch
    with pytest.raises(ValueError, match="prefetch_factor is prefetch"):
        DataLoader(rows, 8, prefetch_factor=2, prefetch=3)
    # collate_fn is given each batch dict as it is handed out
    doubled = DataLoader(rows, 8, collate_fn=lambda batch: {"y": batch["x"] * 2})
    assert next(iter(doubled))["y"].tolist() == list(range(0, 16, 2))
    with pytest.raises(ValueError, match="collate_fn is a transform"):
        DataLoader(rows, 8, collate_fn=dict, transform=dict)


@pytest.mark.parametrize("drop_last", [False, True])
def test_a_distributed_sampler_is_batched_and_told_its_epoch(rows, drop_last):
    sampler = DistributedSampler(range(20), num_replicas=2, rank=1, shuffle=True, seed=3)
    theirs = TorchBatchSampler(DistributedSampler(range(20), 2, 1, shuffle=True, seed=3), 4, drop_last)
    loader = DataLoader(rows, 4, sampler=sampler, drop_last=drop_last)
    assert len(loader) == len(theirs)
    assert _orders(loader) == [list(b) for b in theirs]
    loader.set_epoch(1)
    theirs.sampler.set_epoch(1)
    first = [list(b) for b in theirs]
    assert _orders(loader) == first
    assert sampler.epoch == 1
    with pytest.raises(ValueError, match="sampler draws the rows"):
        DataLoader(rows, 4, sampler=sampler, shuffle=True)


def test_set_epoch_reaches_the_batch_sampler_and_the_sampler_it_batches(rows):
    loader = DataLoader(rows, 8, shuffle=True, seed=7)
    loader.set_epoch(3)
    reference = BatchSampler(20, 8, shuffle=True, seed=7)
    reference.set_epoch(3)
    assert _orders(loader) == [b.tolist() for b in reference]
    distributed = DistributedSampler(range(20), 1, 0, shuffle=True)
    DataLoader(rows, batch_sampler=TorchBatchSampler(distributed, 8, False)).set_epoch(2)
    assert distributed.epoch == 2
    with pytest.raises(TypeError, match="no set_epoch"):
        DataLoader(rows, batch_sampler=[[0, 1]]).set_epoch(1)
    with pytest.raises(ValueError, match="cannot be negative"):
        loader.set_epoch(-1)


@pytest.mark.parametrize("make", [lambda s: torch.Generator().manual_seed(s), np.random.default_rng])
def test_a_generator_is_where_the_seed_comes_from(rows, make):
    first = _orders(DataLoader(rows, 5, shuffle=True, generator=make(11)))
    assert first == _orders(DataLoader(rows, 5, shuffle=True, generator=make(11)))
    assert first != _orders(DataLoader(rows, 5, shuffle=True, generator=make(12)))
    assert sorted(sum(first, [])) == list(range(20))
    with pytest.raises(ValueError, match="generator is drawn the seed from"):
        DataLoader(rows, 5, shuffle=True, generator=make(1), seed=1)
    with pytest.raises(TypeError, match="generator is a numpy Generator or a torch.Generator"):
        DataLoader(rows, 5, shuffle=True, generator=42)


@pytest.mark.parametrize("name", ["torch", "jax"])
def test_an_output_whose_library_is_missing_names_the_extra(name):
    script = (
        f"import sys; sys.modules[{name!r}] = None\n"
        "import numpy as np\nfrom vitrio.data import DataLoader, Dataset\n"
        "try:\n"
        f"    DataLoader(Dataset({{'x': np.arange(3)}}), 1, output={name!r})\n"
        "except ModuleNotFoundError as error:\n"
        "    print(error)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == f"output={name!r} needs {name}: pip install 'vitrio[{name}]'", (
        result.stderr
    )
