"""The loader shared by the process: made once on first use, and afresh in a forked child."""

from __future__ import annotations

import os
import threading
import time

import numpy as np

from vitrio.data import DataLoader, Dataset, ImageSource
from vitrio.data._shared import shared_loader


def run_in_child(check) -> int:
    """Fork, run `check` in the child and exit with 0 if it returns True; the child's exit code."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = 0 if check() else 1
        except BaseException:
            code = 2
        finally:
            os._exit(code)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    raise AssertionError("the forked child hung")


def test_one_loader_is_made_even_when_many_threads_ask_at_once():
    def check() -> bool:
        made = []
        barrier = threading.Barrier(8)

        def ask():
            barrier.wait()
            made.append(shared_loader())

        threads = [threading.Thread(target=ask) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return len(made) == 8 and all(loader is made[0] for loader in made)

    assert run_in_child(check) == 0


def test_a_forked_child_reads_through_a_loader_of_its_own(stacks):
    dataset = Dataset({"image": ImageSource(stacks.locations)})
    np.testing.assert_array_equal(dataset[3]["image"], stacks.images[3])
    parents = shared_loader()
    assert shared_loader() is parents

    def check() -> bool:
        batch = dataset[[1, 8, 20]]
        epoch = np.concatenate([b["image"] for b in DataLoader(dataset, 5, shuffle=True, seed=0)])
        return (
            shared_loader() is not parents
            and np.array_equal(batch["image"], stacks.images[[1, 8, 20]])
            and np.array_equal(np.sort(epoch.ravel()), np.sort(stacks.images.ravel()))
        )

    assert run_in_child(check) == 0
    np.testing.assert_array_equal(dataset[[2]]["image"], stacks.images[[2]])
