"""The bound on how many chunks one read of an OME-Zarr store may decode counts the inner chunks of a
sharded Zarr v3 array: few shards of many tiny inner chunks are refused as many tiny chunks are."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr

import vitrio as vio
from vitrio.formats.zarr import OmeZarrFormat
from vitrio.formats.zarr._reader import FREE_CHUNKS, VALUES_PER_CHUNK

SIDE, SHARD, INNER = 1024, 256, 2


def sharded_store(path: Path) -> Path:
    """A 1024 x 1024 image in 16 shards of 256 x 256, each of 128 x 128 inner chunks of 2 x 2; nothing
    stored, so that every value is the fill value, 7."""
    group = zarr.open_group(str(path), mode="w", zarr_format=3)
    group.create_array(
        "0", shape=(SIDE, SIDE), chunks=(INNER, INNER), shards=(SHARD, SHARD), dtype=np.uint8, fill_value=7
    )
    axes = [{"name": n, "type": "space"} for n in "yx"]
    transform = [{"type": "scale", "scale": [1.0, 1.0]}]
    multiscale = {"axes": axes, "datasets": [{"path": "0", "coordinateTransformations": transform}]}
    group.attrs["ome"] = {"version": "0.5", "multiscales": [multiscale]}
    return path


def test_a_read_of_few_shards_of_far_too_many_inner_chunks_is_refused(tmp_path: Path):
    shards = (SIDE // SHARD) ** 2
    inner = shards * (SHARD // INNER) ** 2
    bound = max(FREE_CHUNKS, SIDE * SIDE // VALUES_PER_CHUNK)
    assert shards <= bound < inner  # the shards alone would pass
    store = sharded_store(tmp_path / "dust.zarr")
    loader = vio.loader(workers=1, formats=[OmeZarrFormat.configured(cache_bytes=1 << 20)])
    out = np.zeros((SIDE, SIDE), np.uint8)
    with pytest.raises(
        vio.FormatError, match=rf"dust.zarr: a read of {SIDE * SIDE} values would decode {inner} "
    ):
        vio.read_batch_async(loader, out[None], [str(store)]).get()
    assert not out.any()
    patch = np.zeros((1, 64, 64), np.uint8)  # one shard: its inner chunks are within the bound
    vio.read_patches_async(loader, patch, str(store), [[100, 100]]).get()
    assert (patch == 7).all()
