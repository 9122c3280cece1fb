"""The whole-file API: read, query_descriptor, write_single, write_stack, write."""

from __future__ import annotations

import gc
import os
import re

import mrcfile
import numpy as np
import pytest
import torch

import vitrio as vio


@pytest.fixture
def stack_file(tmp_path, rng):
    data = rng.normal(size=(4, 6, 5)).astype(np.float32)
    path = tmp_path / "stack.mrcs"
    vio.write_stack(data, path)
    return path, data


def test_read_whole_file_and_one_image(stack_file):
    path, data = stack_file
    whole = vio.read(path)
    assert isinstance(whole, np.ndarray) and whole.dtype == np.float32
    np.testing.assert_array_equal(whole, data)
    np.testing.assert_array_equal(vio.read(str(path)), data)
    for i in range(4):
        np.testing.assert_array_equal(vio.read(vio.ImageLocation(path, i)), data[i])


def test_plain_string_is_a_key_never_parsed(tmp_path, rng, monkeypatch):
    stack = rng.normal(size=(3, 4, 4)).astype(np.float32)
    single = rng.normal(size=(1, 4, 4)).astype(np.float32)
    vio.write_stack(stack, tmp_path / "x.mrcs")
    vio.write_stack(single, tmp_path / "2@x.mrcs")  # a file named like a RELION location
    monkeypatch.chdir(tmp_path)
    np.testing.assert_array_equal(vio.read("2@x.mrcs"), single)
    np.testing.assert_array_equal(vio.read(vio.ImageLocation.from_string("2@x.mrcs")), stack[1])
    assert vio.query_descriptor("2@x.mrcs").extents == (1, 4, 4)


@pytest.mark.parametrize("data_type", ["float64", np.float64, np.dtype("float64"), vio.NumericalType.float64])
def test_read_with_data_type(stack_file, data_type):
    path, data = stack_file
    read = vio.read(path, data_type=data_type)
    assert read.dtype == np.float64
    np.testing.assert_array_equal(read, data.astype(np.float64))
    image = vio.read(vio.ImageLocation(path, 2), data_type=data_type)
    assert image.dtype == np.float64 and image.shape == (6, 5)
    np.testing.assert_array_equal(image, data[2])


def test_read_into_out(stack_file):
    path, data = stack_file
    out = np.zeros((4, 6, 5), np.float32)
    assert vio.read(path, out=out) is out
    np.testing.assert_array_equal(out, data)
    wide = np.zeros((6, 5), np.float64)
    assert vio.read(vio.ImageLocation(path, 3), out=wide) is wide
    np.testing.assert_array_equal(wide, data[3])
    tensor = torch.zeros(6, 5)
    pointer = tensor.data_ptr()
    assert vio.read(vio.ImageLocation(path, 1), out=tensor) is tensor
    assert tensor.data_ptr() == pointer
    np.testing.assert_array_equal(tensor.numpy(), data[1])
    big = np.zeros((6, 10), np.float32)
    vio.read(vio.ImageLocation(path, 0), out=big[:, ::2])
    np.testing.assert_array_equal(big[:, ::2], data[0])
    assert (big[:, 1::2] == 0).all()


def test_read_out_errors(stack_file):
    path, _ = stack_file
    with pytest.raises(ValueError, match="give data_type or out, not both"):
        vio.read(path, data_type="float32", out=np.zeros((4, 6, 5), np.float32))
    with pytest.raises(ValueError, match="stack.mrcs"):
        vio.read(path, out=np.zeros((4, 5, 6), np.float32))
    with pytest.raises(ValueError, match=r"stack.mrcs: reads as shape \(6, 5\), out has shape \(4, 6, 5\)"):
        vio.read(vio.ImageLocation(path, 0), out=np.zeros((4, 6, 5), np.float32))
    read_only = np.zeros((4, 6, 5), np.float32)
    read_only.setflags(write=False)
    with pytest.raises(ValueError, match="the destination is read only"):
        vio.read(path, out=read_only)


def test_read_errors_name_the_file(tmp_path, stack_file):
    path, _ = stack_file
    with pytest.raises(IndexError, match=r"stack\.mrcs: index 4 is past the end of a stack of 4"):
        vio.read(vio.ImageLocation(path, 4))
    with pytest.raises(FileNotFoundError, match="missing.mrc"):
        vio.read(tmp_path / "missing.mrc")
    (tmp_path / "junk.mrc").write_bytes(b"\x01" * 100)
    with pytest.raises(ValueError, match="junk.mrc"):
        vio.read(tmp_path / "junk.mrc")
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ValueError, match="notes.txt"):
        vio.read(tmp_path / "notes.txt")


