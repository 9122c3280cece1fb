"""Files written a batch at a time: writer_provider, saver, write_batch_async."""

from __future__ import annotations

import os

import mrcfile
import numpy as np
import pytest
import tifffile
import torch

import vitrio as vio


def _listing(directory) -> list[str]:
    return sorted(os.listdir(directory))


def test_declare_close_and_file_count(tmp_path):
    writers = vio.writer_provider()
    descriptor = vio.ImageDescriptor((2, 3, 4), 2, "float32")
    assert writers.file_count == 0
    writers.declare(tmp_path / "a.mrcs", descriptor)
    writers.declare(str(tmp_path / "b.tif"), descriptor)
    assert writers.file_count == 2
    with pytest.raises(RuntimeError, match="a.mrcs: is declared already"):
        writers.declare(str(tmp_path / "a.mrcs"), descriptor)
    with pytest.raises(TypeError, match="c.mrc: a descriptor is an ImageDescriptor, not tuple"):
        writers.declare(tmp_path / "c.mrc", (2, 3, 4))
    with pytest.raises(IndexError, match="never.mrc: is not declared"):
        writers.close(tmp_path / "never.mrc")
    with pytest.raises(vio.IncompleteFileError, match="2 of its 2 images were never written"):
        writers.close(str(tmp_path / "a.mrcs"))
    assert writers.file_count == 2  # still declared
    writers.close(str(tmp_path / "a.mrcs"), allow_partial=True)
    assert writers.file_count == 1
    with pytest.raises(IndexError, match="a.mrcs: is not declared"):
        writers.close(tmp_path / "a.mrcs")  # closed: no longer declared
    writers.close(tmp_path / "b.tif", allow_partial=True)
    assert writers.file_count == 0
    assert _listing(tmp_path) == ["a.mrcs", "b.tif"]
    writers.declare(tmp_path / "a.mrcs", vio.ImageDescriptor((1, 5, 5), 2, "int16"))  # may be declared again
    writers.close(tmp_path / "a.mrcs", allow_partial=True)
    assert vio.query_descriptor(tmp_path / "a.mrcs") == vio.ImageDescriptor((1, 5, 5), 2, "int16")


@pytest.mark.parametrize("extension", [".mrcs", ".tif"])
def test_declared_but_unwritten_file_closes_to_zeros_when_allowed(tmp_path, extension):
    writers = vio.writer_provider()
    path = tmp_path / ("z" + extension)
    writers.declare(path, vio.ImageDescriptor((3, 4, 5), 2, "float32"))
    assert not path.exists()
    with pytest.raises(vio.IncompleteFileError, match="3 of its 3 images"):
        writers.close(path)
    assert not path.exists()
    writers.close(path, allow_partial=True)
    np.testing.assert_array_equal(vio.read(path), np.zeros((3, 4, 5), np.float32))
    if extension == ".mrcs":
        with mrcfile.open(str(path), permissive=False) as mrc:
            assert (mrc.data == 0).all() and mrc.data.shape == (3, 4, 5)
    else:
        np.testing.assert_array_equal(tifffile.imread(path), np.zeros((3, 4, 5), np.float32))
    assert _listing(tmp_path) == [path.name]


def test_batch_spanning_several_stacks(tmp_path, rng):
    images = rng.normal(size=(7, 6, 5)).astype(np.float32)
    volumes = rng.integers(0, 1000, size=(3, 2, 6, 5)).astype(np.uint16)
    writers = vio.writer_provider()
    writers.declare(tmp_path / "one.mrcs", vio.ImageDescriptor((4, 6, 5), 2, "float32"))
    writers.declare(tmp_path / "two.tif", vio.ImageDescriptor((3, 6, 5), 2, "float64"))
    writers.declare(tmp_path / "vol.mrc", vio.ImageDescriptor((3, 2, 6, 5), 3, "uint16"))
    writers.declare(tmp_path / "vol.tif", vio.ImageDescriptor((3, 2, 6, 5), 3, "int32"))
    saver = vio.saver(writers, workers=3)
    assert saver.writers is writers and saver.worker_count == 3
    slots = [("one.mrcs", i) for i in range(4)] + [("two.tif", i) for i in range(3)]
    order = rng.permutation(7)
    locations = [vio.ImageLocation(tmp_path / slots[j][0], slots[j][1]) for j in order]
    vio.write_batch_async(saver, torch.from_numpy(images[order]), locations).get()
    for half in ([2, 0], [1]):
        source = np.concatenate([volumes[half], volumes[half]])
        locations = [vio.ImageLocation(tmp_path / name, i) for name in ("vol.mrc", "vol.tif") for i in half]
        vio.write_batch_async(saver, source, locations).get()
    assert writers.file_count == 4
    assert not any((tmp_path / name).exists() for name in ("one.mrcs", "two.tif", "vol.mrc", "vol.tif"))
    writers.flush()  # the files stand at their paths from now on, readable as written so far
    np.testing.assert_array_equal(vio.read(tmp_path / "one.mrcs"), images[:4])
    for name in ("one.mrcs", "two.tif", "vol.mrc", "vol.tif"):
        writers.close(tmp_path / name)
    assert _listing(tmp_path) == ["one.mrcs", "two.tif", "vol.mrc", "vol.tif"]
    with mrcfile.open(str(tmp_path / "one.mrcs"), permissive=False) as mrc:
        np.testing.assert_array_equal(mrc.data, images[:4])
    np.testing.assert_array_equal(tifffile.imread(tmp_path / "two.tif"), images[4:].astype(np.float64))
    with mrcfile.open(str(tmp_path / "vol.mrc"), permissive=False) as mrc:
        assert mrc.header.ispg == 401
        np.testing.assert_array_equal(mrc.data, volumes)
    np.testing.assert_array_equal(vio.read(tmp_path / "vol.tif"), volumes.astype(np.int32))
    assert vio.query_descriptor(tmp_path / "vol.tif") == vio.ImageDescriptor((3, 2, 6, 5), 3, "int32")


