"""Compressed TIFF and EER files at `s3://` URLs, read through tifffile on a file of fetched blocks, as
their local copies read."""

from __future__ import annotations

import numpy as np
import pytest
import tifffile

import vitrio as vio
from vitrio.formats.eer import DetectorEventTimeline, detector_event_timeline_reader_provider, read_events
from vitrio.testing.eer import FIXED_CODES, frame_events, random_events, write_movie


@pytest.fixture(scope="module")
def compressed(s3, tmp_path_factory):
    """{name: (local path, URL)} of TIFF files compressed three ways and an EER movie."""
    folder = tmp_path_factory.mktemp("compressed")
    rng = np.random.default_rng(3)
    values = rng.integers(0, 4000, size=(4, 64, 48)).astype(np.uint16)
    made = {}
    for name, options in {
        "zlib.tif": {"compression": "zlib"},
        "lzw.tif": {"compression": "lzw", "rowsperstrip": 8},
        "tiled.tif": {"compression": "zstd", "tile": (16, 16)},
    }.items():
        tifffile.imwrite(folder / name, values, photometric="minisblack", **options)
        made[name] = folder / name
    code = FIXED_CODES[65001]
    events = [frame_events(random_events(rng, (32, 32), code, 0.05), code, rng) for _ in range(6)]
    write_movie(folder / "movie.eer", events, (32, 32), rows_per_strip=8)
    made["movie.eer"] = folder / "movie.eer"
    return {name: (path, s3.put(path, name)) for name, path in made.items()}


@pytest.mark.parametrize("name", ["zlib.tif", "lzw.tif", "tiled.tif", "movie.eer"])
def test_reads_equal_local_reads(s3, compressed, name):
    path, url = compressed[name]
    options = s3.options
    assert vio.query_metadata(url, storage_options=options) == vio.query_metadata(path)
    np.testing.assert_array_equal(vio.read(url, storage_options=options), vio.read(path))
    loader = vio.loader(2, storage_options=options)
    shape = vio.query_descriptor(path).core_extents
    remote, local = np.zeros((2, 3, 10, 12), np.float32)
    vio.read_patches_async(loader, remote, vio.ImageLocation(url, 1), [[5, 5], [20, 30], [31, 47]]).get()
    vio.read_patches_async(
        vio.loader(2), local, vio.ImageLocation(path, 1), [[5, 5], [20, 30], [31, 47]]
    ).get()
    np.testing.assert_array_equal(remote, local)
    assert shape == vio.query_descriptor(url, storage_options=options).core_extents


def test_an_eer_frame_is_fetched_without_the_rest(s3, compressed):
    path, url = compressed["movie.eer"]
    readers = vio.reader_provider(storage_options=s3.options)
    vio.query_descriptor(url, readers=readers)
    mark = s3.mark()
    frame = vio.read(vio.ImageLocation(url, 4), readers=readers)
    np.testing.assert_array_equal(frame, vio.read(vio.ImageLocation(path, 4)))
    asked = [r for m, _, r in s3.since(mark) if m == "GET"]
    fetched = sum(int(b) - int(a) + 1 for a, b in (r.removeprefix("bytes=").split("-") for r in asked))
    assert len(asked) == 1 and fetched < path.stat().st_size // 4


def test_eer_events_at_a_url_equal_the_local_ones(s3, compressed):
    path, url = compressed["movie.eer"]
    local_reader = detector_event_timeline_reader_provider().acquire(path)
    reader = detector_event_timeline_reader_provider(storage_options=s3.options).acquire(url)
    assert reader.descriptor == local_reader.descriptor
    local, remote = DetectorEventTimeline(), DetectorEventTimeline()
    local_reader.read(1, 5, local)
    mark = s3.mark()
    reader.read(1, 5, remote)
    assert [m for m, _, _ in s3.since(mark)] == ["GET"]  # the strips of the four frames, in one request
    np.testing.assert_array_equal(remote.timestamps, local.timestamps)
    np.testing.assert_array_equal(remote.get_positions(), local.get_positions())
    assert remote.event_count > 0
    reader.close()
    local_reader.close()
    whole = read_events(url, storage_options=s3.options)
    np.testing.assert_array_equal(whole.get_positions(), read_events(path).get_positions())
    appended = read_events(url, 0, 2, storage_options=s3.options)
    read_events(url, 2, 6, events=appended, storage_options=s3.options)
    np.testing.assert_array_equal(appended.get_positions(), whole.get_positions())
    np.testing.assert_array_equal(appended.timestamps, whole.timestamps)
