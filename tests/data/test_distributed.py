"""Processes reading shards under torchrun, and JAX arrays sharded over two devices, in subprocesses."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

import vitrio as vio

HERE = Path(__file__).parent


def numbered_stack(path: Path, rows: int) -> Path:
    """A stack whose image i holds the value i everywhere."""
    vio.write_stack(np.broadcast_to(np.arange(rows, dtype=np.float32)[:, None, None], (rows, 8, 8)), path)
    return path


def run(command: list[str], environment: dict[str, str], folder: Path) -> subprocess.CompletedProcess:
    """Run `command` in `folder`, its temporary files (torchrun's `torchelastic_*`) in `folder`/tmp."""
    (folder / "tmp").mkdir()
    environment = {**os.environ, **environment, "TMPDIR": str(folder / "tmp")}
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=environment, cwd=folder)


def test_two_processes_read_every_row_of_an_epoch_between_them(tmp_path):
    stack = numbered_stack(tmp_path / "numbered.mrcs", 23)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    result = run(
        [*command, str(HERE / "distributed_torch.py"), str(stack), "23", "5", "7"],
        {"OMP_NUM_THREADS": "1"},
        tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    line = next(line for line in result.stdout.splitlines() if line.startswith("rows read:"))
    rows = ast.literal_eval(line.split(":", 1)[1].strip())
    assert len(rows) == 24 and set(rows) == set(range(23))


def test_jax_batches_are_sharded_over_two_devices(tmp_path):
    stack = numbered_stack(tmp_path / "numbered.mrcs", 20)
    environment = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"}
    result = run([sys.executable, str(HERE / "distributed_jax.py"), str(stack), "20"], environment, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK 3" in result.stdout
