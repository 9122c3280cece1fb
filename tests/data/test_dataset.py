"""Dataset: fields, rows, batches, subsets, preloading, and PyTorch's DataLoader over it."""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest
import torch

import vitrio as vio
from vitrio.data import ArraySource, Dataset, ImageSource, PendingBatch, as_columns


@pytest.fixture
def dataset(stacks) -> Dataset:
    rows = len(stacks.images)
    return Dataset(
        {
            "image": ImageSource(stacks.locations),
            "defocus": np.linspace(1.0, 2.0, 2 * rows).reshape(rows, 2),
            "name": [f"particle{i}" for i in range(rows)],
        }
    )


def test_fields_index_and_length(dataset, stacks):
    assert len(dataset) == 21 and dataset.index == "index"
    assert list(dataset.fields) == ["image", "defocus", "name"]
    assert isinstance(dataset.fields["image"], ImageSource)
    assert isinstance(dataset.fields["defocus"], ArraySource)
    assert dataset.fields["defocus"].shape == (2,)


def test_an_integer_reads_one_row_without_the_batch_axis(dataset, stacks):
    row = dataset[-2]
    assert set(row) == {"image", "defocus", "name", "index"}
    assert row["index"] == 19 and row["name"] == "particle19"
    np.testing.assert_array_equal(row["image"], stacks.images[19])
    assert row["image"].shape == (12, 10) and row["defocus"].shape == (2,)


def test_batches_hold_the_rows_asked_for_in_their_order(dataset, stacks):
    mask = np.zeros(21, bool)
    mask[[2, 15]] = True
    for rows, expected in [(slice(5, 1, -2), [5, 3]), ([0, 20, 0], [0, 20, 0]), (mask, [2, 15]), ([], [])]:
        batch = dataset[rows]
        np.testing.assert_array_equal(batch["index"], expected)
        assert batch["image"].shape == (len(expected), 12, 10)
        np.testing.assert_array_equal(batch["image"], stacks.images[expected])
        np.testing.assert_array_equal(batch["name"], [f"particle{i}" for i in expected])


def test_bad_rows(dataset):
    with pytest.raises(IndexError, match="row 21 is past the end of 21 rows"):
        dataset[[0, 21]]
    with pytest.raises(IndexError, match="row -22 is past the end of 21 rows"):
        dataset[-22]
    with pytest.raises(IndexError, match="mask"):
        dataset[np.ones(20, bool)]
    with pytest.raises(TypeError, match="rows are integers or a mask of booleans, not float64"):
        dataset[[0.5]]


def test_dataset_errors(stacks):
    with pytest.raises(ValueError, match="at least one field"):
        Dataset({})
    with pytest.raises(ValueError, match="not all as long"):
        Dataset({"image": ImageSource(stacks.locations), "label": np.arange(20)})
    with pytest.raises(ValueError, match="index"):
        Dataset({"index": np.arange(3)})
    with pytest.raises(ValueError, match="'row'"):
        Dataset({"row": np.arange(3)}, index="row")


def test_index_none_leaves_the_indices_out(stacks):
    dataset = Dataset({"label": np.arange(21), "index": np.arange(21) * 2}, index=None)
    batch = dataset[[4]]
    assert set(batch) == {"label", "index"} and batch["index"][0] == 8


def test_the_allocator_makes_every_array(dataset, loader):
    made = []

    def allocate(shape, dtype):
        made.append((shape, np.dtype(dtype)))
        array = torch.zeros(shape, dtype=torch.float32) if dtype == np.float32 else np.zeros(shape, dtype)
        made.append(array)
        return array

    batch = dataset.read_async([1, 2, 3], allocator=allocate, loader=loader).get()
    shapes = [entry for entry in made if isinstance(entry, tuple)]
    assert ((3, 12, 10), np.dtype(np.float32)) in shapes and ((3,), np.dtype(np.int64)) in shapes
    tensor = next(entry for entry in made if isinstance(entry, torch.Tensor))
    assert np.shares_memory(batch["image"], tensor.numpy())
    with pytest.raises(ValueError, match="allocator"):
        dataset.read_async([1], allocator=lambda shape, dtype: np.empty((2, *shape[1:]), dtype))


def test_pending_batch(dataset, loader, stacks):
    pending = dataset.read_async([3, 4], loader=loader)
    assert isinstance(pending, PendingBatch)
    first = pending.get()
    assert pending.is_ready
    second = pending.get()
    np.testing.assert_array_equal(first["image"], stacks.images[[3, 4]])
    assert first["image"] is second["image"]
    batch = PendingBatch({"x": np.zeros(2)}, [vio.Completion()])
    assert batch.is_ready and list(batch.get()) == ["x"]


class _Failed:
    """A read of a batch that failed at once."""

    is_ready = True

    def wait(self):
        pass

    def get(self):
        raise OSError("a.mrc: image 3 of 2 is past the end of its stack")


