"""A conversion killed mid-write, as a batch scheduler kills it, leaves no hidden file behind for long."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import vitrio as vio
import vitrio._fs

WRITER = textwrap.dedent(
    """
    import sys, time
    import numpy as np
    import vitrio as vio

    writers = vio.writer_provider()
    path = sys.argv[1]
    writers.declare(path, vio.ImageDescriptor((64, 32, 32), 2, "float32"))
    writers.writer(path).write_run(0, [np.ones((32, 32), np.float32)] * 8)
    print("writing", flush=True)
    time.sleep(120)
    """
)


def _killed_mid_write(folder, how: signal.Signals) -> int:
    """Run a writer that stops mid-stack, kill it with `how`, and give its exit status."""
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(folder / "particles.mrcs")],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        assert child.stdout.readline() == b"writing\n"
        assert [name for name in os.listdir(folder) if name.endswith(".partial")]  # a hidden file is there
        child.send_signal(how)
        return child.wait(timeout=60)
    finally:
        child.kill()
        child.wait()


def _hidden(folder) -> list[str]:
    return sorted(name for name in os.listdir(folder) if name.endswith(".partial"))


def test_sigterm_mid_write_removes_the_hidden_file_and_kills_as_sigterm_does(tmp_path):
    assert _killed_mid_write(tmp_path, signal.SIGTERM) == -signal.SIGTERM
    assert os.listdir(tmp_path) == []


def test_a_later_write_removes_what_a_killed_process_left(tmp_path):
    assert _killed_mid_write(tmp_path, signal.SIGKILL) == -signal.SIGKILL  # no handler runs
    (left,) = _hidden(tmp_path)
    assert left.startswith(".particles.mrcs.")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        host = vitrio._partial._HOST
        alive = f".other.mrc.{sleeper.pid}-{host}-{'0' * 16}.partial"  # of a process still running
        elsewhere = (
            f".other.mrc.{sleeper.pid + 1}-{'f' * 8 if host != 'f' * 8 else '0' * 8}-{'1' * 16}.partial"
        )
        unrelated = ".notes.txt.partial"
        for name in (alive, elsewhere, unrelated):
            (tmp_path / name).write_bytes(b"")
        vio.write_single(np.zeros((4, 4), np.float32), tmp_path / "next.mrc")
        assert _hidden(tmp_path) == sorted([alive, elsewhere, unrelated])
    finally:
        sleeper.kill()
        sleeper.wait()
    assert sorted(os.listdir(tmp_path)) == sorted(["next.mrc", alive, elsewhere, unrelated])


@pytest.mark.parametrize("extension", [".mrc", ".tif"])
def test_hidden_names_carry_the_process_id(tmp_path, extension):
    writers = vio.writer_provider()
    path = tmp_path / f"a{extension}"
    writers.declare(path, vio.ImageDescriptor((4, 4), 2, "float32"))
    writers.writer(path).write_run(0, [np.zeros((4, 4), np.float32)])
    (hidden,) = _hidden(tmp_path)
    assert hidden.startswith(f".a{extension}.{os.getpid()}-")
    writers.close(path)
    assert os.listdir(tmp_path) == [f"a{extension}"]
