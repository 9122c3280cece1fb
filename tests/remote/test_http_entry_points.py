"""`vitrio extract`, `vitrio montage`, `vitrio.dask` and EER events of files at `http://` URLs (a server on
127.0.0.1, no options needed), against the same reads of the local copies."""

from __future__ import annotations

import threading
from pathlib import Path

import dask
import mrcfile
import numpy as np
import pytest
from PIL import Image

import vitrio as vio
import vitrio.dask as vd
from vitrio.cli import main
from vitrio.formats.eer import read_events
from vitrio.testing.eer import random_movie

from ..dask.conftest import make_project
from .http import RangeServer


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A folder of two picked micrographs, their STAR files, a stack and an EER movie; its URL and server."""
    folder = tmp_path_factory.mktemp("served")
    make_project(folder, micrographs=2, per_micrograph=8, size=80)
    rng = np.random.default_rng(9)
    vio.write_stack(rng.normal(size=(7, 20, 24)).astype(np.float32), folder / "stack.mrcs")
    random_movie(folder / "movie.eer", frames=5, shape=(40, 40), seed=2)
    files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    server = RangeServer(files)
    yield folder, server.url, server
    server.stop()


@pytest.fixture
def four_stacks(tmp_path):
    """A server of four stacks whose images are filled with their number, and their third images."""
    names = [f"s{n}.mrcs" for n in range(4)]
    for n, name in enumerate(names):
        vio.write_stack(np.full((3, 8, 8), n, np.float32), tmp_path / name)
    server = RangeServer({name: (tmp_path / name).read_bytes() for name in names})
    yield server, [vio.ImageLocation(f"{server.url}/{name}", 2) for name in names]
    server.stop()


@pytest.mark.parametrize("opened", [True, False], ids=["images", "headers"])
def test_a_batch_fetches_the_headers_and_images_of_its_files_together(four_stacks, opened):
    server, locations = four_stacks
    loader = vio.loader(1, storage_options={})  # one thread: only fetching at once holds them together
    if opened:  # the headers first, one file after another
        for location in locations:
            vio.query_descriptor(location.key, readers=loader.readers)
    server.meet = threading.Barrier(len(locations), timeout=10)  # each GET waits for the other three
    before = server.gets
    out = np.empty((len(locations), 8, 8), np.float32)
    vio.read_batch_async(loader, out, locations).get()
    np.testing.assert_array_equal(out[:, 0, 0], np.arange(4))
    assert server.gets - before == len(locations) * (1 if opened else 2)  # the images (and headers)


def test_extract_from_http_equals_the_local_run(served, tmp_path):
    folder, url, server = served
    for where, prefix in (("local", str(folder)), ("remote", url)):
        args = ["--micrographs", f"{prefix}/micrographs.star", "--coordinates", f"{prefix}/coords.star"]
        before = len(server.asked)
        assert main(["extract", *args, "--box-size", "16", "-o", str(tmp_path / where / "p.star")]) == 0
    headers = [n for n, r in server.asked[before:] if n.endswith(".mrc") and r and r.startswith("bytes=0-")]
    assert sorted(headers) == ["Micrographs/mic_000.mrc", "Micrographs/mic_001.mrc"]  # each opened once
    local, remote = (sorted((tmp_path / where).glob("*.mrcs")) for where in ("local", "remote"))
    assert [p.name for p in remote] == [p.name for p in local] and len(local) == 2
    for a, b in zip(local, remote):
        np.testing.assert_array_equal(mrcfile.read(b), mrcfile.read(a))


def test_montage_of_http_urls_equals_the_local_one(served, tmp_path):
    folder, url, _ = served
    pictures = []
    for prefix in (str(folder), url):
        out = tmp_path / f"{len(pictures)}.png"
        assert (
            main(["montage", f"{prefix}/stack.mrcs", f"{prefix}/movie.eer", "--tile", "40", "-o", str(out)])
            == 0
        )
        with Image.open(out) as image:
            pictures.append((np.asarray(image), image.text["Description"]))
    np.testing.assert_array_equal(pictures[1][0], pictures[0][0])
    assert pictures[1][1] == pictures[0][1] and len(pictures[0][1].split("\n")) == 7 + 2


def test_dask_arrays_of_http_urls_equal_the_local_ones(served):
    folder, url, _ = served
    indices = [6, 0, 3, 3, 5]
    remote = vd.from_locations([vio.ImageLocation(f"{url}/stack.mrcs", i) for i in indices], chunk=2)
    with dask.config.set(scheduler="threads"):
        np.testing.assert_array_equal(remote.compute(), vio.read(folder / "stack.mrcs")[indices])
        micrograph = vd.from_file(f"{url}/Micrographs/mic_001.mrc").compute()
    np.testing.assert_array_equal(micrograph, vio.read(folder / "Micrographs/mic_001.mrc"))


def test_eer_events_at_http_urls_equal_the_local_ones(served):
    folder, url, _ = served
    remote, local = read_events(f"{url}/movie.eer", 1, 4), read_events(Path(folder, "movie.eer"), 1, 4)
    np.testing.assert_array_equal(remote.timestamps, local.timestamps)
    np.testing.assert_array_equal(remote.get_positions(), local.get_positions())
    assert local.event_count > 0
