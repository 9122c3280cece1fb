"""The files an epoch opens, counted by the kernel (inotify) and by the loader's `files_opened`: the
same number on a first epoch, and none at all on an epoch a scratch serves (mapped, directory, or a
`PreparedSource`'s), the hints that tell the kernel what is read next included.

The epochs run on a `SynchronousExecutor`, one open after another, since inotify merges an event
with the one before it when both are the same (two opens of one file at once)."""

from __future__ import annotations

import ctypes
import os
import struct
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import vitrio as vio
from vitrio.data import DataLoader, Dataset, ImageSource, Normalize, PreparedSource

STACKS, IMAGES, SIDE = 4, 10, 8

_IN_CLOSE_NOWRITE, _IN_OPEN = 0x10, 0x20
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (then the name)


class Opens:
    """The opens of the files of one folder, as the kernel reports them (inotify), whoever opens them.

    Closes are watched too, so that two opens of a file one after another are two events, not one.
    """

    def __init__(self, folder: Path):
        libc = ctypes.CDLL(None, use_errno=True)
        self._fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if (
            self._fd < 0
            or libc.inotify_add_watch(self._fd, os.fsencode(folder), _IN_OPEN | _IN_CLOSE_NOWRITE) < 0
        ):
            raise OSError(ctypes.get_errno(), f"{folder}: inotify cannot watch it")

    def take(self) -> Counter:
        """The opens of each file since the last call, by name."""
        opens: Counter = Counter()
        while True:
            try:
                events = os.read(self._fd, 1 << 16)
            except BlockingIOError:
                return opens
            at = 0
            while at < len(events):
                _, mask, _, length = _EVENT.unpack_from(events, at)
                if mask & _IN_OPEN:
                    opens[events[at + _EVENT.size : at + _EVENT.size + length].rstrip(b"\0").decode()] += 1
                at += _EVENT.size + length

    def close(self) -> None:
        os.close(self._fd)


@pytest.fixture
def stacks(tmp_path: Path) -> tuple[list[vio.ImageLocation], np.ndarray]:
    """Four MRC stacks of 10 images in tmp_path/data, their locations and values."""
    values = np.random.default_rng(3).standard_normal((STACKS * IMAGES, SIDE, SIDE), dtype=np.float32)
    (tmp_path / "data").mkdir()
    for number in range(STACKS):
        vio.write_stack(
            values[number * IMAGES : (number + 1) * IMAGES], tmp_path / "data" / f"s{number}.mrcs"
        )
    locations = [
        vio.ImageLocation(tmp_path / "data" / f"s{n}.mrcs", i) for n in range(STACKS) for i in range(IMAGES)
    ]
    return locations, values


@pytest.fixture
def opens(tmp_path: Path, stacks):
    watch = Opens(tmp_path / "data")
    yield watch
    watch.close()


def _source(kind: str, locations: list, tmp_path: Path) -> tuple[Dataset, vio.ImageLoader]:
    """A dataset of the stacks as `kind` serves them, and the loader that reads it, on this thread."""
    scratch = None
    if kind == "mapped":
        scratch = vio.create_mapped_file_image_scratch(locations, tmp_path / "images.scratch", run_length=4)
    elif kind == "directory":
        scratch = vio.create_directory_image_scratch(locations, tmp_path / "scratches", 4, budget=1 << 30)
    loader = vio.loader(executor=vio.SynchronousExecutor(), scratch=scratch)
    source = ImageSource(locations, readers=loader.readers)
    if kind == "prepared":
        source = PreparedSource(source, Normalize(SIDE // 2), scratch=tmp_path / "prepared.scratch")
    return Dataset({"image": source}), loader


def _epoch(batches: DataLoader) -> np.ndarray:
    """The images of an epoch, by row."""
    served = {int(i): image for batch in batches for i, image in zip(batch["index"], batch["image"])}
    return np.stack([served[i] for i in range(len(served))])


@pytest.mark.parametrize("kind", ["files", "mapped", "directory", "prepared"])
def test_a_first_epoch_counts_every_file_it_opens(kind, tmp_path, stacks, opens):
    locations, values = stacks
    dataset, loader = _source(kind, locations, tmp_path)
    batches = DataLoader(dataset, 8, shuffle=True, seed=0, loader=loader)
    opens.take()  # the files asked for their shapes
    served = _epoch(batches)
    if kind != "prepared":
        np.testing.assert_array_equal(served, values)
    opened = opens.take()
    assert set(opened) == {f"s{n}.mrcs" for n in range(STACKS)}
    assert batches.stats.reads.files_opened == sum(opened.values())


@pytest.mark.parametrize("kind", ["mapped", "directory", "prepared"])
def test_an_epoch_a_scratch_serves_opens_no_file(kind, tmp_path, stacks, opens):
    dataset, loader = _source(kind, stacks[0], tmp_path)
    batches = DataLoader(dataset, 8, shuffle=True, seed=0, loader=loader)
    first = _epoch(batches)
    opens.take()
    np.testing.assert_array_equal(_epoch(batches), first)
    assert opens.take() == {}
    reads = batches.stats.reads
    assert (reads.files_opened, reads.scratch_images) == (0, STACKS * IMAGES)
