"""What `read` returns: a `vitrio.Array`, with the published attributes and numpy's convenience."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

import vitrio as vio
from vitrio import NumericalType as NT


@pytest.fixture
def image(tmp_path, rng):
    data = rng.normal(size=(4, 6)).astype(np.float32)
    vio.write_single(data, tmp_path / "image.mrc")
    return tmp_path / "image.mrc", data


def test_read_returns_an_array_with_the_published_repr(image):
    path, data = image
    for array in (vio.read(path), vio.read(path, readers=vio.reader_provider())):
        assert isinstance(array, vio.Array) and isinstance(array, np.ndarray)
        assert repr(array) == "Array(shape=(4, 6), data_type=NumericalType.float32)"
        assert array.data_type is NT.float32 and array.shape == (4, 6) and len(array) == 4
        np.testing.assert_array_equal(array, data)
    assert "[" in str(vio.read(path))  # str() still shows values


def test_data_type_is_the_files_or_the_one_asked_for(tmp_path):
    vio.write_single(np.arange(12, dtype=np.int16).reshape(3, 4), tmp_path / "i.mrc")
    assert vio.read(tmp_path / "i.mrc").data_type is NT.int16
    for wanted in (NT.float64, "float64", np.float64):
        read = vio.read(tmp_path / "i.mrc", data_type=wanted)
        assert read.data_type is NT.float64 and read.dtype == np.float64


def test_buffer_protocol_and_dlpack_share_memory(image):
    array = vio.read(image[0])
    view = memoryview(array)
    assert (view.format, view.itemsize, view.shape, view.strides) == ("f", 4, (4, 6), (24, 4))
    assert not view.readonly and view.c_contiguous
    tensor = torch.from_dlpack(array)
    copy_free = np.from_dlpack(array, copy=False)
    tensor[0, 0] = 42.0
    assert array[0, 0] == 42.0 and copy_free[0, 0] == 42.0 and np.asarray(view)[0, 0] == 42.0
    assert array.__dlpack_device__() == (1, 0)
    array.__dlpack__(dl_device=(1, 0))
    del array
    assert copy_free[0, 0] == 42.0  # a view keeps the memory alive


def test_dlpack_refuses_copies_and_other_devices(image):
    array = vio.read(image[0])
    with pytest.raises(BufferError):
        array.__dlpack__(copy=True)
    with pytest.raises(BufferError):
        array.__dlpack__(dl_device=(2, 0))


def test_views_stay_arrays_results_of_arithmetic_do_not(image):
    array = vio.read(image[0])
    assert isinstance(array[1:], vio.Array) and repr(array[1:]).startswith("Array(shape=(3, 6)")
    assert type(array + 1) is np.ndarray and type(np.sqrt(np.abs(array))) is np.ndarray
    assert isinstance(array.sum(), np.floating)


def test_an_array_is_taken_back_as_source_and_out(image, tmp_path):
    path, data = image
    array = vio.read(path)
    vio.write_single(array, tmp_path / "again.tif")
    out = vio.read(tmp_path / "again.tif")
    assert vio.read(path, out=out) is out
    np.testing.assert_array_equal(out, data)
    assert pickle.loads(pickle.dumps(array)).data_type is NT.float32


def test_a_rank_0_array_has_no_len(image):
    with pytest.raises(TypeError):
        len(vio.read(image[0])[0, 0, ...])


def test_complex_float16_reads_but_is_handed_to_no_one(tmp_path, rng):
    data = (rng.normal(size=(3, 4)) + 1j * rng.normal(size=(3, 4))).astype(np.complex64)
    vio.write_single(data, tmp_path / "c.mrc")
    held = vio.read(tmp_path / "c.mrc", data_type=NT.complex_float16)
    assert held.data_type is NT.complex_float16 and held.shape == (3, 4) and len(held) == 3
    assert repr(held) == "Array(shape=(3, 4), data_type=NumericalType.complex_float16)"
    for hand_out in (np.asarray, np.from_dlpack):
        with pytest.raises((RuntimeError, TypeError, ValueError, BufferError)):
            hand_out(held)
