"""What every test shares: Hypothesis's profiles, and a working directory of its own for each test.

Hypothesis runs the profile `ci` where the environment variable `CI` is set:
derandomized (the same examples every run) and without a database, so a CI
run depends on nothing but the code. Elsewhere it runs `dev`: random
examples, and a database of the failing ones kept in a folder of the user's
own under the system's temporary folder, so that a failure is tried first
next time and no `.hypothesis/` folder is written into the repository.
Neither profile has a deadline: on a loaded machine an example may be slow
without being wrong.

Every test runs in its own empty temporary folder: none runs in `/` or in
the repository, whatever folder pytest was started from.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis.configuration import set_hypothesis_home_dir
from hypothesis.database import DirectoryBasedExampleDatabase

from . import in_ci
from .half_complex import half_complex  # noqa: F401 (a fixture of every test)


def _private_folder(name: str) -> Path:
    """A folder of this user's alone under the temporary folder, made if absent; refused if not theirs."""
    folder = Path(tempfile.gettempdir()) / f"{name}-{os.getuid()}"
    with contextlib.suppress(FileExistsError):
        folder.mkdir(mode=0o700)
    info = folder.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise RuntimeError(f"{folder} is not a private folder of this user: remove it")
    return folder


_HYPOTHESIS_HOME = _private_folder("vitrio-hypothesis")
set_hypothesis_home_dir(_HYPOTHESIS_HOME)
settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True)
settings.register_profile(
    "dev", database=DirectoryBasedExampleDatabase(_HYPOTHESIS_HOME / "examples"), deadline=None
)
settings.load_profile("ci" if in_ci() else "dev")


@pytest.fixture(autouse=True)
def _working_directory(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run the test in an empty folder of its own."""
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd", numbered=True))
