"""Files at `gs://` URLs, read through gcsfs from a fake of Google Cloud Storage's JSON API on 127.0.0.1
(`tests/remote/gcs.py`) as their local copies are, with the downloads they make counted there."""

from __future__ import annotations

import numpy as np
import pytest

import vitrio as vio

from .conftest import read_merged_batch, write_files
from .gcs import LocalGCS


@pytest.fixture(scope="module")
def gcs(tmp_path_factory):
    """The fake and {name: (local path, URL, values)} of the files put there."""
    fake = LocalGCS()
    made = write_files(tmp_path_factory.mktemp("gcs"))
    files = {name: (path, fake.put(path, f"data/{name}"), values) for name, (path, values) in made.items()}
    yield fake, files
    fake.stop()


@pytest.mark.parametrize("name", ["stack.mrcs", "stack.tif", "image.dm4"])
def test_files_read_as_the_local_copies(gcs, name):
    fake, files = gcs
    path, url, values = files[name]
    assert vio.query_descriptor(url, storage_options=fake.options) == vio.query_descriptor(path)
    mark = fake.mark()
    np.testing.assert_array_equal(vio.read(url, storage_options=fake.options), values)
    assert fake.media(mark) and all(asked.startswith("bytes=") for asked in fake.media(mark))  # by ranges


def test_a_batch_downloads_each_merged_span_once(gcs, limits):
    fake, files = gcs
    limits(remote_gap=1)  # merge only what touches
    loader = vio.loader(2, storage_options=fake.options)
    mark, planned = read_merged_batch(loader, files["stack.mrcs"], fake.mark)
    assert fake.mark() - mark == len(planned)  # downloads alone: the object's size was asked once
    assert sorted(fake.media(mark)) == planned


def test_a_resumed_scratch_keeps_an_unchanged_object_and_takes_a_changed_one_in_again(gcs, tmp_path):
    fake, files = gcs
    path, _, values = files["stack.mrcs"]
    url = fake.put(path, "data/changing.mrcs")
    locations = [vio.ImageLocation(url, i) for i in range(12)]
    place = tmp_path / "resumed.scratch"

    def resumed():
        files_at = vio.reader_provider(storage_options=fake.options)
        return vio.create_mapped_file_image_scratch(locations, place, 4, files=files_at)

    out = np.empty((12, *values.shape[1:]), np.float32)
    vio.read_batch_async(vio.loader(2, scratch=resumed(), storage_options=fake.options), out, locations).get()
    assert resumed().held_count == 12
    changed = tmp_path / "changed.mrcs"
    vio.write_stack(values[::-1].copy(), changed)
    assert changed.stat().st_size == path.stat().st_size
    fake.put(changed, "data/changing.mrcs")  # a new generation, of the same size
    again = resumed()
    assert again.held_count == 0
    vio.read_batch_async(vio.loader(2, scratch=again, storage_options=fake.options), out, locations).get()
    np.testing.assert_array_equal(out, values[::-1])


def test_a_missing_object_is_a_missing_file(gcs):
    fake, _ = gcs
    with pytest.raises(vio.ImageFileNotFoundError, match="gs://remote-files/data/nothing.mrc"):
        vio.read("gs://remote-files/data/nothing.mrc", storage_options=fake.options)
