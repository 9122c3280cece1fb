"""The scratch on a shared machine: another user who may create files, folders and symbolic links where
a scratch lies, and who can compute its file names, must not make it serve their pixels, read its
files, write through it, or make its eviction remove their files or fail on them.

The tests run as root: another user's file or folder is one given to uid 12345, and another user's
process a child that takes uid 12345.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import stat
import struct
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import vitrio as vio
from tests.hardening.helpers import swapping

OTHER = 12345
IMAGES, SIDE, RUN, BUDGET = 8, 8, 4, 1 << 20
FORGED = 1234.0


@pytest.fixture
def source(tmp_path: Path) -> tuple[list[vio.ImageLocation], np.ndarray]:
    """A stack of 8 images, its locations and values."""
    values = np.random.default_rng(3).standard_normal((IMAGES, SIDE, SIDE), dtype=np.float32)
    path = tmp_path / "data" / "stack.mrcs"
    path.parent.mkdir()
    vio.write_stack(values, path)
    return [vio.ImageLocation(path, i) for i in range(IMAGES)], values


@pytest.fixture
def shared() -> Path:
    """A folder everyone may write in, with the sticky bit, as `/tmp` or a group's scratch folder."""
    path = Path(tempfile.mkdtemp(prefix="vitrio-shared-"))
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path)


def make(kind: str, locations, where: Path) -> vio.ImageScratch:
    if kind == "mapped":
        return vio.create_mapped_file_image_scratch(locations, where / "images.scratch", RUN)
    return vio.create_directory_image_scratch(locations, where / "scratches", RUN, BUDGET)


def read_all(scratch: vio.ImageScratch, locations) -> np.ndarray:
    out = np.zeros((len(locations), SIDE, SIDE), np.float32)
    vio.read_batch_async(vio.loader(workers=1, scratch=scratch), out, locations).get()
    return out


def plant_forged(kind: str, locations, values: np.ndarray, where: Path) -> Path:
    """A scratch file where `make` puts it, valid in every check (header, layout, the source's stamp,
    each run's CRC), whose pixels are all 1234.0: made while the source held them."""
    key = locations[0].key
    before = os.stat(key)
    vio.write_stack(np.full_like(values, FORGED), key)
    os.utime(key, ns=(before.st_atime_ns, before.st_mtime_ns))
    scratch = make(kind, locations, where)
    assert (read_all(scratch, locations) == FORGED).all()
    path = Path(scratch.path)
    del scratch
    vio.write_stack(values, key)
    os.utime(key, ns=(before.st_atime_ns, before.st_mtime_ns))
    now = os.stat(key)  # a stamp anyone may read, which the forger writes into the file's table
    stamps = struct.unpack_from("<16s32s6Q", path.read_bytes())[4]
    with open(path, "r+b") as file:
        file.seek(stamps)
        file.write(np.array([now.st_size, now.st_mtime_ns, now.st_ino, now.st_ctime_ns], "<i8").tobytes())
    return path


def as_other_user(probe: Callable[[], int]) -> int:
    """The exit status of `probe()` run in a child process that took uid and gid 12345."""
    pid = os.fork()
    if pid == 0:
        status = 100
        try:
            os.setgroups([])
            os.setgid(OTHER)
            os.setuid(OTHER)
            status = probe()
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(status)
    deadline = time.monotonic() + 60
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise AssertionError("the process of the other user did not finish in 60 s")
        time.sleep(0.01)


def refused(path: Path, read: Callable[[Path], object]) -> bool:
    try:
        read(path)
    except PermissionError:
        return True
    return False


