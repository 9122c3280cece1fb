"""The suite's own rules: in CI a missing DM archive fails the run; Hypothesis is derandomized in CI;
every mutant of `scripts/mutate.py` can still be planted.

The first two run pytest or Python on a copy of `tests/` laid out without
the archive beside it, in a fresh process.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from scripts.mutate import MUTANTS, ROOT

pytestmark = pytest.mark.timeout(300)

SOURCES = ROOT / "src"


@pytest.fixture(scope="module")
def bare_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the tests with no `shared/testdata` beside it."""
    copy = tmp_path_factory.mktemp("bare") / "repo"
    shutil.copytree(ROOT / "tests", copy / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def run_in(copy: Path, ci: bool, *arguments: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k != "CI"}
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SOURCES), os.environ.get("PYTHONPATH")]))
    if ci:
        environment["CI"] = "true"
    return subprocess.run(
        [sys.executable, *arguments], cwd=copy, env=environment, capture_output=True, text=True, timeout=240
    )


DM_TESTS = (
    "-m",
    "pytest",
    "-q",
    "-p",
    "no:cacheprovider",
    "tests/formats/test_dm.py",
    "-k",
    "oracle or manifest",
)


def test_without_the_dm_archive_the_tests_are_skipped_outside_ci(bare_copy: Path):
    result = run_in(bare_copy, False, *DM_TESTS, "-rs")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 skipped" in result.stdout and "no DM samples at" in result.stdout, result.stdout


def test_without_the_dm_archive_ci_fails(bare_copy: Path):
    result = run_in(bare_copy, True, *DM_TESTS)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "skipped" not in result.stdout and "2 errors" in result.stdout, result.stdout
    assert "no DM samples at" in result.stdout and "CI runs every test of the real DM files" in result.stdout


PROFILE = (
    "import tests.conftest, hypothesis; d = hypothesis.settings.default; print(d.derandomize, d.database)"
)


def test_hypothesis_is_derandomized_in_ci_and_keeps_no_folder_in_the_repository(bare_copy: Path):
    ci = run_in(bare_copy, True, "-c", PROFILE)
    assert ci.stdout.split() == ["True", "None"], ci.stdout + ci.stderr
    local = run_in(bare_copy, False, "-c", PROFILE)
    assert local.stdout.startswith("False DirectoryBasedExampleDatabase"), local.stdout + local.stderr
    assert str(bare_copy) not in local.stdout
    assert not (bare_copy / ".hypothesis").exists() and not (ROOT / ".hypothesis").exists()


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_every_mutant_can_be_planted(mutant):
    """A mutant whose text is gone from its file plants nothing: bring it up to date with the code."""
    assert (ROOT / mutant.path).read_text().count(mutant.old) >= 1
    for test in mutant.tests:
        assert (ROOT / test).is_file(), test


def test_the_mutants_include_the_bugs_the_suite_once_missed():
    names = {m.name for m in MUTANTS}
    assert {
        "tiff-never-bigtiff",
        "cache-waiter-gets-none",
        "pending-batch-raises-before-waiting",
        "cache-keeps-stale-reader",
        "collate-data-padding-unwritten",
        "dataset-data-padding-unwritten",
    } <= names
