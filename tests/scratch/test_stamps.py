"""A scratch that outlives its program notices a source file replaced by another of the same size whose
modification time was carried over (`cp -p`, rsync, a restore): it never serves the old file's images."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import vitrio as vio
from vitrio.data import Compose, DataLoader, Dataset, FourierCrop, ImageSource, PreparedSource

IMAGES, SIDE = 6, 16


@pytest.fixture
def stack(tmp_path: Path) -> tuple[Path, np.ndarray]:
    values = np.random.default_rng(5).standard_normal((IMAGES, SIDE, SIDE), dtype=np.float32)
    path = tmp_path / "data" / "stack.mrcs"
    path.parent.mkdir()
    vio.write_stack(values, path)
    return path, values


def replace_keeping_size_and_time(path: Path, values: np.ndarray) -> None:
    """Put a new file of the same size at `path`, its modification time set to the old one's, as
    `cp -p` or a restore leaves it."""
    old = os.stat(path)
    fresh = path.with_name("fresh.mrcs")
    vio.write_stack(values, fresh)
    os.utime(fresh, ns=(old.st_atime_ns, old.st_mtime_ns))
    os.rename(fresh, path)
    new = os.stat(path)
    assert (new.st_size, new.st_mtime_ns) == (old.st_size, old.st_mtime_ns)


def make(kind: str, locations, tmp_path: Path) -> vio.ImageScratch:
    if kind == "mapped":
        return vio.create_mapped_file_image_scratch(locations, tmp_path / "images.scratch", 4)
    return vio.create_directory_image_scratch(locations, tmp_path / "scratches", 4, budget=1 << 24)


def read_all(scratch: vio.ImageScratch, locations) -> np.ndarray:
    out = np.empty((len(locations), SIDE, SIDE), np.float32)
    vio.read_batch_async(vio.loader(workers=2, scratch=scratch), out, locations).get()
    return out


@pytest.mark.parametrize("kind", ["mapped", "directory"])
def test_a_file_replaced_with_its_size_and_time_is_read_again(kind, stack, tmp_path):
    path, values = stack
    locations = [vio.ImageLocation(path, i) for i in range(IMAGES)]
    np.testing.assert_array_equal(read_all(make(kind, locations, tmp_path), locations), values)
    replace_keeping_size_and_time(path, values + 1)
    again = make(kind, locations, tmp_path)
    assert again.held_count == 0
    np.testing.assert_array_equal(read_all(again, locations), values + 1)


def prepared_epoch(prepared: PreparedSource) -> np.ndarray:
    """The images of an epoch read through a loader of their own, which keeps no file open from before."""
    batches = DataLoader(Dataset({"image": prepared}), IMAGES, loader=vio.loader(workers=2))
    return next(iter(batches))["image"]


def test_prepared_images_of_a_file_replaced_with_its_size_and_time_are_prepared_again(stack, tmp_path):
    path, values = stack
    source = ImageSource([vio.ImageLocation(path, i) for i in range(IMAGES)])
    steps = Compose(FourierCrop(8))
    prepared = PreparedSource(source, steps, scratch=tmp_path / "prepared.scratch")
    np.testing.assert_array_equal(prepared_epoch(prepared), steps(values))
    replace_keeping_size_and_time(path, values + 1)
    again = PreparedSource(source, steps, scratch=tmp_path / "prepared.scratch")
    assert again.prepared_count == 0
    np.testing.assert_array_equal(prepared_epoch(again), steps(values + 1))
