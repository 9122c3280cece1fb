"""The native batch reads of raw files: conversions against numpy, runs with bad offsets, files that
change or shrink under the layout cache, patches against numpy slicing with the edge filled, and the
type of file maps, made from a spec as the stable ABI has it."""

from __future__ import annotations

import ast
import errno
import os
import struct
import weakref
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import vitrio as vio
from vitrio import _native
from vitrio._concurrency import shared_pool
from vitrio.formats import _raw
from vitrio.formats._raw_layout import value_kind

SOURCES = ("uint8", "int8", "uint16", "int16", "float16", "float32")
BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
KINDS = {
    np.dtype(np.uint8): _native.KIND_U8,
    np.dtype(np.int8): _native.KIND_I8,
    np.dtype(np.uint16): _native.KIND_U16,
    np.dtype(np.int16): _native.KIND_I16,
    np.dtype(np.float16): _native.KIND_F16,
    np.dtype(np.float32): _native.KIND_F32,
    BFLOAT16: _native.KIND_BF16,
}


def _values(dtype: np.dtype, count: int, seed: int = 0) -> np.ndarray:
    """Values of `dtype` over its range: any bit pattern for 1- and 2-byte types, extremes for float32."""
    rng = np.random.default_rng(seed)
    if dtype.itemsize <= 2:
        return rng.integers(0, 256, count * dtype.itemsize, dtype=np.uint8).view(dtype.newbyteorder("="))
    scales = np.array([1e-42, 1e-8, 1.0, 100.0, 6.5e4, 7e4, 1e30], dtype=np.float32)
    values = rng.standard_normal(count).astype(np.float32) * scales[rng.integers(0, len(scales), count)]
    values[:4] = (np.inf, -np.inf, np.nan, -0.0)
    return values


@pytest.fixture(params=[True, False], ids=["simd", "portable"])
def simd(request):
    """Conversions with the vector extensions of the processor (where it has them), then without."""
    was = _native.simd(request.param)
    yield request.param
    _native.simd(was)


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("order", ["<", ">"])
@pytest.mark.parametrize("target", ["float32", "float16", "bfloat16", "same"])
def test_every_conversion_matches_numpy(source: str, order: str, target: str, simd: bool):
    stored = np.dtype(source).newbyteorder(order)
    values = _values(np.dtype(source), 4099).astype(stored)
    wanted = np.dtype(source if target == "same" else BFLOAT16 if target == "bfloat16" else target)
    for start in (0, 3):  # a start off the vector width runs the portable tail
        part = values[start:]
        out = np.empty(len(part), wanted)
        _native.convert(part.tobytes(), value_kind(stored), out, KINDS[wanted])
        with np.errstate(over="ignore", invalid="ignore"):
            expected = part.astype(wanted)
        np.testing.assert_array_equal(out, expected)


def test_every_half_converts_exactly(simd: bool):
    halves = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    out = np.empty(len(halves), np.float32)
    _native.convert(halves.tobytes(), KINDS[np.dtype(np.float16)], out, KINDS[np.dtype(np.float32)])
    assert np.array_equal(out, halves.astype(np.float32), equal_nan=True)
    back = np.empty(len(halves), np.float16)
    _native.convert(out.tobytes(), KINDS[np.dtype(np.float32)], back, KINDS[np.dtype(np.float16)])
    finite = np.isfinite(halves)
    assert np.array_equal(back.view(np.uint16)[finite], halves.view(np.uint16)[finite])
    assert np.isnan(back[np.isnan(halves)]).all()


def test_bfloat16_converts_exactly_to_float32_and_back(simd: bool):
    every = np.arange(1 << 16, dtype=np.uint16).view(BFLOAT16)
    out = np.empty(len(every), np.float32)
    _native.convert(every.tobytes(), KINDS[BFLOAT16], out, KINDS[np.dtype(np.float32)])
    assert np.array_equal(out, every.astype(np.float32), equal_nan=True)
    back = np.empty(len(every), BFLOAT16)
    _native.convert(out.tobytes(), KINDS[np.dtype(np.float32)], back, KINDS[BFLOAT16])
    finite = np.isfinite(out)
    assert np.array_equal(back.view(np.uint16)[finite], every.view(np.uint16)[finite])
    assert np.isnan(back.astype(np.float32)[~np.isfinite(out) & np.isnan(out)]).all()


