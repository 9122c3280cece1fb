"""The files an epoch opens, counted by the kernel (inotify) and by the loader's `files_opened`: the
same number on a first epoch, and none at all on an epoch a scratch serves (mapped, directory, or a
`PreparedSource`'s), the hints that tell the kernel what is read next included.

The epochs run on a `SynchronousExecutor`, one open after another, since inotify merges an event
with the one before it when both are the same (two opens of one file at once)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import vitrio as vio
from tests.hardening.opens import Opens
from vitrio.data import DataLoader, Dataset, ImageSource, Normalize, PreparedSource

STACKS, IMAGES, SIDE = 4, 10, 8


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
    with Opens(tmp_path / "data") as watch:
        yield watch


def _source(kind: str, locations: list, tmp_path: Path) -> tuple[Dataset, vio.ImageLoader]:
    """A dataset of the stacks as `kind` serves them, and the loader that reads it, on this thread: a
    "cached" one keeps every file open from the moment the source asks it for its shape."""
    scratch = None
    if kind == "mapped":
        scratch = vio.create_mapped_file_image_scratch(locations, tmp_path / "images.scratch", run_length=4)
    elif kind == "directory":
        scratch = vio.create_directory_image_scratch(locations, tmp_path / "scratches", 4, budget=1 << 30)
    cache = STACKS if kind == "cached" else 0
    loader = vio.loader(executor=vio.SynchronousExecutor(), cache=cache, scratch=scratch)
    source = ImageSource(locations, readers=loader.readers)
    if kind == "prepared":
        source = PreparedSource(source, Normalize(SIDE // 2), scratch=tmp_path / "prepared.scratch")
    return Dataset({"image": source}), loader


def _epoch(batches: DataLoader) -> np.ndarray:
    """The images of an epoch, by row."""
    served = {int(i): image for batch in batches for i, image in zip(batch["index"], batch["image"])}
    return np.stack([served[i] for i in range(len(served))])


@pytest.mark.parametrize("kind", ["files", "cached", "mapped", "directory", "prepared"])
def test_a_first_epoch_counts_every_file_it_opens(kind, tmp_path, stacks, opens):
    locations, values = stacks
    dataset, loader = _source(kind, locations, tmp_path)
    batches = DataLoader(dataset, 8, shuffle=True, seed=0, loader=loader)
    opens.take()  # the files asked for their shapes
    served = _epoch(batches)
    if kind != "prepared":
        np.testing.assert_array_equal(served, values)
    opened = opens.take()
    assert batches.stats.reads.files_opened == sum(opened.values())
    assert set(opened) == (set() if kind == "cached" else {f"s{n}.mrcs" for n in range(STACKS)})


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
