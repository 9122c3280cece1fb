"""A scratch of prepared images is made for the readers that read its files: a later program that reads
the same files otherwise (EER frames or fractions, another grouping of frames, another gain reference,
another format setting) with the same transform and scratch path is never served the first one's."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import h5py
import mrcfile
import numpy as np
import pytest

import vitrio as vio
from cryovit.hdf5 import hdf5_format
from vitrio.data import Compose, DataLoader, Dataset, FourierCrop, ImageSource, PreparedSource
from vitrio.testing.eer import random_movie

STEPS = Compose(FourierCrop(16))
ROWS, SIDE = 4, 32


def movie(tmp_path: Path) -> Path:
    return random_movie(tmp_path / "movie.eer", frames=20, shape=(SIDE, SIDE), density=0.3, seed=4).path


def gain_file(tmp_path: Path, seed: int) -> Path:
    """gain.mrc, written anew with values of `seed`: the same path and size each time."""
    gain = np.random.default_rng(seed).uniform(0.5, 1.5, (SIDE, SIDE)).astype(np.float32)
    mrcfile.write(tmp_path / "gain.mrc", gain, overwrite=True)
    return tmp_path / "gain.mrc"


def volumes(tmp_path: Path) -> Path:
    """A file of two volumes of the same shape and type, under the names data and label."""
    rng = np.random.default_rng(6)
    with h5py.File(tmp_path / "volumes.h5", "w") as file:
        for name in ("data", "label"):
            file[name] = rng.standard_normal((ROWS, SIDE, SIDE)).astype(np.float32)
    return tmp_path / "volumes.h5"


def run_program(key: Path, readers: vio.ImageReaderProvider, scratch: Path) -> tuple[int, np.ndarray]:
    """A program that prepares the first images of `key` as `readers` read them, through `scratch`:
    how many prepared images it found there, and those it was served."""
    source = ImageSource([vio.ImageLocation(key, i) for i in range(ROWS)], "float32", readers=readers)
    prepared = PreparedSource(source, STEPS, scratch=scratch, readers=readers)
    found = prepared.prepared_count
    loader = vio.ExecutorImageLoader(readers, vio.ThreadPoolExecutor(2))
    served = next(iter(DataLoader(Dataset({"image": prepared}), ROWS, loader=loader)))["image"]
    return found, served


def afresh(key: Path, readers: vio.ImageReaderProvider) -> np.ndarray:
    """The first images of `key` as `readers` read them, prepared without a scratch."""
    stored = np.stack([vio.read(vio.ImageLocation(key, i), readers=readers) for i in range(ROWS)])
    return STEPS(stored.astype(np.float32))


EER = vio.detector_event_image_reader_provider
PROGRAMS: dict[str, tuple[Callable, Callable, Callable]] = {
    # what a program reads: the file, the readers of the first program, those of the second
    "EER fractions, then raw frames": (movie, lambda _: EER(4), lambda _: vio.reader_provider()),
    "four fractions, then five": (movie, lambda _: EER(4), lambda _: EER(5)),
    "by count, then by dose": (
        movie,
        lambda _: EER(4),
        lambda _: EER(vio.DetectorEventFractionation(dose_per_fraction=3.0, dose_per_frame=1.0)),
    ),
    "a gain file, then another at its path": (
        movie,
        lambda folder: EER(4, gain=gain_file(folder, 1)),
        lambda folder: EER(4, gain=gain_file(folder, 2)),
    ),
    "a dataset, then another": (
        volumes,
        lambda _: vio.reader_provider(formats=[hdf5_format("data")]),
        lambda _: vio.reader_provider(formats=[hdf5_format("label")]),
    ),
}


@pytest.mark.parametrize("programs", PROGRAMS, ids=list(PROGRAMS))
def test_a_later_program_reading_otherwise_is_never_served_the_first_ones_images(tmp_path, programs):
    write, first, second = PROGRAMS[programs]
    key, scratch = write(tmp_path), tmp_path / "prepared.scratch"
    readers = first(tmp_path)
    expected = afresh(key, readers)
    found, served = run_program(key, readers, scratch)
    assert found == 0
    np.testing.assert_array_equal(served, expected)

    readers = second(tmp_path)
    expected_later = afresh(key, readers)
    assert not np.array_equal(expected_later, expected)
    found, served = run_program(key, readers, scratch)
    assert found == 0
    np.testing.assert_array_equal(served, expected_later)


def test_a_later_program_reading_alike_resumes(tmp_path):
    key, scratch = movie(tmp_path), tmp_path / "prepared.scratch"
    run_program(key, EER(4, gain=gain_file(tmp_path, 1)), scratch)
    readers = EER(4, gain=gain_file(tmp_path, 1), cache=8)  # other providers, the same files and settings
    found, served = run_program(key, readers, scratch)
    assert found == ROWS
    np.testing.assert_array_equal(served, afresh(key, readers))


def test_a_loader_reading_otherwise_than_the_scratch_is_made_for_is_refused(tmp_path):
    key, scratch = movie(tmp_path), tmp_path / "prepared.scratch"
    source = ImageSource([vio.ImageLocation(key, i) for i in range(ROWS)], "float32", readers=EER(4))
    prepared = PreparedSource(source, STEPS, scratch=scratch)  # made for the default readers
    loader = vio.ExecutorImageLoader(EER(4), vio.ThreadPoolExecutor(2))
    with pytest.raises(ValueError, match=f"{scratch}: the prepared images are of the files as"):
        next(iter(DataLoader(Dataset({"image": prepared}), ROWS, loader=loader)))


def test_images_held_in_memory_are_not_served_to_a_loader_reading_otherwise(tmp_path):
    key = movie(tmp_path)
    source = ImageSource([vio.ImageLocation(key, i) for i in range(ROWS)], "float32", readers=EER(4))
    prepared = PreparedSource(source, STEPS)
    first = vio.ExecutorImageLoader(EER(4), vio.ThreadPoolExecutor(2))
    served = next(iter(DataLoader(Dataset({"image": prepared}), ROWS, loader=first)))["image"]
    np.testing.assert_array_equal(served, afresh(key, EER(4)))
    other = vio.ExecutorImageLoader(EER(5), vio.ThreadPoolExecutor(2))
    with pytest.raises(ValueError, match="the prepared images are of the files as"):
        next(iter(DataLoader(Dataset({"image": prepared}), ROWS, loader=other)))


class Doubling(vio.ImageReaderProvider):
    """Readers that cannot describe what they make: each image doubled."""

    def __init__(self):
        self._files = vio.reader_provider()

    def acquire(self, key):
        reader = self._files.acquire(key)
        read_images = reader.read_images

        def doubled(indices, out, slots):
            read_images(indices, out, slots)
            out[slots] *= 2

        reader.read_images = doubled
        return reader

    def release(self, reader):
        self._files.release(reader)


def test_readers_that_cannot_describe_themselves_keep_nothing_for_a_later_program(tmp_path):
    key, scratch = tmp_path / "stack.mrcs", tmp_path / "prepared.scratch"
    vio.write_stack(np.random.default_rng(8).standard_normal((ROWS, SIDE, SIDE), dtype=np.float32), key)
    run_program(key, Doubling(), scratch)
    found, _ = run_program(key, Doubling(), scratch)
    assert found == 0


def test_a_loader_serving_from_a_stored_scratch_prepares_as_its_files_readers_read(tmp_path):
    # a scratch of stored images over the default readers reads the files as they do: not refused
    key, scratch = tmp_path / "stack.mrcs", tmp_path / "prepared.scratch"
    vio.write_stack(np.random.default_rng(7).standard_normal((ROWS, SIDE, SIDE)).astype(np.float32), key)
    readers = vio.reader_provider()
    locations = [vio.ImageLocation(key, i) for i in range(ROWS)]
    stored = vio.create_host_image_scratch(locations, run_length=ROWS, files=readers)
    source = ImageSource(locations, "float32", readers=readers)
    prepared = PreparedSource(source, STEPS, scratch=scratch, readers=readers)
    loader = vio.ExecutorImageLoader(
        vio.ScratchImageReaderProvider(readers, stored), vio.ThreadPoolExecutor(2)
    )
    served = next(iter(DataLoader(Dataset({"image": prepared}), ROWS, loader=loader)))["image"]
    np.testing.assert_array_equal(served, afresh(key, readers))
