"""Scratches take an `ImageLocationGrouping` wherever they take a list of locations."""

from __future__ import annotations

import numpy as np

import vitrio as vio


def test_scratch_functions_take_a_grouping(tmp_path, rng):
    images = rng.normal(size=(4, 3, 3)).astype(np.float32)
    path = tmp_path / "s.mrcs"
    vio.write_stack(images, path)
    grouping = vio.ImageLocationGrouping([vio.ImageLocation(path, i) for i in (3, 1)])
    scratch = vio.create_host_image_scratch(grouping, 1)
    vio.prefetch_scratch_async(scratch, grouping, vio.SynchronousExecutor()).get()
    loader = vio.loader(workers=1, scratch=scratch)
    out = np.zeros((2, 3, 3), np.float32)
    path.unlink()  # what was taken in is served without the file
    vio.read_batch_async(loader, out, [vio.ImageLocation(path, 1), vio.ImageLocation(path, 3)]).get()
    np.testing.assert_array_equal(out, images[[1, 3]])
