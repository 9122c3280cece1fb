"""Run from test_distributed.py with two CPU devices: batches handed out as JAX arrays sharded over both.

    XLA_FLAGS=--xla_force_host_platform_device_count=2 JAX_PLATFORMS=cpu python distributed_jax.py STACK ROWS

Image i of STACK holds the value i everywhere. Prints OK when every batch
arrives laid out over both devices, half on each, with the right values.
"""

from __future__ import annotations

import sys

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import vitrio as vio
from vitrio.data import DataLoader, Dataset, ImageSource


def main() -> int:
    stack, rows = sys.argv[1], int(sys.argv[2])
    devices = jax.devices()
    assert len(devices) == 2, devices
    sharding = NamedSharding(Mesh(np.array(devices), ("batch",)), PartitionSpec("batch"))
    dataset = Dataset(
        {
            "image": ImageSource([vio.ImageLocation(stack, i) for i in range(rows)]),
            "name": [f"n{i}" for i in range(rows)],
        }
    )
    batches = 0
    for batch in DataLoader(
        dataset, 6, shuffle=True, seed=0, drop_last=True, output="jax", sharding=sharding
    ):
        image, index = batch["image"], np.asarray(batch["index"])
        assert isinstance(image, jax.Array) and image.shape[0] == 6
        assert image.sharding.is_equivalent_to(sharding, image.ndim)
        shards = image.addressable_shards
        assert {shard.device for shard in shards} == set(devices)
        assert all(shard.data.shape[0] == 3 for shard in shards)
        for shard in shards:
            rows_of_shard = index[shard.index[0]]
            assert np.all(np.asarray(shard.data)[:, 0, 0] == rows_of_shard)
        assert isinstance(batch["name"], np.ndarray)
        batches += 1
    assert batches == rows // 6
    print("OK", batches)
    return 0


if __name__ == "__main__":
    sys.exit(main())
