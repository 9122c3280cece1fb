"""Local MRC and TIFF files of every layout, read every way the core reads, with and without the
open-file cache, against numpy's reads of their bytes."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import vitrio as vio

from .files import mrc_files, tiff_files, write_mrc, zarr_stores
from .reads import examples, read_every_way


def loaders(data):
    """A loader of 1 to 3 threads, opening each file per use or keeping a few open."""
    workers = data.draw(st.integers(1, 3), label="workers")
    cache = data.draw(st.sampled_from([None, 1, 4]), label="cache")
    return vio.loader(workers, cache=cache)


@examples(25)
@given(data=st.data())
def test_mrc_files_read_every_way_as_their_bytes(folder, data):
    drawn = data.draw(mrc_files(folder), label="file")
    read_every_way(data, drawn, str(drawn.path), loaders(data))


@examples(20)
@given(data=st.data())
def test_tiff_files_read_every_way_as_tifffile_reads_them(folder, data):
    drawn = data.draw(tiff_files(folder), label="file")
    read_every_way(data, drawn, str(drawn.path), loaders(data))


def test_an_mrc_file_of_mode_101_is_refused_naming_its_mode(tmp_path):
    """Mode 101 (4-bit values, two a byte) is an MRC2014 mode vitrio does not read: it says so."""
    path = tmp_path / "four-bit.mrc"
    write_mrc(path, np.arange(24, dtype=np.uint8).reshape(1, 4, 6), 101, "<", (1, 2, 3), 1, 1, 0)
    with pytest.raises(vio.FormatError, match=f"{re.escape(str(path))}: .*mode 101"):
        vio.read(path)


@examples(20)
@given(data=st.data())
def test_ome_zarr_stores_read_every_way_as_zarr_reads_them(folder, data):
    drawn = data.draw(zarr_stores(folder), label="store")
    read_every_way(data, drawn, str(drawn.path), loaders(data))
