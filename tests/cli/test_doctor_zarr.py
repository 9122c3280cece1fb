"""`vitrio doctor` on an OME-Zarr store: whether the chunk cache holds what the epochs read again, and the
size that would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import vitrio as vio
from vitrio.formats.zarr import OmeZarrFormat

CHUNK_BYTES = 16**3 * 4


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A float32 volume of 32 x 64 x 64 in chunks of 16^3: 32 chunks, 512 KiB decoded."""
    volume = np.random.default_rng(4).standard_normal((32, 64, 64)).astype(np.float32)
    path = tmp_path / "tomogram.zarr"
    vio.write_single(volume, path, formats=[OmeZarrFormat.configured(chunks=16, levels=1)])
    return path


def doctor(store: Path, cache_bytes: int | None) -> dict:
    """`python -m vitrio doctor STORE --json`, with the chunk cache of `cache_bytes` (None: the default)."""
    environment = {key: value for key, value in os.environ.items() if not key.startswith("VITRIO_")}
    if cache_bytes is not None:
        environment["VITRIO_ZARR_CACHE_BYTES"] = str(cache_bytes)
    command = [sys.executable, "-m", "vitrio", "doctor", str(store), "--json", "--seconds", "0.5"]
    result = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=600)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def zarr_advice(figures: dict) -> dict:
    (advice,) = [row for row in figures["recommendations"] if row["setting"] == "zarr_cache_bytes"]
    return advice


def test_a_cache_too_small_thrashes_and_the_size_that_holds_the_store_is_recommended(store):
    figures = doctor(store, 2 * CHUNK_BYTES)
    assert figures["zarr"]["cache_bytes"] == 2 * CHUNK_BYTES
    assert figures["zarr"]["working_set"] == 32 * CHUNK_BYTES
    assert 32 - 2 <= figures["zarr"]["warm_misses"] <= 32  # all but the two chunks it holds at most
    advice = zarr_advice(figures)
    assert advice["thrashing"]
    assert advice["value"] >= 32 * CHUNK_BYTES
    assert "thrashes" in advice["reason"] and f"VITRIO_ZARR_CACHE_BYTES={advice['value']}" in advice["reason"]

    again = doctor(store, advice["value"])
    assert again["zarr"]["warm_misses"] == 0
    assert not zarr_advice(again)["thrashing"]
    assert zarr_advice(again)["value"] == advice["value"]


def test_the_default_cache_holds_a_small_store(store):
    figures = doctor(store, None)
    assert figures["zarr"]["cache_bytes"] == vio.Configuration().zarr_cache_bytes
    assert figures["zarr"]["warm_misses"] == 0
    assert not zarr_advice(figures)["thrashing"]
