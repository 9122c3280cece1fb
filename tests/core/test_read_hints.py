"""Reading stacks through maps read at random, told ahead what each read needs; layouts made once."""

from __future__ import annotations

import ctypes
import mmap
import os
import time
from pathlib import Path

import mrcfile
import numpy as np
import pytest

import vitrio as vio
from vitrio import _native


def _stack(path: Path, count: int = 40, side: int = 16) -> np.ndarray:
    values = np.random.default_rng(0).standard_normal((count, side, side)).astype(np.float32)
    with mrcfile.new(path) as mrc:
        mrc.set_data(values)
        mrc.voxel_size = 1.0
    return values


@pytest.mark.parametrize("read_ahead", [False, True])
def test_a_loader_reads_images_of_stacks_in_any_order_through_the_readers(tmp_path: Path, read_ahead: bool):
    stacks = [_stack(tmp_path / f"s{i}.mrcs", count=10 + i) for i in range(3)]
    made = vio.loader(workers=2)
    loader = vio.ImageLoader(made.executor, made.readers, read_ahead=read_ahead)
    picks = [(2, 11), (0, 3), (0, 4), (0, 5), (1, 0), (0, 4), (2, 0), (1, 10), (0, 9)]
    locations = [vio.ImageLocation(tmp_path / f"s{f}.mrcs", i) for f, i in picks]
    out = np.zeros((len(picks), 16, 16), np.float64)  # float64: numpy converts, through the readers
    vio.read_batch_async(loader, out, locations).get()
    np.testing.assert_array_equal(out, [stacks[f][i] for f, i in picks])


def test_a_read_that_tells_the_kernel_ahead_still_names_an_index_past_the_end_and_a_missing_file(
    tmp_path: Path,
):
    _stack(tmp_path / "a.mrcs", count=5)
    made = vio.loader(workers=2)
    loader = vio.ImageLoader(made.executor, made.readers, read_ahead=True)
    out = np.zeros((2, 16, 16), np.float64)
    past = [vio.ImageLocation(tmp_path / "a.mrcs", 1), vio.ImageLocation(tmp_path / "a.mrcs", 5)]
    with pytest.raises(IndexError, match="a.mrcs"):
        vio.read_batch_async(loader, out, past).get()
    missing = [vio.ImageLocation(tmp_path / "a.mrcs", 1), vio.ImageLocation(tmp_path / "b.mrcs", 0)]
    with pytest.raises(FileNotFoundError, match="b.mrcs"):
        vio.read_batch_async(loader, out, missing).get()


def test_the_layout_of_an_open_file_is_made_once_and_keeps_its_map_across_epochs(tmp_path: Path):
    values = _stack(tmp_path / "a.mrcs")
    loader = vio.loader(workers=2, cache=4)
    locations = [vio.ImageLocation(tmp_path / "a.mrcs", i) for i in range(len(values))]
    out = np.zeros((len(values), 16, 16), np.float32)
    layouts, maps = set(), set()
    for epoch in range(3):
        order = np.random.default_rng(epoch).permutation(len(values))
        vio.read_batch_async(loader, out, [locations[i] for i in order]).get()
        np.testing.assert_array_equal(out, values[order])
        layout = loader.readers.layout(str(tmp_path / "a.mrcs"))
        layouts.add(id(layout))
        maps.add(id(layout.mapped()))
    assert len(layouts) == 1 and len(maps) == 1 and layout.mapped() is not None


def _mapped(path: Path, length: int, random: bool):
    fd = os.open(path, os.O_RDONLY)
    try:
        return _native.map_file(fd, length, random)
    finally:
        os.close(fd)


def test_a_map_read_at_random_reads_what_the_file_holds(tmp_path: Path):
    data = np.random.default_rng(1).integers(0, 256, 3 * 4096 + 100, dtype=np.uint8).tobytes()
    (tmp_path / "f").write_bytes(data)
    assert bytes(memoryview(_mapped(tmp_path / "f", len(data), True))) == data
    assert bytes(memoryview(_mapped(tmp_path / "f", len(data), False))) == data


def _resident(mapped) -> int:
    """How many bytes of `mapped` the process holds in memory now, as /proc/self/smaps says."""
    start = np.frombuffer(mapped, np.uint8).ctypes.data
    with open("/proc/self/smaps") as smaps:
        lines = iter(smaps.read().splitlines())
    for line in lines:
        if "-" in line.split()[0] and int(line.split("-")[0], 16) == start:
            return next(int(rss.split()[1]) for rss in lines if rss.startswith("Rss:")) * 1024
    raise AssertionError("the map is not in /proc/self/smaps")


def test_ranges_read_and_done_leave_the_process_s_memory_and_read_the_same_again(tmp_path: Path):
    data = np.random.default_rng(3).integers(0, 256, 4 << 20, np.uint8).tobytes()
    (tmp_path / "f").write_bytes(data)
    mapped = _mapped(tmp_path / "f", len(data), False)
    assert bytes(memoryview(mapped)) == data and _resident(mapped) >= len(data) // 2
    _native.advise_map(mapped, np.array([[0, len(data)]], np.int64), True)
    assert _resident(mapped) < len(data) // 8
    assert bytes(memoryview(mapped)) == data  # mapped again from the page cache


