"""What the hardening tests share: running a script in a fresh interpreter, and counting open files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
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
