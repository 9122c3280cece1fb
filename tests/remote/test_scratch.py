"""A scratch in front of files at URLs: the first epoch fetches, the later ones make no request."""

from __future__ import annotations

import numpy as np

import vitrio as vio


def test_a_mapped_scratch_makes_later_epochs_request_nothing(s3, files, tmp_path):
    _, url, values = files["stack.mrcs"]
    locations = [vio.ImageLocation(url, i) for i in range(12)]
    files_at = vio.reader_provider(storage_options=s3.options)
    scratch = vio.create_mapped_file_image_scratch(locations, tmp_path / "epochs.scratch", 4, files=files_at)
    loader = vio.loader(2, scratch=scratch, storage_options=s3.options)
    order = np.random.default_rng(1).permutation(12)
    out = np.empty((12, *values.shape[1:]), np.float32)
    vio.read_batch_async(loader, out, [locations[i] for i in order]).get()
    np.testing.assert_array_equal(out, values[order])
    mark = s3.mark()
    for epoch in range(2):
        order = np.random.default_rng(epoch + 2).permutation(12)
        vio.read_batch_async(loader, out, [locations[i] for i in order]).get()
        np.testing.assert_array_equal(out, values[order])
    assert s3.since(mark) == []


def test_a_changed_object_is_taken_in_again_by_a_resumed_scratch(s3, files, tmp_path):
    path, _, values = files["stack.mrcs"]
    url = s3.put(path, "changing.mrcs")
    locations = [vio.ImageLocation(url, i) for i in range(12)]
    files_at = vio.reader_provider(storage_options=s3.options)
    place = tmp_path / "resumed.scratch"
    scratch = vio.create_mapped_file_image_scratch(locations, place, 4, files=files_at)
    out = np.empty((12, *values.shape[1:]), np.float32)
    vio.read_batch_async(vio.loader(2, scratch=scratch, storage_options=s3.options), out, locations).get()
    changed = tmp_path / "changed.mrcs"
    vio.write_stack(values[::-1].copy(), changed)
    s3.put(changed, "changing.mrcs")  # of the same size, another ETag
    again = vio.create_mapped_file_image_scratch(
        locations, place, 4, files=vio.reader_provider(storage_options=s3.options)
    )
    assert again.held_count == 0
    loader = vio.loader(2, scratch=again, storage_options=s3.options)
    vio.read_batch_async(loader, out, locations).get()
    np.testing.assert_array_equal(out, values[::-1])