def test_whole_files_written_by_key(tmp_path, rng):
    stacks = rng.normal(size=(2, 3, 4, 4)).astype(np.float32)
    writers = vio.writer_provider()
    keys = [tmp_path / "w0.mrcs", str(tmp_path / "w1.tif")]
    for key in keys:
        writers.declare(key, vio.ImageDescriptor((3, 4, 4), 2, "float32"))
    vio.write_batch_async(vio.saver(writers, workers=2), stacks, keys).get()
    for key in keys:
        writers.close(key)
    np.testing.assert_array_equal(vio.read(keys[0]), stacks[0])
    np.testing.assert_array_equal(vio.read(keys[1]), stacks[1])


def test_write_batch_errors(tmp_path):
    writers = vio.writer_provider()
    writers.declare(tmp_path / "e.mrcs", vio.ImageDescriptor((2, 4, 4), 2, "float32"))
    saver = vio.saver(writers, workers=2)
    one = [vio.ImageLocation(tmp_path / "e.mrcs", 0)]
    with pytest.raises(
        ValueError, match=r"leading extent must be the number of locations, 1: its shape is \(2, 4, 4\)"
    ):
        vio.write_batch_async(saver, np.zeros((2, 4, 4)), one)
    with pytest.raises(ValueError, match="locations mix whole files and images of stacks"):
        vio.write_batch_async(saver, np.zeros((2, 4, 4)), [*one, tmp_path / "e.mrcs"])
    completion = vio.write_batch_async(
        saver, np.zeros((1, 4, 4)), [vio.ImageLocation(tmp_path / "e.mrcs", 2)]
    )
    with pytest.raises(IndexError, match=r"e\.mrcs: index 2 is past the end of a stack of 2"):
        completion.get()
    completion = vio.write_batch_async(
        saver, np.zeros((1, 4, 4)), [vio.ImageLocation(tmp_path / "x.mrcs", 0)]
    )
    with pytest.raises(IndexError, match="x.mrcs"):
        completion.get()
    completion = vio.write_batch_async(saver, np.zeros((1, 4, 5)), one)
    with pytest.raises(ValueError, match="e.mrcs"):
        completion.get()
    with pytest.raises(TypeError, match="writers is an ImageWriterProvider, not object"):
        vio.saver(object())
    writers.discard(tmp_path / "e.mrcs")
    assert writers.file_count == 0
    assert _listing(tmp_path) == []


def test_context_manager_closes_or_discards(tmp_path, rng):
    data = rng.normal(size=(2, 3, 3)).astype(np.float32)
    with vio.writer_provider() as writers:
        writers.declare(tmp_path / "ok.mrcs", vio.ImageDescriptor((2, 3, 3), 2, "float32"))
        locations = [vio.ImageLocation(tmp_path / "ok.mrcs", i) for i in range(2)]
        vio.write_batch_async(vio.saver(writers, workers=1), data, locations).get()
    np.testing.assert_array_equal(vio.read(tmp_path / "ok.mrcs"), data)
    with pytest.raises(KeyError), vio.writer_provider() as writers:
        writers.declare(tmp_path / "bad.mrcs", vio.ImageDescriptor((2, 3, 3), 2, "float32"))
        locations = [vio.ImageLocation(tmp_path / "bad.mrcs", i) for i in range(2)]
        vio.write_batch_async(vio.saver(writers, workers=1), data, locations).get()
        raise KeyError("stop")
    assert _listing(tmp_path) == ["ok.mrcs"]