def test_float32_to_float16_rounds_as_numpy_over_the_whole_range(simd: bool):
    bits = np.arange(0, 1 << 32, 65_537, dtype=np.uint64).astype(np.uint32)
    floats = bits.view(np.float32)
    out = np.empty(len(floats), np.float16)
    _native.convert(floats.tobytes(), KINDS[np.dtype(np.float32)], out, KINDS[np.dtype(np.float16)])
    with np.errstate(over="ignore"):
        assert np.array_equal(out, floats.astype(np.float16), equal_nan=True)


def test_convert_refuses_what_it_cannot_do():
    out = np.empty(4, np.float32)
    with pytest.raises(ValueError, match="no conversion"):
        _native.convert(b"\0" * 8, KINDS[np.dtype(np.float32)], out, KINDS[np.dtype(np.int16)])
    with pytest.raises(ValueError, match="no conversion"):
        _native.convert(b"\0" * 8, 99, out, KINDS[np.dtype(np.float32)])
    with pytest.raises(ValueError, match="too small"):
        _native.convert(b"\0" * 40, KINDS[np.dtype(np.float32)], out, KINDS[np.dtype(np.float32)])
    with pytest.raises(ValueError, match="whole values"):
        _native.convert(b"\0" * 3, KINDS[np.dtype(np.int16)], out, KINDS[np.dtype(np.float32)])


# ---------------------------------------------------------------- read_runs


def _file(tmp_path: Path, data: bytes) -> tuple[bytes, np.ndarray]:
    path = tmp_path / "data.bin"
    path.write_bytes(data)
    status = os.stat(path)
    check = np.zeros((1, _native.CHECK_FIELDS), np.int64)
    check[0, _native.CHECK_SIZE] = status.st_size
    check[0, _native.CHECK_MTIME] = status.st_mtime_ns
    check[0, _native.CHECK_INODE] = status.st_ino
    check[0, _native.CHECK_DEVICE] = status.st_dev
    check[0, _native.CHECK_KIND] = _native.KIND_F32
    return os.fsencode(path), check


