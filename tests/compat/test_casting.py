"""The published vitrio's lossy conversion, spelt out: `casting="unsafe"` reads a float file into an integer
type as numpy's `casting="unsafe"` does; without it, such a read raises `DestinationTypeError` naming it."""

from __future__ import annotations

from pathlib import Path

import mrcfile
import numpy as np
import pytest

import vitrio as vio
from vitrio.cli import main
from vitrio.data import Dataset, ImageSource, PatchSource

UNSAFE = 'casting="unsafe"'


@pytest.fixture
def floats(tmp_path: Path) -> tuple[str, np.ndarray]:
    """A stack of float32 values with fractions, of both signs, within int16's range."""
    values = (np.random.default_rng(11).standard_normal((4, 10, 12)) * 900).astype(np.float32)
    values[0, 0, :3] = (-2.7, 2.7, -0.5)
    path = str(tmp_path / "floats.mrcs")
    vio.write_stack(values, path)
    return path, values


def test_read_converts_as_numpy_unsafe_only_when_asked(floats):
    path, values = floats
    expected = values.astype(np.int16)  # numpy's casting="unsafe": fractions cut toward zero
    assert expected[0, 0, :3].tolist() == [-2, 2, 0]
    for kwargs in ({"data_type": "int16"}, {"out": np.empty(values.shape, np.int16)}):
        with pytest.raises(vio.DestinationTypeError, match=UNSAFE):
            vio.read(path, **kwargs)
        read = vio.read(path, **kwargs, casting="unsafe")
        np.testing.assert_array_equal(read, expected)
        assert read.dtype == np.int16
    one = vio.read(vio.ImageLocation(path, 2), data_type=np.uint8, casting="unsafe")
    np.testing.assert_array_equal(one, values[2].astype(np.uint8))
    with pytest.raises(ValueError, match="casting"):
        vio.read(path, data_type="int16", casting="same_kind")


def test_batches_and_patches_convert_as_numpy_unsafe_only_when_asked(floats):
    path, values = floats
    loader = vio.loader(workers=2)
    locations = [vio.ImageLocation(path, i) for i in (3, 0, 2)]
    batch = np.empty((3, 10, 12), np.int16)
    with pytest.raises(vio.DestinationTypeError, match=UNSAFE):
        vio.read_batch_async(loader, batch, locations).get()
    vio.read_batch_async(loader, batch, locations, casting="unsafe").get()
    np.testing.assert_array_equal(batch, values[[3, 0, 2]].astype(np.int16))
    patches = np.zeros((2, 4, 4), np.int32)
    centres = [[2, 2], [5, 6]]
    with pytest.raises(vio.DestinationTypeError, match=UNSAFE):
        vio.read_patches_async(loader, patches, vio.ImageLocation(path, 0), centres).get()
    vio.read_patches_async(loader, patches, vio.ImageLocation(path, 0), centres, casting="unsafe").get()
    np.testing.assert_array_equal(patches[0], values[0, 0:4, 0:4].astype(np.int32))
    np.testing.assert_array_equal(patches[1], values[0, 3:7, 4:8].astype(np.int32))


def test_sources_convert_as_numpy_unsafe_only_when_asked(floats):
    path, values = floats
    locations = [vio.ImageLocation(path, i) for i in range(4)]
    with pytest.raises(vio.DestinationTypeError, match=UNSAFE):
        ImageSource(locations, data_type="int16")
    centres = np.array([[5, 6]] * 4)
    with pytest.raises(vio.DestinationTypeError, match=UNSAFE):
        PatchSource(locations, centres, (4, 4), data_type="int16")
    dataset = Dataset(
        {
            "image": ImageSource(locations, data_type="int16", casting="unsafe"),
            "patch": PatchSource(locations, centres, (4, 4), data_type="int16", casting="unsafe"),
        }
    )
    batch = dataset[np.array([2, 1])]
    np.testing.assert_array_equal(batch["image"], values[[2, 1]].astype(np.int16))
    np.testing.assert_array_equal(batch["patch"], values[[2, 1], 3:7, 4:8].astype(np.int16))
    subset = dataset.subset(np.array([3]))  # a subset keeps the casting
    np.testing.assert_array_equal(subset[np.array([0])]["image"], values[[3]].astype(np.int16))


def test_convert_takes_casting_unsafe(floats, tmp_path: Path, capsys):
    path, values = floats
    out = str(tmp_path / "out.mrcs")
    assert main(["convert", path, out, "--data-type", "int16"]) == 1
    assert "--casting unsafe" in capsys.readouterr().err
    assert main(["convert", path, out, "--data-type", "int16", "--casting", "unsafe"]) == 0
    with mrcfile.open(out) as mrc:
        np.testing.assert_array_equal(mrc.data, values.astype(np.int16))
