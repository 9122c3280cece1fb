"""Fixtures of the OME-Zarr tests: a tomogram store written by vitrio, and the S3 server on 127.0.0.1."""

from __future__ import annotations

import numpy as np
import pytest

import vitrio as vio
from vitrio.formats.zarr import OmeZarrFormat

from .s3 import LocalS3

SHAPE = (40, 96, 80)
CHUNKS = 16


@pytest.fixture(scope="module")
def tomogram(tmp_path_factory):
    """A float32 tomogram of `SHAPE` in a store of 3 levels, chunks of 16^3, 7.84 Å voxels; and its values."""
    values = np.random.default_rng(5).normal(size=SHAPE).astype(np.float32)
    path = tmp_path_factory.mktemp("stores") / "tomo.zarr"
    written = OmeZarrFormat.configured(chunks=CHUNKS, levels=3, voxel_size=7.84)
    vio.write_single(values, path, formats=[written])
    return path, values


@pytest.fixture(scope="module")
def s3():
    """An S3 server on 127.0.0.1, stopped when the module's tests are done."""
    server = LocalS3()
    yield server
    server.stop()
