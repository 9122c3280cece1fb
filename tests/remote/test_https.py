"""Files at `https://` URLs of a server on 127.0.0.1 whose certificate a private authority signed (made here
with trustme): read as the local copies where the authority is trusted, through `storage_options={"ssl":
context}` or, for the command, `SSL_CERT_FILE`; refused, naming the URL, where it is not."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import trustme

import vitrio as vio
from vitrio.data import particle_locations, read_particles

from .conftest import write_files
from .http import RangeServer

SOURCES = Path(__file__).resolve().parents[2] / "src"
STAR = "data_particles\n\nloop_\n_rlnImageName #1\n_rlnDefocusU #2\n" + "".join(
    f"{i:06d}@Extract/job007/particles.mrcs {1000 + i}.5\n" for i in (3, 1, 12)
)


def _certified(authority: trustme.CA) -> ssl.SSLContext:
    """A server's context showing a certificate for 127.0.0.1 that `authority` signed."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("127.0.0.1").configure_cert(context)
    return context


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The server, the options that trust its authority, the file of that authority, and the files served."""
    folder = tmp_path_factory.mktemp("https")
    made = write_files(folder)
    (folder / "project/Refine3D/job010").mkdir(parents=True)
    (folder / "project/Refine3D/job010/run_data.star").write_text(STAR)
    (folder / "project/Extract/job007").mkdir(parents=True)
    (folder / "project/Extract/job007/particles.mrcs").write_bytes(made["stack.mrcs"][0].read_bytes())
    authority = trustme.CA()
    trusted = ssl.create_default_context()
    authority.configure_trust(trusted)
    authority.cert_pem.write_to_path(str(folder / "authority.pem"))
    files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    server = RangeServer(files, tls=_certified(authority))
    yield server, {"ssl": trusted}, folder / "authority.pem", made
    server.stop()


@pytest.mark.parametrize("name", ["stack.mrcs", "stack.tif", "image.dm4"])
def test_files_read_as_the_local_copies(served, name):
    server, options, _, made = served
    path, values = made[name]
    url = f"{server.url}/{name}"
    assert url.startswith("https://")
    assert vio.query_descriptor(url, storage_options=options) == vio.query_descriptor(path)
    np.testing.assert_array_equal(vio.read(url, storage_options=options), values)


def test_a_batch_reads_images_of_several_files(served):
    server, options, _, made = served
    stack, tiff = made["stack.mrcs"][1], made["stack.tif"][1]
    locations = [vio.ImageLocation(f"{server.url}/stack.mrcs", i) for i in (7, 0, 11)]
    locations += [vio.ImageLocation(f"{server.url}/stack.tif", i) for i in (4, 1)]
    out = np.empty((5, 40, 56), np.float32)
    tiles = np.empty((2, 30, 20), np.float32)
    loader = vio.loader(2, storage_options=options)
    vio.read_batch_async(loader, out[:3], locations[:3]).get()
    vio.read_batch_async(loader, tiles, locations[3:]).get()
    np.testing.assert_array_equal(out[:3], stack[[7, 0, 11]])
    np.testing.assert_array_equal(tiles, tiff[[4, 1]])


def test_a_table_resolves_its_images_against_its_url(served):
    server, options, _, made = served
    url = f"{server.url}/project/Refine3D/job010/run_data.star"
    table = read_particles(url, storage_options=options)
    assert table["rlnDefocusU"].tolist() == [1003.5, 1001.5, 1012.5]
    locations = particle_locations(table, url, storage_options=options)
    assert {loc.key for loc in locations} == {f"{server.url}/project/Extract/job007/particles.mrcs"}
    images = vio.data.ImageSource(locations, readers=vio.reader_provider(storage_options=options))
    batch = vio.data.Dataset({"image": images}).read_async(
        [0, 1, 2], loader=vio.loader(2, storage_options=options)
    )
    np.testing.assert_array_equal(batch.get()["image"], made["stack.mrcs"][1][[2, 0, 11]])


def _info(url: str, **environment: str) -> subprocess.CompletedProcess:
    """`vitrio info --json URL` in a fresh interpreter, with `environment` added to this one's."""
    env = {**os.environ, "PYTHONPATH": str(SOURCES), **environment}
    command = [sys.executable, "-m", "vitrio", "info", "--json", url]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)


def test_the_command_trusts_the_authorities_of_ssl_cert_file(served):
    server, _, authority, made = served
    url = f"{server.url}/stack.mrcs"
    result = _info(url, SSL_CERT_FILE=str(authority))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)[0]["shape"] == list(made["stack.mrcs"][1].shape)
    refused = _info(url, SSL_CERT_FILE=os.devnull)
    assert refused.returncode != 0 and url in refused.stderr and "CERTIFICATE_VERIFY_FAILED" in refused.stderr


@pytest.mark.parametrize("trusting", ["the system's authorities", "another authority"])
def test_an_untrusted_certificate_is_refused_naming_the_url(served, trusting):
    server, _, _, _ = served
    context = ssl.create_default_context()
    if trusting == "another authority":
        trustme.CA().configure_trust(context)
    url = f"{server.url}/stack.mrcs"
    with pytest.raises(OSError, match="CERTIFICATE_VERIFY_FAILED") as refused:
        vio.read(url, storage_options={"ssl": context})
    assert url in str(refused.value) and not isinstance(refused.value, FileNotFoundError)


def test_a_certificate_changed_after_the_header_is_refused_at_once(served):
    server, options, _, made = served
    url = f"{server.url}/stack.mrcs"
    readers = vio.reader_provider(storage_options=options)
    vio.query_descriptor(url, readers=readers)
    shown = server.tls
    server.tls = _certified(trustme.CA())
    refused = r"stack.mrcs \(bytes \d+-\d+\): .*CERTIFICATE_VERIFY_FAILED"
    try:
        with pytest.raises(OSError, match=refused) as error:
            vio.read(vio.ImageLocation(url, 5), readers=readers)
        assert "attempts" not in str(error.value)  # not asked again: no retry makes it trusted
    finally:
        server.tls = shown
    image = vio.read(vio.ImageLocation(url, 5), readers=readers)
    np.testing.assert_array_equal(image, made["stack.mrcs"][1][5])
