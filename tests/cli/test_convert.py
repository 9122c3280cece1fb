"""`vitrio convert`: MRC to TIFF and back, stacks and volumes, checked with mrcfile and tifffile."""

from __future__ import annotations

import io
import os
import shutil
import sys
import tempfile
from pathlib import Path

import mrcfile
import numpy as np
import pytest
import tifffile

import vitrio as vio
from vitrio.cli import main

from ..half_complex import write_half_complex
from .helpers import Result, assert_fails, leftovers

OTHER = 12345  # the uid and gid of another user, who may not write in root's folders


@pytest.fixture
def stack(tmp_path: Path) -> tuple[Path, np.ndarray]:
    """An MRC stack of 7 images of 20 x 24 int16, written by mrcfile."""
    values = np.random.default_rng(3).integers(-3000, 3000, (7, 20, 24)).astype(np.int16)
    path = tmp_path / "stack.mrcs"
    mrcfile.write(path, values)
    return path, values


def test_a_stack_goes_to_tiff_and_back(vitrio, stack, tmp_path):
    path, values = stack
    with vio.configure(chunk_bytes=3 * 20 * 24 * 2):  # chunks of 3 images
        result = vitrio("convert", path, tmp_path / "stack.tif")
    assert result.status == 0, result.err
    assert "a stack of 7 images of 20 x 24, int16" in result.out
    with tifffile.TiffFile(tmp_path / "stack.tif") as tiff:
        assert len(tiff.pages) == 7
        np.testing.assert_array_equal(tiff.asarray(), values, strict=True)
    assert vitrio("convert", tmp_path / "stack.tif", tmp_path / "back.mrcs").status == 0
    with mrcfile.open(tmp_path / "back.mrcs", permissive=False) as mrc:
        assert mrc.is_image_stack()
        np.testing.assert_array_equal(mrc.data, values, strict=True)
        assert mrc.header.dmin == values.min() and mrc.header.dmax == values.max()


def test_a_volume_goes_to_tiff_and_back(vitrio, tmp_path):
    values = np.random.default_rng(4).standard_normal((6, 10, 12)).astype(np.float32)
    with mrcfile.new(tmp_path / "volume.mrc") as mrc:
        mrc.set_data(values)
        mrc.set_volume()
    assert vitrio("convert", tmp_path / "volume.mrc", tmp_path / "volume.tiff").status == 0
    np.testing.assert_array_equal(tifffile.imread(tmp_path / "volume.tiff"), values, strict=True)
    assert vio.query_descriptor(tmp_path / "volume.tiff") == vio.ImageDescriptor((6, 10, 12), 3, "float32")
    assert vitrio("convert", tmp_path / "volume.tiff", tmp_path / "back.mrc").status == 0
    with mrcfile.open(tmp_path / "back.mrc", permissive=False) as mrc:
        assert mrc.is_volume()
        np.testing.assert_array_equal(mrc.data, values, strict=True)


def test_a_single_image_and_a_data_type(vitrio, tmp_path):
    values = np.random.default_rng(5).uniform(0, 1000, (30, 40)).astype(np.float32)
    tifffile.imwrite(tmp_path / "image.tif", values)
    assert (
        vitrio("convert", tmp_path / "image.tif", tmp_path / "image.mrc", "--data-type", "float16").status
        == 0
    )
    with mrcfile.open(tmp_path / "image.mrc", permissive=False) as mrc:
        assert mrc.is_single_image() and mrc.data.dtype == np.float16
        np.testing.assert_array_equal(mrc.data, values.astype(np.float16))


# ---------------------------------------------------------------- a user's mistakes


def test_a_missing_input(vitrio, tmp_path):
    assert_fails(vitrio("convert", tmp_path / "none.mrc", tmp_path / "out.tif"), "none.mrc", "no such file")
    assert leftovers(tmp_path) == []


def test_an_input_of_no_known_format(vitrio, tmp_path):
    (tmp_path / "notes.txt").write_text("not an image")
    assert_fails(vitrio("convert", tmp_path / "notes.txt", tmp_path / "out.tif"), "notes.txt")
    assert leftovers(tmp_path) == ["notes.txt"]


