"""OME-Zarr stores in a bucket of an S3 server on 127.0.0.1 that the tests start (moto's): the same crops
as from disk, one GET per chunk a crop touches, and errors naming the store and the chunk (a missing
store, one without NGFF metadata, a truncated chunk, a server that dies mid-read) that leave the loader
usable."""

from __future__ import annotations

import itertools
import json
import time

import numpy as np
import pytest
import zarr

import vitrio as vio
from vitrio.formats.zarr import OmeZarrFormat

from .conftest import CHUNKS, SHAPE
from .s3 import LocalS3

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def bucket_store(tomogram, s3):
    """The tomogram's store copied into the bucket `tomograms`: its URL."""
    path, _ = tomogram
    return s3.put_store(str(path), "tomograms", "tomo.zarr")


def remote(s3: LocalS3, **options) -> type[OmeZarrFormat]:
    """A format reaching the server, with a chunk cache of its own."""
    return OmeZarrFormat.configured(storage_options=s3.options, cache_bytes=64 << 20, **options)


def touched(origin, shape) -> set[str]:
    """The chunk keys of level 0 a box touches, computed from the chunk size alone."""
    spans = [range(o // CHUNKS, (o + n - 1) // CHUNKS + 1) for o, n in zip(origin, shape)]
    return {"/".join(str(i) for i in coords) for coords in itertools.product(*spans)}


def crop(values, centre, shape):
    origin = [c - n // 2 for c, n in zip(centre, shape)]
    return values[tuple(slice(o, o + n) for o, n in zip(origin, shape))], origin


def test_crops_from_the_bucket_equal_those_from_disk(tomogram, s3, bucket_store):
    path, values = tomogram
    rng = np.random.default_rng(9)
    shape = (8, 24, 20)
    centres = np.stack([rng.integers(n // 2, e - n // 2, size=24) for n, e in zip(shape, SHAPE)], axis=1)
    local, bucket = (np.zeros((24, *shape), np.float32) for _ in range(2))
    vio.read_patches_async(vio.loader(workers=3), local, path, centres).get()
    vio.read_patches_async(vio.loader(workers=3, formats=[remote(s3)]), bucket, bucket_store, centres).get()
    np.testing.assert_array_equal(bucket, local)
    np.testing.assert_array_equal(local[5], crop(values, centres[5], shape)[0])
    sections = np.zeros((4, 1, 30, 30), np.float32)
    centres = [[0, 15, 15], [39, 80, 64], [20, 40, 40], [7, 0, 79]]
    vio.read_patches_async(vio.loader(workers=2, formats=[remote(s3)]), sections, bucket_store, centres).get()
    local_sections = np.zeros_like(sections)
    vio.read_patches_async(vio.loader(workers=2), local_sections, path, centres).get()
    np.testing.assert_array_equal(sections, local_sections)
    assert vio.query_descriptor(f"{bucket_store}#2", vio.reader_provider(formats=[remote(s3)])).extents == (
        10,
        24,
        20,
    )


def test_a_crop_fetches_each_chunk_it_touches_once(tomogram, s3, bucket_store):
    _, values = tomogram
    readers = vio.reader_provider(cache=2, formats=[remote(s3)])
    loader = vio.ImageLoader(vio.ThreadPoolExecutor(4), readers)
    vio.query_descriptor(bucket_store, readers)  # the metadata, fetched once
    seen: set[str] = set()
    for centre, shape in (((20, 48, 40), (8, 24, 20)), ((20, 40, 33), (20, 40, 30)), ((4, 4, 4), (4, 4, 4))):
        before = len(s3.gets("tomograms/tomo.zarr/"))
        out = np.zeros((3, *shape), np.float32)  # three patches on one box: each chunk fetched once
        vio.read_patches_async(loader, out, bucket_store, [centre] * 3).get()
        fetched = s3.gets("tomograms/tomo.zarr/")[before:]
        expected, origin = crop(values, centre, shape)
        np.testing.assert_array_equal(out[2], expected)
        expected_keys = {f"/tomograms/tomo.zarr/0/{key}" for key in touched(origin, shape)} - seen
        assert sorted(fetched) == sorted(expected_keys)  # those not cached already, once each
        seen |= expected_keys
        vio.read_patches_async(loader, out[:1], bucket_store, [centre]).get()
        assert len(s3.gets("tomograms/tomo.zarr/")) == before + len(fetched)  # now from the cache


def test_a_missing_store_and_one_without_ngff_metadata_are_named(tomogram, s3, bucket_store, tmp_path):
    loader = vio.loader(workers=2, formats=[remote(s3)])
    with pytest.raises(FileNotFoundError, match="s3://tomograms/missing.zarr"):
        vio.read_patches_async(
            loader, np.zeros((1, 4, 4, 4)), "s3://tomograms/missing.zarr", [[8, 8, 8]]
        ).get()
    plain = zarr.open_group(str(tmp_path / "plain.zarr"), mode="w", zarr_format=2)
    plain.create_array("0", data=np.ones((4, 8, 8), np.float32))
    url = s3.put_store(str(tmp_path / "plain.zarr"), "tomograms", "plain.zarr")
    with pytest.raises(vio.FormatError, match="s3://tomograms/plain.zarr.*multiscales"):
        vio.read_patches_async(loader, np.zeros((1, 4, 4, 4)), url, [[2, 4, 4]]).get()
    out = np.zeros((1, 4, 4, 4), np.float32)
    vio.read_patches_async(loader, out, bucket_store, [[8, 8, 8]]).get()
    np.testing.assert_array_equal(out[0], tomogram[1][6:10, 6:10, 6:10])


def test_a_truncated_chunk_is_named(tomogram, s3, tmp_path):
    path, values = tomogram
    url = s3.put_store(str(path), "tomograms", "cut.zarr")
    chunk = "tomograms/cut.zarr/0/1/2/3"
    stored = s3.fs.cat_file(chunk)
    s3.fs.pipe_file(chunk, stored[: len(stored) // 2])
    loader = vio.loader(workers=2, formats=[remote(s3)])
    out = np.zeros((1, 8, 8, 8), np.float32)
    with pytest.raises(vio.FormatError, match=r"s3://tomograms/cut.zarr: chunk 0/1/2/3"):
        vio.read_patches_async(loader, out, url, [[16, 32, 48]]).get()
    vio.read_patches_async(loader, out, url, [[8, 8, 8]]).get()  # other chunks read on
    np.testing.assert_array_equal(out[0], values[4:12, 4:12, 4:12])


def test_a_server_that_dies_mid_read_is_named_and_the_loader_reads_on(
    tomogram, s3, bucket_store, monkeypatch
):
    path, values = tomogram
    monkeypatch.setattr("s3fs.S3FileSystem.retries", 2)  # s3fs retries a dropped request 5 times by default
    dying = LocalS3()
    try:
        url = dying.put_store(str(path), "tomograms", "tomo.zarr")
        loader = vio.loader(workers=2, formats=[remote(dying), remote(s3)])
        vio.query_descriptor(url, loader.readers)
        dying.drop_after(3)  # three chunks, then nothing
        out = np.zeros((1, 40, 64, 64), np.float32)
        start = time.monotonic()
        with pytest.raises(OSError, match=r"s3://tomograms/tomo.zarr: chunk 0/\d+/\d+/\d+"):
            vio.read_patches_async(loader, out, url, [[20, 48, 40]]).get()
        assert time.monotonic() - start < 60
    finally:
        dying.stop()
    out = np.zeros((1, 8, 8, 8), np.float32)
    readers = vio.reader_provider(formats=[remote(s3)])
    vio.read_patches_async(vio.ImageLoader(loader.executor, readers), out, bucket_store, [[20, 20, 20]]).get()
    np.testing.assert_array_equal(out[0], values[16:24, 16:24, 16:24])


def test_vitrio_info_describes_a_store_in_a_bucket_by_its_url(s3, bucket_store, monkeypatch, capsys):
    import fsspec

    from vitrio.cli import main

    monkeypatch.setitem(fsspec.config.conf, "s3", s3.options)  # as FSSPEC_S3_* variables would set them
    assert bucket_store.startswith("s3://")
    assert main(["info", "--json", bucket_store]) == 0
    (info,) = json.loads(capsys.readouterr().out)
    assert info["file"] == bucket_store
    assert info["format"] == "ome-zarr" and info["shape"] == list(SHAPE)
    assert info["voxel_size"] == pytest.approx([7.84] * 3)


def test_vitrio_convert_reads_a_store_in_a_bucket_by_its_url(
    tomogram, s3, bucket_store, monkeypatch, tmp_path
):
    import fsspec
    import mrcfile

    from vitrio.cli import main

    path, values = tomogram
    monkeypatch.setitem(fsspec.config.conf, "s3", s3.options)
    assert main(["convert", bucket_store, str(tmp_path / "tomo.mrc")]) == 0
    with mrcfile.open(tmp_path / "tomo.mrc") as mrc:
        np.testing.assert_array_equal(mrc.data, values)
        assert float(mrc.voxel_size.x) == pytest.approx(7.84, rel=1e-5)
    folder = tmp_path / "several"  # several inputs: each written into the folder under its stem
    other = tmp_path / "other.mrc"
    other.write_bytes((tmp_path / "tomo.mrc").read_bytes())
    assert main(["convert", bucket_store, str(other), str(folder)]) == 0
    assert sorted(p.name for p in folder.iterdir()) == ["other.mrc", "tomo.mrc"]
    np.testing.assert_array_equal(vio.read(folder / "tomo.mrc"), values)
