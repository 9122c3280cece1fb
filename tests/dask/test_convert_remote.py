"""`vitrio convert` of files at `s3://` URLs on a local cluster: `--storage-options` reach the workers."""

from __future__ import annotations

import json

import numpy as np

import vitrio as vio
from vitrio.cli import main

from ..remote import conftest as remote_files

s3 = remote_files.s3  # the fixture of the S3 server on 127.0.0.1


def test_convert_on_a_local_cluster_reads_urls_with_the_storage_options(s3, tmp_path, capsys):
    values = np.random.default_rng(9).integers(-500, 500, (5, 12, 16)).astype(np.int16)
    vio.write_stack(values, tmp_path / "stack.mrcs", voxel_size=1.5)
    urls = [s3.put(tmp_path / "stack.mrcs", f"convert/{name}.mrcs") for name in ("a", "b")]
    options = tmp_path / "options.json"  # the bucket's endpoint and credentials
    options.write_text(json.dumps(s3.options))
    command = ["convert", *urls, str(tmp_path / "out"), "--suffix", "tif", "--local", "2"]
    assert main([*command, "--storage-options", f"@{options}"]) == 0, capsys.readouterr().err
    for name in ("a", "b"):
        np.testing.assert_array_equal(vio.read(tmp_path / "out" / f"{name}.tif"), values)
        assert vio.query_metadata(tmp_path / "out" / f"{name}.tif").voxel_size == (1.5, 1.5)
