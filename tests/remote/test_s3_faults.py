"""Files at `s3://` URLs of a server that fails every request: asked `remote_attempts` times, then an
error naming the bucket, the key and (for a read) the range."""

from __future__ import annotations

import numpy as np
import pytest

import vitrio as vio
from vitrio._config import configuration


@pytest.fixture(autouse=True)
def quick_retries(limits, s3):
    limits(remote_backoff=0.001)
    yield
    s3.failing = None


def requests_at_most(failing):
    """The requests `remote_attempts` make at most: aiohttp asks once more, on a new connection, where
    one it kept open is closed unanswered."""
    return configuration().remote_attempts * (2 if failing == "drop" else 1)


def lasting_defaults(s3):
    """The server's `storage_options` without its retries and time limits: those vitrio sets stand."""
    return {**s3.options, "config_kwargs": {}}


@pytest.mark.parametrize("failing", ["503", "drop"])
def test_opening_a_file_of_a_failing_server_is_an_error_naming_its_url(s3, files, failing):
    url = files["volume.mrc"][1]
    s3.failing = failing
    mark = s3.mark()
    with pytest.raises(OSError, match=f"{url}: .* after {configuration().remote_attempts} attempts"):
        vio.read(url, storage_options=lasting_defaults(s3))
    assert configuration().remote_attempts <= len(s3.since(mark)) <= requests_at_most(failing)


@pytest.mark.parametrize("failing", ["503", "drop"])
def test_reading_a_file_of_a_failing_server_is_an_error_naming_its_url_and_range(s3, files, failing):
    path, url, values = files["stack.mrcs"]
    readers = vio.reader_provider(storage_options=lasting_defaults(s3))
    vio.query_descriptor(url, readers=readers)
    s3.failing = failing
    mark = s3.mark()
    offset = path.stat().st_size - values.nbytes + 3 * values[0].nbytes
    asked = rf"{url} \(bytes {offset}-{offset + values[0].nbytes - 1}\)"
    with pytest.raises(OSError, match=f"{asked}: .* after {configuration().remote_attempts} attempts"):
        vio.read(vio.ImageLocation(url, 3), readers=readers)
    assert configuration().remote_attempts <= len(s3.since(mark)) <= requests_at_most(failing)
    s3.failing = None
    np.testing.assert_array_equal(vio.read(vio.ImageLocation(url, 3), readers=readers), values[3])
