"""Where `vitrio bench` writes: a fresh private folder, or a `--data` folder of the user's, no link;
and the figures of the cost-growth benchmark (`vitrio.bench.growth`) on tiny files.
"""

from __future__ import annotations

import os
import re
import stat
import tempfile
from pathlib import Path

import mrcfile
import numpy as np
import pytest

from vitrio.bench import growth
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


def test_the_growth_benchmark_measures_each_loader_over_every_file_in_a_process_of_its_own(tmp_path: Path):
    # the process that measures is started while this one holds a lot: its peak must not count it
    ballast = np.ones(384 << 20, np.uint8)
    lines: list[str] = []
    results = growth.run(tmp_path, 2000, 50, epochs=1, batch=64, baseline_batches=3, out=lines.append)
    del ballast
    stack, files = tmp_path / "g1-2000x16.mrcs", sorted((tmp_path / "g2-50x20x16").iterdir())
    assert [p.name for p in tmp_path.iterdir() if "partial" in p.name] == []
    with mrcfile.open(stack, permissive=True) as mrc:
        assert mrc.data.shape == (2000, 16, 16) and mrc.data.dtype == np.float32
    assert len(files) == 50
    with mrcfile.open(files[-1], permissive=True) as mrc:
        assert mrc.data.shape == (20, 16, 16) and np.std(mrc.data) > 0.5
    assert [(r.workload.split()[0], r.loader) for r in results] == [
        ("G1", "vitrio"),
        ("G1", "torch"),
        ("G2", "vitrio"),
        ("G2", "torch"),
    ]
    for result, images, file_bytes in zip(
        results, (2000, 2000, 1000, 1000), (2000 * 1024 + 1024,) * 2 + (50 * (20 * 1024 + 1024),) * 2
    ):
        assert (result.images, result.file_bytes) == (images, file_bytes)
        # vitrio counts the whole epoch after its first batch, the baseline the batches it is given
        assert result.counted == (images - 64 if result.loader == "vitrio" else 3 * 64)
        assert result.rate > 0 and result.build > 0
        assert 0 < result.first < result.epoch
        assert 0 < result.start_kib <= result.peak_kib
        if result.loader == "vitrio":
            assert result.peak_kib < 192 << 10, result  # not the 384 MB this process held
    assert len(lines) == 7 and "peak RSS MB" in lines[1] and lines[-1].startswith("load average")
    for line, result, baseline in zip(lines[2:6], results, (results[1], None, results[3], None)):
        assert line.startswith(result.workload) and f"{result.rate:,.0f}" in line
        if baseline is not None:
            assert f"{result.rate / baseline.rate:.1f}" == line.split()[-5]


def test_the_growth_benchmark_writes_its_files_once(tmp_path: Path):
    stack = growth.write_stack(tmp_path, 100)
    files = growth.write_files(tmp_path, 3)
    written = [p.stat().st_mtime_ns for p in (stack, *files)]
    assert growth.write_stack(tmp_path, 100) == stack and growth.write_files(tmp_path, 3) == files
    assert [p.stat().st_mtime_ns for p in (stack, *files)] == written
