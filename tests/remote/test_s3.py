"""Files at `s3://` URLs read as their local copies are, with the requests they make counted at the server."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

import vitrio as vio
from vitrio.cli import main
from vitrio.data import ImageSource, PatchSource

from .conftest import read_merged_batch

NAMES = ["stack.mrcs", "volume.mrc", "image.dm4", "stack.tif"]


@pytest.mark.parametrize("name", NAMES)
def test_whole_files_and_headers_read_as_local_ones(s3, files, name):
    path, url, values = files[name]
    options = s3.options
    assert vio.query_descriptor(url, storage_options=options) == vio.query_descriptor(path)
    remote, local = vio.query_metadata(url, storage_options=options), vio.query_metadata(path)
    assert (remote.voxel_size, remote.format_name) == (local.voxel_size, local.format_name)
    np.testing.assert_array_equal(vio.read(url, storage_options=options), values)
    np.testing.assert_array_equal(
        vio.read(url, storage_options=options, data_type="float32"), vio.read(path, data_type="float32")
    )


@pytest.mark.parametrize("name", NAMES)
def test_one_image_is_fetched_alone(s3, files, name):
    path, url, values = files[name]
    count = vio.query_descriptor(path).image_count if name != "volume.mrc" else values.shape[0]
    index = count - 1
    mark = s3.mark()
    image = vio.read(vio.ImageLocation(url, index), storage_options=s3.options)
    np.testing.assert_array_equal(image, values[index] if values.ndim == 3 else values)
    asked = [r for m, p, r in s3.since(mark) if m == "GET"]
    first, last = (int(b) for b in asked[-1].removeprefix("bytes=").split("-"))
    assert last - first + 1 == image.nbytes  # the image, not the file


def test_a_batch_makes_one_request_per_merged_span(s3, files, limits):
    limits(remote_gap=1)  # merge only what touches
    loader = vio.loader(2, storage_options=s3.options)
    (mark, counted), planned = read_merged_batch(
        loader, files["stack.mrcs"], lambda: (s3.mark(), loader.stats().remote_requests)
    )
    assert sorted(r for m, _, r in s3.since(mark)) == planned
    assert loader.stats().remote_requests - counted == len(planned)  # as the loader's statistics say


def test_a_batch_over_many_files_keeps_more_requests_in_flight_than_botocore_s_pool(s3, tmp_path):
    count = 16  # botocore's pool holds 10 connections unless told
    urls = []
    for n in range(count):
        vio.write_stack(np.full((2, 4, 4), n, np.float32), tmp_path / f"s{n}.mrcs")
        urls.append(s3.put(tmp_path / f"s{n}.mrcs", f"many/s{n}.mrcs"))
    loader = vio.loader(1, storage_options=s3.options)
    for url in urls:
        vio.query_descriptor(url, readers=loader.readers)
    s3.meet = threading.Barrier(count, timeout=10)
    try:
        out = np.empty((count, 4, 4), np.float32)
        vio.read_batch_async(loader, out, [vio.ImageLocation(url, 1) for url in urls]).get()
    finally:
        s3.meet = None
    np.testing.assert_array_equal(out[:, 0, 0], np.arange(count))


def test_sections_of_a_volume_are_fetched_together(s3, files):
    path, url, values = files["volume.mrc"]
    loader = vio.loader(2, storage_options=s3.options)
    vio.query_descriptor(url, readers=loader.readers)
    out = np.empty((4, *values.shape[1:]), np.float32)
    mark = s3.mark()
    vio.read_batch_async(loader, out, [vio.ImageLocation(url, i) for i in (8, 2, 3, 0)]).get()
    np.testing.assert_array_equal(out, values[[8, 2, 3, 0]])
    assert len(s3.since(mark)) == 1  # the sections lie within one merged span


def test_patches_fetch_the_rows_they_cross(s3, files):
    path, url, values = files["stack.mrcs"]
    loader = vio.loader(2, storage_options=s3.options)
    centres = [[0, 0], [20, 28], [39, 55], [10, 50]]
    remote = np.full((4, 8, 10), -1, np.float32)
    local = remote.copy()
    vio.read_patches_async(loader, remote, vio.ImageLocation(url, 4), centres).get()
    vio.read_patches_async(vio.loader(2), local, vio.ImageLocation(path, 4), centres).get()
    np.testing.assert_array_equal(remote, local)
    volume_path, volume_url, _ = files["volume.mrc"]
    box = np.zeros((2, 4, 6, 8), np.int16), np.zeros((2, 4, 6, 8), np.int16)
    vio.read_patches_async(loader, box[0], volume_url, [[4, 12, 16], [8, 23, 31]]).get()
    vio.read_patches_async(vio.loader(2), box[1], volume_path, [[4, 12, 16], [8, 23, 31]]).get()
    np.testing.assert_array_equal(*box)


def test_patches_of_one_file_at_a_url_fetch_each_byte_once(s3, files):
    """All the patches of a file at a URL are one task, their rows merged: two workers would each fetch
    the rows of their share, the rows that both shares cross twice."""
    path, url, values = files["stack.mrcs"]
    loader = vio.loader(2, storage_options=s3.options)
    vio.query_descriptor(url, readers=loader.readers)  # the header, once
    centres = [[10, 10], [12, 40], [14, 20], [16, 50], [18, 30], [20, 10], [22, 40], [24, 20]]
    out = np.empty((len(centres), 8, 8), np.float32)
    mark = s3.mark()
    vio.read_patches_async(loader, out, vio.ImageLocation(url, 4), centres).get()
    local = np.empty_like(out)
    vio.read_patches_async(vio.loader(2), local, vio.ImageLocation(path, 4), centres).get()
    np.testing.assert_array_equal(out, local)
    spans = sorted(tuple(int(b) for b in r.removeprefix("bytes=").split("-")) for m, _, r in s3.since(mark))
    assert spans and all(last < first for (_, last), (first, _) in zip(spans, spans[1:])), spans


def test_image_and_patch_sources_read_urls(s3, files):
    _, url, values = files["stack.mrcs"]
    _, dm_url, dm_values = files["image.dm4"]
    readers = vio.reader_provider(storage_options=s3.options)
    loader = vio.loader(2, storage_options=s3.options)
    images = ImageSource([vio.ImageLocation(url, i) for i in range(12)], readers=readers)
    dataset = vio.data.Dataset({"image": images})
    batch = dataset.read_async([3, 11, 0], loader=loader).get()
    np.testing.assert_array_equal(np.asarray(batch["image"]), values[[3, 11, 0]])
    patches = PatchSource([dm_url, dm_url], [[10, 10], [30, 40]], (6, 6), readers=readers)
    got = vio.data.Dataset({"patch": patches}).read_async([0, 1], loader=loader).get()
    np.testing.assert_array_equal(np.asarray(got["patch"])[0], dm_values[7:13, 7:13])


def test_storage_options_go_with_the_provider_alone(s3, files):
    _, url, _ = files["stack.mrcs"]
    with pytest.raises(ValueError, match="not both"):
        vio.read(url, readers=vio.reader_provider(), storage_options=s3.options)


def test_a_missing_object_is_a_missing_file(s3, files):
    with pytest.raises(vio.ImageFileNotFoundError, match="nothing.mrc"):
        vio.read(f"s3://{files['stack.mrcs'][1].split('/')[2]}/nothing.mrc", storage_options=s3.options)


def test_the_command_line_reads_urls_with_storage_options(s3, files, tmp_path, capsys):
    path, url, values = files["stack.mrcs"]
    options = json.dumps(s3.options)
    assert main(["info", "--json", "--storage-options", options, url]) == 0
    described = json.loads(capsys.readouterr().out)[0]
    assert described["shape"] == list(values.shape) and described["format"] == "mrc"
    main(["convert", "--storage-options", options, url, str(tmp_path / "copy.tif")])
    np.testing.assert_array_equal(vio.read(tmp_path / "copy.tif"), values)
