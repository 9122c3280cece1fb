"""Batches over stacks, local or at URLs, read through each scratch (in memory, a mapped file, a shared
directory), in the first epoch, the second, and through a later scratch resuming the file, against
numpy's reads."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import vitrio as vio

from .files import FLOAT32_MODES, REAL_TYPES, fresh, mrc_files, tiff_files
from .reads import batches, cropped, examples, filled, patches
from .urls import served


def stacks(data, folder) -> list:
    """One to three drawn stacks, MRC or TIFF, of one image shape and real types."""
    shape = data.draw(st.tuples(st.integers(1, 16), st.integers(1, 16)), label="image shape")
    drawn = []
    for _ in range(data.draw(st.integers(1, 3), label="files")):
        mrc = mrc_files(folder, kinds=("stack",), modes=FLOAT32_MODES, shape=shape)
        tiff = tiff_files(folder, shape=shape, types=REAL_TYPES, pages=(2, 5))
        drawn.append(data.draw(st.one_of(mrc, tiff), label="stack"))
    return drawn


def scratch_maker(data, locations, folder, first: int, files):
    """What makes the drawn scratch over `locations`, and whether a second one made so resumes the
    first's file; it holds them all, or (`first`, the bytes of the first file in key order) fewer.
    `files` is the provider that asks the files for their shapes."""
    kind = data.draw(st.sampled_from(["host", "mapped", "directory"]), label="scratch")
    run = data.draw(st.integers(1, 5), label="run length")
    room = data.draw(st.sampled_from([None, first + 8192]), label="room")  # all of them, or what fits
    if kind == "host":
        return lambda: vio.create_host_image_scratch(locations, run, room, files=files), False
    if kind == "mapped":
        path = fresh(folder, "epochs.scratch")
        return lambda: vio.create_mapped_file_image_scratch(locations, path, run, room, files=files), True
    budget = 1 << 30 if room is None else room
    return lambda: vio.create_directory_image_scratch(locations, folder / "shared", run, budget, files), True


@examples(20)
@given(data=st.data())
def test_batches_through_each_scratch_read_as_the_files_bytes(folder, s3, http, data):
    drawn = stacks(data, folder)
    place = data.draw(st.sampled_from(["local", "local", "s3", "http"]), label="served from")
    keys = [served(d, place, s3, http) for d in drawn]
    options = keys[0][1]
    locations = [vio.ImageLocation(key, i) for d, (key, _) in zip(drawn, keys) for i in range(len(d.images))]
    images = np.concatenate([d.images.astype(np.float64) for d in drawn])
    first = drawn[min(range(len(drawn)), key=lambda i: keys[i][0])].images.nbytes
    files = vio.reader_provider(storage_options=options)
    make, resumes = scratch_maker(data, locations, folder, first, files)
    layouts = " | ".join(d.layout for d in drawn)
    scratch = make()
    loader = vio.loader(
        data.draw(st.integers(1, 3), label="workers"), scratch=scratch, storage_options=options
    )
    ahead = data.draw(st.lists(st.sampled_from(locations), max_size=4), label="prefetched")
    if ahead:
        vio.prefetch_scratch_async(scratch, ahead, loader.executor, files).get()
    epochs = ["first", "second"] + (["resumed"] if resumes else [])
    for epoch in epochs:
        if epoch == "resumed":
            del loader, scratch
            scratch = make()
            loader = vio.loader(
                data.draw(st.integers(1, 3), label="workers"), scratch=scratch, storage_options=options
            )
        slots = data.draw(batches(len(locations), most=3 * len(locations)), label=f"{epoch} epoch")
        out = filled((len(slots), *images.shape[1:]), np.float64)
        vio.read_batch_async(loader, out, [locations[i] for i in slots]).get()
        np.testing.assert_array_equal(out, images[slots], err_msg=f"{layouts}; {epoch} epoch {slots}")
        image = data.draw(st.integers(0, len(locations) - 1), label=f"{epoch} patched image")
        shape, centres = data.draw(patches(images.shape[1:]), label=f"{epoch} patches")
        out = filled((len(centres), *shape), np.float64)
        vio.read_patches_async(loader, out, locations[image], centres).get()
        expected = cropped(images, [image] * len(centres), centres, filled(out.shape, np.float64))
        message = f"{layouts}; {epoch} epoch's patches of {image} at {centres.tolist()}"
        np.testing.assert_array_equal(out, expected, err_msg=message)
