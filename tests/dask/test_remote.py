"""`vitrio.dask` arrays and cluster extraction of files at `s3://` URLs (the S3 server on 127.0.0.1),
`storage_options` reaching the reads in this process and on the workers, against the local copies."""

from __future__ import annotations

import re

import dask
import mrcfile
import numpy as np
import pytest

import vitrio as vio
import vitrio.dask as vd
from vitrio._config import configure
from vitrio.extract import extract_particles

from ..remote import conftest as remote_files
from .conftest import make_project

s3 = remote_files.s3  # the fixture of the S3 server on 127.0.0.1


@pytest.fixture(scope="module")
def stacks(s3, tmp_path_factory):
    """[(local path, URL)] of three MRC stacks of 16 x 12 float32 images and a TIFF stack of uint16 ones."""
    folder = tmp_path_factory.mktemp("stacks")
    rng = np.random.default_rng(4)
    made = {f"s{i}.mrcs": rng.standard_normal((3 + i, 16, 12)).astype(np.float32) for i in range(3)}
    made["t.tif"] = rng.integers(0, 1000, (4, 16, 12)).astype(np.uint16)
    out = []
    for name, values in made.items():
        vio.write_stack(values, folder / name)
        out.append((folder / name, s3.put(folder / name, f"dask/{name}")))
    return out


def locations(stacks, which: int) -> list[vio.ImageLocation]:
    """Every image of every stack, then a few again, at the local paths (`which` 0) or the URLs (1)."""
    runs = [
        vio.ImageLocation(pair[which], i)
        for pair in stacks
        for i in range(vio.query_descriptor(pair[0]).image_count)
    ]
    return runs + [runs[4], runs[0], runs[-1]]


def test_arrays_of_urls_equal_the_local_ones_on_threads(s3, stacks):
    options = s3.options
    remote = vd.from_locations(locations(stacks, 1), chunk=5, storage_options=options)
    local = vd.from_locations(locations(stacks, 0), chunk=5)
    assert remote.dtype == local.dtype == np.float32 and remote.chunks == local.chunks
    with dask.config.set(scheduler="threads"):
        np.testing.assert_array_equal(remote.compute(), local.compute())
        path, url = stacks[1]
        np.testing.assert_array_equal(vd.from_file(url, storage_options=options).compute(), vio.read(path))
        centres = np.array([[2, 3], [8, 6], [15, 11]])
        images = [vio.ImageLocation(url, i) for i in (0, 2, 3)]
        patches = vd.from_patches(images, centres, (6, 6), storage_options=options, chunk=2)
        images = [vio.ImageLocation(path, i) for i in (0, 2, 3)]
        expected = vd.from_patches(images, centres, (6, 6), chunk=2)
        np.testing.assert_array_equal(patches.compute(), expected.compute())


def test_the_options_name_the_array(s3, stacks):
    url = stacks[0][1]
    one = vd.from_file(url, storage_options=s3.options)
    other = vd.from_file(url, storage_options={**s3.options, "default_block_size": 1 << 20})
    assert one.name != other.name and one.name == vd.from_file(url, storage_options=s3.options).name


def test_workers_read_urls_with_the_options_of_the_task(client, s3, stacks):
    remote = vd.from_locations(locations(stacks, 1), chunk=4, storage_options=s3.options)
    mark = s3.mark()
    computed = client.compute(remote).result()
    assert any(method == "GET" for method, _, _ in s3.since(mark))  # the workers fetched
    np.testing.assert_array_equal(computed, np.stack([vio.read(loc) for loc in locations(stacks, 0)]))


def test_cluster_extraction_from_urls_equals_the_local_one(client, s3, tmp_path):
    project = make_project(tmp_path / "project", micrographs=2, per_micrograph=10, size=96)
    for path in sorted((tmp_path / "project").rglob("*")):
        if path.is_file():
            url = s3.put(path, f"extract/{path.relative_to(tmp_path / 'project').as_posix()}")
    folder = url[: url.index("/extract/") + len("/extract")]
    local = extract_particles(project.micrographs, project.coordinates, 24, tmp_path / "local/p.star")
    remote = extract_particles(
        f"{folder}/micrographs.star",
        f"{folder}/coords.star",
        24,
        tmp_path / "remote/p.star",
        client=client,
        storage_options=s3.options,
    )
    assert [p.name for p in remote.stacks] == [p.name for p in local.stacks] and len(local.stacks) == 2
    for a, b in zip(local.stacks, remote.stacks):
        np.testing.assert_array_equal(mrcfile.read(b), mrcfile.read(a))
    columns = [c for c in local.particles.columns if c != "rlnImageName"]
    assert remote.particles[columns].equals(local.particles[columns])


def test_workers_read_with_the_configuration_the_array_was_made_with(client, s3, stacks):
    """The storage a task carries holds the configuration as well as the options: parts of 256 bytes asked
    here are the parts the workers fetch, though their own configuration is the default."""
    path, url = stacks[0]
    with configure(remote_part=256):
        remote = vd.from_locations([vio.ImageLocation(url, i) for i in range(3)], storage_options=s3.options)
    mark = s3.mark()
    computed = client.compute(remote).result()
    np.testing.assert_array_equal(computed, vio.read(path))
    spans = [
        int(b) + 1 - int(a)
        for method, _, asked in s3.since(mark)
        if method == "GET" and asked and (found := re.fullmatch(r"bytes=(\d+)-(\d+)", asked))
        for a, b in [found.groups()]
    ]
    assert spans and max(spans) <= 256, spans
