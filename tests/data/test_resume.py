"""Resuming BatchSampler and DataLoader in the middle of an epoch, in this process and after a SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from itertools import islice
from pathlib import Path

import numpy as np
import pytest

import vitrio as vio
from vitrio.data import BatchSampler, DataLoader, Dataset, ImageSource

HERE = Path(__file__).parent


def through_json(state: dict) -> dict:
    """The state as it comes back from a JSON file, checked to be the same."""
    back = json.loads(json.dumps(state))
    assert back == state
    return back


def rows_of(batches) -> list[list[int]]:
    return [[int(row) for row in batch] for batch in batches]


def indices(batches) -> list[list[int]]:
    return [batch["index"].tolist() for batch in batches]


@pytest.fixture
def dataset(stacks) -> Dataset:
    return Dataset({"image": ImageSource(stacks.locations), "label": np.arange(len(stacks.images)) % 3})


@pytest.mark.parametrize("shard", [(0, 1), (1, 3)])
@pytest.mark.parametrize("drawn", [0, 1, 2])
def test_sampler_resumes_mid_epoch_and_goes_on_with_the_next(shard, drawn):
    sampler = BatchSampler(23, 4, shuffle=True, shard=shard)
    batches = iter(sampler)
    before = rows_of(islice(batches, drawn))
    state = through_json(sampler.state_dict())
    assert state["epoch"] == 0 and state["batches"] == drawn
    rest, following = rows_of(batches), rows_of(sampler)

    resumed = BatchSampler(23, 4, shuffle=True, shard=shard)
    resumed.load_state_dict(state)
    assert resumed.state_dict() == state and resumed.epoch == 0
    assert rows_of(resumed) == rest
    assert resumed.epoch == 1
    assert rows_of(resumed) == following
    assert before + rest == rows_of(BatchSampler(23, 4, shuffle=True, seed=state["seed"], shard=shard))


def test_sampler_state_between_epochs():
    sampler = BatchSampler(10, 3, shuffle=True, seed=4)
    assert sampler.state_dict()["epoch"] == 0 and sampler.state_dict()["batches"] == 0
    rows_of(sampler)
    state = sampler.state_dict()
    assert (state["epoch"], state["batches"]) == (1, 0)
    resumed = BatchSampler(10, 3, shuffle=True)
    resumed.load_state_dict(state)
    assert rows_of(resumed) == rows_of(sampler)


def test_an_abandoned_iteration_is_resumed_and_set_epoch_chooses_afresh():
    sampler = BatchSampler(20, 3, shuffle=True, seed=1)
    next(iter(sampler))
    state = sampler.state_dict()
    assert (state["epoch"], state["batches"]) == (0, 1)
    resumed = BatchSampler(20, 3, shuffle=True, seed=1)
    resumed.load_state_dict(state)
    resumed.set_epoch(0)
    assert rows_of(resumed) == rows_of(BatchSampler(20, 3, shuffle=True, seed=1))[1:]
    resumed.load_state_dict(state)
    resumed.set_epoch(2)
    assert resumed.state_dict()["batches"] == 0
    assert rows_of(resumed) == [batch.tolist() for batch in np.array_split(sampler.order(2), range(3, 20, 3))]


@pytest.mark.parametrize(
    "change,differs",
    [
        ({"size": 24}, "size"),
        ({"batch_size": 5}, "batch_size"),
        ({"shard": [0, 2]}, "shard"),
        ({"shuffle": False}, "shuffle"),
        ({"drop_last": True}, "drop_last"),
        ({"version": 1}, "version"),  # orders of more than 65,536 rows were drawn otherwise
        ({"batches": 99}, "batches"),
        ({"epoch": -1}, "epoch"),
    ],
)
def test_sampler_refuses_a_state_that_does_not_fit(change, differs):
    sampler = BatchSampler(23, 4, shuffle=True, shard=(1, 3))
    state = {**sampler.state_dict(), **change}
    with pytest.raises(ValueError, match=differs):
        BatchSampler(23, 4, shuffle=True, shard=(1, 3)).load_state_dict(state)


def test_sampler_refuses_another_seed_given_or_a_state_lacking_one():
    state = BatchSampler(10, 2, shuffle=True, seed=3).state_dict()
    with pytest.raises(ValueError, match="seed is 3 in the state but 4 here"):
        BatchSampler(10, 2, shuffle=True, seed=4).load_state_dict(state)
    del state["seed"]
    with pytest.raises(ValueError, match="seed"):
        BatchSampler(10, 2, shuffle=True).load_state_dict(state)
    with pytest.raises(ValueError, match="dict"):
        BatchSampler(10, 2).load_state_dict([1, 2])


@pytest.mark.parametrize("shuffle,shard", [(False, None), (True, None), (True, (1, 3)), (True, (0, 2))])
@pytest.mark.parametrize("handed", [0, 1, 3])
def test_loader_resumes_mid_epoch_with_the_batches_not_handed_out(dataset, loader, shuffle, shard, handed):
    def make() -> DataLoader:
        if shard is None:
            return DataLoader(dataset, 2, shuffle=shuffle, loader=loader, prefetch=3)
        sampler = BatchSampler(len(dataset), 2, shuffle=shuffle, shard=shard)
        return DataLoader(dataset, batch_sampler=sampler, loader=loader, prefetch=3)

    interrupted = make()
    batches = iter(interrupted)
    before = indices(islice(batches, handed))
    state = through_json(interrupted.state_dict())
    assert state["batches"] == handed
    rest = indices(batches)
    following = indices(interrupted)
    assert rest and following

    resumed = make()
    resumed.load_state_dict(state)
    assert resumed.state_dict() == state
    assert indices(resumed) == rest
    assert indices(resumed) == following
    order = BatchSampler(len(dataset), 2, shuffle, seed=state["sampler"]["seed"], shard=shard or (0, 1))
    assert [row for batch in before + rest for row in batch] == order.order(0).tolist()


def test_loader_state_of_an_abandoned_epoch_and_of_a_finished_one(dataset, loader):
    interrupted = DataLoader(dataset, 4, shuffle=True, loader=loader)
    for number, _ in enumerate(interrupted):
        if number == 1:
            break
    state = through_json(interrupted.state_dict())
    assert state["batches"] == 2 and state["sampler"]["epoch"] == 0
    resumed = DataLoader(dataset, 4, shuffle=True, loader=loader)
    resumed.load_state_dict(state)
    order = BatchSampler(len(dataset), 4, shuffle=True, seed=state["sampler"]["seed"]).order(0)
    assert [row for batch in indices(resumed) for row in batch] == order[8:].tolist()
    state = resumed.state_dict()
    assert state["batches"] == 0 and (state["sampler"]["epoch"], state["sampler"]["batches"]) == (1, 0)


def test_loader_resumes_a_batch_sampler_without_state_by_skipping(dataset, loader):
    batches = [[5, 1], [0, 2, 3], [7], [4, 6]]
    interrupted = DataLoader(dataset, batch_sampler=batches, loader=loader, pad_last=True)
    iterator = iter(interrupted)
    next(iterator), next(iterator)
    state = through_json(interrupted.state_dict())
    assert state["sampler"] is None and state["batches"] == 2
    resumed = DataLoader(dataset, batch_sampler=batches, loader=loader, pad_last=True)
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert indices(rest) == [[7, 7], [4, 6]]
    assert [batch["valid"].tolist() for batch in rest] == [[True, False], [True, True]]


def test_loader_refuses_a_state_that_does_not_fit(dataset, loader):
    state = DataLoader(dataset, 4, shuffle=True, loader=loader).state_dict()
    with pytest.raises(ValueError, match="size is 21 in the state but 20 here"):
        DataLoader(dataset.subset(np.arange(20)), 4, shuffle=True, loader=loader).load_state_dict(state)
    with pytest.raises(ValueError, match="batch_size is 4 in the state but 5 here"):
        DataLoader(dataset, 5, shuffle=True, loader=loader).load_state_dict(state)
    with pytest.raises(ValueError, match="version"):
        DataLoader(dataset, 4, shuffle=True, loader=loader).load_state_dict({**state, "version": 0})
    with pytest.raises(ValueError, match="batches"):
        DataLoader(dataset, 4, shuffle=True, loader=loader).load_state_dict({**state, "batches": 7})
    with pytest.raises(ValueError, match="no state of the batch sampler"):
        DataLoader(dataset, 4, shuffle=True, loader=loader).load_state_dict({**state, "sampler": None})
    with pytest.raises(ValueError, match="has no load_state_dict"):
        DataLoader(dataset, batch_sampler=[[0, 1]], loader=loader).load_state_dict(state)


def numbered_stack(path: Path, rows: int) -> Path:
    """A stack whose image i holds the value i everywhere."""
    vio.write_stack(np.broadcast_to(np.arange(rows, dtype=np.float32)[:, None, None], (rows, 6, 6)), path)
    return path


def worker(stack: Path, rows: int, record: Path, *options: str) -> list[str]:
    return [sys.executable, str(HERE / "resume_worker.py"), str(stack), str(rows), str(record), *options]


def environment() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "JAX_PLATFORMS": "cpu"}


def kill_when_recorded(command: list[str], record: Path, batches: int) -> None:
    """Run a worker, and SIGKILL it once it has recorded at least so many batches."""
    process = subprocess.Popen(command, env=environment(), cwd=record.parent)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.poll() is None:
            if record.exists() and len(json.loads(record.read_text())["epochs"][0]) >= 3 * batches:
                process.send_signal(signal.SIGKILL)
                break
            time.sleep(0.02)
        assert process.wait(timeout=60) == -signal.SIGKILL
    finally:
        if process.poll() is None:
            process.kill()


@pytest.mark.parametrize("kill", ["itself", "from outside"])
def test_a_killed_run_resumes_in_another_process_with_every_row_once(tmp_path, kill):
    rows = 40
    stack = numbered_stack(tmp_path / "numbered.mrcs", rows)
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    if kill == "itself":
        result = subprocess.run(worker(stack, rows, first, "--die-at", "6"), env=environment(), timeout=120)
        assert result.returncode == -signal.SIGKILL
    else:
        kill_when_recorded(worker(stack, rows, first, "--pause", "0.05", "--hold-after", "8"), first, 3)

    killed = json.loads(first.read_text())
    seen = killed["epochs"][0]
    assert killed["state"]["batches"] == len(seen) // 3 < -(-rows // 3)
    if kill == "itself":
        assert len(seen) == 15
    result = subprocess.run(
        worker(stack, rows, second, "--resume", str(first), "--epochs", "2"), env=environment(), timeout=120
    )
    assert result.returncode == 0
    rest, following = json.loads(second.read_text())["epochs"]

    assert sorted(seen + rest) == list(range(rows))
    order = BatchSampler(rows, 3, shuffle=True, seed=killed["state"]["sampler"]["seed"])
    assert seen + rest == order.order(0).tolist()
    assert following == order.order(1).tolist()
