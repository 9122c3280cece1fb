"""A failed read raises, through a `DataLoader` and through `read_batch_async(...).get()`, the very error
the file's reader raised: its class, errno, filename and key kept, the rows it concerns added as a note.

Each way of failing is read both ways and compared with what `vitrio.read` of the same image raises:
a file missing, one that is not of its format, one the user may not read (read as another user),
and a URL whose server answers 404.
"""

from __future__ import annotations

import errno
import multiprocessing
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import vitrio as vio
from vitrio.data import DataLoader, Dataset, ImageSource

from ..remote.http import RangeServer
from .conftest import write_stacks

OTHER = 12345


def identity(error: BaseException) -> tuple:
    """What a caller tells a failure by: its class, errno, filename and key."""
    return type(error), getattr(error, "errno", None), getattr(error, "filename", None), error.key


def failures(locations: list[vio.ImageLocation], shape: tuple[int, int]) -> dict[str, BaseException]:
    """What reading `locations` (the first a good one) raises each way: the core alone (the last), a
    batch, a `DataLoader` over a source that asked only the first file for its shape."""
    loader = vio.loader(workers=2)
    raised: dict[str, BaseException] = {}
    for way in ("read", "batch", "data loader"):
        try:
            if way == "read":
                vio.read(locations[-1])
            elif way == "batch":
                destination = np.zeros((len(locations), *shape), np.float32)
                vio.read_batch_async(loader, destination, locations).get()
            else:
                dataset = Dataset({"image": ImageSource(locations, check=False)})
                list(DataLoader(dataset, batch_size=len(locations), loader=loader))
        except Exception as error:  # noqa: BLE001 - compared below
            raised[way] = error
    return raised


def check_kept(raised: dict[str, BaseException], kind: type, number: int | None, key: str) -> None:
    assert set(raised) == {"read", "batch", "data loader"}, raised
    assert isinstance(raised["read"], kind) and raised["read"].key == key
    assert getattr(raised["read"], "errno", None) == number
    for way in ("batch", "data loader"):
        assert identity(raised[way]) == identity(raised["read"]), way
    assert raised["data loader"].__notes__ == [f"reading row 1 ({vio.ImageLocation(key, 0)})"]


@pytest.fixture
def good(tmp_path: Path) -> vio.ImageLocation:
    return write_stacks(tmp_path, (3,)).locations[0]


def test_a_missing_file_keeps_its_class_and_errno(good, tmp_path: Path):
    missing = str(tmp_path / "missing.mrcs")
    raised = failures([good, vio.ImageLocation(missing, 0)], (12, 10))
    check_kept(raised, vio.ImageFileNotFoundError, errno.ENOENT, missing)
    assert isinstance(raised["data loader"], FileNotFoundError)


def test_a_file_not_of_its_format_keeps_its_class(good, tmp_path: Path):
    corrupt = tmp_path / "corrupt.mrcs"
    corrupt.write_bytes(b"not an MRC file" * 10)
    raised = failures([good, vio.ImageLocation(str(corrupt), 0)], (12, 10))
    check_kept(raised, vio.FormatError, None, str(corrupt))


def read_as_another_user(locations: list[vio.ImageLocation], outcomes: multiprocessing.Queue) -> None:
    """As uid 12345, put in `outcomes` what reading `locations` raises each way, as identities and notes."""
    os.setgroups([])
    os.setgid(OTHER)
    os.setuid(OTHER)
    raised = failures(locations, (12, 10))
    outcomes.put(
        {way: (*identity(error), getattr(error, "__notes__", None)) for way, error in raised.items()}
    )


@pytest.fixture
def passable(tmp_path: Path) -> Iterator[Path]:
    """A folder another user may pass through (pytest's own are private to this one)."""
    folder = Path(tempfile.mkdtemp())
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


def test_a_file_the_user_may_not_read_keeps_its_class_errno_and_filename(passable: Path):
    good = write_stacks(passable, (3,)).locations[0]
    (passable / "private").mkdir()
    locked = write_stacks(passable / "private", (3,)).paths[0]
    locked.chmod(0o600)
    spawn = multiprocessing.get_context("spawn")
    outcomes = spawn.Queue()
    other = spawn.Process(
        target=read_as_another_user, args=([good, vio.ImageLocation(str(locked), 0)], outcomes)
    )
    other.start()
    try:
        raised = outcomes.get()
    finally:
        other.join()
    expected = (PermissionError, errno.EACCES, str(locked), str(locked))
    assert {way: found[:4] for way, found in raised.items()} == dict.fromkeys(raised, expected)
    assert set(raised) == {"read", "batch", "data loader"}
    assert raised["data loader"][4] == [f"reading row 1 ({vio.ImageLocation(str(locked), 0)})"]


def test_a_url_answered_404_keeps_its_class_and_errno(good):
    server = RangeServer({})
    try:
        gone = f"{server.url}/gone.mrcs"
        raised = failures([vio.ImageLocation(good.key, 0), vio.ImageLocation(gone, 0)], (12, 10))
    finally:
        server.stop()
    check_kept(raised, vio.ImageFileNotFoundError, errno.ENOENT, gone)


def test_an_explained_failure_is_raised_itself_noting_its_context_once():
    error = PermissionError(errno.EACCES, "Permission denied", "a.mrc")
    explained = vio.Completion.failed(error).explained(lambda failure: f"reading {failure.filename}")
    for _ in range(2):
        with pytest.raises(PermissionError) as raised:
            explained.get()
        assert raised.value is error
    assert error.errno == errno.EACCES and error.filename == "a.mrc"
    assert error.__notes__ == ["reading a.mrc"]
