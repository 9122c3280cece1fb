"""Writes in a folder another user may write (a group's project folder, without the sticky bit): that
user can rename what lies there, so a hidden store being written, or an old store set aside, can be
exchanged for a link or for another folder of the user's. Nothing of the user's but what vitrio made
may then be written, given a mode, moved or removed; and what is being written is private meanwhile.

The tests run as root: the other user is a child process that took uid 12345.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import zarr

import vitrio as vio
from tests.scratch.test_security import as_other_user
from vitrio._partial import PartialFile
from vitrio.cli import main
from vitrio.formats.zarr import OmeZarrWriter

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="another user's process is made by root")

SOURCES = Path(__file__).resolve().parents[2] / "src"
KEPT = b"the user's own notes"


def exchange(first: Path, second: Path) -> int:
    """Exchange the entries at `first` and `second` at once (`renameat2(RENAME_EXCHANGE)`): 0 if done."""
    renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    return 0 if renameat2(-100, os.fsencode(first), -100, os.fsencode(second), 2) == 0 else 1


def exchanged_by_other_user(folder: Path, suffix: str, other: Path) -> str:
    """The other user exchanges the one entry of `folder` whose name ends with `suffix` with `other`;
    the name of that entry."""
    (name,) = [name for name in os.listdir(folder) if name.endswith(suffix)]
    assert as_other_user(lambda: exchange(folder / name, other)) == 0
    return name


@pytest.fixture
def out() -> Iterator[Path]:
    """A folder everyone may write in, without the sticky bit, holding a folder of the user's, `precious`,
    with a file in it; beside it lies a private folder of the user's, `private`, with a file."""
    shared = Path(tempfile.mkdtemp(prefix="vitrio-project-"))
    try:
        shared.chmod(0o755)
        for folder, mode in (
            (shared / "out", 0o777),
            (shared / "private", 0o700),
            (shared / "out" / "precious", 0o755),
        ):
            folder.mkdir()
            folder.chmod(mode)
            (folder / "notes").write_bytes(KEPT)
        yield shared / "out"
    finally:
        shutil.rmtree(shared)


def assert_private_untouched(out: Path) -> None:
    """Assert that the user's private folder beside `out` was neither written nor opened to others."""
    private = out.parent / "private"
    assert os.listdir(private) == ["notes"] and (private / "notes").read_bytes() == KEPT
    assert stat.S_IMODE(private.stat().st_mode) == 0o700


def assert_holds_only_notes(folder: Path) -> None:
    assert os.listdir(folder) == ["notes"] and (folder / "notes").read_bytes() == KEPT


def other_users_link(out: Path) -> Path:
    """A link of the other user's, in `out`, to the user's private folder."""
    link = out / "link"
    assert as_other_user(lambda: os.symlink(out.parent / "private", link) or 0) == 0
    return link


VALUES = np.random.default_rng(5).random((3, 40, 40)).astype(np.float32)
SMALL_CHUNKS = vio.formats.zarr.OmeZarrFormat.configured(levels=2, chunks=16)


@pytest.mark.parametrize("swapped_for", ["a link to a private folder", "another folder of the user's"])
def test_a_hidden_store_exchanged_while_written_takes_no_write_and_is_not_published(
    out: Path, monkeypatch: pytest.MonkeyPatch, swapped_for: str
) -> None:
    other = other_users_link(out) if swapped_for.startswith("a link") else out / "precious"
    hidden: list[str] = []
    write_run = OmeZarrWriter.write_run

    def exchanged_first(writer: OmeZarrWriter, *args: object) -> None:
        if not hidden:
            hidden.append(exchanged_by_other_user(out, ".partial", other))
        write_run(writer, *args)

    monkeypatch.setattr(OmeZarrWriter, "write_run", exchanged_first)
    with pytest.raises(OSError, match="x.zarr: .*partial is no longer the folder written"):
        vio.write_stack(VALUES, out / "x.zarr", formats=[SMALL_CHUNKS])
    assert not os.path.lexists(out / "x.zarr")
    assert_private_untouched(out)
    assert_holds_only_notes(out / hidden[0] if other.name == "precious" else out / "precious")
    assert os.listdir(other) == []  # the store's folder, emptied where the other user put it


