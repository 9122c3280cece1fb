"""cryovit's TomogramDataset over OME-Zarr tomograms and label volumes: on disk, and in a bucket by URL."""

from __future__ import annotations

import numpy as np
import pytest

import vitrio as vio
from cryovit.data import TomogramDataset
from cryovit.types import FileData
from vitrio.formats.zarr import OmeZarrFormat


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """A tomogram and its labels (0 background, 1 membrane, 2 granule) as OME-Zarr stores."""
    rng = np.random.default_rng(11)
    tomogram = rng.normal(size=(24, 40, 36)).astype(np.float32)
    labels = rng.integers(0, 3, size=tomogram.shape).astype(np.uint8)
    folder = tmp_path_factory.mktemp("run")
    written = OmeZarrFormat.configured(chunks=8, levels=2)
    vio.write_single(tomogram, folder / "tomo.zarr", formats=[written])
    vio.write_single(labels, folder / "labels.zarr", formats=[written])
    return folder, tomogram, labels


def check_crops(dataset: TomogramDataset, tomogram: np.ndarray, labels: np.ndarray, value: int) -> None:
    items = dataset.__getitems__([0, 0, 0])
    for item in items:
        z, y, x = item.aux_data["crop_origin"]
        box = (slice(z, z + 5), slice(y, y + 12), slice(x, x + 12))
        np.testing.assert_array_equal(item.data[0].numpy(), tomogram[box])
        np.testing.assert_array_equal(item.label.numpy(), labels[box] == value)


def test_crops_of_an_ome_zarr_tomogram_and_its_labels(stores):
    folder, tomogram, labels = stores
    files = [FileData(folder / "tomo.zarr", folder / "labels.zarr", labels=["membrane", "granule"])]
    dataset = TomogramDataset(files, label="granule", crop=(5, 12), workers=2, seed=3)
    try:
        assert dataset.tomogram_shape(0) == tomogram.shape
        check_crops(dataset, tomogram, labels, 2)
        whole = dataset.read(0)
        np.testing.assert_array_equal(whole.data[0].numpy(), tomogram)
        assert whole.tomo_name == "tomo.zarr" and whole.sample == folder.name
    finally:
        dataset.close()


def test_stores_named_by_url(stores, s3, monkeypatch):
    folder, tomogram, labels = stores
    tomo_url = s3.put_store(str(folder / "tomo.zarr"), "portal", "10001/tomo.zarr")
    labels_url = s3.put_store(str(folder / "labels.zarr"), "portal", "10001/labels.zarr")
    monkeypatch.setattr(OmeZarrFormat, "storage_options", s3.options)  # how the registered format reaches it
    files = [FileData(tomo_url, labels_url, labels=["membrane"])]
    dataset = TomogramDataset(files, label="membrane", crop=(5, 12), workers=2, seed=4)
    try:
        check_crops(dataset, tomogram, labels, 1)
        assert dataset.read(0).sample == "10001"
    finally:
        dataset.close()
