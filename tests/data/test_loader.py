"""DataLoader: batches, outputs, padding, orders, prefetching, failures and abandoned epochs."""

from __future__ import annotations

import re
import threading
import time
import warnings

import jax
import numpy as np
import pytest
import torch

import vitrio as vio
from vitrio.data import BatchSampler, DataLoader, Dataset, ImageSource


@pytest.fixture
def dataset(stacks) -> Dataset:
    rows = len(stacks.images)
    return Dataset(
        {
            "image": ImageSource(stacks.locations),
            "label": np.arange(rows) % 3,
            "name": np.array([f"p{i}" for i in range(rows)]),
        }
    )


class Recorder:
    """A source of its row numbers, remembering the rows of every read started."""

    shape = ()
    dtype = np.dtype(np.int64)

    def __init__(self, rows: int):
        self.rows = rows
        self.started: list[np.ndarray] = []

    def __len__(self) -> int:
        return self.rows

    def read_async(self, loader, rows, out):
        self.started.append(np.array(rows))
        out[...] = rows
        return vio.Completion()

    def subset(self, rows):
        raise NotImplementedError


class Slow:
    """A source whose reads take a while on the loader's threads, counting those begun and those done."""

    shape = (3,)
    dtype = np.dtype(np.float32)

    class Pending:
        def __init__(self):
            self.done = threading.Event()

        @property
        def is_ready(self):
            return self.done.is_set()

        def wait(self):
            self.done.wait()

        def get(self):
            self.done.wait()

    def __init__(self, rows: int):
        self.rows = rows
        self.begun = 0
        self.finished = 0
        self.lock = threading.Lock()

    def __len__(self) -> int:
        return self.rows

    def read_async(self, loader, rows, out):
        pending = Slow.Pending()
        with self.lock:
            self.begun += 1

        def work():
            time.sleep(0.05)
            out[...] = np.asarray(rows)[:, None]
            with self.lock:
                self.finished += 1
            pending.done.set()

        loader.executor.submit(work)
        return pending

    def subset(self, rows):
        raise NotImplementedError


def test_an_epoch_in_order(dataset, stacks, loader):
    batches = list(DataLoader(dataset, 8, loader=loader))
    assert [len(b["index"]) for b in batches] == [8, 8, 5]
    assert len(DataLoader(dataset, 8)) == 3
    np.testing.assert_array_equal(np.concatenate([b["index"] for b in batches]), np.arange(21))
    np.testing.assert_array_equal(np.concatenate([b["image"] for b in batches]), stacks.images)
    assert all(isinstance(b["image"], np.ndarray) for b in batches)


def test_batches_are_never_written_again(dataset, stacks, loader):
    batches = list(DataLoader(dataset, 2, shuffle=True, seed=0, loader=loader, prefetch=6))
    for batch in batches:
        np.testing.assert_array_equal(batch["image"], stacks.images[batch["index"]])
    images = [b["image"] for b in batches]
    assert not any(np.shares_memory(a, b) for i, a in enumerate(images) for b in images[i + 1 :])


def test_torch_output_shares_the_memory_read_into(dataset, stacks, loader):
    made = {}

    def allocate(shape, dtype):
        array = np.empty(shape, dtype)
        made[array.ctypes.data] = array
        return array

    for batch in DataLoader(dataset, 5, loader=loader, output="torch", allocator=allocate, device="cpu"):
        assert isinstance(batch["image"], torch.Tensor) and batch["image"].dtype == torch.float32
        assert batch["image"].data_ptr() in made and batch["label"].data_ptr() in made
        assert isinstance(batch["name"], np.ndarray)
        np.testing.assert_array_equal(batch["image"].numpy(), stacks.images[batch["index"].numpy()])


def test_jax_output(dataset, stacks, loader):
    batches = list(DataLoader(dataset, 8, loader=loader, output="jax", device=jax.devices()[0]))
    assert all(isinstance(b["image"], jax.Array) for b in batches)
    assert isinstance(batches[0]["name"], np.ndarray)
    rows = np.asarray(batches[1]["index"])
    np.testing.assert_array_equal(np.asarray(batches[1]["image"]), stacks.images[rows])
    np.testing.assert_array_equal(np.asarray(batches[1]["label"]), rows % 3)


