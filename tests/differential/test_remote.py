"""Files at `http://` and `s3://` URLs, read every way the core reads, against numpy's reads of their
local copies; requests are cut into parts and merged across gaps of a few bytes, so that a small file
spans many parts."""

from __future__ import annotations

from unittest import mock

from hypothesis import given
from hypothesis import strategies as st

import vitrio as vio
from vitrio._remote import RemoteFile

from .files import mrc_files, tiff_files
from .reads import examples, read_every_way


def request_sizes(data, size: int):
    """`RemoteFile.part` and `gap` patched for an example: the file of `size` bytes cut into up to 16 parts
    (or left whole, as parts of 16 MiB leave it), merged across gaps of a few bytes, or of none."""
    parts = data.draw(st.sampled_from([1, 2, 3, 7, 16]), label="parts")
    part = max(16, -(-size // parts)) + data.draw(st.integers(0, 5), label="part's odd bytes")
    gap = data.draw(st.sampled_from([0, 1, 7, part // 2, RemoteFile.gap]), label="gap")
    return mock.patch.multiple(RemoteFile, part=part, gap=gap)


def served(data, drawn, s3, http) -> tuple[str, dict]:
    """The URL of `drawn` at one of the servers, and the options that reach it."""
    name = drawn.path.name
    if data.draw(st.sampled_from(["s3", "http"]), label="server") == "s3":
        return s3.put(drawn.path, name), s3.options
    http.files[name] = drawn.path.read_bytes()
    return f"{http.url}/{name}", {}


def read_at_url(data, drawn, s3, http):
    url, options = served(data, drawn, s3, http)
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
