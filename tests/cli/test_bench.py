"""Where `vitrio bench` writes: a fresh private folder, or a `--data` folder of the user's, no link."""

from __future__ import annotations

import os
import re
import stat
import tempfile
from pathlib import Path

import pytest

from vitrio.bench.workloads import own_folder

from .helpers import assert_fails

OTHER = 12345  # a user who is not the one running the tests
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user takes root")


def bench(vitrio, tmp_path: Path, *options: object):
    return vitrio("bench", "--tiny", "--plot", tmp_path / "bench.png", *options)


def test_a_link_at_the_old_fixed_folder_is_not_followed(vitrio, tmp_path: Path, monkeypatch):
    temporary, victim = tmp_path / "tmp", tmp_path / "victim"
    temporary.mkdir()
    victim.mkdir()
    (temporary / "vitrio-bench").symlink_to(victim)
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    (victim / "notes").write_text("mine")
    (tmp_path / "bench.png").symlink_to(victim / "notes")  # nor is the chart written through a link
    result = bench(vitrio, tmp_path)
    assert result.status == 0, result.err
    assert list(victim.iterdir()) == [victim / "notes"] and (victim / "notes").read_text() == "mine"
    folder = Path(re.search(r"files under (\S+) \(removed at the end\)", result.out)[1])
    assert folder.parent.parent == temporary and folder.parent.name != "vitrio-bench"
    assert list(temporary.iterdir()) == [temporary / "vitrio-bench"]  # the fresh folder is gone
    assert not (tmp_path / "bench.png").is_symlink() and (tmp_path / "bench.png").stat().st_size > 1000


def test_a_data_folder_that_is_not_there_is_made_private(vitrio, tmp_path: Path):
    folder = own_folder(tmp_path / "new" / "data")
    assert folder.is_dir() and stat.S_IMODE(folder.stat().st_mode) == 0o700
    (tmp_path / "file").write_text("")
    with pytest.raises(NotADirectoryError, match="is not a folder"):
        own_folder(tmp_path / "file")
    assert_fails(bench(vitrio, tmp_path, "--data", tmp_path / "file"), tmp_path / "file", "not a folder")


@as_root
def test_a_data_folder_of_another_user_is_refused(vitrio, tmp_path: Path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, OTHER, OTHER)
    assert_fails(bench(vitrio, tmp_path, "--data", theirs), theirs, f"belongs to uid {OTHER}", "your own")
    assert list(theirs.iterdir()) == []
    # nor is it taken through a link of one's own
    mine = tmp_path / "link-to-theirs"
    mine.symlink_to(theirs)
    assert_fails(bench(vitrio, tmp_path, "--data", mine), mine, f"the folder belongs to uid {OTHER}")
    assert list(theirs.iterdir()) == []


@as_root
def test_a_link_of_another_user_is_refused(vitrio, tmp_path: Path):
    folder = tmp_path / "mine"
    folder.mkdir()
    link = tmp_path / "planted"
    link.symlink_to(folder)
    os.lchown(link, OTHER, OTHER)
    assert_fails(bench(vitrio, tmp_path, "--data", link), link, f"the symbolic link belongs to uid {OTHER}")
    assert list(folder.iterdir()) == []
