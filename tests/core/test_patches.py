"""read_patches_async: patches around centres, in 2-D and 3-D, at and beyond the edges."""

from __future__ import annotations

import numpy as np
import pytest
import tifffile
import torch

import vitrio as vio

from .helpers import expected_patch, write_mrc_by_hand


@pytest.fixture
def micrograph(tmp_path, rng):
    image = rng.normal(size=(20, 24)).astype(np.float32)
    vio.write_single(image, tmp_path / "m.mrc")
    return tmp_path / "m.mrc", image


def _as_centres(kind: str, rows: list[list[int]]):
    if kind == "table":
        table = vio.IndexTable(len(rows[0]))
        for row in rows:
            table.add(row)
        return table
    if kind == "array":
        return np.array(rows, dtype=np.uint32)
    return rows


@pytest.mark.parametrize("kind", ["table", "array", "lists"])
@pytest.mark.parametrize("shape", [(5, 6), (4, 4), (1, 7)])
def test_2d_patches(micrograph, kind, shape):
    path, image = micrograph
    rows = [[10, 12], [0, 0], [19, 23], [3, 20], [7, 1], [25, 30], [22, 27]]
    destination = np.full((len(rows), *shape), -7.0, dtype=np.float32)
    vio.read_patches_async(vio.loader(workers=2), destination, path, _as_centres(kind, rows)).get()
    for patch, centre in zip(destination, rows):
        np.testing.assert_array_equal(patch, expected_patch(image, centre, shape, -7.0))
        cy, cx = centre
        if cy < 20 and cx < 24:
            assert patch[shape[0] // 2, shape[1] // 2] == image[cy, cx]


def test_centre_lands_at_extent_halved(micrograph):
    path, image = micrograph
    destination = np.zeros((1, 4, 5), np.float32)
    vio.read_patches_async(vio.loader(workers=1), destination, path, [[9, 11]]).get()
    np.testing.assert_array_equal(destination[0], image[7:11, 9:14])
    assert destination[0, 2, 2] == image[9, 11]


@pytest.mark.parametrize("kind", ["table", "array", "lists"])
def test_3d_patches(tmp_path, rng, kind):
    volume = rng.integers(-500, 500, size=(9, 10, 11)).astype(np.int16)
    write_mrc_by_hand(tmp_path / "t.mrc", volume, 1, order=">", ispg=1)  # big-endian, converted
    rows = [[4, 5, 5], [0, 0, 0], [8, 9, 10], [2, 11, 3], [20, 20, 20]]
    destination = np.full((len(rows), 3, 4, 5), np.nan, dtype=np.float64)
    vio.read_patches_async(
        vio.loader(workers=2), destination, tmp_path / "t.mrc", _as_centres(kind, rows)
    ).get()
    for patch, centre in zip(destination, rows):
        np.testing.assert_array_equal(patch, expected_patch(volume, centre, (3, 4, 5), np.nan))


def test_patch_wholly_beyond_one_edge_leaves_the_destination(micrograph, tmp_path, rng):
    """A patch beyond the image along one axis, across it along another, reads nothing."""
    path, image = micrograph
    rows = [[40, 2], [3, 50], [10, 12]]
    destination = np.full((3, 5, 6), -7.0, dtype=np.float32)
    vio.read_patches_async(vio.loader(workers=1), destination, path, rows).get()
    assert (destination[:2] == -7).all()
    np.testing.assert_array_equal(destination[2], image[8:13, 9:15])
    volume = rng.normal(size=(6, 7, 8)).astype(np.float32)
    vio.write_single(volume, tmp_path / "v.tif")
    patches = np.full((2, 2, 3, 4), 3.0, dtype=np.float32)
    vio.read_patches_async(vio.loader(workers=1), patches, tmp_path / "v.tif", [[1, 30, 1], [2, 2, 2]]).get()
    assert (patches[0] == 3).all()
    np.testing.assert_array_equal(patches[1], volume[1:3, 1:4, 0:4])


def test_patches_of_an_image_of_a_stack(tmp_path, rng):
    stack = rng.normal(size=(3, 12, 12)).astype(np.float32)
    vio.write_stack(stack, tmp_path / "s.mrcs")
    tifffile.imwrite(tmp_path / "s.tif", stack, photometric="minisblack", compression="zlib")
    for name in ("s.mrcs", "s.tif"):
        destination = torch.full((2, 4, 4), -1.0)
        pointer = destination.data_ptr()
        location = vio.ImageLocation(tmp_path / name, 2)
        vio.read_patches_async(vio.loader(workers=2), destination, location, [[6, 6], [11, 0]]).get()
        assert destination.data_ptr() == pointer
        np.testing.assert_array_equal(destination[0].numpy(), stack[2, 4:8, 4:8])
        np.testing.assert_array_equal(destination[1].numpy(), expected_patch(stack[2], (11, 0), (4, 4), -1.0))


def test_no_centres(micrograph):
    """No centres: nothing to read (the file is not even opened), done at once; a destination that does
    not hold no patches is refused."""
    path, _ = micrograph
    for key in (path, path.parent / "absent.mrc"):
        for centres in ([], vio.IndexTable(2)):
            out = np.zeros((0, 3, 3), np.float32)
            completion = vio.read_patches_async(vio.loader(workers=1), out, key, centres)
            assert completion.is_ready and completion.get() is None
    with pytest.raises(ValueError, match="leading extent must be the number of centres, 0: its shape is"):
        vio.read_patches_async(vio.loader(workers=1), np.zeros((1, 3, 3), np.float32), path, [])


def test_patch_errors_at_the_call(micrograph):
    path, _ = micrograph
    loader = vio.loader(workers=1)
    with pytest.raises(ValueError, match="centres must not be negative"):
        vio.read_patches_async(loader, np.zeros((1, 3, 3), np.float32), path, [[-1, 4]])
    with pytest.raises(ValueError, match="centres must not be negative"):
        vio.read_patches_async(loader, np.zeros((1, 3, 3), np.float32), path, np.array([[4, -4]]))
    with pytest.raises(ValueError, match=r"patches of shape \(3, 3\) do not fit centres of rank 3"):
        vio.read_patches_async(loader, np.zeros((1, 3, 3), np.float32), path, [[1, 2, 3]])
    with pytest.raises(ValueError, match=r"patches of shape \(3, 3, 3\) do not fit centres of rank 2"):
        vio.read_patches_async(loader, np.zeros((1, 3, 3, 3), np.float32), path, [[1, 2]])
    with pytest.raises(
        ValueError, match=r"leading extent must be the number of centres, 1: its shape is \(2, 3, 3\)"
    ):
        vio.read_patches_async(loader, np.zeros((2, 3, 3), np.float32), path, [[1, 2]])
    with pytest.raises(TypeError, match="centres must be integers, not float64"):
        vio.read_patches_async(loader, np.zeros((1, 3, 3), np.float32), path, [[1.5, 2.0]])


def test_patch_errors_from_get_name_the_file(tmp_path, micrograph, rng):
    path, _ = micrograph
    loader = vio.loader(workers=1)
    vio.write_stack(rng.normal(size=(2, 8, 8)).astype(np.float32), tmp_path / "s.mrcs")
    cases = [
        (np.zeros((1, 3, 3), np.float32), tmp_path / "s.mrcs", [[1, 1]], ValueError),  # a whole stack
        (np.zeros((1, 3, 3), np.float32), vio.ImageLocation(tmp_path / "s.mrcs", 2), [[1, 1]], IndexError),
        (np.zeros((1, 3, 3), np.float32), tmp_path / "none.mrc", [[1, 1]], FileNotFoundError),
        (np.zeros((1, 3, 3, 3), np.float32), path, [[1, 1, 1]], ValueError),  # 3-D patches of an image
    ]
    for destination, location, centres, error in cases:
        completion = vio.read_patches_async(loader, destination, location, centres)
        name = location.key if isinstance(location, vio.ImageLocation) else str(location)
        with pytest.raises(error, match=name.rsplit("/", 1)[-1]):
            completion.get()
