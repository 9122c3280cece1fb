"""`Completion`, the one thing to wait on: several combined, a failure known at once, a failure explained."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import vitrio as vio
from vitrio.data import ArraySource, Dataset


class Gate:
    """A user's waitable, ready once opened, whose `get()` raises what it was given."""

    def __init__(self, error: Exception | None = None):
        self.opened = threading.Event()
        self.error = error

    @property
    def is_ready(self) -> bool:
        return self.opened.is_set()

    def wait(self) -> None:
        self.opened.wait()

    def get(self) -> None:
        self.wait()
        if self.error is not None:
            raise self.error


def test_all_is_ready_when_every_part_is_and_raises_the_first_failure(tmp_path):
    path = tmp_path / "s.mrcs"
    vio.write_stack(np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4), path)
    out = np.zeros((2, 3, 4), np.float32)
    read = vio.read_batch_async(vio.loader(workers=1), out, [vio.ImageLocation(path, i) for i in (1, 0)])
    first, second = Gate(ValueError("first")), Gate(KeyError("second"))
    combined = vio.Completion.all([read, first, second])
    read.wait()
    assert not combined.is_ready
    first.opened.set()
    second.opened.set()
    assert combined.is_ready
    with pytest.raises(ValueError, match="first"):
        combined.get()
    np.testing.assert_array_equal(out, vio.read(path)[[1, 0]])
    assert vio.Completion.all([]).is_ready and vio.Completion.all([]).exception is None


def test_failed_is_ready_and_raises_its_error_each_get():
    error = OSError(5, "broken")
    completion = vio.Completion.failed(error)
    assert completion.is_ready
    for _ in range(2):
        with pytest.raises(OSError) as raised:
            completion.get()
        assert raised.value is error
    assert completion.exception is error


def test_explained_adds_the_context_as_a_note_to_the_error_itself():
    error = vio.FormatError("a.mrc: truncated")
    error.key = "a.mrc"
    explained = vio.Completion.failed(error).explained(lambda failure: f"reading {failure.key}")
    with pytest.raises(vio.FormatError, match=r"a.mrc: truncated\nreading a.mrc") as raised:
        explained.get()
    assert raised.value is error and error.key == "a.mrc" and error.__notes__ == ["reading a.mrc"]


def test_a_sources_single_waitable_is_waited_for_by_the_batch():
    gate = Gate(RuntimeError("late"))

    class Late(ArraySource):
        def read_async(self, loader, rows, out):
            super().read_async(None, rows, out)
            return gate

    batch = Dataset({"x": Late(np.arange(4))}).read_async([2, 3])
    assert not batch.is_ready
    gate.opened.set()
    with pytest.raises(RuntimeError, match="late"):
        batch.get()
    gate.error = None
    np.testing.assert_array_equal(batch.get()["x"], [2, 3])


def test_then_runs_once_after_the_work_and_raises_the_first_failure():
    gate, calls = Gate(), []
    following = vio.Completion.all([gate]).then(lambda: calls.append(threading.get_ident()))
    assert not following.is_ready and calls == []
    gate.opened.set()
    following.get()
    following.get()
    assert following.is_ready and calls == [threading.get_ident()]

    def refuse():
        raise ValueError("refused")

    refused = vio.Completion().then(refuse)
    for _ in range(2):
        with pytest.raises(ValueError, match="refused"):
            refused.get()
    never = vio.Completion.failed(OSError(5, "broken")).then(lambda: calls.append(0))
    assert isinstance(never.exception, OSError) and calls == [threading.get_ident()]