def test_writer_formats_are_chosen_by_extension(tmp_path):
    writers = vio.writer_provider(formats=[vio.formats.mrc.MrcFormat])
    writers.declare(tmp_path / "t.tif", vio.ImageDescriptor((3, 3), 2, "float32"))
    with pytest.raises(ValueError, match="t.tif"):
        writers.close(tmp_path / "t.tif", allow_partial=True)
    assert _listing(tmp_path) == []


def test_flush_hands_the_images_and_header_so_far_to_the_system(tmp_path, rng):
    data = rng.normal(size=(3, 4, 4)).astype(np.float32)
    writers = vio.writer_provider()
    writers.flush()  # nothing open yet: nothing to do
    writers.declare(tmp_path / "f.mrcs", vio.ImageDescriptor((3, 4, 4), 2, "float32"))
    saver = vio.saver(writers, workers=2)
    vio.write_batch_async(
        saver, data[:2], [vio.ImageLocation(tmp_path / "f.mrcs", i) for i in range(2)]
    ).get()
    writers.flush()
    assert writers.file_count == 1 and _listing(tmp_path) == ["f.mrcs"]
    with mrcfile.open(str(tmp_path / "f.mrcs"), permissive=True) as mrc:
        np.testing.assert_array_equal(mrc.data[:2], data[:2])
        assert (mrc.data[2] == 0).all()
        assert mrc.header.dmax == pytest.approx(max(float(data[:2].max()), 0.0))
    vio.write_batch_async(saver, data[2:], [vio.ImageLocation(tmp_path / "f.mrcs", 2)]).get()
    writers.close(tmp_path / "f.mrcs")
    assert _listing(tmp_path) == ["f.mrcs"]
    np.testing.assert_array_equal(vio.read(tmp_path / "f.mrcs"), data)


def test_a_tiff_past_4_gib_is_written_as_bigtiff(tmp_path):
    """A stack of 4 GiB and more cannot be a classic TIFF (its offsets are 32-bit): it is written as
    BigTIFF. Only the last two images are written; the rest stays a hole of the sparse file."""
    path = tmp_path / "big.tif"
    count, side = 257, 4096  # 257 images of 16 MiB: past 4 GiB
    writers = vio.writer_provider()
    writers.declare(path, vio.ImageDescriptor((count, side, side), 2, "uint8"))
    last = (np.arange(2 * side * side) % 251).astype(np.uint8).reshape(2, side, side)
    vio.write_batch_async(
        vio.saver(writers, workers=1),
        last,
        [vio.ImageLocation(path, count - 2), vio.ImageLocation(path, count - 1)],
    ).get()
    writers.close(path, allow_partial=True)  # sparse: only the last images are written
    assert path.stat().st_size > 2**32
    with tifffile.TiffFile(path) as tiff:
        assert tiff.is_bigtiff
        assert tiff.series[0].shape == (count, side, side)
        np.testing.assert_array_equal(tiff.pages[count - 1].asarray(), last[1])
        np.testing.assert_array_equal(tiff.pages[count - 2].asarray(), last[0])
        assert not tiff.pages[0].asarray().any()
    out = np.full((2, side, side), 7, np.uint8)
    vio.read_batch_async(
        vio.loader(workers=1), out, [vio.ImageLocation(path, count - 1), vio.ImageLocation(path, 0)]
    ).get()
    np.testing.assert_array_equal(out[0], last[1])
    assert not out[1].any()


def test_closing_a_file_while_writes_to_it_are_in_flight(tmp_path):
    """close() racing a batch of writes to the same file, 30 times: each write lands, or raises an
    error naming the file (IndexError once the file is closed); the file at the path is whole, of
    the declared shape; a file written meanwhile is intact; no partial file is left."""
    descriptor = vio.ImageDescriptor((64, 32, 32), 2, "float32")
    ones = np.ones((64, 32, 32), np.float32)
    failures = set()
    for trial in range(30):
        writers = vio.writer_provider()
        saver = vio.saver(writers, workers=4)
        closed, other = tmp_path / f"closed{trial}.mrcs", tmp_path / f"other{trial}.mrcs"
        writers.declare(closed, descriptor)
        writers.declare(other, descriptor)
        racing = vio.write_batch_async(saver, ones, [vio.ImageLocation(closed, i) for i in range(64)])
        writers.close(closed, allow_partial=True)  # the writes under way finish first; later ones are refused
        vio.write_batch_async(saver, 2 * ones, [vio.ImageLocation(other, i) for i in range(64)]).get()
        writers.close(other)
        try:
            racing.get()
        except (IndexError, OSError) as error:
            assert str(closed) in str(error), error
            failures.add(type(error))
        assert vio.query_descriptor(closed) == descriptor
        assert set(np.unique(vio.read(closed)).tolist()) <= {0.0, 1.0}
        np.testing.assert_array_equal(vio.read(other), 2 * ones)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f"closed{n}.mrcs" for n in range(30)] + [f"other{n}.mrcs" for n in range(30)]
    )
