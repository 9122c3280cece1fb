"""A failed read raises, through a `DataLoader` and through `read_batch_async(...).get()`, the very error
the file's reader raised: its class, errno, filename and key kept, the rows it concerns added as a note.

Each way of failing is read both ways and compared with what `vitrio.read` of the same image raises:
a file missing, one that is not of its format, a folder holding no Zarr metadata, one the user may not
read (an MRC file, an OME-Zarr store's chunk or metadata, read as another user), and a URL whose server
answers 404.
"""

from __future__ import annotations

import errno
import multiprocessing
import os
import shutil
import tempfile
from collections.abc import Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

import vitrio as vio
from vitrio.data import DataLoader, Dataset, ImageSource

from ..remote.http import RangeServer
from .conftest import write_stacks

OTHER = 12345


def identity(error: BaseException) -> tuple:
    """What a caller tells a failure by: its class, errno, filename and key."""
    return type(error), getattr(error, "errno", None), getattr(error, "filename", None), error.key


def failures(locations: list[Any], shape: tuple[int, int]) -> dict[str, BaseException]:
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


def test_a_folder_without_zarr_metadata_is_a_missing_file(tmp_path: Path):
    good, empty = tmp_path / "good.mrc", tmp_path / "empty.zarr"
    vio.write_single(np.zeros((12, 10), np.float32), good)
    empty.mkdir()
    raised = failures([str(good), str(empty)], (12, 10))
    assert set(raised) == {"read", "batch", "data loader"}, raised
    for error in raised.values():
        assert identity(error) == (vio.ImageFileNotFoundError, errno.ENOENT, None, str(empty))
        assert f"{empty}: no such Zarr store" in str(error)


def test_a_file_not_of_its_format_keeps_its_class(good, tmp_path: Path):
    corrupt = tmp_path / "corrupt.mrcs"
    corrupt.write_bytes(b"not an MRC file" * 10)
    raised = failures([good, vio.ImageLocation(str(corrupt), 0)], (12, 10))
    check_kept(raised, vio.FormatError, None, str(corrupt))


def read_as_another_user(keys: list[str], sending: Connection) -> None:
    """As uid 12345, send what reading `keys` raises each way: the identity and notes of each failure."""
    os.setgroups([])
    os.setgid(OTHER)
    os.setuid(OTHER)
    with sending:
        raised = failures(keys, (12, 10))
        sending.send(
            {way: (identity(error), getattr(error, "__notes__", [])) for way, error in raised.items()}
        )


@pytest.fixture
def passable() -> Iterator[Path]:
    """A folder another user may pass through (pytest's own are private to this one)."""
    folder = Path(tempfile.mkdtemp())
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


def ome_zarr(path: Path, values: np.ndarray) -> Path:
    """A one-level OME-Zarr image of `values`, on Zarr v2, in chunks of 4 x 4."""
    group = zarr.open_group(str(path), mode="w", zarr_format=2)
    group.create_array("0", data=values, chunks=(4, 4))
    axes = [{"name": n, "type": "space"} for n in "yx"]
    group.attrs["multiscales"] = [{"version": "0.4", "axes": axes, "datasets": [{"path": "0"}]}]
    return path


LOCKED = {
    "an MRC file": ("", ""),
    "a chunk of an OME-Zarr store": ("0/0.0", "chunk 0/0.0"),
    "an OME-Zarr array's metadata": ("0/.zarray", "0/.zarray"),
}
"""What is locked: the file's path in the store (none for a file), and how the store's error names it."""


@pytest.mark.parametrize("locked", LOCKED)
def test_a_file_the_user_may_not_read_keeps_its_class_errno_and_filename(passable: Path, locked: str):
    values = np.ones((12, 10), np.float32)
    good = passable / "good.mrc"
    vio.write_single(values, good)
    inside, named = LOCKED[locked]
    key = str(ome_zarr(passable / "locked.zarr", values) if inside else passable / "locked.mrc")
    if not inside:
        vio.write_single(values, key)
    Path(key, inside).chmod(0o600)
    spawn = multiprocessing.get_context("spawn")
    receiving, sending = spawn.Pipe(duplex=False)
    other = spawn.Process(target=read_as_another_user, args=([str(good), key], sending))
    other.start()
    sending.close()  # the child's end alone is left: reading ends when the child does
    with receiving:
        raised = receiving.recv()
    other.join()
    assert set(raised) == {"read", "batch", "data loader"}, raised
    kind, number, filename, found_key = raised["read"][0]
    assert (kind, number, found_key) == (PermissionError, errno.EACCES, key)
    assert filename == (Path(inside).name if inside else key)
    assert raised["batch"][0] == raised["data loader"][0] == raised["read"][0]
    notes = raised["data loader"][1]
    assert notes[-1].startswith(f"reading row 1 ({key}")
    if inside:  # the store's error, naming the store and what in it could not be read
        assert notes[:-1] == raised["read"][1] == [f"{key}: {named}"]


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
