"""The example that trains on crops of an OME-Zarr tomogram, run for a few steps: on its synthetic stores on
disk, and on the same stores in a bucket of the S3 server on 127.0.0.1."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).parents[2] / "examples" / "train_on_ome_zarr.py"


def run(*arguments: str) -> list[float]:
    """Run the example; the losses it prints."""
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), "--steps", "30", *arguments],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return [float(loss) for loss in re.findall(r"loss ([0-9.]+)", result.stdout)]


@pytest.mark.timeout(300)
def test_the_network_learns_from_a_synthetic_tomogram():
    losses = run()
    assert len(losses) == 3
    assert losses[-1] < losses[0] * 0.8, losses


@pytest.mark.timeout(300)
def test_it_trains_on_stores_in_a_bucket(tmp_path, s3):
    spec = importlib.util.spec_from_file_location("train_on_ome_zarr", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    tomogram, labels = example.write_synthetic(tmp_path)
    tomogram_url = s3.put_store(tomogram, "portal", "run/tomogram.zarr")
    labels_url = s3.put_store(labels, "portal", "run/labels.zarr")
    before = len(s3.gets("portal/run/tomogram.zarr/1/"))
    options = json.dumps(s3.options)
    stores = ("--tomogram", tomogram_url, "--labels", labels_url)
    losses = run(*stores, "--level", "1", "--storage-options", options)
    assert len(losses) == 3 and losses[-1] < losses[0], losses
    assert len(s3.gets("portal/run/tomogram.zarr/1/")) > before  # level 1 was read from the bucket
    assert not s3.gets("portal/run/tomogram.zarr/0/")
