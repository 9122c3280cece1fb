"""MRC against mrcfile, both ways, and against headers written by hand from the MRC2014 specification."""

from __future__ import annotations

import io
import itertools
import os
import struct
import warnings

import mrcfile
import numpy as np
import pytest

import vitrio as vio

from .helpers import MODE_DTYPES, STAMP_BIG, STAMP_LITTLE, mrc_header, read_header_field, write_mrc_by_hand

MODES = sorted(MODE_DTYPES)
ORDERS = ["<", ">"]


def _values(rng: np.random.Generator, shape, dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype.kind == "c":
        return (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(dtype)
    if dtype.kind == "f":
        return rng.normal(0, 2, size=shape).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -(2**31)), min(info.max, 2**31 - 1), size=shape, endpoint=True).astype(
        dtype
    )


def _mrcfile_write(path, data: np.ndarray, *, stack: bool = False) -> None:
    with mrcfile.new(str(path), overwrite=True) as mrc:
        mrc.set_data(data)  # 4-D data makes a volume stack
        if stack:
            mrc.set_image_stack()


def _validate(path) -> None:
    report = io.StringIO()
    assert mrcfile.validate(str(path), print_file=report), report.getvalue()


def _stamp(path) -> bytes:
    with open(path, "rb") as file:
        return file.read(216)[212:216]


# ---------------------------------------------------------------- mrcfile writes, vitrio reads


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("mode", MODES)
def test_reads_every_mode_and_byte_order_from_mrcfile(tmp_path, rng, mode, order):
    dtype = MODE_DTYPES[mode]
    image = _values(rng, (7, 9), dtype).astype(dtype.newbyteorder(order))
    stack = _values(rng, (4, 7, 9), dtype).astype(dtype.newbyteorder(order))
    volume = _values(rng, (5, 7, 9), dtype).astype(dtype.newbyteorder(order))
    if dtype.itemsize == 1 and order == ">":  # mrcfile writes bytes in the machine's order: by hand
        write_mrc_by_hand(tmp_path / "image.mrc", image, mode, order=order)
        write_mrc_by_hand(tmp_path / "stack.mrc", stack, mode, order=order, ispg=0)
        write_mrc_by_hand(tmp_path / "volume.mrc", volume, mode, order=order, ispg=1)
    else:
        _mrcfile_write(tmp_path / "image.mrc", image)
        _mrcfile_write(tmp_path / "stack.mrc", stack, stack=True)
        _mrcfile_write(tmp_path / "volume.mrc", volume)
    for name in ("image.mrc", "stack.mrc", "volume.mrc"):
        assert _stamp(tmp_path / name)[:2] == (STAMP_LITTLE if order == "<" else STAMP_BIG)[:2]

    cases = [("image.mrc", image, 2), ("stack.mrc", stack, 2), ("volume.mrc", volume, 3)]
    for name, expected, core_rank in cases:
        path = tmp_path / name
        descriptor = vio.query_descriptor(path)
        assert descriptor == vio.ImageDescriptor(expected.shape, core_rank, dtype), name
        read = vio.read(str(path))
        assert read.dtype == dtype and read.dtype.isnative
        np.testing.assert_array_equal(read, expected)
    np.testing.assert_array_equal(vio.read(vio.ImageLocation(tmp_path / "stack.mrc", 2)), stack[2])
    as_float64 = vio.read(tmp_path / "volume.mrc", data_type="complex128" if mode == 4 else "float64")
    np.testing.assert_array_equal(as_float64, volume.astype(as_float64.dtype))


@pytest.mark.parametrize("order", ORDERS)
def test_reads_mode_3_complex_int16(tmp_path, rng, order):
    pairs = rng.integers(-30000, 30000, size=(3, 6, 5, 2)).astype(np.int16)
    expected = (pairs[..., 0] + 1j * pairs[..., 1]).astype(np.complex64)
    write_mrc_by_hand(tmp_path / "c.mrcs", pairs, 3, order=order)
    descriptor = vio.query_descriptor(tmp_path / "c.mrcs")
    assert descriptor == vio.ImageDescriptor((3, 6, 5), 2, "complex64")
    np.testing.assert_array_equal(vio.read(tmp_path / "c.mrcs"), expected)
    np.testing.assert_array_equal(vio.read(vio.ImageLocation(tmp_path / "c.mrcs", 1)), expected[1])
    wide = np.zeros((2, 6, 5), dtype=np.complex128)
    loader = vio.loader(workers=2)
    locations = [vio.ImageLocation(tmp_path / "c.mrcs", i) for i in (2, 0)]
    vio.read_batch_async(loader, wide, locations).get()
    np.testing.assert_array_equal(wide, expected[[2, 0]])
    patch = np.zeros((1, 2, 3), dtype=np.complex64)
    vio.read_patches_async(loader, patch, vio.ImageLocation(tmp_path / "c.mrcs", 1), [[3, 2]]).get()
    np.testing.assert_array_equal(patch[0], expected[1, 2:4, 1:4])