def test_read_runs_reads_and_converts_runs(tmp_path: Path):
    values = np.arange(100, dtype=np.float32)
    path, check = _file(tmp_path, values.tobytes())
    out = np.zeros(20, np.float16)
    runs = np.array([[0, 40, 5, 0], [0, 0, 3, 20]], np.int64)  # values 10..14 to 0.., 0..2 to 10..
    assert _native.read_runs((path,), check, runs, out, KINDS[np.dtype(np.float16)]) is None
    np.testing.assert_array_equal(out[:5], values[10:15])
    np.testing.assert_array_equal(out[10:13], values[:3])
    assert not out[5:10].any()


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("order", ["<", ">"])
@pytest.mark.parametrize("target", ["float32", "float16", "same"])
@pytest.mark.parametrize("mapped", [False, True], ids=["pread", "map"])
def test_runs_into_a_large_destination_stream_exactly_at_any_alignment(
    tmp_path: Path, source: str, order: str, target: str, mapped: bool
):
    stored = np.dtype(source).newbyteorder(order)
    values = _values(np.dtype(source), 70_001, seed=3).astype(stored)
    path, check = _file(tmp_path, values.tobytes())
    check[0, _native.CHECK_KIND] = value_kind(stored)
    wanted = np.dtype(source if target == "same" else target)
    out = np.zeros((5 << 20) // wanted.itemsize, wanted)  # past the size that streams
    size = wanted.itemsize
    runs = np.array(
        [  # (first value, count, destination value): heads and tails off every alignment
            [0, 70_001, 1],
            [3, 4097, 80_000],
            [5, 1, 90_000],
            [70_000, 1, 100_003],
            [17, 33, len(out) - 33],
        ],
        np.int64,
    )
    table = np.column_stack(
        [np.zeros(len(runs), np.int64), runs[:, 0] * stored.itemsize, runs[:, 1], runs[:, 2] * size]
    )
    maps = None
    if mapped:
        fd = os.open(path, os.O_RDONLY)
        maps = (_native.map_file(fd, len(values) * stored.itemsize),)
        os.close(fd)
    assert _native.read_runs((path,), check, table, out, KINDS[wanted], maps) is None
    expected = np.zeros_like(out)
    with np.errstate(over="ignore", invalid="ignore"):
        for first, count, at in runs.tolist():
            expected[at : at + count] = values[first : first + count].astype(wanted)
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("source", [*SOURCES, "bfloat16"])
@pytest.mark.parametrize("order", ["<", ">"])
@pytest.mark.parametrize("target", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("mapped", [False, True], ids=["pread", "map"])
def test_runs_at_odd_bytes_of_the_file_and_of_the_destination(
    tmp_path: Path, source: str, order: str, target: str, mapped: bool, simd: bool
):
    """Every conversion reads a run that starts at an odd byte and writes it at an odd byte."""
    stored = np.dtype(ml_dtypes.bfloat16 if source == "bfloat16" else source).newbyteorder(order)
    values = _values(np.dtype(stored.type), 4099, seed=5).astype(stored)
    data = b"\x7f" + values.tobytes()
    path, check = _file(tmp_path, data)
    check[0, _native.CHECK_KIND] = value_kind(stored)
    wanted = np.dtype(ml_dtypes.bfloat16 if target == "bfloat16" else target)
    out = np.zeros((len(values) + 2) * wanted.itemsize, np.uint8)
    table = np.array([[0, 1, len(values), 1]], np.int64)
    maps = None
    if mapped:
        fd = os.open(path, os.O_RDONLY)
        maps = (_native.map_file(fd, len(data)),)
        os.close(fd)
    assert _native.read_runs((path,), check, table, out, KINDS[wanted], maps) is None
    with np.errstate(over="ignore", invalid="ignore"):
        expected = values.astype(wanted)
    np.testing.assert_array_equal(out[1 : 1 + len(values) * wanted.itemsize].view(wanted), expected)


@pytest.mark.parametrize(
    "run",
    [
        (0, 400, 1, 0),  # past the end of the file
        (0, 396, 2, 0),  # runs over the end of the file
        (0, -4, 1, 0),  # a negative offset
        (0, 0, -1, 0),  # a negative count
        (0, 0, 1, 80),  # past the end of out
        (0, 0, 20, 4),  # runs over the end of out
        (0, 0, 1, -4),  # a negative destination
        (1, 0, 1, 0),  # no such file
        (-1, 0, 1, 0),
        (0, 0, 1 << 62, 0),  # a count whose bytes overflow
    ],
)
def test_read_runs_refuses_runs_outside_the_file_or_out(tmp_path: Path, run: tuple[int, ...]):
    path, check = _file(tmp_path, np.arange(100, dtype=np.float32).tobytes())
    out = np.zeros(20, np.float32)
    with pytest.raises(ValueError, match="run 0 lies outside"):
        _native.read_runs((path,), check, np.array([run], np.int64), out, KINDS[np.dtype(np.float32)])
    assert not out.any()


def test_read_runs_refuses_malformed_tables(tmp_path: Path):
    path, check = _file(tmp_path, b"\0" * 64)
    out = np.zeros(4, np.float32)
    kind = KINDS[np.dtype(np.float32)]
    with pytest.raises(ValueError, match="rows of 4"):
        _native.read_runs((path,), check, np.zeros(3, np.int64), out, kind)
    with pytest.raises(ValueError, match="rows of 5"):
        _native.read_runs((path, path), check, np.zeros((1, 4), np.int64), out, kind)
    with pytest.raises(TypeError, match="bytes"):
        _native.read_runs((str(path),), check, np.zeros((1, 4), np.int64), out, kind)
    with pytest.raises(ValueError, match="dst_kind"):
        _native.read_runs((path,), check, np.zeros((1, 4), np.int64), out, 42)
    with pytest.raises(ValueError, match="no conversion"):
        _native.read_runs((path,), check, np.zeros((1, 4), np.int64), out, KINDS[np.dtype(np.int16)])


def test_read_runs_reports_files_missing_or_changed(tmp_path: Path):
    path, check = _file(tmp_path, np.arange(16, dtype=np.float32).tobytes())
    out = np.zeros(4, np.float32)
    runs = np.array([[0, 0, 4, 0]], np.int64)
    kind = KINDS[np.dtype(np.float32)]
    changed = check.copy()
    changed[0, _native.CHECK_MTIME] += 1
    assert _native.read_runs((path,), changed, runs, out, kind)[2] == _native.READ_CHANGED
    missing = path + b".missing"
    run, file, status, code = _native.read_runs((missing,), check, runs, out, kind)
    assert (run, file, status) == (0, 0, _native.READ_OPEN) and code == errno.ENOENT
    assert not out.any()


def test_advise_passes_over_files_that_do_not_open(tmp_path: Path):
    path, check = _file(tmp_path, b"\0" * 4096)
    runs = np.array([[0, 0, 1024, 0], [1, 0, 1024, 0]], np.int64)
    assert _native.advise((path, path + b".missing"), np.concatenate([check, check]), runs) is None
    with pytest.raises(ValueError, match="run 0 lies outside"):
        _native.advise((path,), check, np.array([[2, 0, 1, 0]], np.int64))
    with pytest.raises(ValueError, match="run 0 lies outside"):  # 1025 float32 values: past the end
        _native.advise((path,), check, np.array([[0, 0, 1025, 0]], np.int64))


# ---------------------------------------------------------------- through the public API


def _big_endian(path: Path) -> None:
    """Rewrite the MRC file at `path` (written by vitrio, little endian) in big-endian byte order."""
    data = bytearray(path.read_bytes())
    header = data[:1024]
    words = [*range(0, 104, 4), *range(108, 208, 4), 216, 220]
    for at in words:
        header[at : at + 4] = header[at : at + 4][::-1]
    header[212:216] = b"\x11\x11\x00\x00"
    mode = struct.unpack(">i", header[12:16])[0]
    dtype = {0: np.int8, 1: np.int16, 2: np.float32, 6: np.uint16, 12: np.float16}[mode]
    body = np.frombuffer(bytes(data[1024:]), dtype).byteswap()
    path.write_bytes(bytes(header) + body.tobytes())


@pytest.mark.parametrize("stored", ["int8", "int16", "uint16", "float16", "float32"])
@pytest.mark.parametrize("order", ["<", ">"])
def test_batches_read_natively_match_numpy(tmp_path: Path, stored: str, order: str):
    rng = np.random.default_rng(1)
    stacks = []
    for number in range(4):
        values = (rng.standard_normal((12, 8, 6)) * 300).astype(stored)
        path = tmp_path / f"stack{number}.mrcs"
        vio.write_stack(values, path)
        if order == ">":
            _big_endian(path)
        stacks.append((path, values))
    locations = [vio.ImageLocation(p, i) for p, v in stacks for i in range(len(v))]
    expected_all = np.concatenate([v for _, v in stacks])
    loader = vio.loader(workers=2, cache=1)  # more files than open readers
    for epoch in range(3):  # the first learns the layouts, the others read natively
        order_ = rng.permutation(len(locations))
        for dtype in ("float32", "float16", BFLOAT16, stored, "float64"):
            out = np.full((len(order_), 8, 6), 7, dtype)
            vio.read_batch_async(loader, out, [locations[i] for i in order_]).get()
            with np.errstate(over="ignore"):
                expected = expected_all[order_].astype(dtype)
            np.testing.assert_array_equal(out, expected, err_msg=f"epoch {epoch} into {dtype}")
    assert all(loader.readers.layout(str(p)) is not None for p, _ in stacks)


@pytest.mark.parametrize("stored", ["int8", "int16", "uint16", "float16", "float32"])
@pytest.mark.parametrize("order", ["<", ">"])
@pytest.mark.parametrize("kind", ["volume", "stack"])
def test_a_large_whole_file_read_on_several_threads_matches_numpy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stored: str, order: str, kind: str
):
    with vio.configure(split_bytes=4096):  # this file's tens of KB count as large
        copies = []
        original = _native.convert
        monkeypatch.setattr(_raw, "convert", lambda *args: copies.append(args) or original(*args))
        values = (np.random.default_rng(2).standard_normal((9, 40, 30)) * 300).astype(stored)
        path = tmp_path / "file.mrc"
        (vio.write_single if kind == "volume" else vio.write_stack)(values, path)
        if order == ">":
            _big_endian(path)
        readers = vio.reader_provider()
        for data_type in (stored, "float32", "float16", BFLOAT16):
            copies.clear()
            result = vio.read(path, readers=readers, out=np.empty(values.shape, data_type))
            with np.errstate(over="ignore"):
                np.testing.assert_array_equal(result, values.astype(data_type), err_msg=str(data_type))
            assert len(copies) == min(
                os.cpu_count() or 1, vio.configuration().split_parts, result.nbytes // 2048
            )
        np.testing.assert_array_equal(
            vio.read(path, readers=readers, data_type="float32"), values.astype(np.float32)
        )
        out = np.zeros((9, 40, 32), np.float32)[..., 1:-1]  # not one block: numpy copies it
        copies.clear()
        vio.read(path, readers=readers, out=out)
        np.testing.assert_array_equal(out, values.astype(np.float32))
        assert copies == []


def test_whole_file_reads_at_once_share_the_processors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    with vio.configure(split_bytes=4096):
        values = np.arange(9 * 40 * 30, dtype=np.float32).reshape(9, 40, 30)
        vio.write_single(values, tmp_path / "volume.mrc")
        parts = []
        original = _native.convert
        monkeypatch.setattr(_raw, "convert", lambda *args: parts.append(args) or original(*args))
        readers = vio.reader_provider()
        _, permits = _raw._split_threads(vio.configuration().split_threads)
        taken = 0
        while permits.acquire(blocking=False):  # as if other reads had every thread of the pool
            taken += 1
        try:
            np.testing.assert_array_equal(vio.read(tmp_path / "volume.mrc", readers=readers), values)
            assert len(parts) == 1  # copied here, in one part
        finally:
            for _ in range(taken):
                permits.release()
        parts.clear()
        np.testing.assert_array_equal(vio.read(tmp_path / "volume.mrc", readers=readers), values)
        assert len(parts) == min(os.cpu_count() or 1, vio.configuration().split_parts)


def test_the_split_pool_and_parts_are_the_configurations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    values = np.arange(9 * 40 * 30, dtype=np.float32).reshape(9, 40, 30)
    vio.write_single(values, tmp_path / "volume.mrc")
    parts = []
    original = _native.convert
    monkeypatch.setattr(_raw, "convert", lambda *args: parts.append(args) or original(*args))
    pools = []
    monkeypatch.setattr(_raw, "shared_pool", lambda *args: pools.append(args) or shared_pool(*args))
    with vio.configure(split_bytes=4096, split_threads=3, split_parts=1):
        np.testing.assert_array_equal(vio.read(tmp_path / "volume.mrc"), values)
        assert len(parts) == 1 and pools == [("split", 3)]
    with vio.configure(split_bytes=1 << 30):  # this file is small
        parts.clear()
        np.testing.assert_array_equal(vio.read(tmp_path / "volume.mrc"), values)
        assert len(parts) == 0


def test_consecutive_images_read_into_consecutive_slots(tmp_path: Path):
    values = np.arange(40 * 4 * 4, dtype=np.float32).reshape(40, 4, 4)
    path = tmp_path / "stack.mrcs"
    vio.write_stack(values, path)
    loader = vio.loader(workers=2, cache=2)
    locations = [vio.ImageLocation(path, i) for i in [*range(5, 25), 0, 39, 38]]
    for _ in range(2):
        out = np.zeros((len(locations), 4, 4), np.float32)
        vio.read_batch_async(loader, out, locations).get()
        np.testing.assert_array_equal(out, values[[loc.index_in_stack for loc in locations]])


def test_a_file_replaced_after_its_layout_was_kept_is_parsed_anew(tmp_path: Path):
    paths = [tmp_path / f"stack{n}.mrcs" for n in range(3)]
    for number, path in enumerate(paths):
        vio.write_stack(np.full((4, 8, 8), number, np.float32), path)
    loader = vio.loader(workers=1, cache=1)
    locations = [vio.ImageLocation(p, i) for p in paths for i in range(4)]
    out = np.zeros((len(locations), 8, 8), np.float32)
    vio.read_batch_async(loader, out, locations).get()
    old = loader.readers.layout(str(paths[0]))
    assert old is not None
    # another type, another offset, more images: reading with the old layout would be wrong
    vio.write_stack(np.full((6, 8, 8), 50, np.int16), paths[0])
    vio.read_batch_async(loader, out, locations).get()
    assert (out[:4] == 50).all() and (out[4:8] == 1).all()
    assert loader.readers.layout(str(paths[0])) is not old
    vio.read_batch_async(loader, out, locations).get()
    assert (out[:4] == 50).all()


def test_a_file_truncated_after_its_layout_was_kept_raises_naming_it(tmp_path: Path):
    paths = [tmp_path / f"stack{n}.mrcs" for n in range(2)]
    for path in paths:
        vio.write_stack(np.ones((4, 8, 8), np.float32), path)
    loader = vio.loader(workers=1, cache=1)
    locations = [vio.ImageLocation(p, i) for p in paths for i in range(4)]
    out = np.zeros((len(locations), 8, 8), np.float32)
    vio.read_batch_async(loader, out, locations).get()  # paths[0]'s reader is closed, its layout kept
    os.truncate(paths[0], 1024 + 8 * 8 * 4)
    with pytest.raises((OSError, ValueError), match=f"{paths[0]}: .*truncated"):
        vio.read_batch_async(loader, out, locations).get()
    vio.read_batch_async(loader, out[4:], locations[4:]).get()  # the loader still reads the rest


def test_an_index_past_the_end_of_a_known_file_raises_index_error(tmp_path: Path):
    path = tmp_path / "stack.mrcs"
    vio.write_stack(np.ones((4, 8, 8), np.float32), path)
    loader = vio.loader(workers=1, cache=1)
    out = np.zeros((1, 8, 8), np.float32)
    vio.read_batch_async(loader, out, [vio.ImageLocation(path, 0)]).get()
    with pytest.raises(IndexError, match=f"{path}: index 4"):
        vio.read_batch_async(loader, out, [vio.ImageLocation(path, 4)]).get()


# ---------------------------------------------------------------- patches


def _expected_patches(image: np.ndarray, centres: np.ndarray, shape: tuple[int, ...], fill, initial, dtype):
    padded_shape = np.asarray(shape)
    out = np.full((len(centres), *shape), initial, dtype)
    for slot, centre in enumerate(centres):
        origin = centre - padded_shape // 2
        low = np.clip(origin, 0, image.shape)
        high = np.clip(origin + padded_shape, 0, image.shape)
        if fill is not None and ((low != origin).any() or (high != origin + padded_shape).any()):
            out[slot] = fill
        if (high > low).all():
            target = tuple(slice(a - o, b - o) for a, b, o in zip(low, high, origin))
            out[slot][target] = image[tuple(slice(a, b) for a, b in zip(low, high))]
    return out


@pytest.mark.parametrize("stored", ["int16", "float16", "float32"])
@pytest.mark.parametrize("rank", [2, 3])
@pytest.mark.parametrize("fill", [None, 0, -5])
def test_patches_match_numpy_slicing_with_the_edge_filled(tmp_path: Path, stored: str, rank: int, fill):
    rng = np.random.default_rng(rank)
    image_shape = (9, 13, 11)[3 - rank :]
    image = (rng.standard_normal(image_shape) * 100).astype(stored)
    path = tmp_path / "image.mrc"
    vio.write_single(image, path)
    patch = (4, 5, 6)[3 - rank :]
    centres = np.concatenate(
        [
            rng.integers(0, np.asarray(image_shape) + 4, (40, rank)),
            [[0] * rank, list(image_shape), [e + 20 for e in image_shape]],
        ]
    )
    loader = vio.loader(workers=2, cache=2)
    for dtype in ("float32", "float16", stored):
        out = np.full((len(centres), *patch), 3, dtype)
        images = [(str(path), -1)]
        vio.read_patches_indexed_async(
            loader, out, images, np.zeros(len(centres), int), centres, fill=fill
        ).get()
        expected = _expected_patches(image.astype(dtype), centres, patch, fill, 3, dtype)
        np.testing.assert_array_equal(out, expected, err_msg=f"into {dtype}")


def test_crop_refuses_patches_outside_out_or_images_outside_src():
    image = np.arange(16, dtype=np.float32)
    out = np.zeros((2, 2, 2), np.float32)
    kind = KINDS[np.dtype(np.float32)]
    origins = np.zeros((1, 2), np.int64)
    with pytest.raises(ValueError, match="patch 0 lies outside out"):
        _native.crop(image, 0, kind, (4, 4), origins, np.array([2], np.int64), out, kind, (2, 2), None)
    with pytest.raises(ValueError, match="origin is out of range"):
        _native.crop(
            image, 0, kind, (4, 4), np.array([[1 << 62, 0]]), np.zeros(1, np.int64), out, kind, (2, 2), None
        )
    with pytest.raises(ValueError, match="outside src"):
        _native.crop(image, 4, kind, (4, 4), origins, np.zeros(1, np.int64), out, kind, (2, 2), None)
    with pytest.raises(ValueError, match="one value"):
        _native.crop(image, 0, kind, (4, 4), origins, np.zeros(1, np.int64), out, kind, (2, 2), b"\0")
    with pytest.raises(ValueError, match="2 or 3"):
        _native.crop(image, 0, kind, (16,), origins, np.zeros(1, np.int64), out, kind, (2,), None)
    _native.crop(
        image, 0, kind, (4, 4), np.array([[-1, 3]]), np.array([1], np.int64), out, kind, (2, 2), None
    )
    np.testing.assert_array_equal(out[1], [[0, 0], [3, 0]])


def test_a_loader_that_reads_ahead_reads_the_same(tmp_path: Path):
    values = np.arange(30 * 4 * 4, dtype=np.float32).reshape(30, 4, 4)
    path = tmp_path / "stack.mrcs"
    vio.write_stack(values, path)
    plain = vio.loader(workers=2, cache=2)
    ahead = vio.ImageLoader(plain.executor, plain.readers, read_ahead=True)
    order = np.random.default_rng(0).permutation(30)
    for loader in (plain, ahead, ahead):
        out = np.zeros((30, 4, 4), np.float32)
        vio.read_batch_async(loader, out, [vio.ImageLocation(path, int(i)) for i in order]).get()
        np.testing.assert_array_equal(out, values[order])


# ---------------------------------------------------------------- random arguments

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_any = st.integers(-(1 << 63), (1 << 63) - 1)
_small = st.integers(-8, 80)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(runs=st.lists(st.tuples(st.integers(-1, 2), st.one_of(_small, _any), _small, _small), max_size=6))
def test_read_runs_reads_what_it_accepts_and_refuses_the_rest(tmp_path: Path, runs):
    values = np.arange(16, dtype=np.int16)
    path = tmp_path / "values.bin"
    if not path.exists():
        path.write_bytes(values.tobytes())
    status = os.stat(path)
    check = np.array([[status.st_size, status.st_mtime_ns, status.st_ino, status.st_dev, 3]] * 2, np.int64)
    table = np.array(runs, np.int64).reshape(-1, 4)
    out = np.zeros(10, np.float32)
    kind = KINDS[np.dtype(np.float32)]
    try:
        failure = _native.read_runs((os.fsencode(path),) * 2, check, table, out, kind)
    except ValueError as error:
        assert "lies outside" in str(error)
        assert not out.any()
        return
    assert failure is None
    expected = np.zeros(40, np.uint8)
    for _, offset, count, at in runs:
        stored = np.frombuffer(values.tobytes()[offset : offset + 2 * count], np.int16)
        expected[at : at + 4 * count] = stored.astype(np.float32).view(np.uint8)
    np.testing.assert_array_equal(out.view(np.uint8), expected)


@settings(max_examples=300, deadline=None)
@given(
    extents=st.tuples(st.integers(0, 6), st.integers(0, 6), st.integers(0, 6)),
    patch=st.tuples(st.integers(0, 4), st.integers(0, 4), st.integers(0, 4)),
    origins=st.lists(
        st.tuples(st.integers(-6, 9), st.integers(-6, 9), st.integers(-6, 9)), min_size=1, max_size=4
    ),
    rank=st.sampled_from([2, 3]),
    fill=st.sampled_from([None, 9.0]),
)
def test_crop_matches_numpy_for_any_origin(extents, patch, origins, rank, fill):
    extents, patch = extents[3 - rank :], patch[3 - rank :]
    image = np.arange(int(np.prod(extents)), dtype=np.float16).reshape(extents)
    starts = np.array([o[3 - rank :] for o in origins], np.int64)
    out = np.full((len(origins), *patch), -1, np.float32)
    value = None if fill is None else np.float32(fill).tobytes()
    slots = np.arange(len(origins), dtype=np.int64)
    _native.crop(image, 0, KINDS[np.dtype(np.float16)], extents, starts, slots, out, 5, patch, value)
    expected = _expected_patches(
        image.astype(np.float32), starts + np.asarray(patch) // 2, patch, fill, -1, np.float32
    )
    np.testing.assert_array_equal(out, expected)


def test_a_file_with_an_open_reader_is_read_out_of_its_map_until_the_reader_closes(tmp_path: Path):
    values = np.arange(6 * 8 * 8, dtype=np.int16).reshape(6, 8, 8)
    path = tmp_path / "stack.mrcs"
    vio.write_stack(values, path)
    loader = vio.loader(workers=1, cache=1)
    locations = [vio.ImageLocation(path, i) for i in (5, 0, 3)]
    for _ in range(2):
        out = np.zeros((3, 8, 8), np.float32)
        vio.read_batch_async(loader, out, locations).get()
        np.testing.assert_array_equal(out, values[[5, 0, 3]])
    layout = loader.readers.layout(str(path))
    assert layout.mapped() is not None  # the cached reader's map
    loader.readers.clear()
    assert layout.mapped() is None  # closed with its reader: read with pread from now on
    vio.read_batch_async(loader, out, locations[::-1]).get()
    np.testing.assert_array_equal(out, values[[3, 0, 5]])


def test_a_file_truncated_after_native_reads_raises_naming_it(tmp_path: Path):
    path = tmp_path / "stack.mrcs"
    vio.write_stack(np.ones((64, 32, 32), np.float32), path)
    loader = vio.loader(workers=1, cache=2)
    locations = [vio.ImageLocation(path, i) for i in range(64)]
    out = np.zeros((64, 32, 32), np.float32)
    vio.read_batch_async(loader, out, locations).get()
    vio.read_batch_async(loader, out, locations).get()
    os.truncate(path, 1024 + 10 * 32 * 32 * 4)
    # the native read finds the file changed; the batch's check of its path has it opened anew, and refused
    with pytest.raises(ValueError, match=f"{path}: the file is truncated"):
        vio.read_batch_async(loader, out, locations).get()


def test_a_file_map_is_a_read_only_buffer_that_only_map_file_makes_and_that_dies_with_its_last_reference(
    tmp_path: Path,
):
    path = tmp_path / "bytes"
    path.write_bytes(b"vitrio")
    fd = os.open(path, os.O_RDONLY)
    try:
        mapped = _native.map_file(fd, 6)
    finally:
        os.close(fd)
    view = memoryview(mapped)
    assert view.readonly and bytes(view) == b"vitrio" and mapped.faults == 0 and mapped.guarded
    assert type(mapped).__module__ == "vitrio._native" and type(mapped).__name__ == "FileMap"
    with pytest.raises(TypeError, match="cannot create 'vitrio._native.FileMap' instances"):
        type(mapped)()
    reference = weakref.ref(mapped)
    del mapped
    assert reference() is not None  # the view holds it
    view.release()
    assert reference() is None


# ---------------------------------------------------------------- the interface


def test_the_stub_names_what_the_module_has():
    stub = ast.parse(Path(_native.__file__).with_name("_native.pyi").read_text())
    typed = {node.target.id for node in stub.body if isinstance(node, ast.AnnAssign)}
    typed |= {node.name for node in stub.body if isinstance(node, ast.FunctionDef)}
    assert typed == {name for name in dir(_native) if not name.startswith("_")}
    kinds = [getattr(_native, name) for name in typed if name.startswith("KIND_")]
    assert len(set(kinds)) == len(kinds) == 8 and _native.SWAP not in kinds
    assert [_native.RUN_FILE, _native.RUN_OFFSET, _native.RUN_COUNT, _native.RUN_DESTINATION] == [0, 1, 2, 3]
    assert _native.RUN_FIELDS == 4 and _native.CHECK_FIELDS == 5 and _native.CHECK_KIND == 4