def test_callable_output_and_transform(dataset, loader):
    def output(batch):
        assert isinstance(batch["image"], np.ndarray)
        return (batch["image"].sum(axis=(1, 2)), batch["index"])

    seen = []
    loader_ = DataLoader(
        dataset, 10, loader=loader, output=output, transform=lambda pair: seen.append(pair) or "done"
    )
    assert list(loader_) == ["done"] * 3
    assert all(isinstance(pair, tuple) and len(pair[0]) == len(pair[1]) for pair in seen)
    torch_loader = DataLoader(dataset, 10, loader=loader, output="torch", transform=lambda b: b["image"] * 2)
    assert isinstance(next(iter(torch_loader)), torch.Tensor)


def test_drop_last_and_pad_last(dataset, stacks, loader):
    assert [len(b["index"]) for b in DataLoader(dataset, 8, drop_last=True, loader=loader)] == [8, 8]
    padded = list(DataLoader(dataset, 8, pad_last=True, loader=loader, valid="real"))
    assert [len(b["index"]) for b in padded] == [8, 8, 8]
    assert all(b["real"].dtype == np.bool_ for b in padded)
    assert padded[0]["real"].all() and padded[1]["real"].all()
    np.testing.assert_array_equal(padded[2]["real"], [True] * 5 + [False] * 3)
    np.testing.assert_array_equal(padded[2]["index"], [16, 17, 18, 19, 20, 16, 17, 18])
    np.testing.assert_array_equal(padded[2]["image"], stacks.images[padded[2]["index"]])
    sampler = torch.utils.data.BatchSampler(torch.utils.data.SequentialSampler(range(21)), 6, False)
    last = list(DataLoader(dataset, batch_sampler=sampler, pad_last=True, loader=loader, output="torch"))[-1]
    assert last["valid"].tolist() == [True, True, True, False, False, False]
    assert last["index"].tolist() == [18, 19, 20, 18, 19, 20]


def test_a_seed_decides_the_orders_and_each_epoch_has_its_own(dataset, loader):
    def orders(data_loader, epochs=2):
        return [np.concatenate([b["index"] for b in data_loader]).tolist() for _ in range(epochs)]

    first = orders(DataLoader(dataset, 4, shuffle=True, seed=42, loader=loader))
    again = orders(DataLoader(dataset, 4, shuffle=True, seed=42, loader=loader))
    other = orders(DataLoader(dataset, 4, shuffle=True, seed=43, loader=loader))
    assert first == again and first != other
    assert first[0] != first[1] and sorted(first[0]) == sorted(first[1]) == list(range(21))
    unseeded = [orders(DataLoader(dataset, 4, shuffle=True, loader=loader), 1) for _ in range(2)]
    assert unseeded[0] != unseeded[1]


def test_batch_sampler_draws_the_rows(dataset, loader):
    sampler = BatchSampler(21, 4, shuffle=True, seed=1, shard=(1, 2))
    data_loader = DataLoader(dataset, batch_sampler=sampler, loader=loader)
    assert data_loader.batch_sampler is sampler
    rows = np.concatenate([b["index"] for b in data_loader])
    np.testing.assert_array_equal(rows, sampler.order(0))
    assert sampler.epoch == 1
    distributed = torch.utils.data.DistributedSampler(range(21), num_replicas=2, rank=0, shuffle=False)
    torch_batches = torch.utils.data.BatchSampler(distributed, 5, False)
    rows = np.concatenate(
        [b["index"] for b in DataLoader(dataset, batch_sampler=torch_batches, loader=loader)]
    )
    assert rows.tolist() == list(range(0, 21, 2))


def test_prefetch_keeps_batches_under_way(loader):
    recorder = Recorder(40)
    iterator = iter(DataLoader(Dataset({"row": recorder}), 4, prefetch=3, loader=loader))
    first = next(iterator)
    assert len(recorder.started) == 4
    next(iterator)
    assert len(recorder.started) == 5
    np.testing.assert_array_equal(first["row"], [0, 1, 2, 3])