def test_an_output_that_exists_or_cannot_be_written(vitrio, stack, tmp_path):
    path, values = stack
    (tmp_path / "out.tif").write_text("mine")
    assert_fails(vitrio("convert", path, tmp_path / "out.tif"), "out.tif", "--force")
    assert (tmp_path / "out.tif").read_text() == "mine"
    assert vitrio("convert", path, tmp_path / "out.tif", "--force").status == 0
    np.testing.assert_array_equal(tifffile.imread(tmp_path / "out.tif"), values)
    assert_fails(vitrio("convert", path, path, "--force"), "stack.mrcs", "input")
    assert_fails(vitrio("convert", path, tmp_path / "out.png"), "out.png")
    assert leftovers(tmp_path) == ["out.tif", "stack.mrcs"]


def test_the_folders_of_an_output_are_made_and_removed_if_it_fails(vitrio, stack, tmp_path):
    path, values = stack
    assert vitrio("convert", path, tmp_path / "no" / "sub" / "out.mrcs").status == 0
    np.testing.assert_array_equal(mrcfile.read(tmp_path / "no" / "sub" / "out.mrcs"), values)
    assert_fails(vitrio("convert", path, tmp_path / "new" / "sub" / "out.png"), "out.png")
    assert not (tmp_path / "new").exists()


def test_a_bad_data_type_is_a_usage_error(vitrio, stack, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit:
        vitrio("convert", stack[0], tmp_path / "out.tif", "--data-type", "float33")
    assert exit.value.code == 2 and "float33" in capsys.readouterr().err


@pytest.mark.parametrize("failure", [KeyboardInterrupt, OSError])
def test_an_interrupted_conversion_leaves_nothing(vitrio, stack, tmp_path, monkeypatch, failure):
    real, calls = vio.read_batch_async, []

    def read_batch_async(*args):
        calls.append(args)
        if len(calls) == 3:
            raise failure("the disk went away")
        return real(*args)

    monkeypatch.setattr(vio, "read_batch_async", read_batch_async)
    with vio.configure(chunk_bytes=2 * 20 * 24 * 2):  # chunks of 2 images: the third read fails
        result = vitrio("convert", stack[0], tmp_path / "out.mrc")
    assert result.status == (130 if failure is KeyboardInterrupt else 1)
    assert len(calls) == 3 and leftovers(tmp_path) == ["stack.mrcs"]


def test_complex_float16_values_are_converted_as_complex64(vitrio, half_complex, tmp_path):
    values = (np.arange(2 * 4 * 5) - 1j * np.arange(2 * 4 * 5)).reshape(2, 4, 5).astype(np.complex64)
    write_half_complex(tmp_path / "h.c32", values)
    assert vitrio("convert", tmp_path / "h.c32", tmp_path / "h.mrcs").status == 0
    with mrcfile.open(tmp_path / "h.mrcs", permissive=False) as mrc:
        assert mrc.data.dtype == np.complex64
        np.testing.assert_array_equal(mrc.data, values)


def as_other_user(*args: object) -> Result:
    """Run `vitrio ARGS...` in a child process that took uid and gid 12345, capturing what it prints."""
    reading, writing = os.pipe()
    pid = os.fork()
    if pid == 0:
        status = 100
        try:
            os.close(reading)
            os.setgroups([])
            os.setgid(OTHER)
            os.setuid(OTHER)
            sys.stdout, sys.stderr = io.StringIO(), io.StringIO()
            status = main([str(arg) for arg in args])
            os.write(writing, sys.stderr.getvalue().encode())
        finally:
            os._exit(status)
    os.close(writing)
    with os.fdopen(reading, "rb") as pipe:
        err = pipe.read().decode()
    return Result(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), "", err)


@pytest.mark.skipif(os.geteuid() != 0, reason="another user's process is made by root")
def test_a_folder_that_cannot_be_written_is_reported_by_the_output_path():
    folder = Path(tempfile.mkdtemp(prefix="vitrio-unwritable-"))
    try:
        folder.chmod(0o755)
        vio.write_stack(np.zeros((2, 8, 8), np.float32), folder / "stack.mrcs")
        (folder / "stack.mrcs").chmod(0o644)
        for command in (
            ("convert", folder / "stack.mrcs", folder / "out.tif"),
            ("montage", folder / "stack.mrcs", "-o", folder / "m.png"),
        ):
            result = as_other_user(*command)
            assert_fails(result, f"{command[-1]}: Permission denied")
            assert ".partial" not in result.err
        assert leftovers(folder) == ["stack.mrcs"]
    finally:
        shutil.rmtree(folder)
