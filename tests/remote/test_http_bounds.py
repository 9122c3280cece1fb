"""Files at `http://` URLs read from servers that misbehave: bodies shorter than asked, stalls, redirects to
other hosts; and the secrets a URL holds kept out of every message and repr."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import vitrio as vio
from vitrio._config import configuration
from vitrio._remote import RemoteFile
from vitrio.data import particle_locations, read_particles

from .http import RangeServer

VALUES = np.random.default_rng(5).normal(size=(4, 16, 20)).astype(np.float32)
SECRETS = ("pa55word", "s1gnature", "cr3dential", "t0ken")


class Unsigned(dict):
    """Files by name, a name asked with a query (a signed URL's) found without it."""

    def get(self, name, default=None):
        return super().get(name.partition("?")[0], default)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    path = tmp_path_factory.mktemp("served") / "stack.mrcs"
    vio.write_stack(VALUES, path)
    server = RangeServer(Unsigned({"stack.mrcs": path.read_bytes()}))
    yield server, f"{server.url}/stack.mrcs", path
    server.stop()


@pytest.fixture(autouse=True)
def quick_retries(limits, served):
    limits(remote_backoff=0.001)
    server = served[0]
    server.faults.clear()
    server.always = server.redirect = None
    server.kept = set()
    server.heads = None


def image_range(path, index):
    size = VALUES[0].nbytes
    offset = path.stat().st_size - VALUES.nbytes + index * size
    return f"bytes {offset}-{offset + size - 1}"


def test_a_file_a_server_is_unavailable_to_give_is_an_error_naming_it_not_a_missing_file(served):
    server, url, _ = served
    server.heads = server.always = "503"
    with pytest.raises(
        OSError, match=f"{url}: .* after {configuration().remote_attempts} attempts"
    ) as failed:
        vio.read(url)
    assert not isinstance(failed.value, FileNotFoundError)


@pytest.mark.parametrize("fault", ["short", "half"])
def test_a_body_shorter_than_the_range_is_an_error_naming_the_url_and_range(served, fault):
    server, url, path = served
    readers = vio.reader_provider()
    vio.query_descriptor(url, readers=readers)
    server.always = fault
    before = server.gets
    with pytest.raises(OSError, match=rf"stack.mrcs \({image_range(path, 2)}\): .* after 4 attempts"):
        vio.read(vio.ImageLocation(url, 2), readers=readers)
    assert server.gets - before == configuration().remote_attempts


def test_a_stalled_server_is_an_error_naming_the_url_within_the_time_limit(served, limits):
    server, url, path = served
    limits(remote_timeout=0.5)
    readers = vio.reader_provider()
    vio.query_descriptor(url, readers=readers)
    server.always = "stall"
    server.release.clear()
    failed = []

    def read():
        try:
            vio.read(vio.ImageLocation(url, 1), readers=readers)
        except OSError as error:
            failed.append(error)

    reader = threading.Thread(target=read)
    reader.start()
    reader.join(
        60 * configuration().remote_attempts * configuration().remote_timeout
    )  # far past the attempts' time limits
    waited_on = reader.is_alive()
    server.release.set()
    reader.join()
    assert not waited_on, "the read waited past its time limits"
    assert len(failed) == 1
    assert f"stack.mrcs ({image_range(path, 1)})" in str(failed[0])
    assert "Timeout" in str(failed[0])


@pytest.fixture
def elsewhere():
    """A second server, on another port of 127.0.0.1, holding nothing."""
    server = RangeServer({})
    yield server
    server.stop()


def test_headers_given_are_not_sent_to_another_host_a_redirect_names(served, elsewhere):
    server, url, _ = served
    server.redirect = elsewhere.url
    options = {"headers": {"X-Api-Key": "k3y"}}
    with pytest.raises(OSError, match=rf"stack.mrcs: .*redirected to {elsewhere.url}.*refused"):
        vio.read(url, storage_options=options)
    assert elsewhere.headers == []
    server.redirect = None
    np.testing.assert_array_equal(vio.read(url, storage_options=options), VALUES)


def test_a_redirect_to_another_host_is_followed_where_no_header_is_given(served, elsewhere):
    server, url, path = served
    elsewhere.files = {"stack.mrcs": path.read_bytes()}
    server.redirect = elsewhere.url
    np.testing.assert_array_equal(vio.read(url), VALUES)
    assert elsewhere.gets > 0


def secret_url(url):
    host, _, path = url.removeprefix("http://").partition("/")
    return f"http://reader:pa55word@{host}/{path}?X-Amz-Signature=s1gnature&X-Amz-Credential=cr3dential&sig=t0ken"


def assert_no_secret(text):
    assert not [s for s in SECRETS if s in text], text


def test_secrets_in_a_url_are_in_no_message_nor_repr(served):
    server, url, path = served
    signed = secret_url(url)
    file = RemoteFile(signed)
    assert "stack.mrcs" in repr(file)
    assert_no_secret(repr(file))
    server.always = "503"
    with pytest.raises(OSError, match=r"stack.mrcs\?X-Amz-Signature=\*\*\*") as failed:
        file.read_ranges([(0, 10)])
    assert_no_secret(str(failed.value))
    assert failed.value.key == signed  # the key is the URL as given
    with pytest.raises(vio.ImageFileNotFoundError, match="absent.mrcs") as missing:
        vio.read(secret_url(f"{server.url}/absent.mrcs"))
    assert_no_secret(str(missing.value))


def test_secrets_in_a_tables_url_are_not_in_the_paths_it_tried(served):
    server, _, _ = served
    server.files["project/run.star"] = b"data_\nloop_\n_rlnImageName #1\n1@gone.mrcs\n"
    url = secret_url(f"{server.url}/project/run.star").partition("?")[0]
    with pytest.raises(FileNotFoundError, match="gone.mrcs") as missing:
        particle_locations(read_particles(url), url)
    assert_no_secret(str(missing.value))


def test_secrets_in_a_stores_url_are_in_no_message(served):
    server, _, _ = served
    url = secret_url(f"{server.url}/missing.zarr").partition("?")[0]
    with pytest.raises(FileNotFoundError, match="missing.zarr") as missing:
        vio.read(url)
    assert_no_secret(str(missing.value))


def test_secrets_in_a_url_are_not_in_what_a_format_says_of_its_file(served):
    server, _, _ = served
    server.files["junk.mrc"] = b"not an image " * 100
    with pytest.raises(vio.FormatError, match="junk.mrc") as malformed:
        vio.read(secret_url(f"{server.url}/junk.mrc"))
    assert_no_secret(str(malformed.value))


def test_headers_given_for_a_table_are_not_sent_where_its_images_redirect(served, elsewhere):
    server, _, _ = served
    server.files["project/run.star"] = b"data_\nloop_\n_rlnImageName #1\n1@moved.mrcs\n"
    server.redirect, server.kept = elsewhere.url, {"project/run.star"}
    url, options = f"{server.url}/project/run.star", {"headers": {"X-Api-Key": "k3y"}}
    with pytest.raises(OSError, match=rf"moved.mrcs: .*redirected to {elsewhere.url}"):
        particle_locations(read_particles(url, storage_options=options), url, storage_options=options)
    assert elsewhere.headers == []


def test_secrets_in_a_url_are_not_in_a_batchs_error_nor_a_readers_or_locations_repr(served):
    server, url, _ = served
    signed = secret_url(url)
    location = vio.ImageLocation(signed, 0)
    assert "stack.mrcs" in repr(location)
    assert_no_secret(repr(location))
    with vio.reader_provider().acquire(signed) as reader:
        assert "stack.mrcs" in repr(reader)
        assert_no_secret(repr(reader))
    server.files["short.mrcs"] = server.files[url.rpartition("/")[2]][:1200]  # a header, no images
    short = vio.ImageLocation(secret_url(f"{server.url}/short.mrcs"), 0)
    with pytest.raises(vio.FormatError, match=r"short.mrcs\?.*=\*\*\*: the file is truncated") as failed:
        vio.read_batch_async(vio.loader(workers=1), np.empty((1, 16, 16), np.float32), [short]).get()
    assert_no_secret(str(failed.value))
    assert_no_secret(" ".join(getattr(failed.value, "__notes__", [])))
    server.files["text.txt"] = b"plain text, of no format " * 100
    with pytest.raises(vio.FormatError, match="text.txt") as unknown:
        vio.read(secret_url(f"{server.url}/text.txt"))
    assert_no_secret(str(unknown.value))