def test_the_allocator_makes_every_array_of_a_batch(dataset, loader):
    shapes = []

    def allocate(shape, dtype):
        shapes.append((shape, np.dtype(dtype)))
        return np.empty(shape, dtype)

    list(DataLoader(dataset, 10, loader=loader, allocator=allocate, pad_last=True))
    assert ((10, 12, 10), np.dtype(np.float32)) in shapes and ((10,), np.dtype(np.bool_)) in shapes
    assert len(shapes) == 3 * 5


def test_pin_memory(dataset, stacks, loader):
    assert not torch.cuda.is_available()
    with pytest.warns(UserWarning, match="CUDA is not available"):
        data_loader = DataLoader(dataset, 7, output="torch", pin_memory=True, loader=loader)
    batch = next(iter(data_loader))
    np.testing.assert_array_equal(batch["image"].numpy(), stacks.images[:7])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        DataLoader(dataset, 7, output="torch", device="cpu")


@pytest.mark.parametrize(
    "arguments,message",
    [
        ({"batch_sampler": [[0]], "batch_size": 2}, "batch_size"),
        ({"batch_sampler": [[0]], "shuffle": True}, "shuffle"),
        ({"batch_sampler": [[0]], "drop_last": True}, "drop_last"),
        ({"batch_sampler": [[0]], "seed": 1}, "seed"),
        ({"drop_last": True, "pad_last": True}, "pad_last"),
        ({"output": "tensorflow"}, "output"),
        ({"output": 3}, "output"),
        ({"device": "cpu"}, "device"),
        ({"output": lambda batch: batch, "device": "cpu"}, "device"),
        ({"output": "torch", "sharding": object()}, "sharding"),
        ({"output": "jax", "sharding": object(), "device": object()}, "sharding"),
        ({"output": "jax", "pin_memory": True}, "pin_memory"),
        ({"output": "torch", "pin_memory": True, "allocator": np.empty}, "pin_memory"),
        ({"prefetch": 0}, "prefetch"),
        ({"batch_size": 0}, "batch size"),
        ({"pad_last": True, "valid": "label"}, "label"),
        ({"pad_last": True, "valid": "index"}, "index"),
    ],
)
def test_errors(dataset, arguments, message):
    with pytest.raises(ValueError, match=message):
        DataLoader(dataset, **arguments)


def test_a_failed_read_raises_at_its_batch_and_the_next_epoch_reads(dataset, stacks, loader):
    data_loader = DataLoader(dataset, 4, loader=loader, prefetch=2)
    stacks.paths[1].unlink()
    iterator = iter(data_loader)
    first = next(iterator)
    np.testing.assert_array_equal(first["image"], stacks.images[:4])
    expected = rf"(?s){re.escape(str(stacks.paths[1]))}.*row 7 \(1@{re.escape(str(stacks.paths[1]))}\)"
    with pytest.raises(FileNotFoundError, match=expected):
        next(iterator)
    with pytest.raises(StopIteration):
        next(iterator)
    vio.write_stack(stacks.arrays[1], stacks.paths[1])
    images = np.concatenate([b["image"] for b in data_loader])
    np.testing.assert_array_equal(images, stacks.images)


def test_bad_rows_of_a_batch_sampler_raise_at_their_batch(dataset, loader):
    iterator = iter(DataLoader(dataset, batch_sampler=[[0, 1], [0, 99], [2]], loader=loader))
    np.testing.assert_array_equal(next(iterator)["index"], [0, 1])
    with pytest.raises(IndexError, match="99"):
        next(iterator)


def test_abandoning_an_epoch_waits_for_the_reads_under_way(loader):
    slow = Slow(64)
    data_loader = DataLoader(Dataset({"row": slow}), 4, prefetch=4, loader=loader)
    for batch in data_loader:
        np.testing.assert_array_equal(batch["row"][:, 0], [0, 1, 2, 3])
        break
    assert slow.begun == 5 and slow.finished == 5
    iterator = iter(data_loader)
    next(iterator)
    iterator.close()
    assert slow.begun == slow.finished == 10
    assert sum(len(b["row"]) for b in data_loader) == 64


