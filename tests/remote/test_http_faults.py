"""Files at `http://` URLs: read as local ones; timeouts, dropped connections, 5xx and bodies of the
wrong length retried a bounded number of times, then an error naming the URL and the range."""

from __future__ import annotations

import re

import numpy as np
import pytest

import vitrio as vio
from vitrio._config import configuration

from .http import RangeServer

VALUES = np.random.default_rng(7).normal(size=(6, 20, 24)).astype(np.float32)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    path = tmp_path_factory.mktemp("served") / "stack.mrcs"
    vio.write_stack(VALUES, path)
    server = RangeServer({"stack.mrcs": path.read_bytes()})
    yield server, f"{server.url}/stack.mrcs", path
    server.stop()


@pytest.fixture(autouse=True)
def quick_retries(limits, served):
    limits(remote_backoff=0.001)
    served[0].faults.clear()
    served[0].always = None


def test_reads_equal_local_reads(served):
    _, url, path = served
    np.testing.assert_array_equal(vio.read(url), vio.read(path))
    assert vio.query_metadata(url).voxel_size == vio.query_metadata(path).voxel_size


def test_faults_are_retried_then_read(served):
    server, url, _ = served
    loader = vio.loader(2)
    out = np.empty((2, 20, 24), np.float32)
    locations = [vio.ImageLocation(url, 4), vio.ImageLocation(url, 1)]
    vio.read_batch_async(loader, out[:1], locations[:1]).get()  # the header
    before = server.gets
    server.fail("drop", "503", "short")
    vio.read_batch_async(loader, out, locations).get()
    np.testing.assert_array_equal(out, VALUES[[4, 1]])
    assert server.gets - before == 4  # three failed, the fourth served


def test_a_lasting_fault_is_an_error_naming_the_range_and_reading_goes_on(served):
    server, url, path = served
    loader = vio.loader(2)
    out = np.empty((1, 20, 24), np.float32)
    vio.read_batch_async(loader, out, [vio.ImageLocation(url, 0)]).get()
    server.always = "503"
    before = server.gets
    image = VALUES[0].nbytes
    offset = path.stat().st_size - VALUES.nbytes
    with pytest.raises(OSError, match=rf"stack.mrcs \(bytes {offset + 3 * image}-{offset + 4 * image - 1}\)"):
        vio.read_batch_async(loader, out, [vio.ImageLocation(url, 3)]).get()
    assert server.gets - before == configuration().remote_attempts
    server.always = None
    vio.read_batch_async(loader, out, [vio.ImageLocation(url, 3)]).get()
    np.testing.assert_array_equal(out[0], VALUES[3])


@pytest.mark.parametrize("fault", ["long", "whole"])
def test_a_body_not_as_asked_is_refused(served, fault):
    server, url, _ = served
    readers = vio.reader_provider()
    vio.query_descriptor(url, readers=readers)
    server.always = fault
    with pytest.raises(OSError, match="stack.mrcs"):
        vio.read(vio.ImageLocation(url, 2), readers=readers)
    server.always = None
    np.testing.assert_array_equal(vio.read(vio.ImageLocation(url, 2), readers=readers), VALUES[2])


def test_a_missing_file_is_named(served):
    server, _, _ = served
    with pytest.raises(vio.ImageFileNotFoundError, match="absent.mrc"):
        vio.read(f"{server.url}/absent.mrc")


def test_a_server_not_reached_is_named_not_taken_for_a_missing_file():
    server = RangeServer({})
    url = f"{server.url}/stack.mrcs"
    server.stop()
    with pytest.raises(OSError, match=re.escape(f"{url}: ClientConnectorError")) as error:
        vio.read(url)
    assert not isinstance(error.value, FileNotFoundError)