def test_advise_map_takes_ranges_within_the_map_and_refuses_others(tmp_path: Path):
    data = bytes(range(256)) * 64
    (tmp_path / "f").write_bytes(data)
    mapped = _mapped(tmp_path / "f", len(data), True)
    _native.advise_map(mapped, np.array([[0, 100], [5000, 0], [4097, len(data) - 4097]], np.int64))
    _native.advise_map(mapped, np.zeros((0, 2), np.int64))
    assert bytes(memoryview(mapped)) == data
    for bad in ([[0, len(data) + 1]], [[-1, 10]], [[10, -1]], [[len(data) + 1, 0]]):
        with pytest.raises(ValueError, match="within the map"):
            _native.advise_map(mapped, np.array(bad, np.int64))
    with pytest.raises(ValueError, match="int64 rows"):
        _native.advise_map(mapped, np.zeros(3, np.int64))
    with pytest.raises(TypeError):
        _native.advise_map(memoryview(data), np.zeros((1, 2), np.int64))


def _in_page_cache(mapped, start: int, length: int) -> np.ndarray:
    """Whether each page of `mapped` from `start` (a page's start) for `length` bytes is in memory, as
    mincore(2) says of a map of a file the caller owns: in the page cache."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    pages = np.zeros(-(-length // mmap.PAGESIZE), np.uint8)
    address = np.frombuffer(mapped, np.uint8).ctypes.data + start
    assert libc.mincore(address, length, pages.ctypes.data) == 0, os.strerror(ctypes.get_errno())
    return (pages & 1).astype(bool)


def _evicted(path: Path, size: int, seed: int):
    """A map of a new file of `size` random bytes at `path` whose pages are out of the page cache (the
    test is skipped, saying why, on a filesystem that keeps files in memory), and its bytes."""
    data = np.random.default_rng(seed).integers(0, 256, size, np.uint8).tobytes()
    with open(path, "wb") as file:
        file.write(data)
        os.fsync(file.fileno())
        os.posix_fadvise(file.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    mapped = _mapped(path, len(data), True)
    if _in_page_cache(mapped, 0, len(data)).any():
        pytest.skip(f"{path.parent}'s filesystem keeps the file in memory: there is nothing to read ahead")
    return mapped, data


def _read_in(mapped, start: int, length: int) -> bool:
    """Whether that range of `mapped` comes into the page cache, waiting while the disk reads it."""
    for _ in range(600):
        if _in_page_cache(mapped, start, length).all():
            return True
        time.sleep(0.05)
    return False


def test_ranges_to_read_are_read_ahead_where_they_are_not_in_memory_and_others_are_left(tmp_path: Path):
    """A range of a cold file told ahead (MADV_WILLNEED) comes into the page cache before it is read, a
    range not told stays out; a range told again once in memory reads the same (it is not advised
    again, which costs a page cache lookup a page)."""
    mib = 1 << 20
    mapped, data = _evicted(tmp_path / "f", 8 * mib, 4)
    _native.advise_map(mapped, np.array([[mib + 100, 3 * mib]], np.int64))
    assert _read_in(mapped, mib, 3 * mib)
    assert not _in_page_cache(mapped, 5 * mib, 3 * mib).any()
    _native.advise_map(mapped, np.array([[mib, 3 * mib]], np.int64))
    assert bytes(memoryview(mapped)) == data


def test_ranges_of_several_maps_told_at_once_are_read_ahead(tmp_path: Path):
    """`advise_maps` tells the ranges of several maps in one call, each row naming its map: each range
    comes into the page cache, the rest of each file stays out."""
    mib = 1 << 20
    (a, data_a), (b, data_b) = _evicted(tmp_path / "a", 4 * mib, 5), _evicted(tmp_path / "b", 4 * mib, 6)
    _native.advise_maps((a, b), np.array([[1, 2 * mib, mib], [0, 0, mib]], np.int64))
    assert _read_in(b, 2 * mib, mib) and _read_in(a, 0, mib)
    assert not _in_page_cache(b, 0, 2 * mib).any() and not _in_page_cache(a, mib, 3 * mib).any()
    assert bytes(memoryview(a)) == data_a and bytes(memoryview(b)) == data_b


def test_advise_maps_takes_ranges_within_their_maps_and_refuses_others(tmp_path: Path):
    data = bytes(range(256)) * 64
    (tmp_path / "f").write_bytes(data)
    mapped = _mapped(tmp_path / "f", len(data), False)
    _native.advise_maps((mapped, mapped), np.array([[0, 0, 100], [1, 4097, len(data) - 4097]], np.int64))
    _native.advise_maps((), np.zeros((0, 3), np.int64))
    for bad in ([[2, 0, 1]], [[-1, 0, 1]], [[0, -1, 1]], [[0, 1, len(data)]], [[0, len(data) + 1, 0]]):
        with pytest.raises(ValueError, match="within the maps"):
            _native.advise_maps((mapped, mapped), np.array(bad, np.int64))
    with pytest.raises(ValueError, match="within the maps"):
        _native.advise_maps((mapped,), np.zeros(2, np.int64))
    _native.advise_maps((None, mapped), np.array([[1, 0, 100]], np.int64))  # None: a file not mapped
    with pytest.raises(ValueError, match="within the maps"):
        _native.advise_maps((None, mapped), np.array([[0, 0, 100]], np.int64))
    with pytest.raises(TypeError, match="FileMaps"):
        _native.advise_maps((mapped, memoryview(data)), np.zeros((0, 3), np.int64))
