"""read_indexed_async and read_patches_indexed_async: the planned reads, arguments checked at the call."""

from __future__ import annotations

import numpy as np
import pytest

import vitrio as vio

from .helpers import expected_patch


@pytest.fixture
def files(tmp_path, rng):
    """Two stacks of 4 and 3 images of 6 x 5 float32, and one image of 6 x 5."""
    stacks = [rng.normal(size=(n, 6, 5)).astype(np.float32) for n in (4, 3)]
    keys = [str(tmp_path / "a.mrcs"), str(tmp_path / "b.mrcs"), str(tmp_path / "c.mrc")]
    vio.write_stack(stacks[0], keys[0])
    vio.write_stack(stacks[1], keys[1])
    single = rng.normal(size=(6, 5)).astype(np.float32)
    vio.write_single(single, keys[2])
    return keys, stacks, single


@pytest.fixture
def loader():
    return vio.loader(workers=2)


def test_reads_image_i_of_file_key_ids_i_into_slot_i(files, loader):
    keys, stacks, _ = files
    key_ids = np.array([1, 0, 0, 1, 0, 0])
    indices = np.array([2, 3, 0, 0, 1, 3])
    out = np.zeros((6, 6, 5), np.float64)
    vio.read_indexed_async(loader, out, keys[:2], key_ids, indices).get()
    for slot, (key_id, index) in enumerate(zip(key_ids, indices)):
        np.testing.assert_array_equal(out[slot], stacks[key_id][index])


def test_reads_whole_files_where_every_index_is_minus_one(files, loader):
    keys, _, single = files
    out = np.zeros((2, 6, 5), np.float32)
    vio.read_indexed_async(loader, out, keys, [2, 2], [-1, -1]).get()
    np.testing.assert_array_equal(out, [single, single])


def test_nothing_to_read_completes_at_once(files, loader):
    out = np.zeros((0, 6, 5), np.float32)
    vio.read_indexed_async(loader, out, files[0], np.zeros(0, np.int64), np.zeros(0, np.int64)).get()


def test_an_index_past_the_end_surfaces_from_get(files, loader):
    keys, _, _ = files
    out = np.zeros((2, 6, 5), np.float32)
    completion = vio.read_indexed_async(loader, out, keys, [0, 1], [0, 3])
    with pytest.raises(IndexError, match=r"b\.mrcs: index 3 is past the end of a stack of 3"):
        completion.get()


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        ({"out": [[0.0]]}, TypeError, "out is a numpy array"),
        ({"keys": "a.mrcs"}, TypeError, "keys is a sequence"),
        ({"key_ids": [0.0, 1.0]}, TypeError, "key_ids are integers"),
        ({"indices": np.array(["0", "1"])}, TypeError, "indices are integers"),
        ({"key_ids": [0]}, ValueError, r"key_ids are one per slot .* 2 .* shape \(1,\)"),
        ({"indices": [[0, 1]]}, ValueError, r"indices are one per slot .* shape \(1, 2\)"),
        ({"key_ids": [0, 3]}, ValueError, r"key_ids\[1\] is 3, not the number of one of the 3 keys"),
        ({"key_ids": [-1, 0]}, ValueError, r"key_ids\[0\] is -1"),
        ({"indices": [0, -2]}, ValueError, r"indices\[1\] is -2"),
        ({"indices": [-1, 0]}, ValueError, "mix -1"),
    ],
)
def test_read_indexed_checks_its_arguments_at_the_call(files, loader, change, error, match):
    keys, _, _ = files
    arguments = {"out": np.zeros((2, 6, 5), np.float32), "keys": keys, "key_ids": [0, 1], "indices": [0, 1]}
    arguments |= change
    with pytest.raises(error, match=match):
        vio.read_indexed_async(loader, **arguments)


def test_read_only_destination_is_refused(files, loader):
    keys, _, _ = files
    out = np.zeros((1, 6, 5), np.float32)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        vio.read_indexed_async(loader, out, keys, [0], [0])


def test_crops_patch_i_out_of_image_image_ids_i(files, loader):
    keys, stacks, single = files
    images = [(keys[0], 3), (keys[2], -1), (keys[1], 0)]
    sources = [stacks[0][3], single, stacks[1][0]]
    image_ids = np.array([2, 0, 1, 0, 2])
    centres = np.array([[0, 0], [3, 2], [5, 4], [6, 9], [2, 2]])
    out = np.full((5, 3, 4), 9.0)
    vio.read_patches_indexed_async(loader, out, images, image_ids, centres, fill=-1.0).get()
    for slot, (image_id, centre) in enumerate(zip(image_ids, centres)):
        np.testing.assert_array_equal(out[slot], expected_patch(sources[image_id], centre, (3, 4), -1.0))


def test_patches_without_fill_leave_what_lies_beyond(files, loader):
    keys, stacks, _ = files
    out = np.full((1, 3, 3), 9.0, np.float32)
    vio.read_patches_indexed_async(loader, out, [(keys[0], 1)], [0], [[0, 0]]).get()
    np.testing.assert_array_equal(out[0], expected_patch(stacks[0][1], (0, 0), (3, 3), 9.0))


def test_a_patch_past_the_end_of_a_stack_surfaces_from_get(files, loader):
    keys, _, _ = files
    out = np.zeros((1, 3, 3), np.float32)
    completion = vio.read_patches_indexed_async(loader, out, [(keys[1], 5)], [0], [[1, 1]])
    with pytest.raises(IndexError, match=r"b\.mrcs: index 5 is past the end of a stack of 3"):
        completion.get()


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        ({"out": 3}, TypeError, "out is a numpy array"),
        ({"images": None}, TypeError, "images is a sequence"),
        ({"image_ids": [0.5, 0]}, TypeError, "image_ids are integers"),
        ({"image_ids": [0, 0, 0]}, ValueError, r"image_ids are one per slot .* 2 .* shape \(3,\)"),
        ({"image_ids": [0, 1]}, ValueError, r"image_ids\[1\] is 1, not the number of one of the 1 images"),
        ({"centres": [[1.0, 1.0], [2.0, 2.0]]}, TypeError, "centres must be integers"),
        ({"centres": [[1, 1]]}, ValueError, r"centres are a row of 2 coordinates for each of the 2 patches"),
        ({"centres": [[1, 1, 1], [2, 2, 2]]}, ValueError, r"their shape is \(2, 3\)"),
        ({"centres": [[1, 1], [-2, 2]]}, ValueError, "negative"),
    ],
)
def test_read_patches_indexed_checks_its_arguments_at_the_call(files, loader, change, error, match):
    keys, _, _ = files
    arguments = {
        "out": np.zeros((2, 3, 3), np.float32),
        "images": [(keys[0], 0)],
        "image_ids": [0, 0],
        "centres": [[1, 1], [2, 2]],
    }
    arguments |= change
    with pytest.raises(error, match=match):
        vio.read_patches_indexed_async(loader, **arguments)