def test_mode_3_is_not_written(tmp_path):
    with pytest.raises(ValueError, match="x.mrc: MRC cannot hold complex_float16 values"):
        vio.write_single(np.zeros((4, 4), np.complex64), tmp_path / "x.mrc", data_type="complex_float16")
    assert os.listdir(tmp_path) == []


def test_hand_made_big_endian_file(tmp_path, rng):
    volume = rng.normal(size=(3, 4, 5)).astype(np.float32)
    write_mrc_by_hand(tmp_path / "be.mrc", volume, 2, order=">", ispg=1)
    assert _stamp(tmp_path / "be.mrc") == STAMP_BIG
    with mrcfile.open(str(tmp_path / "be.mrc")) as mrc:  # the hand-made file is a valid one
        np.testing.assert_array_equal(mrc.data, volume)
    np.testing.assert_array_equal(vio.read(tmp_path / "be.mrc"), volume)


def test_mrcs_with_ispg_1_is_a_stack_of_images(tmp_path, rng):
    data = _values(rng, (6, 5, 4), np.float32)
    _mrcfile_write(tmp_path / "p.mrcs", data)  # a volume to mrcfile: ispg 1
    with mrcfile.open(str(tmp_path / "p.mrcs")) as mrc:
        assert mrc.header.ispg == 1
    descriptor = vio.query_descriptor(tmp_path / "p.mrcs")
    assert descriptor == vio.ImageDescriptor((6, 5, 4), 2, "float32")
    np.testing.assert_array_equal(vio.read(vio.ImageLocation(tmp_path / "p.mrcs", 5)), data[5])


def test_ispg_0_with_nz_above_1_is_a_stack(tmp_path, rng):
    data = _values(rng, (3, 5, 4), np.int16)
    write_mrc_by_hand(tmp_path / "s.mrc", data, 1, ispg=0)
    assert vio.query_descriptor(tmp_path / "s.mrc") == vio.ImageDescriptor((3, 5, 4), 2, "int16")


@pytest.mark.parametrize("order", ORDERS)
def test_volume_stack_from_mrcfile(tmp_path, rng, order):
    data = _values(rng, (3, 4, 5, 6), np.float32).astype(np.dtype(np.float32).newbyteorder(order))
    _mrcfile_write(tmp_path / "vs.mrc", data)
    with mrcfile.open(str(tmp_path / "vs.mrc")) as mrc:
        assert mrc.header.ispg == 401 and mrc.header.mz == 4
    assert vio.query_descriptor(tmp_path / "vs.mrc") == vio.ImageDescriptor((3, 4, 5, 6), 3, "float32")
    np.testing.assert_array_equal(vio.read(tmp_path / "vs.mrc"), data)
    np.testing.assert_array_equal(vio.read(vio.ImageLocation(tmp_path / "vs.mrc", 2)), data[2])


def test_volume_stack_by_hand_with_other_space_groups(tmp_path, rng):
    data = _values(rng, (2, 3, 4, 5), np.int8)
    write_mrc_by_hand(tmp_path / "vs.mrc", data.reshape(6, 4, 5), 0, ispg=630, mz=3)
    assert vio.query_descriptor(tmp_path / "vs.mrc") == vio.ImageDescriptor((2, 3, 4, 5), 3, "int8")
    np.testing.assert_array_equal(vio.read(vio.ImageLocation(tmp_path / "vs.mrc", 1)), data[1])


@pytest.mark.parametrize("order", ORDERS)
def test_extended_header_is_skipped(tmp_path, rng, order):
    data = _values(rng, (3, 6, 7), np.float32).astype(np.dtype(np.float32).newbyteorder(order))
    extended = rng.integers(1, 255, size=1536).astype(np.uint8)
    with mrcfile.new(str(tmp_path / "x.mrcs")) as mrc:
        mrc.set_data(data)
        mrc.set_image_stack()
        mrc.set_extended_header(extended)
    with mrcfile.open(str(tmp_path / "x.mrcs")) as mrc:
        assert mrc.header.nsymbt == 1536
    np.testing.assert_array_equal(vio.read(tmp_path / "x.mrcs"), data)
    loader = vio.loader(workers=2)
    out = np.zeros((2, 6, 7), np.float32)
    vio.read_batch_async(loader, out, [vio.ImageLocation(tmp_path / "x.mrcs", i) for i in (2, 1)]).get()
    np.testing.assert_array_equal(out, data[[2, 1]])
    patch = np.zeros((1, 3, 3), np.float32)
    vio.read_patches_async(loader, patch, vio.ImageLocation(tmp_path / "x.mrcs", 0), [[1, 1]]).get()
    np.testing.assert_array_equal(patch[0], data[0, 0:3, 0:3])