class _Slow:
    """A read of a batch that is done only once waited for: notes that it was."""

    def __init__(self):
        self.is_ready = False

    def wait(self):
        self.is_ready = True

    def get(self):
        self.wait()


def test_pending_batch_get_waits_for_every_read_before_it_raises():
    """A batch whose first read failed still waits for the others: its arrays are not being written
    once get() raises, so they may be reused or freed."""
    slow = _Slow()
    batch = PendingBatch({"a": np.zeros(2), "b": np.zeros(2)}, [_Failed(), slow])
    with pytest.raises(OSError, match="a.mrc: image 3 of 2"):
        batch.get()
    assert slow.is_ready, "get() raised before every read of the batch was done"


def test_subset_shares_sources_and_counts_its_own_rows(dataset, stacks):
    part = dataset.subset([20, 3, 3, -1])
    assert len(part) == 4
    batch = part[[0, 1, 3]]
    np.testing.assert_array_equal(batch["index"], [0, 1, 3])
    np.testing.assert_array_equal(batch["image"], stacks.images[[20, 3, 20]])
    np.testing.assert_array_equal(batch["name"], ["particle20", "particle3", "particle20"])
    masked = dataset.subset(np.arange(21) >= 19)
    np.testing.assert_array_equal(masked[:]["image"], stacks.images[19:])


def test_preload_reads_every_source_and_no_file_afterwards(dataset, stacks, loader, tmp_path):
    loaded = dataset.preload(loader=loader)
    assert all(isinstance(source, ArraySource) for source in loaded.fields.values())
    for path in stacks.paths:
        path.unlink()
    batch = loaded[[20, 0, 7]]
    np.testing.assert_array_equal(batch["image"], stacks.images[[20, 0, 7]])
    np.testing.assert_array_equal(batch["index"], [20, 0, 7])
    assert loaded.fields["defocus"] is dataset.fields["defocus"]
    with pytest.raises(FileNotFoundError, match=r"stack0.mrcs: no such file\nreading row 0"):
        dataset[[0]]


def test_preload_of_some_fields(stacks, tmp_path, loader):
    copy = tmp_path / "copy"
    copy.mkdir()
    for path in stacks.paths:
        shutil.copy(path, copy / path.name)
    moved = [
        vio.ImageLocation(copy / loc.key.rsplit("/", 1)[1], loc.index_in_stack) for loc in stacks.locations
    ]
    dataset = Dataset({"kept": ImageSource(stacks.locations), "read": ImageSource(moved)})
    loaded = dataset.preload(["read"], loader=loader)
    assert isinstance(loaded.fields["read"], ArraySource)
    assert isinstance(loaded.fields["kept"], ImageSource)
    shutil.rmtree(copy)
    np.testing.assert_array_equal(loaded[[5]]["read"], stacks.images[[5]])
    with pytest.raises(KeyError, match=r"no fields named \['nothing'\]"):
        dataset.preload(["nothing"])


def test_columns_of_a_dataframe_are_fields(stacks):
    table = pd.DataFrame({"rlnClassNumber": np.arange(21) % 3, "rlnDefocusU": np.linspace(1, 2, 21)})
    dataset = Dataset({"image": ImageSource(stacks.locations), **as_columns(table)})
    batch = dataset[[2, 5]]
    np.testing.assert_array_equal(batch["rlnClassNumber"], [2, 2])
    np.testing.assert_allclose(batch["rlnDefocusU"], table["rlnDefocusU"].to_numpy()[[2, 5]])


def test_works_as_it_is_with_the_dataloader_of_pytorch(dataset, stacks):
    sampler = torch.utils.data.BatchSampler(torch.utils.data.RandomSampler(dataset), 4, False)
    loader = torch.utils.data.DataLoader(dataset, sampler=sampler, batch_size=None)
    seen = []
    for batch in loader:
        assert isinstance(batch["image"], torch.Tensor) and isinstance(batch["index"], torch.Tensor)
        assert isinstance(batch["name"], np.ndarray)
        rows = batch["index"].numpy()
        np.testing.assert_array_equal(batch["image"].numpy(), stacks.images[rows])
        assert list(batch["name"]) == [f"particle{i}" for i in rows]
        seen.extend(rows.tolist())
    assert sorted(seen) == list(range(21))


def test_pytorch_worker_processes_read_through_a_loader_of_their_own(dataset, stacks):
    sampler = torch.utils.data.BatchSampler(torch.utils.data.SequentialSampler(dataset), 8, False)
    dataset[0]
    loader = torch.utils.data.DataLoader(
        dataset, sampler=sampler, batch_size=None, num_workers=2, multiprocessing_context="fork", timeout=60
    )
    images = torch.cat([batch["image"] for batch in loader])
    np.testing.assert_array_equal(images.numpy(), stacks.images)
