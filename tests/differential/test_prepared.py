"""Stacks read through `vitrio.data`: an `ImageSource`, a `PatchSource` of patches anywhere on their
images (fill beyond the edge), and a `PreparedSource` of a transform that changes nothing (held in
memory, or in its scratch file and served again to a later program), over shuffled epochs of a
`DataLoader`, against numpy's reads of the files."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import vitrio as vio
from vitrio.data import Compose, Invert

from .files import FLOAT32_MODES, FLOAT32_TYPES, fresh, mrc_files, tiff_files
from .reads import cropped, examples, patches


def unchanged(images):
    """The images as they are: a transform that prepares nothing."""
    return images


def epochs(dataset, images, batch_size: int, seed: int, loader):
    """Two shuffled epochs of `dataset`, each batch's images those numpy read for its rows; what the
    epochs' reads did."""
    batches = vio.data.DataLoader(dataset, batch_size, shuffle=True, seed=seed, loader=loader)
    for epoch in range(2):
        rows = []
        for batch in batches:
            np.testing.assert_array_equal(batch["image"], images[batch["index"]], err_msg=f"epoch {epoch}")
            rows.extend(batch["index"].tolist())
        assert sorted(rows) == list(range(len(images)))
    return batches.stats.reads


@examples(15)
@given(data=st.data())
def test_image_patch_and_prepared_sources_read_as_the_files_bytes(folder, data):
    shape = data.draw(st.tuples(st.integers(1, 16), st.integers(1, 16)), label="image shape")
    mrc = mrc_files(folder, kinds=("stack",), modes=FLOAT32_MODES, shape=shape)
    tiff = tiff_files(folder, shape=shape, types=FLOAT32_TYPES, pages=(2, 5))
    drawn = data.draw(st.lists(st.one_of(mrc, tiff), min_size=1, max_size=3), label="stacks")
    locations = [vio.ImageLocation(str(d.path), i) for d in drawn for i in range(len(d.images))]
    images = np.concatenate([d.images.astype(np.float32) for d in drawn])
    batch_size = data.draw(st.integers(1, len(images) + 1), label="batch size")
    seed = data.draw(st.integers(0, 2**16), label="seed")
    loader = vio.loader(data.draw(st.integers(1, 3), label="workers"))
    ways = ["image source", "patch source", "prepared", "prepared in a scratch file"]
    way = data.draw(st.sampled_from(ways), label="way")
    source = vio.data.ImageSource(locations, data_type="float32")
    if way == "patch source":
        shape, centres = data.draw(patches(images.shape[1:], most=2 * len(images)), label="patches")
        rows = data.draw(
            st.lists(st.sampled_from(range(len(images))), min_size=len(centres), max_size=len(centres))
        )
        fill = data.draw(st.sampled_from([0, -5]), label="fill")
        patched = vio.data.PatchSource([locations[i] for i in rows], centres, shape, "float32", fill)
        expected = cropped(images, rows, centres, np.full((len(rows), *shape), fill, np.float32))
        epochs(vio.data.Dataset({"image": patched}), expected, batch_size, seed, loader)
        return
    if way == "image source":
        epochs(vio.data.Dataset({"image": source}), images, batch_size, seed, loader)
        return
    if way == "prepared":
        prepared = vio.data.PreparedSource(source, unchanged)
        epochs(vio.data.Dataset({"image": prepared}), images, batch_size, seed, loader)
        assert prepared.prepared_count == len(images)
        return
    path = fresh(folder, "prepared.scratch")
    for program in ("first", "later"):  # the later program serves the images from the file
        prepared = vio.data.PreparedSource(source, Compose(Invert(), Invert()), scratch=path)
        reads = epochs(vio.data.Dataset({"image": prepared}), images, batch_size, seed, vio.loader(2))
        assert program == "first" or reads.files_opened == 0
