"""Byte ranges of a file at a URL, in any number, order and overlap, read as plain slices of its bytes:
the planning of `RemoteFile.read_ranges` checked against slicing, and patches over HTTP against the
local file."""

from __future__ import annotations

import fsspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import vitrio as vio
from vitrio._config import configuration
from vitrio._remote import RemoteFile, merge_ranges

from .http import RangeServer

SIZE = 300
DATA = bytes(np.random.default_rng(3).integers(0, 256, SIZE, dtype=np.uint8))


@pytest.fixture(scope="module")
def memory_file():
    """A `RemoteFile` of `DATA` in fsspec's memory filesystem."""
    fs = fsspec.filesystem("memory")
    fs.pipe("/ranges/data.bin", DATA)
    yield RemoteFile("memory://ranges/data.bin")
    fs.rm("/ranges/data.bin")


ranges = st.lists(
    st.tuples(st.integers(0, SIZE), st.integers(0, SIZE)).map(sorted).map(tuple), min_size=1, max_size=12
)


@settings(max_examples=400, deadline=None)
@given(ranges=ranges, gap=st.integers(1, 40), part=st.integers(1, 64))
def test_any_ranges_read_as_slices_of_the_file(memory_file, ranges, gap, part):
    memory_file.limits = configuration().replace(remote_gap=gap, remote_part=part)
    spans = merge_ranges(ranges, gap, part)
    assert all(b - a <= part for a, b in spans)
    assert all(b <= c for (_, b), (c, _) in zip(spans, spans[1:]))  # sorted, apart: no byte fetched twice
    got = memory_file.read_ranges(ranges)
    assert [bytes(g) for g in got] == [DATA[a:b] for a, b in ranges]


def test_the_merge_gap_is_a_bound_not_reached(memory_file):
    gap = 10
    assert merge_ranges([(0, 5), (5 + gap, 20)], gap, 100) == [(0, 5), (15, 20)]
    assert merge_ranges([(0, 5), (4 + gap, 20)], gap, 100) == [(0, 20)]


@pytest.fixture(scope="module")
def micrograph(tmp_path_factory):
    """An HTTP server of a 512x512 float32 micrograph; the server, the URL and the values."""
    values = np.random.default_rng(11).normal(size=(512, 512)).astype(np.float32)
    path = tmp_path_factory.mktemp("micrograph") / "micrograph.mrc"
    vio.write_single(values, path)
    server = RangeServer({"micrograph.mrc": path.read_bytes()})
    yield server, f"{server.url}/micrograph.mrc", values
    server.stop()


def test_overlapping_patches_each_over_several_parts_read_as_numpy_slices(micrograph, limits):
    _, url, values = micrograph
    row = values.shape[1] * values.itemsize
    limits(remote_part=128 * row)  # a patch's 138 rows span two requests
    centres = np.array([[237, 200], [125, 60], [187, 300]])
    patches = np.empty((len(centres), 138, 64), np.float32)
    vio.read_patches_async(vio.loader(2), patches, url, centres).get()
    for patch, (y, x) in zip(patches, centres):
        np.testing.assert_array_equal(patch, values[y - 69 : y + 69, x - 32 : x + 32])


@pytest.mark.parametrize("gap", [0, 1])
def test_ranges_a_merge_gap_apart_are_asked_apart_and_closer_ones_together(micrograph, limits, gap):
    server, url, values = micrograph
    size = RemoteFile(url).size
    offset = size - values.nbytes
    limits(remote_gap=4096)
    file = RemoteFile(url)
    before = server.gets
    ranges = [(offset, offset + 100), (offset + 100 + 4096 - gap, offset + 4400)]
    got = file.read_ranges(ranges)
    assert [bytes(g) for g in got] == [values.tobytes()[a - offset : b - offset] for a, b in ranges]
    assert server.gets - before == (2 if gap == 0 else 1)
