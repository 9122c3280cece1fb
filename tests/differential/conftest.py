"""The servers the differential tests read files at URLs from: S3 (moto's) and plain HTTP, on 127.0.0.1,
started once per module."""

from __future__ import annotations

import pytest

from ..remote.conftest import RangedS3
from ..remote.http import RangeServer


@pytest.fixture(scope="module")
def s3():
    """The S3 server, its bucket filled by `RangedS3.put`."""
    server = RangedS3()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def http():
    """The HTTP server of ranges; a file is served at `{url}/{name}` once put in its `files` dict."""
    server = RangeServer({})
    yield server
    server.stop()


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A folder for the files of the module's examples, each of a name of its own."""
    return tmp_path_factory.mktemp("drawn")