def test_extended_header_by_hand_of_odd_size(tmp_path, rng):
    data = _values(rng, (4, 5), np.uint16)
    write_mrc_by_hand(tmp_path / "x.mrc", data, 6, extended=bytes(range(1, 94)))
    np.testing.assert_array_equal(vio.read(tmp_path / "x.mrc"), data)


PERMUTATIONS = list(itertools.permutations((1, 2, 3)))


@pytest.mark.parametrize("axes", PERMUTATIONS, ids=["".join(map(str, p)) for p in PERMUTATIONS])
def test_axes_of_the_header_are_applied(tmp_path, rng, axes):
    mapc, mapr, maps = axes
    volume = _values(rng, (4, 5, 6), np.float32)  # (z, y, x) as intended
    stored = volume.transpose(3 - maps, 3 - mapr, 3 - mapc)  # (sections, rows, columns)
    with mrcfile.new(str(tmp_path / "p.mrc")) as mrc:
        mrc.set_data(np.ascontiguousarray(stored))
        mrc.header.mapc, mrc.header.mapr, mrc.header.maps = axes
    descriptor = vio.query_descriptor(tmp_path / "p.mrc")
    assert descriptor == vio.ImageDescriptor((4, 5, 6), 3, "float32")
    np.testing.assert_array_equal(vio.read(tmp_path / "p.mrc"), volume)
    np.testing.assert_array_equal(vio.read(tmp_path / "p.mrc", data_type="float64"), volume)
    patches = np.full((2, 3, 3, 3), -1.0, dtype=np.float32)
    vio.read_patches_async(vio.loader(workers=1), patches, tmp_path / "p.mrc", [[2, 2, 2], [0, 0, 0]]).get()
    np.testing.assert_array_equal(patches[0], volume[1:4, 1:4, 1:4])
    np.testing.assert_array_equal(patches[1][1:, 1:, 1:], volume[:2, :2, :2])
    assert (patches[1][0] == -1).all()


def test_axes_of_a_big_endian_volume_stack(tmp_path, rng):
    volumes = _values(rng, (2, 3, 4, 5), np.int16)
    stored = volumes.transpose(0, 2, 3, 1)  # sections are y, rows are x, columns are z
    write_mrc_by_hand(
        tmp_path / "p.mrc", stored.reshape(8, 5, 3), 1, order=">", ispg=401, mz=4, axes=(3, 1, 2)
    )
    assert vio.query_descriptor(tmp_path / "p.mrc") == vio.ImageDescriptor((2, 3, 4, 5), 3, "int16")
    np.testing.assert_array_equal(vio.read(tmp_path / "p.mrc"), volumes)


# ---------------------------------------------------------------- vitrio writes, mrcfile reads

WRITTEN_MODES = [
    ("int8", 0, "int8"),
    ("int16", 1, "int16"),
    ("float32", 2, "float32"),
    ("complex64", 4, "complex64"),
    ("uint16", 6, "uint16"),
    ("float16", 12, "float16"),
    ("uint8", 6, "uint16"),
    ("bool", 6, "uint16"),
    ("int32", 2, "float32"),
    ("float64", 2, "float32"),
    ("complex128", 4, "complex64"),
]


def _small(rng, shape, dtype):
    values = _values(rng, shape, dtype)
    if np.dtype(dtype).kind in "iu" and np.dtype(dtype).itemsize > 2:
        values = (values % 1000).astype(dtype)  # exact in float32
    if np.dtype(dtype) == np.float16:
        values = (values / 8).astype(np.float16)  # mrcfile's float16 std would overflow
    return values


