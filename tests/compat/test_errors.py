"""The published exception types, raised as classes that existing Python callers catch too."""

from __future__ import annotations

import errno

import numpy as np
import pytest

import vitrio as vio


def test_a_missing_file_is_both_file_not_found_and_runtime_error(tmp_path):
    missing = tmp_path / "missing.mrc"
    calls = [
        lambda: vio.read(missing),
        lambda: vio.query_descriptor(missing),
        lambda: vio.create_host_image_scratch([vio.ImageLocation(missing, 0)], 1),
    ]
    for call in calls:
        with pytest.raises(RuntimeError) as raised:
            call()
        assert isinstance(raised.value, FileNotFoundError) and raised.value.errno == errno.ENOENT
        assert isinstance(raised.value, vio.ImageFileNotFoundError) and str(missing) in str(raised.value)


def test_a_missing_file_fails_a_prefetch_with_runtime_error(tmp_path):
    path = tmp_path / "s.mrcs"
    vio.write_stack(np.zeros((2, 3, 3), np.float32), path)
    scratch = vio.create_host_image_scratch([vio.ImageLocation(path, 0)], 1)
    path.unlink()
    completion = vio.prefetch_scratch_async(scratch, [vio.ImageLocation(path, 0)], vio.SynchronousExecutor())
    with pytest.raises(RuntimeError):
        completion.get()


def test_a_string_is_a_key_never_a_location(tmp_path):
    path = tmp_path / "s.mrcs"
    vio.write_stack(np.zeros((2, 3, 3), np.float32), path)
    with pytest.raises(RuntimeError):
        vio.read(f"1@{path}")


def test_malformed_and_unknown_files_are_runtime_errors(tmp_path):
    (tmp_path / "junk.mrc").write_bytes(b"\0" * 10)
    with pytest.raises(RuntimeError):
        vio.read(tmp_path / "junk.mrc")
    with pytest.raises(RuntimeError):
        vio.write_single(np.zeros((2, 2), np.float32), tmp_path / "x.unknown")
    assert issubclass(vio.FormatError, ValueError) and issubclass(vio.FormatError, RuntimeError)


def test_a_read_only_out_is_a_type_error(tmp_path):
    vio.write_single(np.zeros((3, 3), np.float32), tmp_path / "a.mrc")
    out = np.zeros((3, 3), np.float32)
    out.flags.writeable = False
    with pytest.raises(TypeError):
        vio.read(tmp_path / "a.mrc", out=out)
    with pytest.raises(ValueError):  # as before, for callers that caught ValueError
        vio.read(tmp_path / "a.mrc", out=out)


def test_write_single_refuses_what_the_published_package_refuses(tmp_path):
    swapped = np.zeros((3, 3), dtype=">f4")
    with pytest.raises(TypeError, match="byte order"):
        vio.write_single(swapped, tmp_path / "a.mrc")
    misaligned = np.frombuffer(bytearray(37), dtype=np.uint8)[1:].view(np.float32).reshape(3, 3)
    assert not misaligned.flags.aligned
    with pytest.raises(ValueError, match="aligned"):
        vio.write_single(misaligned, tmp_path / "a.mrc")
    with pytest.raises(TypeError, match="numpy.asarray"):
        vio.write_single([[1.0, 2.0], [3.0, 4.0]], tmp_path / "a.mrc")
    with pytest.raises(TypeError):
        vio.write_single(np.zeros((2, 2), dtype=object), tmp_path / "a.mrc")
    with pytest.raises(TypeError):
        vio.write_single(np.zeros((2, 2), dtype=[("a", "f4"), ("b", "i4")]), tmp_path / "a.mrc")
    assert list(tmp_path.iterdir()) == []


def test_patch_centres_of_no_kind_are_a_type_error(tmp_path):
    vio.write_single(np.zeros((8, 8), np.float32), tmp_path / "a.mrc")
    with pytest.raises(TypeError):
        vio.read_patches_async(vio.loader(workers=1), np.zeros((1, 2, 2), np.float32), tmp_path / "a.mrc", 10)


def test_declaring_a_key_twice_is_a_value_error(tmp_path):
    writers = vio.writer_provider()
    descriptor = vio.ImageDescriptor((2, 2), 2, "float32")
    writers.declare(tmp_path / "a.mrc", descriptor)
    with pytest.raises(ValueError):
        writers.declare(tmp_path / "a.mrc", descriptor)
    with pytest.raises(RuntimeError):
        writers.declare(str(tmp_path / "a.mrc"), descriptor)
    writers.discard(tmp_path / "a.mrc")
