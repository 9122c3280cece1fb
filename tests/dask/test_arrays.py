"""`vitrio.dask`'s lazy arrays, against `vitrio.read` of each location, and `store`, against `write_stack`."""

from __future__ import annotations

import pickle
from pathlib import Path

import dask
import dask.array as da
import mrcfile
import numpy as np
import pytest

import vitrio as vio
import vitrio.dask as vd
import vitrio.dask._arrays as arrays

from ..half_complex import write_half_complex


@pytest.fixture
def stacks(tmp_path: Path) -> list[Path]:
    """Five MRC stacks of 16 x 12 float32 images, of 3 to 7 images, and a TIFF stack of uint16 ones."""
    rng = np.random.default_rng(1)
    paths = []
    for i in range(5):
        paths.append(tmp_path / f"s{i}.mrcs")
        vio.write_stack(rng.standard_normal((3 + i, 16, 12)).astype(np.float32), paths[-1])
    paths.append(tmp_path / "t.tif")
    vio.write_stack(rng.integers(0, 1000, (4, 16, 12)).astype(np.uint16), paths[-1])
    return paths


def locations_of(stacks: list[Path]) -> list[vio.ImageLocation]:
    """Every image of every stack, in runs of one file, then a few from here and there."""
    runs = [vio.ImageLocation(p, i) for p in stacks for i in range(vio.query_descriptor(p).image_count)]
    return runs + [runs[5], runs[0], runs[-1], runs[5]]


def test_computed_on_the_cluster_equals_reading_each_location(client, stacks):
    locations = locations_of(stacks)
    images = vd.from_locations(locations, chunk=6)
    assert images.shape == (len(locations), 16, 12) and images.dtype == np.float32
    expected = np.stack([vio.read(location, data_type="float32") for location in locations])
    np.testing.assert_array_equal(images.compute(), expected)
    np.testing.assert_allclose(images.sum().compute(), expected.sum(), rtol=1e-5)


def test_a_chunk_is_a_run_of_images_cut_where_the_file_changes(stacks):
    locations = locations_of(stacks)[:-4]
    images = vd.from_locations(locations, chunk=6)
    # s0..s4 hold 3..7 images, t.tif 4: a run of 7 is cut at 6, and its last image packed with the next.
    assert images.chunks[0] == (3, 4, 5, 6, 6, 5)


def test_indexing_reads_only_the_chunks_it_needs(stacks, monkeypatch):
    reads = []

    def counted(keys, *args):
        reads.append(tuple(keys))
        return read_chunk(keys, *args)

    read_chunk = arrays._read_chunk
    monkeypatch.setattr(arrays, "_read_chunk", counted)
    locations = locations_of(stacks)[:-4]
    images = vd.from_locations(locations, chunk=6)
    with dask.config.set(scheduler="sync"):
        one = images[8].compute()
        assert reads == [(str(stacks[2]),)]
        np.testing.assert_array_equal(one, vio.read(locations[8]))
        reads.clear()
        images[[0, 20]].compute()
        assert sorted(reads) == sorted([(str(stacks[0]),), (str(stacks[4]),)])


def test_texts_and_whole_files(stacks, tmp_path):
    texts = [f"2@{stacks[0]}", f"1@{stacks[3]}"]
    np.testing.assert_array_equal(
        vd.from_locations(texts).compute(scheduler="sync"),
        np.stack([vio.read(vio.ImageLocation(stacks[0], 1)), vio.read(vio.ImageLocation(stacks[3], 0))]),
    )
    singles = []
    for i in range(3):
        singles.append(tmp_path / f"one{i}.mrc")
        vio.write_single(np.full((5, 6), i, np.int16), singles[-1])
    whole = vd.from_locations(singles, data_type="float32").compute(scheduler="sync")
    assert whole.dtype == np.float32
    np.testing.assert_array_equal(whole, np.arange(3, dtype=np.float32)[:, None, None] * np.ones((5, 6)))


def test_a_task_carries_names_not_open_files(stacks):
    images = vd.from_locations(locations_of(stacks), chunk=6)
    graph = dict(images.__dask_graph__())
    restored = pickle.loads(pickle.dumps(graph))
    assert len(restored) == len(images.chunks[0])
    assert len(pickle.dumps(graph)) < 20_000
    with dask.config.set(scheduler="sync"):
        np.testing.assert_array_equal(
            da.Array(restored, images.name, images.chunks, dtype=images.dtype).compute(), images.compute()
        )


def test_patches_and_files(client, tmp_path):
    rng = np.random.default_rng(2)
    micrograph = rng.standard_normal((40, 50)).astype(np.float32)
    vio.write_single(micrograph, tmp_path / "mic.mrc")
    centres = np.array([[0, 0], [20, 25], [39, 49], [10, 3]])
    patches = vd.from_patches([tmp_path / "mic.mrc"] * 4, centres, (8, 8), chunk=3).compute()
    padded = np.pad(micrograph, 8)
    for patch, (y, x) in zip(patches, centres):
        np.testing.assert_array_equal(patch, padded[y - 4 + 8 : y + 4 + 8, x - 4 + 8 : x + 4 + 8])

    volume = rng.standard_normal((9, 7, 6)).astype(np.float32)
    vio.write_single(volume, tmp_path / "volume.mrc")
    lazy = vd.from_file(tmp_path / "volume.mrc", chunk=4)
    assert lazy.chunks[0] == (4, 4, 1)
    np.testing.assert_array_equal(lazy.compute(), volume)
    stack = vd.from_file(tmp_path / "mic.mrc")
    np.testing.assert_array_equal(stack.compute(), micrograph)


