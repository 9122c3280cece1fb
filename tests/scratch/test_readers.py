"""A scratch of stored images is made for the readers that read its files: a later program reading the same
files otherwise (EER fractions of another grouping) is not served the images of the first, and readers
of another configuration than the scratch was made with never take images into it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import vitrio as vio
from vitrio.testing.eer import random_movie

ROWS, SIDE = 4, 32
EER = vio.detector_event_image_reader_provider


@pytest.fixture
def locations(tmp_path: Path) -> list[vio.ImageLocation]:
    movie = random_movie(tmp_path / "movie.eer", frames=20, shape=(SIDE, SIDE), density=0.3, seed=4)
    return [vio.ImageLocation(movie.path, i) for i in range(ROWS)]


def make(kind: str, locations, tmp_path: Path, files: vio.ImageReaderProvider) -> vio.ImageScratch:
    if kind == "mapped":
        return vio.create_mapped_file_image_scratch(locations, tmp_path / "images.scratch", 2, files=files)
    return vio.create_directory_image_scratch(locations, tmp_path / "scratches", 2, 1 << 24, files=files)


def read_all(scratch: vio.ImageScratch, locations, readers: vio.ImageReaderProvider) -> np.ndarray:
    loader = vio.ExecutorImageLoader(
        vio.ScratchImageReaderProvider(readers, scratch), vio.ThreadPoolExecutor(2)
    )
    out = np.empty((len(locations), SIDE, SIDE), np.float32)
    vio.read_batch_async(loader, out, locations).get()
    return out


def afresh(locations, readers: vio.ImageReaderProvider) -> np.ndarray:
    return np.stack([vio.read(location, readers=readers) for location in locations]).astype(np.float32)


@pytest.mark.parametrize("kind", ["mapped", "directory"])
def test_a_later_program_reading_otherwise_is_not_served_the_first_ones_images(kind, locations, tmp_path):
    first = make(kind, locations, tmp_path, EER(4))
    np.testing.assert_array_equal(read_all(first, locations, EER(4)), afresh(locations, EER(4)))
    assert first.held_count == ROWS
    later = make(kind, locations, tmp_path, EER(5))
    assert later.held_count == 0
    np.testing.assert_array_equal(read_all(later, locations, EER(5)), afresh(locations, EER(5)))
    alike = make(kind, locations, tmp_path, EER(5, cache=4))  # another provider of the same configuration
    assert alike.held_count == ROWS


@pytest.mark.parametrize("kind", ["host", "mapped"])
def test_readers_of_another_configuration_take_nothing_in(kind, locations, tmp_path):
    if kind == "host":
        scratch = vio.create_host_image_scratch(locations, 2, files=EER(4))
    else:
        scratch = make(kind, locations, tmp_path, EER(4))
    with pytest.raises(ValueError, match=f"{locations[0].key}: the scratch .* other formats or settings"):
        read_all(scratch, locations, EER(5))
    assert scratch.held_count == 0
