"""The files `vitrio.testing` writes, as users write test data into shared folders: made as vitrio makes
files (`vitrio._partial.new_file`), so a link at the path is replaced, never written through."""

from __future__ import annotations

from pathlib import Path

import mrcfile
import numpy as np
import pytest

from vitrio.testing.dm import write_dm
from vitrio.testing.mrc import write_mrc_by_hand

KEPT = b"the user's own notes"


def _write_mrc(path: Path, values: np.ndarray) -> None:
    write_mrc_by_hand(path, values, 2)


@pytest.mark.parametrize("write", [_write_mrc, write_dm], ids=["mrc", "dm"])
def test_a_link_at_the_path_is_replaced_not_written_through(tmp_path: Path, write) -> None:
    notes = tmp_path / "notes"
    notes.write_bytes(KEPT)
    target = tmp_path / "image"
    target.symlink_to(notes)
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    write(target, values)
    assert notes.read_bytes() == KEPT
    assert not target.is_symlink() and target.stat().st_size > values.nbytes
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".partial")] == []


def test_the_mrc_written_reads_with_mrcfile(tmp_path: Path) -> None:
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    write_mrc_by_hand(tmp_path / "image.mrc", values, 2)
    with mrcfile.open(tmp_path / "image.mrc", permissive=False) as opened:
        np.testing.assert_array_equal(opened.data, values)
