"""The commands that write, stopped mid-write by SIGTERM (what a batch scheduler sends, and `kill`)
or SIGINT (Ctrl-C): they stop promptly and leave no hidden file or folder, whichever thread made it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import vitrio as vio
from vitrio.testing.eer import random_movie

from .conftest import Picked

SOURCES = Path(__file__).resolve().parents[2] / "src"

# Runs `vitrio ARGS...` with every image write and the PNG's save slowed, saying when the first has begun.
SLOWED = """
import os, sys, time
import PIL.Image
from vitrio._writers import TrackedWriter
from vitrio.cli import main

def slowed(write):
    def slow(*args, **kwargs):
        result = write(*args, **kwargs)
        os.write(1, b"writing\\n")  # one write: threads writing at once do not interleave it
        time.sleep(0.4)
        return result
    return slow

TrackedWriter.write_run = slowed(TrackedWriter.write_run)
PIL.Image.Image.save = slowed(PIL.Image.Image.save)
sys.exit(main(sys.argv[1:]))
"""

STATUS = {signal.SIGTERM: -signal.SIGTERM, signal.SIGINT: 130}


def _hidden(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.name.endswith(".partial"))


def _stopped_mid_write(folder: Path, how: signal.Signals, *arguments: object) -> tuple[int, bool]:
    """Run `vitrio ARGUMENTS...` in `folder`, send `how` once it writes, and give its status and whether
    it ended promptly: within 5 s, or twice what it took to start writing where the machine is so loaded
    that starting took longer."""
    launched = time.monotonic()
    child = subprocess.Popen(
        [sys.executable, "-c", SLOWED, *map(str, arguments)],
        cwd=folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(map(str, (SOURCES, *sys.path)))},
    )
    try:
        assert child.stdout.readline() == b"writing\n", child.stderr.read().decode()
        assert _hidden(folder)  # the file (or store) being written is there, hidden
        child.send_signal(how)
        started = time.monotonic()
        status = child.wait(timeout=60)
        return status, time.monotonic() - started < max(5.0, 2 * (started - launched))
    finally:
        child.kill()
        child.wait()


@pytest.fixture
def stack(tmp_path: Path) -> Path:
    vio.write_stack(np.random.default_rng(1).random((12, 64, 64)).astype(np.float32), tmp_path / "in.mrcs")
    return tmp_path / "in.mrcs"


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("output", ["out.mrcs", "out.tif", "out.zarr", "montage.png"])
def test_convert_and_montage_stopped_mid_write_leave_nothing(stack: Path, tmp_path: Path, how, output):
    arguments = ("montage", stack, "-o", output) if output.endswith(".png") else ("convert", stack, output)
    status, prompt = _stopped_mid_write(tmp_path, how, *arguments)
    assert status == STATUS[how] and prompt
    assert sorted(os.listdir(tmp_path)) == ["in.mrcs"]


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_extract_stopped_mid_write_leaves_nothing(picked: Picked, tmp_path: Path, how):
    files = ["--micrographs", picked.micrographs, "--coordinates", picked.coordinates]
    status, prompt = _stopped_mid_write(
        tmp_path, how, "extract", *files, "--box-size", 16, "-o", "Extract/p.star"
    )
    assert status == STATUS[how] and prompt
    assert [p for p in (tmp_path / "Extract").rglob("*") if not p.is_dir()] == []


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_fractionate_stopped_mid_write_leaves_nothing(tmp_path: Path, how):
    random_movie(tmp_path / "movie.eer", frames=16, shape=(64, 64))
    status, prompt = _stopped_mid_write(
        tmp_path, how, "fractionate", "movie.eer", "--fractions", 8, "-o", "f.mrc"
    )
    assert status == STATUS[how] and prompt
    assert sorted(os.listdir(tmp_path)) == ["movie.eer"]
