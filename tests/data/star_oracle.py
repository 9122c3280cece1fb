"""starfile's reading of a STAR file, the oracle of read_star, and the check that read_star's equals it."""

from __future__ import annotations

import linecache
from pathlib import Path

import pandas as pd
import pytest
import starfile

import vitrio.data._star_text
from vitrio.data import read_star


def starfile_blocks(path: Path) -> dict[str, pd.DataFrame]:
    """The blocks of `path` as starfile reads them, a block of single values as a table of one row."""
    linecache.clearcache()  # starfile reads through linecache, which keeps the lines of a path it read before
    blocks = starfile.read(path, always_dict=True)
    return {name: b if isinstance(b, pd.DataFrame) else pd.DataFrame([b]) for name, b in blocks.items()}


def read_plain_rows(monkeypatch: pytest.MonkeyPatch, plain: bool) -> None:
    """Have the plain rows of a loop read by the C extension (`plain`, as they are), or by pandas as all
    others are (the C extension's reader then finds none)."""
    if not plain:
        monkeypatch.setattr(vitrio.data._star_text, "_plain_rows", lambda lines, names, kept: None)


def assert_read_as_starfile(path: Path, expected: dict[str, pd.DataFrame] | None = None) -> None:
    """Assert that read_star reads `path` as starfile does (or as `expected`, where given): the same blocks
    in the same order, columns, dtypes and values, with the C extension's reader and without it."""
    if expected is None:
        expected = starfile_blocks(path)
    for plain in (True, False):
        with pytest.MonkeyPatch.context() as monkeypatch:
            read_plain_rows(monkeypatch, plain)
            ours = read_star(path)
        assert list(ours) == list(expected), f"plain rows read natively: {plain}"
        for name, block in expected.items():
            what = f"data_{name} of {path.name}, plain rows read natively: {plain}"
            pd.testing.assert_frame_equal(ours[name], block, check_exact=True, obj=what)