def test_read_through_a_given_provider(stack_file):
    path, data = stack_file
    readers = vio.reader_provider(cache=2)
    np.testing.assert_array_equal(vio.read(vio.ImageLocation(path, 1), readers=readers), data[1])
    assert readers.reader_count == 1
    assert vio.query_descriptor(path, readers=readers) == vio.ImageDescriptor((4, 6, 5), 2, "float32")


def test_query_descriptor(tmp_path, rng):
    vio.write_single(rng.normal(size=(3, 4, 5)).astype(np.float16), tmp_path / "v.mrc")
    assert vio.query_descriptor(tmp_path / "v.mrc") == vio.ImageDescriptor((3, 4, 5), 3, "float16")
    assert vio.query_descriptor(str(tmp_path / "v.mrc")) == vio.ImageDescriptor((3, 4, 5), 3, "float16")
    with pytest.raises(FileNotFoundError, match="nothing.tif"):
        vio.query_descriptor(tmp_path / "nothing.tif")


# ---------------------------------------------------------------- writing


@pytest.mark.parametrize("extension", [".mrc", ".tif"])
def test_write_with_descriptor_and_data_type(tmp_path, rng, extension):
    data = rng.integers(0, 100, size=(2, 3, 4, 5)).astype(np.int32)
    descriptor = vio.ImageDescriptor((2, 3, 4, 5), 3, "int16")
    vio.write(data, tmp_path / ("w" + extension), descriptor)
    assert vio.query_descriptor(tmp_path / ("w" + extension)) == descriptor
    np.testing.assert_array_equal(vio.read(tmp_path / ("w" + extension)), data.astype(np.int16))
    vio.write_single(data[0], tmp_path / ("s" + extension), data_type=np.dtype("float32"))
    assert vio.query_descriptor(tmp_path / ("s" + extension)).data_type is vio.NumericalType.float32
    vio.write_stack(data[0], tmp_path / ("k" + extension), data_type=vio.NumericalType.uint16)
    assert vio.query_descriptor(tmp_path / ("k" + extension)) == vio.ImageDescriptor((3, 4, 5), 2, "uint16")


def test_write_from_views_tensors_and_lists(tmp_path, rng):
    data = rng.normal(size=(5, 6)).astype(np.float32)
    vio.write_single(data.T, tmp_path / "t.mrc")
    np.testing.assert_array_equal(vio.read(tmp_path / "t.mrc"), data.T)
    vio.write_single(torch.from_numpy(data), tmp_path / "torch.tif")
    np.testing.assert_array_equal(vio.read(tmp_path / "torch.tif"), data)
    with pytest.raises(TypeError, match="numpy.asarray"):  # a list is not converted, as published
        vio.write_single([[1, 2], [3, 4]], tmp_path / "list.tif", data_type="int16")
    vio.write_single(np.asarray([[1, 2], [3, 4]]), tmp_path / "list.tif", data_type="int16")
    np.testing.assert_array_equal(vio.read(tmp_path / "list.tif"), [[1, 2], [3, 4]])


def _listing(directory) -> list[str]:
    return sorted(os.listdir(directory))


@pytest.mark.parametrize("extension", [".mrc", ".tif"])
def test_write_errors_leave_nothing(tmp_path, extension):
    path = tmp_path / ("x" + extension)
    with pytest.raises(
        ValueError, match=rf"x{re.escape(extension)}: an array of shape \(3, 4\) does not fit"
    ):
        vio.write(np.zeros((3, 4)), path, vio.ImageDescriptor((4, 3), 2, "float32"))
    with pytest.raises(
        ValueError, match=rf"x{re.escape(extension)}: an array of shape \(2, 3, 4\) does not fit"
    ):
        vio.write(np.zeros((2, 3, 4)), path, vio.ImageDescriptor((3, 3, 4), 2, "float32"))
    with pytest.raises(
        ValueError,
        match=rf"x{re.escape(extension)}: a single image or volume is 2-D or 3-D, not of shape \(4,\)",
    ):
        vio.write_single(np.zeros(4), path)
    with pytest.raises(
        ValueError,
        match=rf"x{re.escape(extension)}: a single image or volume is 2-D or 3-D, not of shape \(1, 2, 3,",
    ):
        vio.write_single(np.zeros((1, 2, 3, 4)), path)
    with pytest.raises(
        ValueError, match=rf"x{re.escape(extension)}: a stack is 3-D or 4-D, not of shape \(3, 4\)"
    ):
        vio.write_stack(np.zeros((3, 4)), path)
    with pytest.raises(ValueError, match="x.unknown: no format writes files ending '.unknown'"):
        vio.write_single(np.zeros((3, 4)), tmp_path / "x.unknown")
    with pytest.raises(FileNotFoundError, match=f"dir{re.escape(extension)}: no directory"):
        vio.write_single(np.zeros((3, 4)), tmp_path / "no" / "such" / ("dir" + extension))
    assert _listing(tmp_path) == []


