"""The tests of copick projects run where copick is installed: an environment of their own.

copick pins zarr<3, which the test environment (zarr 3, for writing) cannot
hold, so `make test` runs this folder in `.venv-copick` after the suite. A
run of the whole suite where copick cannot be imported leaves this folder
out. A run asked for this folder alone (or a file in it) never does: there
a missing copick fails the collection, so a run without copick cannot pass
for one that tested it, in CI or not.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
COPICK = importlib.util.find_spec("copick") is not None


def _inside(path: Path) -> bool:
    return path == HERE or HERE in path.parents


def _asked_for_alone(config: pytest.Config) -> bool:
    """Whether every path the run was asked for lies in this folder."""
    start = config.invocation_params.dir
    asked = [(start / arg.split("::")[0]).resolve() for arg in config.args]
    return bool(asked) and all(_inside(path) for path in asked)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if COPICK or not _inside(collection_path.resolve()) or _asked_for_alone(config):
        return None
    return True