def test_a_store_set_aside_by_convert_force_and_exchanged_removes_no_other_folder(
    out: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vio.write_stack(VALUES[::-1].copy(), out / "x.zarr")
    vio.write_stack(VALUES, out / "new.mrcs")
    aside: list[str] = []
    read = vio.read_batch_async

    def exchanged_first(*args: object) -> vio.Completion:
        if not aside:
            aside.append(exchanged_by_other_user(out, ".replaced", out / "precious"))
        return read(*args)

    monkeypatch.setattr(vio, "read_batch_async", exchanged_first)
    assert main(["convert", "--force", str(out / "new.mrcs"), str(out / "x.zarr")]) == 0
    np.testing.assert_array_equal(vio.read(out / "x.zarr"), VALUES)
    assert_holds_only_notes(out / aside[0])
    assert os.listdir(out / "precious") == []  # the old store, emptied where the other user put it


def test_convert_force_does_not_follow_a_link_to_a_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    vio.write_stack(VALUES, tmp_path / "new.mrcs")
    vio.write_stack(VALUES[::-1].copy(), tmp_path / "elsewhere.zarr")
    (tmp_path / "x.zarr").symlink_to("elsewhere.zarr")
    assert main(["convert", "--force", str(tmp_path / "new.mrcs"), str(tmp_path / "x.zarr")]) == 1
    assert capsys.readouterr().err.endswith("x.zarr: exists already; it is not replaced\n")
    assert os.readlink(tmp_path / "x.zarr") == "elsewhere.zarr"
    np.testing.assert_array_equal(vio.read(tmp_path / "elsewhere.zarr"), VALUES[::-1])
    assert sorted(os.listdir(tmp_path)) == ["elsewhere.zarr", "new.mrcs", "x.zarr"]


def test_a_discarded_store_exchanged_removes_no_other_folder(out: Path) -> None:
    key = out / "x.zarr"
    writers = vio.writer_provider()
    writers.declare(key, vio.ImageDescriptor(VALUES.shape, 2, "float32"))
    writers.writer(key)
    hidden = exchanged_by_other_user(out, ".partial", out / "precious")
    writers.discard(key)
    assert_holds_only_notes(out / hidden)
    assert os.listdir(out / "precious") == []  # the store's folder, emptied where the other user put it


# Declares a store, makes its writer (its hidden folder), says so, and waits for SIGTERM.
WAITING = """
import sys, time
import vitrio as vio
writers = vio.writer_provider()
writers.declare(sys.argv[1], vio.ImageDescriptor((3, 40, 40), 2, "float32"))
writers.writer(sys.argv[1]).write_run(0, [vio.read(vio.ImageLocation(sys.argv[2], 0))])
print("writing", flush=True)
time.sleep(600)
"""


def test_a_hidden_store_exchanged_before_sigterm_removes_no_other_folder(out: Path) -> None:
    vio.write_stack(VALUES, out / "in.mrcs")
    child = subprocess.Popen(
        [sys.executable, "-c", WAITING, str(out / "x.zarr"), str(out / "in.mrcs")],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(map(str, (SOURCES, *sys.path)))},
    )
    try:
        assert child.stdout.readline() == b"writing\n"
        hidden = exchanged_by_other_user(out, ".partial", out / "precious")
        child.terminate()
        assert child.wait(timeout=60) == -15
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
    assert_holds_only_notes(out / hidden)
    assert os.listdir(out / "precious") == []


# ------------------------------------------------------------------ what is being written is private


def modes_under(folder: Path) -> dict[str, int]:
    """The mode of each hidden entry of `folder` and of all under it, by its path there."""
    found = {}
    for top in folder.iterdir():
        if top.name.startswith("."):
            for path in [top, *top.rglob("*")]:
                found[str(path.relative_to(folder))] = path.lstat().st_mode
    return found


@pytest.fixture
def umask_022() -> Iterator[None]:
    before = os.umask(0o022)
    yield
    os.umask(before)


def test_a_store_being_written_is_private_and_published_with_the_umasks_modes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, umask_022: None
) -> None:
    seen: dict[str, int] = {}
    finish = OmeZarrWriter.finish

    def looked_at_first(writer: OmeZarrWriter) -> None:
        seen.update(modes_under(tmp_path))
        finish(writer)

    monkeypatch.setattr(OmeZarrWriter, "finish", looked_at_first)
    vio.write_stack(VALUES, tmp_path / "x.zarr", formats=[SMALL_CHUNKS])
    assert len(seen) > 10
    wrong = {
        path: oct(mode)
        for path, mode in seen.items()
        if stat.S_IMODE(mode) != (0o700 if stat.S_ISDIR(mode) else 0o600)
    }
    assert not wrong
    published = {
        path: path.stat().st_mode for path in [tmp_path / "x.zarr", *(tmp_path / "x.zarr").rglob("*")]
    }
    assert {oct(stat.S_IMODE(mode)) for mode in published.values()} == {"0o755", "0o644"}
    assert all(stat.S_IMODE(mode) == 0o755 for mode in published.values() if stat.S_ISDIR(mode))
    assert not [path for path in published if path.name.endswith(".partial")]
    group = zarr.open_group(str(tmp_path / "x.zarr"), mode="r")
    np.testing.assert_array_equal(group["0"][:], VALUES)
    np.testing.assert_array_equal(vio.read(tmp_path / "x.zarr"), VALUES)


@pytest.mark.parametrize("made", ["MRC stack", "TIFF", "mapped scratch", "directory scratch"])
def test_a_file_being_written_is_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, umask_022: None, made: str
) -> None:
    seen: list[int] = []
    for method in ("publish", "expose"):
        real = getattr(PartialFile, method)

        def looked_at_first(partial: PartialFile, *args: object, real=real) -> None:
            if partial.path != partial.target:
                seen.append(os.lstat(partial.path).st_mode)
            real(partial, *args)

        monkeypatch.setattr(PartialFile, method, looked_at_first)
    source = tmp_path / "in.mrcs"
    vio.write_stack(VALUES, source)
    seen.clear()
    locations = [vio.ImageLocation(source, i) for i in range(len(VALUES))]
    if made == "MRC stack":
        vio.write_stack(VALUES, tmp_path / "out.mrcs")
    elif made == "TIFF":
        vio.write_stack(VALUES, tmp_path / "out.tif")
    elif made == "mapped scratch":
        vio.create_mapped_file_image_scratch(locations, tmp_path / "images.scratch", 2)
    else:
        vio.create_directory_image_scratch(locations, tmp_path / "scratches", 2, 1 << 20)
    assert seen and all(stat.S_IMODE(mode) == 0o600 for mode in seen), [oct(mode) for mode in seen]
