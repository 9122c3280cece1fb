"""A FIFO where a file is opened only to tell the kernel what is read next: an epoch of a `DataLoader`
over stacks not checked when the source was made, a scratch taking whole files in, and `vitrio doctor`
dropping a store's pages. Each is opened as its reader opens it, so the FIFO is named by the read that
follows, or passed over, instead of blocking forever. Each case runs in a fresh interpreter with a
time limit, so that an open that blocks fails the test rather than hanging it."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np

import vitrio as vio
from tests.hardening.helpers import run_script
from tests.hardening.opens import Opens

TIME_LIMIT = 120
"""Seconds a case may take: each reads a few images, which take well under a second unblocked."""

_OUTCOME = """
import json
import numpy as np
import vitrio as vio
from vitrio.data import DataLoader, Dataset, ImageSource

folder = {folder!r}
try:
{call}
    outcome = "read"
except Exception as error:  # noqa: BLE001 - the test checks its type and message
    outcome = f"{{type(error).__name__}}: {{error}}"
print(json.dumps(outcome))
"""


def outcome(folder: Path, call: str) -> str:
    """What running `call` (lines of Python, indented, with `folder` defined) in a fresh interpreter
    gave: "read", or the type and message of the exception it raised."""
    return run_script(_OUTCOME.format(folder=str(folder), call=call), timeout=TIME_LIMIT)


def test_an_epoch_over_stacks_not_checked_names_a_fifo_where_a_stack_should_be(tmp_path: Path):
    vio.write_stack(np.zeros((4, 8, 8), np.float32), tmp_path / "a.mrcs")
    os.mkfifo(tmp_path / "pipe.mrcs")
    call = """
    names = ("a.mrcs", "pipe.mrcs")
    locations = [vio.ImageLocation(f"{folder}/{name}", i) for name in names for i in range(4)]
    source = ImageSource(locations, check=False)  # only a.mrcs is asked for its shape
    list(DataLoader(Dataset({"image": source}), 8, loader=vio.loader(workers=2)))
    """
    found = outcome(tmp_path, call)
    assert found.startswith("OSError") and "pipe.mrcs" in found and "FIFO" in found, found


def test_a_scratch_taking_whole_files_in_names_a_file_become_a_fifo(tmp_path: Path):
    for name in ("a.mrc", "b.mrc"):
        vio.write_single(np.ones((8, 8), np.float32), tmp_path / name)
    call = """
    scratch = vio.create_host_image_scratch([f"{folder}/a.mrc", f"{folder}/b.mrc"], run_length=1)
    import os
    os.unlink(f"{folder}/b.mrc")
    os.mkfifo(f"{folder}/b.mrc")
    keys = [f"{folder}/a.mrc", f"{folder}/b.mrc"]
    vio.prefetch_scratch_async(scratch, keys, vio.SynchronousExecutor()).get()
    """
    found = outcome(tmp_path, call)
    assert found.startswith("OSError") and "b.mrc" in found and "FIFO" in found, found


def test_a_stack_become_a_fifo_after_its_layout_was_read_is_named(tmp_path: Path):
    vio.write_stack(np.zeros((4, 8, 8), np.float32), tmp_path / "a.mrcs")
    call = """
    import os
    loader = vio.loader(workers=2)
    locations = [vio.ImageLocation(f"{folder}/a.mrcs", i) for i in range(4)]
    out = np.empty((4, 8, 8), np.float32)
    vio.read_batch_async(loader, out, locations).get()
    os.unlink(f"{folder}/a.mrcs")
    os.mkfifo(f"{folder}/a.mrcs")
    vio.read_batch_async(loader, out, locations).get()
    """
    found = outcome(tmp_path, call)
    assert found.startswith("OSError") and "a.mrcs" in found and "FIFO" in found, found


def test_doctor_passes_over_a_fifo_and_links_inside_a_store(tmp_path: Path):
    store = tmp_path / "tomogram.zarr"
    vio.write_single(np.random.default_rng(0).standard_normal((4, 16, 16)).astype(np.float32), store)
    os.mkfifo(store / "notes")
    (store / "zero").symlink_to("/dev/zero")
    (tmp_path / "outside.bin").write_bytes(b"\0" * 64)
    (store / "elsewhere").symlink_to(tmp_path / "outside.bin")
    doctor = [sys.executable, "-m", "vitrio", "doctor", str(store), "--json", "--seconds", "1e-9"]
    with Opens(tmp_path) as opens:
        result = subprocess.run(doctor, capture_output=True, text=True, timeout=TIME_LIMIT, check=False)
        assert result.returncode == 0, result.stderr
        assert opens.take()["outside.bin"] == 0
    figures = json.loads(result.stdout)
    assert figures["dataset"]["kinds"]["store"]["files"] == 1
    assert list(figures["formats"]) == ["ome-zarr"]
    assert stat.S_ISFIFO(os.lstat(store / "notes").st_mode)