@pytest.mark.parametrize(("dtype", "mode", "read_as"), WRITTEN_MODES)
def test_written_files_read_by_mrcfile(tmp_path, rng, dtype, mode, read_as):
    image = _small(rng, (6, 7), dtype)
    stack = _small(rng, (3, 6, 7), dtype)
    volume = _small(rng, (4, 6, 7), dtype)
    volumes = _small(rng, (2, 3, 6, 7), dtype)
    vio.write_single(image, tmp_path / "image.mrc")
    vio.write_stack(stack, tmp_path / "stack.mrcs")
    vio.write_single(volume, tmp_path / "volume.map")
    vio.write_stack(volumes, tmp_path / "volumes.mrc")
    expectations = [
        ("image.mrc", image, 0, 1),
        ("stack.mrcs", stack, 0, 1),
        ("volume.map", volume, 1, 4),
        ("volumes.mrc", volumes, 401, 3),
    ]
    for name, values, ispg, mz in expectations:
        path = tmp_path / name
        _validate(path)
        assert _stamp(path) == STAMP_LITTLE
        with mrcfile.open(str(path), permissive=False) as mrc:
            assert int(mrc.header.mode) == mode, name
            assert int(mrc.header.ispg) == ispg and int(mrc.header.mz) == mz, name
            assert (int(mrc.header.mapc), int(mrc.header.mapr), int(mrc.header.maps)) == (1, 2, 3)
            assert mrc.header.map.tobytes() == b"MAP " and int(mrc.header.nversion) == 20141
            assert mrc.data.dtype == np.dtype(read_as)
            np.testing.assert_array_equal(mrc.data, values.astype(read_as).reshape(mrc.data.shape))
            if np.dtype(read_as).kind != "c":
                wide = values.astype(np.float64)
                np.testing.assert_allclose(mrc.header.dmin, wide.min(), rtol=1e-3)
                np.testing.assert_allclose(mrc.header.dmax, wide.max(), rtol=1e-3)
                np.testing.assert_allclose(mrc.header.dmean, wide.mean(), rtol=1e-3, atol=1e-4)
            np.testing.assert_allclose(mrc.header.rms, values.astype(np.complex128).std(), rtol=1e-3)
        back = vio.read(path)
        assert back.dtype == np.dtype(read_as)
        np.testing.assert_array_equal(back, values.astype(read_as))


def test_written_file_statistics_exact(tmp_path, rng):
    data = rng.normal(3.0, 5.0, size=(5, 16, 12)).astype(np.float32)
    vio.write_stack(data, tmp_path / "s.mrcs")
    dmin, dmax, dmean = read_header_field(tmp_path / "s.mrcs", "3f", 76)
    (rms,) = read_header_field(tmp_path / "s.mrcs", "f", 216)
    wide = data.astype(np.float64)
    np.testing.assert_allclose(
        [dmin, dmax, dmean, rms], [wide.min(), wide.max(), wide.mean(), wide.std()], rtol=1e-6
    )


def test_stack_statistics_written_batch_by_batch(tmp_path, rng):
    data = rng.normal(-2.0, 4.0, size=(11, 8, 9)).astype(np.float32)
    writers = vio.writer_provider()
    writers.declare(tmp_path / "b.mrcs", vio.ImageDescriptor(data.shape, 2, "float32"))
    saver = vio.saver(writers, workers=3)
    order = rng.permutation(11)
    for batch in np.array_split(order, 4):
        locations = [vio.ImageLocation(tmp_path / "b.mrcs", int(i)) for i in batch]
        vio.write_batch_async(saver, data[batch], locations).get()
    writers.close(tmp_path / "b.mrcs")
    _validate(tmp_path / "b.mrcs")
    with mrcfile.open(str(tmp_path / "b.mrcs")) as mrc:
        wide = data.astype(np.float64)
        np.testing.assert_allclose(mrc.header.dmin, wide.min(), rtol=1e-6)
        np.testing.assert_allclose(mrc.header.dmax, wide.max(), rtol=1e-6)
        np.testing.assert_allclose(mrc.header.dmean, wide.mean(), rtol=1e-5)
        np.testing.assert_allclose(mrc.header.rms, wide.std(), rtol=1e-5)
        np.testing.assert_array_equal(mrc.data, data)


def test_statistics_of_images_rewritten_and_left_unwritten(tmp_path):
    writers = vio.writer_provider()
    writers.declare(tmp_path / "b.mrcs", vio.ImageDescriptor((4, 2, 2), 2, "float32"))
    saver = vio.saver(writers, executor=vio.SynchronousExecutor())
    location = vio.ImageLocation(tmp_path / "b.mrcs", 1)
    vio.write_batch_async(saver, np.full((1, 2, 2), 100.0, np.float32), [location]).get()
    vio.write_batch_async(saver, np.full((1, 2, 2), 5.0, np.float32), [location]).get()
    vio.write_batch_async(
        saver, np.full((1, 2, 2), 7.0, np.float32), [vio.ImageLocation(tmp_path / "b.mrcs", 3)]
    )
    writers.close(tmp_path / "b.mrcs", allow_partial=True)  # images 0 and 2 are left zeros
    expected = np.zeros((4, 2, 2))
    expected[1], expected[3] = 5.0, 7.0
    with mrcfile.open(str(tmp_path / "b.mrcs")) as mrc:
        np.testing.assert_array_equal(mrc.data, expected)
        got = [mrc.header.dmin, mrc.header.dmax, mrc.header.dmean, mrc.header.rms]
    np.testing.assert_allclose(got, [0.0, 7.0, expected.mean(), expected.std()], rtol=1e-6)


