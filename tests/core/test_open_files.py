"""A loader keeps files open by default, as many as the process's file limit allows, across batches; a file
replaced between two batches is read anew; `cache=` still chooses."""

from __future__ import annotations

import os
import resource

import numpy as np
import pytest
import tifffile

import vitrio as vio


def _stack(path, seed: int) -> np.ndarray:
    values = np.random.default_rng(seed).integers(0, 999, size=(6, 16, 12)).astype(np.float32)
    vio.write_stack(values, path)
    return values


def _tiff(path, seed: int) -> np.ndarray:
    """A compressed TIFF stack: read through its reader, never by the native path."""
    values = np.random.default_rng(seed).integers(0, 250, size=(4, 16, 12)).astype(np.uint8)
    made = path.with_name(f".{path.name}.{seed}")
    tifffile.imwrite(made, values, compression="zlib", photometric="minisblack")
    os.replace(made, path)
    return values


def _batch(loader, key, count):
    out = np.empty((count, 16, 12), np.float32)
    vio.read_batch_async(loader, out, [vio.ImageLocation(key, i) for i in range(count)]).get()
    return out


def test_a_default_loader_keeps_a_file_open_across_batches(tmp_path):
    values = _stack(tmp_path / "stack.mrcs", 1)
    loader = vio.loader(workers=2)
    for _ in range(3):
        np.testing.assert_array_equal(_batch(loader, tmp_path / "stack.mrcs", 6), values)
    stats = loader.stats()
    assert stats.files_opened == 1, f"opened {stats.files_opened} times in three batches"
    assert stats.readers_reused >= 2


def test_cache_zero_opens_a_file_for_each_use(tmp_path):
    _stack(tmp_path / "stack.mrcs", 1)
    loader = vio.loader(workers=2, cache=0)
    assert isinstance(loader.readers, vio.FileImageReaderProvider)
    for _ in range(3):
        _batch(loader, tmp_path / "stack.mrcs", 6)
    assert loader.stats().files_opened >= 3  # once a batch at least


def test_cache_is_still_honoured():
    assert vio.loader(workers=1, cache=3).readers.capacity == 3
    with pytest.raises(ValueError, match="capacity must be positive: -1"):
        vio.loader(workers=1, cache=-1)


@pytest.mark.parametrize("cache", [None, 4])
def test_a_file_replaced_between_batches_is_read_anew(tmp_path, cache):
    key = tmp_path / "stack.tif"
    first = _tiff(key, 1)
    loader = vio.loader(workers=2, cache=cache)
    np.testing.assert_array_equal(_batch(loader, key, 4), first)
    second = _tiff(key, 2)
    np.testing.assert_array_equal(_batch(loader, key, 4), second)
    np.testing.assert_array_equal(vio.read(key, readers=loader.readers), second)


def test_a_file_checked_once_a_batch(tmp_path, monkeypatch):
    """Many tasks of one batch acquire the file: its path is looked at once, not per task."""
    key = str(tmp_path / "stack.tif")
    _tiff(tmp_path / "stack.tif", 1)
    loader = vio.loader(workers=4, cache=4, configuration=vio.configuration().replace(tasks_per_worker=4))
    _batch(loader, key, 4)  # opens it
    looked = []
    real = os.stat

    def counting(path, *args, **kwargs):
        if os.fspath(path) == key:
            looked.append(path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", counting)
    for _ in range(2):
        out = np.empty((32, 16, 12), np.float32)
        vio.read_batch_async(loader, out, [vio.ImageLocation(key, i % 4) for i in range(32)]).get()
    assert len(looked) == 2, f"the path was looked at {len(looked)} times in two batches"


def test_the_default_is_bounded_by_the_file_limit(monkeypatch):
    monkeypatch.setattr(resource, "getrlimit", lambda which: (40, 4096))
    assert vio.loader(workers=1).readers.capacity == 10
    monkeypatch.setattr(resource, "getrlimit", lambda which: (resource.RLIM_INFINITY,) * 2)
    assert vio.loader(workers=1).readers.capacity == vio.configuration().open_files
    with vio.configure(open_files=7):
        assert vio.loader(workers=1).readers.capacity == 7