def test_a_scratch_of_the_loader_serves_the_epochs_after_the_first(dataset, stacks):
    scratch = vio.create_host_image_scratch(stacks.locations, 4)
    data_loader = DataLoader(dataset, 6, shuffle=True, seed=2, loader=vio.loader(workers=2, scratch=scratch))
    first = list(data_loader)
    for path in stacks.paths:
        path.unlink()
    second = list(data_loader)
    assert [b["index"].tolist() for b in first] != [b["index"].tolist() for b in second]
    for batch in second:
        np.testing.assert_array_equal(batch["image"], stacks.images[batch["index"]])


class _Interrupting(Slow):
    """A slow source whose batch starting at row `at` raises `error` from get(), once."""

    def __init__(self, rows: int, at: int, error: BaseException):
        super().__init__(rows)
        self.at, self.error = at, error

    def read_async(self, loader, rows, out):
        pending = super().read_async(loader, rows, out)
        if int(np.asarray(rows)[0]) != self.at or self.error is None:
            return pending
        error, self.error = self.error, None

        class Raising(Slow.Pending):
            def get(self):
                pending.get()
                raise error

        raising = Raising()
        raising.done = pending.done
        return raising


def _hooked(error: BaseException, on_call: int):
    """A function handing a batch on as it is, that raises `error` on its `on_call`-th call only."""
    calls = []

    def hook(batch):
        calls.append(None)
        if len(calls) == on_call:
            raise error
        return batch

    return hook


@pytest.mark.parametrize(
    "error", [RuntimeError("the hook failed"), KeyboardInterrupt()], ids=["error", "interrupt"]
)
@pytest.mark.parametrize("where", ["transform", "output", "get"])
def test_a_failure_in_transform_output_or_the_wait_waits_for_the_reads_under_way(loader, error, where):
    """An exception, or KeyboardInterrupt, raised by transform, by a callable output, or from the wait
    for a batch, comes out of next() as it is, once every read under way is done; the next iteration
    reads a whole epoch."""
    if where == "get":
        source = _Interrupting(64, 4, error)
        data_loader = DataLoader(Dataset({"row": source}), 4, prefetch=4, loader=loader)
    else:
        source = Slow(64)
        data_loader = DataLoader(
            Dataset({"row": source}), 4, prefetch=4, loader=loader, **{where: _hooked(error, 2)}
        )
    iterator = iter(data_loader)
    np.testing.assert_array_equal(next(iterator)["row"][:, 0], [0, 1, 2, 3])
    with pytest.raises(type(error)) as caught:
        next(iterator)
    assert caught.value is error
    assert source.begun > 2 and source.begun == source.finished  # nothing left writing a batch's arrays
    with pytest.raises(StopIteration):
        next(iterator)
    rows = np.concatenate([batch["row"][:, 0] for batch in data_loader])
    np.testing.assert_array_equal(rows, np.arange(64))


def test_two_live_iterations_of_one_loader_are_two_epochs(dataset, stacks, loader):
    """Each iteration is an epoch of its own, even while another is under way: interleaved, the two
    draw the orders of epochs 0 and 1 and read their own rows right."""
    data_loader = DataLoader(dataset, 5, shuffle=True, seed=4, loader=loader, prefetch=3)
    sampler = BatchSampler(len(dataset), 5, shuffle=True, seed=4)
    first, second = iter(data_loader), iter(data_loader)
    drawn: list[list[np.ndarray]] = [[], []]
    for _ in range(len(data_loader)):
        for number, iterator in ((1, second), (0, first)):
            batch = next(iterator)
            np.testing.assert_array_equal(batch["image"], stacks.images[batch["index"]])
            drawn[number].append(batch["index"])
    for iterator in (first, second):
        with pytest.raises(StopIteration):
            next(iterator)
    orders = {tuple(np.concatenate(rows).tolist()) for rows in drawn}
    assert orders == {tuple(sampler.order(0).tolist()), tuple(sampler.order(1).tolist())}