def test_a_forged_scratch_file_is_served_when_trusted(source, tmp_path: Path):
    """The forgery the other tests plant passes every check of the file: only its owner and mode give
    it away."""
    locations, values = source
    path = plant_forged("mapped", locations, values, tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert (read_all(make("mapped", locations, tmp_path), locations) == FORGED).all()


@pytest.mark.parametrize("kind", ["mapped", "directory"])
@pytest.mark.parametrize("planted", ["owned by another user", "group-writable", "writable by others"])
def test_a_planted_scratch_file_is_never_read(kind: str, planted: str, source, tmp_path: Path):
    locations, values = source
    path = plant_forged(kind, locations, values, tmp_path)
    if planted == "owned by another user":
        os.chown(path, OTHER, OTHER)
    else:
        path.chmod(0o620 if planted == "group-writable" else 0o602)
    scratch = make(kind, locations, tmp_path)
    assert scratch.path == str(path)
    np.testing.assert_array_equal(read_all(scratch, locations), values)
    status = path.lstat()
    assert (status.st_uid, stat.S_IMODE(status.st_mode)) == (os.geteuid(), 0o600)


@pytest.mark.parametrize("kind", ["mapped", "directory"])
def test_scratch_files_are_private_whatever_the_umask(kind: str, source, shared: Path):
    locations, values = source
    umask = os.umask(0)
    try:
        scratch = make(kind, locations, shared)
        np.testing.assert_array_equal(read_all(scratch, locations), values)
    finally:
        os.umask(umask)
    path = Path(scratch.path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    if kind == "directory":
        assert path.parent == shared / "scratches" / f"vitrio-{os.geteuid()}"
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    control = shared / "control"
    control.write_bytes(b"anyone may read this")
    control.chmod(0o644)

    def probe() -> int:
        if refused(control, Path.read_bytes):
            return 1
        if not refused(path, Path.read_bytes):
            return 2
        if kind == "directory" and not refused(path.parent, os.listdir):
            return 3
        return 0

    assert as_other_user(probe) == 0


def test_another_users_folder_at_the_users_name_is_refused(source, tmp_path: Path):
    locations, values = source
    folder = tmp_path / "scratches" / f"vitrio-{os.geteuid()}"
    path = plant_forged("directory", locations, values, tmp_path)
    os.chown(folder, OTHER, OTHER)
    os.chown(path, OTHER, OTHER)
    with pytest.raises(PermissionError, match=f"{re.escape(str(folder))}.*owned by uid {OTHER}"):
        make("directory", locations, tmp_path)
    os.chown(folder, os.geteuid(), os.getegid())
    folder.chmod(0o755)
    with pytest.raises(PermissionError, match=f"{re.escape(str(folder))}.*mode 0o755"):
        make("directory", locations, tmp_path)
    assert path.stat().st_uid == OTHER


@pytest.mark.parametrize("target", ["folder", "file"])
def test_a_link_at_the_users_folder_is_refused_and_not_followed(target: str, source, tmp_path: Path):
    locations, _ = source
    victim = tmp_path / "victim"
    if target == "folder":
        victim.mkdir(mode=0o700)
        (victim / "kept").write_bytes(b"kept")
    else:
        victim.write_bytes(b"kept")
    (tmp_path / "scratches").mkdir()
    link = tmp_path / "scratches" / f"vitrio-{os.geteuid()}"
    link.symlink_to(victim)
    with pytest.raises(PermissionError, match=re.escape(str(link))):
        make("directory", locations, tmp_path)
    assert link.is_symlink()
    if target == "folder":
        assert os.listdir(victim) == ["kept"] and stat.S_IMODE(victim.stat().st_mode) == 0o700
    else:
        assert victim.read_bytes() == b"kept"


@pytest.mark.parametrize("kind", ["mapped", "directory"])
@pytest.mark.parametrize("target", ["a file", "nothing"])
def test_a_link_at_the_scratch_files_name_is_not_written_through(kind: str, target: str, source, tmp_path):
    locations, values = source
    path = Path(make(kind, locations, tmp_path).path)
    path.unlink()
    victim = tmp_path / "victim"
    if target == "a file":
        victim.write_bytes(b"precious")
        victim.chmod(0o644)
    path.symlink_to(victim)
    scratch = make(kind, locations, tmp_path)
    np.testing.assert_array_equal(read_all(scratch, locations), values)
    assert stat.S_ISREG(path.lstat().st_mode) and scratch.held_count == IMAGES
    if target == "a file":
        assert victim.read_bytes() == b"precious" and stat.S_IMODE(victim.stat().st_mode) == 0o644
    else:
        assert not victim.exists()


def test_what_cannot_be_replaced_raises_an_error_naming_the_file(source, tmp_path: Path):
    locations, _ = source
    path = tmp_path / "images.scratch"
    path.mkdir()
    (path / "kept").write_bytes(b"kept")
    with pytest.raises(OSError, match=f"{path}: the scratch file cannot be put there"):
        vio.create_mapped_file_image_scratch(locations, path, RUN)
    assert sorted(os.listdir(tmp_path)) == ["data", "images.scratch"]
    assert (path / "kept").read_bytes() == b"kept"


def plant(folder: Path, name: str, size: int, mtime: int, uid: int) -> Path:
    path = folder / f"{name * 32}.vitrio-scratch"
    path.write_bytes(b"\0" * size)
    path.chmod(0o600)
    os.chown(path, uid, uid)
    os.utime(path, ns=(mtime, mtime))
    return path


def test_eviction_neither_counts_nor_removes_another_users_files(source, tmp_path: Path):
    locations, _ = source
    folder = Path(make("directory", locations[:1], tmp_path).path).parent
    own = plant(folder, "0", 100_000, 1, os.geteuid())
    theirs = plant(folder, "f", 10 * BUDGET, 2, OTHER)
    make("directory", locations, tmp_path)
    assert own.exists() and theirs.stat().st_size == 10 * BUDGET and theirs.stat().st_uid == OTHER
    vio.create_directory_image_scratch(locations, tmp_path / "scratches", RUN, 100_000)
    assert not own.exists() and theirs.stat().st_size == 10 * BUDGET


def test_another_users_scratch_in_a_shared_folder_neither_fails_nor_touches_ours(source, shared: Path):
    """The other user's eviction, with a budget too small for anything but its own new file, in the
    folder both share: it neither fails on our scratch file nor removes it."""
    _, values = source
    data = shared / "data"
    data.mkdir(mode=0o755)
    key = data / "stack.mrcs"
    vio.write_stack(values, key)
    key.chmod(0o644)
    ours = Path(vio.create_directory_image_scratch([str(key)], shared, RUN, BUDGET).path)
    size = ours.stat().st_size

    def probe() -> int:
        scratch = vio.create_directory_image_scratch([vio.ImageLocation(key, 0)], shared, 1, SIDE * SIDE * 4)
        return 0 if Path(scratch.path).parent == shared / f"vitrio-{OTHER}" else 1

    assert as_other_user(probe) == 0
    assert ours.stat().st_size == size and ours.stat().st_uid == os.geteuid()
    assert (shared / f"vitrio-{OTHER}").stat().st_uid == OTHER


def test_the_users_folder_swapped_for_a_link_in_a_loop_neither_evicts_nor_writes_elsewhere(source, tmp_path):
    """In a shared folder without the sticky bit, another user exchanges the user's folder with a link
    to another private folder of the user's, in a loop: eviction does not remove the scratch files
    there, and no scratch file is written there."""
    locations, _ = source
    kept = tmp_path / "kept"
    kept.mkdir(mode=0o700)
    old = plant(kept, "0", 100_000, 1, os.geteuid())
    where = Path(tempfile.mkdtemp(prefix="vitrio-shared-"))
    try:
        where.chmod(0o777)
        folder = Path(vio.create_directory_image_scratch(locations[:1], where, RUN, BUDGET).path).parent
        (where / "link").symlink_to(kept)
        os.lchown(where / "link", OTHER, OTHER)
        made = refused = 0
        with swapping(folder, where / "link", OTHER) as swaps:
            deadline = time.monotonic() + 20
            while made + refused < 1000 and time.monotonic() < deadline:
                count = 1 + (made + refused) % IMAGES  # other images each time: a new file, evicting the last
                try:
                    vio.create_directory_image_scratch(
                        locations[:count], where, RUN, SIDE * SIDE * 4 * IMAGES
                    )
                    made += 1
                except OSError:  # the link, refused
                    refused += 1
        assert swaps[0] > 100 and made > 10 and refused > 10, (swaps, made, refused)
        assert os.listdir(kept) == [old.name] and old.stat().st_size == 100_000
    finally:
        shutil.rmtree(where)