# ---------------------------------------------------------------- headers as common writers leave them


def _hand_file(tmp_path, name="w.mrc", order="<", **fields):
    data = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    write_mrc_by_hand(tmp_path / name, data, 2, order=order, **fields)
    return tmp_path / name, data


@pytest.mark.parametrize("order", ORDERS)
def test_zeroed_machine_stamp_warns_and_reads(tmp_path, order):
    path, data = _hand_file(tmp_path, order=order, stamp=b"\x00\x00\x00\x00")
    with pytest.warns(vio.FormatWarning, match="w.mrc"):
        read = vio.read(path)
    np.testing.assert_array_equal(read, data)


def test_machine_stamp_contradicted_by_the_header_warns(tmp_path):
    path, data = _hand_file(tmp_path, order=">", stamp=STAMP_LITTLE)
    with pytest.warns(vio.FormatWarning, match="w.mrc"):
        read = vio.read(path)
    np.testing.assert_array_equal(read, data)


def test_serialem_machine_stamp_reads(tmp_path):
    path, data = _hand_file(tmp_path, stamp=b"\x44\x41\x00\x00")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", vio.FormatWarning)  # a warning is allowed, an error is not
        np.testing.assert_array_equal(vio.read(path), data)


def test_missing_map_field_warns_and_reads(tmp_path):
    path, data = _hand_file(tmp_path, map_field=b"\x00\x00\x00\x00")
    with pytest.warns(vio.FormatWarning, match="w.mrc"):
        read = vio.read(path)
    np.testing.assert_array_equal(read, data)


def test_nsymbt_past_a_missing_extended_header_warns_and_reads(tmp_path):
    path, data = _hand_file(tmp_path, nsymbt=4096)
    assert os.path.getsize(path) == 1024 + data.nbytes
    with pytest.warns(vio.FormatWarning, match="w.mrc"):
        read = vio.read(path)
    np.testing.assert_array_equal(read, data)


def test_contents_recognized_whatever_the_extension(tmp_path, rng):
    data = _values(rng, (2, 3, 4), np.int16)
    write_mrc_by_hand(tmp_path / "frames.dat", data, 1)
    np.testing.assert_array_equal(vio.read(tmp_path / "frames.dat"), data)
    for extension in (".st", ".rec", ".ali"):
        write_mrc_by_hand(tmp_path / ("x" + extension), data, 1, map_field=b"MAP ")
        np.testing.assert_array_equal(vio.read(tmp_path / ("x" + extension)), data)


def test_unsupported_mode_names_the_file(tmp_path):
    header = bytearray(mrc_header(4, 4, 1, 2))
    struct.pack_into("<i", header, 12, 101)
    (tmp_path / "m101.mrc").write_bytes(bytes(header) + bytes(16))
    with pytest.raises(ValueError, match="m101.mrc"):
        vio.read(tmp_path / "m101.mrc")


def test_header_shorter_than_1024_bytes(tmp_path):
    (tmp_path / "short.mrc").write_bytes(mrc_header(4, 4, 1, 2)[:600])
    with pytest.raises(ValueError, match="short.mrc"):
        vio.query_descriptor(tmp_path / "short.mrc")


def test_axes_that_are_no_permutation_warn_and_read_as_standard(tmp_path):
    path, data = _hand_file(tmp_path, ispg=1, axes=(1, 1, 3))
    with pytest.warns(vio.FormatWarning, match="w.mrc"):
        read = vio.read(path)
    np.testing.assert_array_equal(read, data)


def test_volume_stack_whose_mz_does_not_divide_nz_warns_and_reads_as_a_volume(tmp_path):
    path, data = _hand_file(tmp_path, ispg=401, mz=2)
    with pytest.warns(vio.FormatWarning, match="w.mrc"):
        descriptor = vio.query_descriptor(path)
    assert descriptor == vio.ImageDescriptor((3, 4, 5), 3, "float32")


def test_negative_nsymbt_is_an_error_naming_the_file(tmp_path):
    path, _ = _hand_file(tmp_path, nsymbt=-8)
    with pytest.raises(ValueError, match="w.mrc"):
        vio.read(path)
