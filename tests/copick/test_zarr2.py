"""vitrio reads OME-Zarr beside zarr 2, the one copick pins: stores zarr 2 wrote read as their values."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr
from copick.util.ome import volume_pyramid, write_ome_zarr_3d

import vitrio as vio


def test_this_environment_holds_zarr_2() -> None:
    assert zarr.__version__.startswith("2."), zarr.__version__


@pytest.mark.parametrize("dtype", ["float32", "int16", "uint8"])
def test_a_store_zarr_2_wrote_reads_as_its_values(tmp_path: Path, dtype: str) -> None:
    rng = np.random.default_rng(7)
    volume = (rng.standard_normal((30, 41, 52)) * 40).astype(dtype)
    store = tmp_path / "tomogram.zarr"
    pyramid = volume_pyramid(volume, 8.0, 2, dtype=volume.dtype)
    write_ome_zarr_3d(zarr.storage.DirectoryStore(str(store)), pyramid, chunk_size=(7, 16, 10))
    assert zarr.open(str(store))["0"].compressor is not None  # chunks compressed, as zarr 2 does
    np.testing.assert_array_equal(vio.read(str(store)), volume)
    np.testing.assert_array_equal(vio.read(f"{store}#1"), pyramid[16.0])
    metadata = vio.query_metadata(str(store))
    assert metadata.voxel_size == (8.0, 8.0, 8.0) and metadata.descriptor.core_extents == (30, 41, 52)
    centres = np.array([[0, 0, 0], [15, 20, 26], [29, 40, 51]])
    boxes = vio.data.PatchSource([str(store)] * 3, centres, (6, 8, 8))
    patches = vio.data.Dataset({"box": boxes})[:]["box"]
    padded = np.pad(volume, 8)
    for patch, centre in zip(patches, centres):
        start = centre - np.array([3, 4, 4]) + 8
        np.testing.assert_array_equal(patch, padded[tuple(slice(s, s + e) for s, e in zip(start, (6, 8, 8)))])
