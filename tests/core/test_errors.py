"""Every error of vitrio is a `VitrioError` carrying the key of the file it concerns: the public API."""

from __future__ import annotations

import mrcfile
import numpy as np
import pytest

import vitrio as vio
from vitrio.data import Dataset, ImageSource

ERRORS = {
    vio.FormatError: (ValueError, RuntimeError),
    vio.ImageFileNotFoundError: (FileNotFoundError, RuntimeError),
    vio.ReadOnlyDestinationError: (TypeError, ValueError),
    vio.DestinationTypeError: (TypeError, ValueError),
    vio.IncompleteFileError: (ValueError,),
    vio.DeclaredTwiceError: (ValueError, RuntimeError),
}


@pytest.fixture
def stack(tmp_path):
    """A stack of 3 images written by mrcfile, not by vitrio."""
    path = tmp_path / "stack.mrcs"
    with mrcfile.new(path) as mrc:
        mrc.set_data(np.arange(3 * 4 * 5, dtype=np.float32).reshape(3, 4, 5))
        mrc.header.ispg = 0
    return path


def test_each_error_is_a_vitrio_error_and_of_its_published_classes():
    for error, bases in ERRORS.items():
        assert issubclass(error, vio.VitrioError)
        assert all(issubclass(error, base) for base in bases), error


def test_a_missing_file_carries_its_key(tmp_path):
    missing = str(tmp_path / "missing.mrc")
    loader = vio.loader(workers=2)
    calls = [
        lambda: vio.read(missing),
        lambda: vio.query_descriptor(missing),
        lambda: vio.query_metadata(missing),
        lambda: vio.read_batch_async(loader, np.zeros((1, 4, 5), np.float32), [missing]).get(),
    ]
    for call in calls:
        with pytest.raises(vio.ImageFileNotFoundError) as raised:
            call()
        assert raised.value.key == missing


def test_a_missing_zarr_store_is_the_same_error_as_a_missing_file(tmp_path):
    missing = str(tmp_path / "missing.zarr")
    with pytest.raises(vio.ImageFileNotFoundError) as raised:
        vio.read(missing)
    assert isinstance(raised.value, RuntimeError) and raised.value.key == missing


def test_a_corrupt_file_carries_its_key(tmp_path, stack):
    garbage = tmp_path / "garbage.mrc"
    garbage.write_bytes(b"not an image" * 100)
    truncated = tmp_path / "truncated.mrcs"
    truncated.write_bytes(stack.read_bytes()[:-7])
    for path in (garbage, truncated):
        with pytest.raises(vio.FormatError) as raised:
            vio.read(path)
        assert raised.value.key == str(path)


def test_an_index_past_the_end_carries_its_key(stack):
    loader = vio.loader(workers=2)
    calls = [
        lambda: vio.read(vio.ImageLocation(stack, 3)),
        lambda: vio.read_batch_async(
            loader,
            np.zeros((2, 4, 5), np.float32),
            [vio.ImageLocation(stack, 0), vio.ImageLocation(stack, 7)],
        ).get(),
        lambda: vio.read_patches_async(
            loader, np.zeros((1, 2, 2), np.float32), vio.ImageLocation(stack, 9), [[1, 1]]
        ).get(),
    ]
    for call in calls:
        with pytest.raises(IndexError) as raised:
            call()
        assert isinstance(raised.value, vio.VitrioError) and raised.value.key == str(stack)


def test_a_destination_that_cannot_hold_the_values_carries_the_key(stack):
    with pytest.raises(vio.DestinationTypeError) as raised:
        vio.read(stack.as_posix(), data_type="int8")
    assert raised.value.key == str(stack)


def test_a_write_with_no_format_carries_its_key(tmp_path):
    path = tmp_path / "image.unknown"
    with pytest.raises(vio.FormatError) as raised:
        vio.write_single(np.zeros((4, 5), np.float32), path)
    assert raised.value.key == str(path) and not path.exists()


def test_a_failed_batch_names_the_rows_of_the_file_its_error_carries(tmp_path, stack):
    other = tmp_path / "other.mrcs"
    with mrcfile.new(other) as mrc:
        mrc.set_data(np.zeros((3, 4, 5), np.float32))
    locations = [vio.ImageLocation(stack, 0), vio.ImageLocation(other, 1), vio.ImageLocation(other, 2)]
    dataset = Dataset({"image": ImageSource(locations)})
    other.unlink()
    with pytest.raises(vio.ImageFileNotFoundError) as raised:
        dataset.read_async([0, 1, 2], loader=vio.loader(workers=2)).get()
    assert raised.value.key == str(other)
    (note,) = raised.value.__notes__
    assert note.startswith("reading row 1 ") and "and 1 more" in note