@pytest.mark.parametrize("extension", [".mrcs", ".tif"])
def test_write_failing_midway_leaves_no_file_and_no_partial(tmp_path, extension):
    source = np.zeros((4, 3, 3), dtype=object)
    source[3, 1, 1] = "not a number"  # converting image 3 fails, after 0..2 were written
    path = tmp_path / ("mid" + extension)
    with pytest.raises(ValueError):
        vio.write_stack(source, path, data_type="float32")
    assert _listing(tmp_path) == []


def test_failed_write_keeps_the_file_that_was_there(tmp_path):
    path = tmp_path / "keep.mrc"
    vio.write_single(np.ones((3, 3), np.float32), path)
    before = path.read_bytes()
    source = np.zeros((3, 3), dtype=object)
    source[2, 2] = object()
    with pytest.raises(TypeError):
        vio.write_single(source, path, data_type="float32")
    assert path.read_bytes() == before
    assert _listing(tmp_path) == ["keep.mrc"]


@pytest.mark.parametrize("extension", [".mrc", ".tif"])
def test_write_failing_at_the_rename_leaves_no_partial(tmp_path, monkeypatch, extension):
    def refuse(*args, **kwargs):
        raise PermissionError("no renaming today")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(PermissionError, match=f"r{re.escape(extension)}: no renaming today"):
        vio.write_single(np.ones((3, 3), np.float32), tmp_path / ("r" + extension))
    monkeypatch.undo()
    assert _listing(tmp_path) == []


def test_mrc_refuses_volumes_in_a_mrcs_file(tmp_path):
    with pytest.raises(ValueError, match="v.mrcs"):
        vio.write_single(np.zeros((3, 4, 5), np.float32), tmp_path / "v.mrcs")
    with pytest.raises(ValueError, match="v.mrcs: a .mrcs file is a stack of images, it cannot hold volumes"):
        vio.write_stack(np.zeros((2, 3, 4, 5), np.float32), tmp_path / "v.mrcs")
    assert _listing(tmp_path) == []


def test_empty_stacks(tmp_path):
    vio.write_stack(np.zeros((0, 4, 5), np.float32), tmp_path / "e.mrcs")
    assert vio.query_descriptor(tmp_path / "e.mrcs") == vio.ImageDescriptor((0, 4, 5), 2, "float32")
    assert vio.read(tmp_path / "e.mrcs").shape == (0, 4, 5)
    with mrcfile.open(str(tmp_path / "e.mrcs"), permissive=False) as mrc:
        assert mrc.data.shape == (0, 4, 5)
    vio.write_stack(np.zeros((0, 3, 4, 5), np.int16), tmp_path / "e.mrc")
    assert vio.query_descriptor(tmp_path / "e.mrc") == vio.ImageDescriptor((0, 3, 4, 5), 3, "int16")
    with pytest.raises(IndexError, match=r"e\.mrc: index 0 is past the end of a stack of 0"):
        vio.read(vio.ImageLocation(tmp_path / "e.mrc", 0))
    for name, values in [
        ("x.tif", np.zeros((0, 4, 5))),
        ("y.mrc", np.zeros((4, 0))),
        ("z.tif", np.zeros((4, 0))),
    ]:
        with pytest.raises(ValueError, match=name):
            (vio.write_stack if values.ndim == 3 else vio.write_single)(values, tmp_path / name)
    assert _listing(tmp_path) == ["e.mrc", "e.mrcs"]


def test_writer_provider_dropped_unclosed_leaves_nothing(tmp_path):
    writers = vio.writer_provider()
    writers.declare(tmp_path / "lost.mrcs", vio.ImageDescriptor((2, 3, 3), 2, "float32"))
    location = vio.ImageLocation(tmp_path / "lost.mrcs", 0)
    vio.write_batch_async(vio.saver(writers, workers=1), np.ones((1, 3, 3)), [location]).get()
    assert len(_listing(tmp_path)) == 1  # the partial file, beside the path
    with pytest.warns(ResourceWarning):
        del writers
        gc.collect()
    assert _listing(tmp_path) == []