def test_store_on_the_cluster_equals_write_stack(client, stacks, tmp_path):
    images = vd.from_locations(locations_of(stacks), chunk=5)
    doubled = images * 2 + 1
    vd.store(doubled, tmp_path / "stored.mrcs")
    expected = np.stack([vio.read(location, data_type="float32") for location in locations_of(stacks)])
    vio.write_stack(expected * 2 + 1, tmp_path / "direct.mrcs")
    with mrcfile.open(tmp_path / "stored.mrcs", permissive=False) as stored:
        np.testing.assert_array_equal(stored.data, expected * 2 + 1)
    assert (tmp_path / "stored.mrcs").read_bytes() == (tmp_path / "direct.mrcs").read_bytes()

    volume = da.from_array(np.arange(60, dtype=np.float32).reshape(3, 4, 5), chunks=2)
    vd.store(volume, tmp_path / "volume.mrc", vio.ImageDescriptor((3, 4, 5), 3, "float32"))
    np.testing.assert_array_equal(mrcfile.read(tmp_path / "volume.mrc"), volume.compute())
    vd.store(volume, tmp_path / "sized.mrcs", voxel_size=(2.0, 1.5))
    with mrcfile.open(tmp_path / "sized.mrcs") as sized:
        assert (float(sized.voxel_size.y), float(sized.voxel_size.x)) == (2.0, 1.5)


def broken(block: np.ndarray) -> np.ndarray:
    if block[0, 0, 0] >= 4:
        raise RuntimeError("this block fails")
    return block


def test_a_failed_store_leaves_nothing(client, tmp_path):
    values = da.from_array(
        np.arange(8, dtype=np.float32)[:, None, None] * np.ones((1, 4, 4)), chunks=(2, 4, 4)
    )
    with pytest.raises(RuntimeError, match="this block fails"):
        vd.store(values.map_blocks(broken), tmp_path / "out.mrcs")
    assert list(tmp_path.iterdir()) == []


def test_bad_locations(stacks, tmp_path):
    vio.write_stack(np.zeros((2, 8, 8), np.float32), tmp_path / "small.mrcs")
    with pytest.raises(ValueError, match="small.mrcs"):
        vd.from_locations([vio.ImageLocation(stacks[0], 0), vio.ImageLocation(tmp_path / "small.mrcs", 0)])
    with pytest.raises(IndexError, match="s0.mrcs"):
        vd.from_locations([vio.ImageLocation(stacks[0], 3)])
    with pytest.raises(ValueError, match="mix"):
        vd.from_locations([vio.ImageLocation(stacks[0], 0), stacks[1]])
    with pytest.raises(ValueError, match="chunk"):
        vd.from_locations([vio.ImageLocation(stacks[0], 0)], chunk=0)
    with pytest.raises(ValueError, match="no image"):
        vd.from_locations([])
    with pytest.raises(ValueError, match="centres"):
        vd.from_patches([stacks[0]], [[-1, 2]], (4, 4))


def test_an_index_into_a_single_volume_names_its_section_as_in_image_source(tmp_path):
    volume = np.arange(5 * 6 * 7, dtype=np.float32).reshape(5, 6, 7)
    vio.write_single(volume, tmp_path / "particles.mrc")
    locations = [vio.ImageLocation(tmp_path / "particles.mrc", i) for i in (3, 0)]
    images = vd.from_locations(locations)
    assert images.shape == (2, *vio.data.ImageSource(locations).shape) == (2, 6, 7)
    np.testing.assert_array_equal(images.compute(scheduler="sync"), volume[[3, 0]])
    with pytest.raises(IndexError, match="particles.mrc"):
        vd.from_locations([vio.ImageLocation(tmp_path / "particles.mrc", 5)])
    vio.write_single(np.zeros((6, 7), np.float32), tmp_path / "single.mrc")
    with pytest.raises(ValueError, match="single.mrc: holds a single image"):
        vd.from_locations([vio.ImageLocation(tmp_path / "single.mrc", 0)])


def test_complex_float16_files_are_read_as_complex64(half_complex, tmp_path):
    values = (np.arange(3 * 4 * 5) + 1j * np.arange(3 * 4 * 5)[::-1]).reshape(3, 4, 5).astype(np.complex64)
    write_half_complex(tmp_path / "h.c32", values)
    for images, expected in (
        (vd.from_file(tmp_path / "h.c32"), values),
        (vd.from_locations([f"3@{tmp_path / 'h.c32'}"]), values[[2]]),
        (
            vd.from_patches([vio.ImageLocation(tmp_path / "h.c32", 1)], [[2, 2]], (2, 2)),
            values[None, 1, 1:3, 1:3],
        ),
    ):
        assert images.dtype == np.complex64
        np.testing.assert_array_equal(images.compute(scheduler="sync"), expected)
