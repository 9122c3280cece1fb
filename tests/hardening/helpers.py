"""What the hardening tests share: running a script in a fresh interpreter, counting open files, and
another user swapping a folder for a link in a loop."""

from __future__ import annotations

import contextlib
import ctypes
import json
import mmap
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def run_script(source: str, timeout: float = 120) -> Any:
    """Run Python `source` in a new interpreter and return what its last line of output holds, as JSON.

    A crash (a signal), a hang (past `timeout`) or a non-zero exit fails the
    calling test with the script's output, rather than pytest.
    """
    environment = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    result = subprocess.run(
        [sys.executable, "-X", "faulthandler", "-c", textwrap.dedent(source)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environment,
    )
    output = (result.stdout + result.stderr)[-4000:]
    if result.returncode < 0:
        raise AssertionError(f"the script was killed by {signal.Signals(-result.returncode).name}:\n{output}")
    assert result.returncode == 0, output
    return json.loads(result.stdout.strip().splitlines()[-1])


def open_files() -> int:
    """How many files this process has open."""
    return len(os.listdir("/proc/self/fd"))


@contextlib.contextmanager
def swapping(first: Path, second: Path, uid: int) -> Iterator[list[int]]:
    """Within the block, a child process of another user (`uid`, and the group of that number)
    exchanges `first` and `second` in a loop (`renameat2(RENAME_EXCHANGE)`); the list yielded holds,
    once the block ends, how many times it did."""
    count = mmap.mmap(-1, 8)  # shared with the child
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
            old, new = os.fsencode(first), os.fsencode(second)
            swaps = 0
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                swaps += renameat2(-100, old, -100, new, 2) == 0  # AT_FDCWD, RENAME_EXCHANGE
                count[:] = swaps.to_bytes(8, "little")
        finally:
            os._exit(0)
    swaps: list[int] = []
    try:
        yield swaps
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        swaps.append(int.from_bytes(count[:], "little"))
