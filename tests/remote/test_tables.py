"""Particle tables at URLs: read as local ones, their relative image paths resolved against their URL."""

from __future__ import annotations

import numpy as np
import pytest

import vitrio as vio
from vitrio.data import particle_locations, read_particles

STAR = "data_particles\n\nloop_\n_rlnImageName #1\n_rlnDefocusU #2\n" + "".join(
    f"{i:06d}@Extract/job007/particles.mrcs {1000 + i}.5\n" for i in (3, 1, 12)
)


@pytest.fixture(scope="module")
def table(s3, files, tmp_path_factory):
    """The URL of a STAR file two folders below the folder of the particle stack its rows name."""
    local = tmp_path_factory.mktemp("tables") / "run_data.star"
    local.write_text(STAR)
    s3.put(files["stack.mrcs"][0], "project/Extract/job007/particles.mrcs")
    return local, s3.put(local, "project/Refine3D/job010/run_data.star")


def test_a_table_at_a_url_reads_as_its_local_copy(s3, table):
    local, url = table
    remote = read_particles(url, storage_options=s3.options)
    assert remote.equals(read_particles(local))
    assert remote["rlnDefocusU"].tolist() == [1003.5, 1001.5, 1012.5]


def test_image_paths_resolve_against_the_tables_url(s3, files, table):
    _, url = table
    locations = particle_locations(
        read_particles(url, storage_options=s3.options), url, storage_options=s3.options
    )
    stack = url.replace("Refine3D/job010/run_data.star", "Extract/job007/particles.mrcs")
    assert [(loc.key, loc.index_in_stack) for loc in locations] == [(stack, 2), (stack, 0), (stack, 11)]
    images = vio.data.ImageSource(locations, readers=vio.reader_provider(storage_options=s3.options))
    batch = vio.data.Dataset({"image": images}).read_async(
        [0, 1, 2], loader=vio.loader(2, storage_options=s3.options)
    )
    np.testing.assert_array_equal(batch.get()["image"], files["stack.mrcs"][2][[2, 0, 11]])


def test_a_path_missing_beside_the_table_is_named(s3, table):
    local, _ = table
    url = s3.put(local, "elsewhere/run_data.star")
    with pytest.raises(FileNotFoundError, match="Extract/job007/particles.mrcs"):
        particle_locations(read_particles(url, storage_options=s3.options), url, storage_options=s3.options)


def test_a_path_leaving_the_tables_bucket_is_looked_for_within_it(s3, files, tmp_path):
    local = tmp_path / "x.star"
    local.write_text("data_particles\n\nloop_\n_rlnImageName #1\n000002@../../../other/y.mrcs\n")
    url = s3.put(local, "dir/x.star")
    if not s3.fs.exists("other"):
        s3.fs.call_s3("create_bucket", Bucket="other")
    s3.fs.put(str(files["stack.mrcs"][0]), "other/y.mrcs")  # where `..` would lead, were it followed
    s3.fs.invalidate_cache()
    options = s3.options
    with pytest.raises(FileNotFoundError, match=r"is not at s3://remote-files/other/y\.mrcs;") as missing:
        particle_locations(read_particles(url, storage_options=options), url, storage_options=options)
    assert "s3://other" not in str(missing.value)
    inside = s3.put(files["stack.mrcs"][0], "other/y.mrcs")
    locations = particle_locations(read_particles(url, storage_options=options), url, storage_options=options)
    assert [(loc.key, loc.index_in_stack) for loc in locations] == [(inside, 1)]
