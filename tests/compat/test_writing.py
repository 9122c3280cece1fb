"""Files declared to a writer provider are readable at their path once flushed, while still open."""

from __future__ import annotations

import os

import numpy as np
import pytest

import vitrio as vio


@pytest.mark.parametrize("name", ["stack.mrcs", "stack.tif"])
def test_flush_makes_what_was_written_readable_at_its_path(tmp_path, rng, name):
    images = rng.normal(size=(3, 4, 6)).astype(np.float32)
    path = tmp_path / name
    writers = vio.writer_provider()
    writers.declare(path, vio.ImageDescriptor((3, 4, 6), 2, "float32"))
    saver = vio.saver(writers, workers=2)
    vio.write_batch_async(saver, images[:2], [vio.ImageLocation(path, i) for i in range(2)]).get()
    assert not path.exists()
    writers.flush()
    assert writers.file_count == 1 and os.listdir(tmp_path) == [name]
    for i in range(2):
        np.testing.assert_array_equal(vio.read(vio.ImageLocation(path, i)), images[i])
    vio.write_batch_async(saver, images[2:], [vio.ImageLocation(path, 2)]).get()
    writers.close(path)
    np.testing.assert_array_equal(vio.read(path), images)
    assert os.listdir(tmp_path) == [name]


def test_a_discarded_flushed_file_is_removed(tmp_path):
    path = tmp_path / "gone.mrc"
    writers = vio.writer_provider()
    writers.declare(path, vio.ImageDescriptor((2, 2), 2, "float32"))
    vio.write_batch_async(vio.saver(writers, workers=1), np.ones((1, 2, 2)), [path]).get()
    writers.flush()
    assert path.exists()
    writers.discard(path)
    assert os.listdir(tmp_path) == []
