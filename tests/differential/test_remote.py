"""Files at `http://` and `s3://` URLs, read every way the core reads, against numpy's reads of their
local copies; requests are cut into parts and merged across gaps of a few bytes, so that a small file
spans many parts."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

import vitrio as vio

from .files import mrc_files, tiff_files
from .reads import examples, read_every_way
from .urls import request_sizes, served


def read_at_url(data, drawn, s3, http):
    """Read `drawn` every way at a URL of one of the servers, its requests cut into parts."""
    url, options = served(drawn, data.draw(st.sampled_from(["s3", "http"]), label="server"), s3, http)
    cache = data.draw(st.sampled_from([None, 4]), label="cache")
    loader = vio.loader(data.draw(st.integers(1, 3), label="workers"), cache=cache, storage_options=options)
    with request_sizes(data, drawn.path.stat().st_size):
        read_every_way(data, drawn, url, loader, options)


@examples(12)
@given(data=st.data())
def test_mrc_files_at_urls_read_every_way_as_their_bytes(s3, http, folder, data):
    read_at_url(data, data.draw(mrc_files(folder)), s3, http)


@examples(10)
@given(data=st.data())
def test_tiff_files_at_urls_read_every_way_as_tifffile_reads_them(s3, http, folder, data):
    read_at_url(data, data.draw(tiff_files(folder)), s3, http)
