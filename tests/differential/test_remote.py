"""Files (MRC, TIFF) and OME-Zarr stores at `http://` and `s3://` URLs, read every way the core reads,
against numpy's reads of their local copies; requests are cut into parts and merged across gaps of a
few bytes, so that a small file spans many parts."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import vitrio as vio

from ..remote.conftest import BUCKET
from .files import mrc_files, tiff_files, zarr_stores
from .reads import examples, read_every_way
from .urls import largest_file, request_sizes, served


def read_at_url(data, drawn, s3, http, servers=("s3", "http")):
    """Read `drawn` every way at a URL of one of `servers`, its requests cut into parts."""
    url, options = served(drawn, data.draw(st.sampled_from(servers), label="server"), s3, http)
    cache = data.draw(st.sampled_from([None, 4]), label="cache")
    loader = vio.loader(data.draw(st.integers(1, 3), label="workers"), cache=cache, storage_options=options)
    with request_sizes(data, largest_file(drawn)):
        read_every_way(data, drawn, url, loader, options)


@examples(10)
@given(data=st.data())
def test_mrc_files_at_urls_read_every_way_as_their_bytes(s3, http, folder, data):
    read_at_url(data, data.draw(mrc_files(folder)), s3, http)


@examples(8)
@given(data=st.data())
def test_tiff_files_at_urls_read_every_way_as_tifffile_reads_them(s3, http, folder, data):
    read_at_url(data, data.draw(tiff_files(folder)), s3, http)


@examples(6)
@given(data=st.data())
def test_ome_zarr_stores_at_http_urls_read_every_way_as_zarr_reads_them(s3, http, folder, data):
    # Few chunks a read: the test server queues 5 connections, and a read fetches its chunks together.
    read_at_url(data, data.draw(zarr_stores(folder, chunks_across=2)), s3, http, ["http"])


def test_an_ome_zarr_store_at_an_s3_url_is_read_with_the_storage_options_given(s3, tmp_path):
    """docs/remote.md: `storage_options=` of `vio.read` and `vio.loader` reach the stores at URLs too.
    The format reads an OME-Zarr key with its own configured options (none here), whatever the call
    gives, so the server is asked without the credentials given."""
    values = np.arange(12, dtype=np.uint16).reshape(3, 4)
    store = tmp_path / "image.zarr"
    vio.write_single(values, store)
    url = s3.put_store(str(store), BUCKET, "given-options.zarr")
    np.testing.assert_array_equal(vio.read(url, storage_options=s3.options), values)
    out = np.zeros((1, 3, 4), np.uint16)
    vio.read_batch_async(vio.loader(1, storage_options=s3.options), out, [url]).get()
    np.testing.assert_array_equal(out[0], values)
