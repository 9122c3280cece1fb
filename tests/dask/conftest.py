"""Fixtures of the tests on a Dask cluster: a LocalCluster of two worker processes, and picked micrographs."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import dask
import distributed
import mrcfile
import numpy as np
import pandas as pd
import pytest
import starfile

import vitrio.dask as vd


def local_cluster() -> distributed.LocalCluster:
    """Two worker processes of one thread on 127.0.0.1, speaking TLS with keys of their own, quiet."""
    return vd.local_cluster(2, silence_logs=logging.CRITICAL)


@pytest.fixture(scope="session")
def cluster() -> Iterator[distributed.LocalCluster]:
    """A LocalCluster shared by the tests that leave it as they found it, shut down at the end."""
    with local_cluster() as cluster:
        yield cluster


@pytest.fixture
def client(cluster: distributed.LocalCluster) -> Iterator[distributed.Client]:
    """A client of the shared cluster, the default one dask computes on while the test runs."""
    with distributed.Client(cluster) as client:
        yield client


@pytest.fixture
def scheduler(cluster: distributed.LocalCluster) -> Iterator[str]:
    """The `tls://` address of the shared cluster, its key and certificates in the Dask configuration.

    As a user's own are for the scheduler they started (`--scheduler`).
    """
    security = cluster.security
    credentials = {
        "distributed.comm.tls.ca-file": security.tls_ca_file,
        "distributed.comm.tls.client.cert": security.tls_client_cert,
        "distributed.comm.tls.client.key": security.tls_client_key,
    }
    with dask.config.set(credentials):
        yield cluster.scheduler_address


@dataclass
class Project:
    """Micrographs with particles picked on them, and their STAR files.

    Attributes:
        micrographs: The micrographs STAR file.
        coordinates: The coordinates STAR file.
        count: How many particles are picked.
    """

    micrographs: Path
    coordinates: Path
    count: int


def make_project(folder: Path, micrographs: int = 8, per_micrograph: int = 125, size: int = 256) -> Project:
    """`micrographs` MRC micrographs of `size` x `size` with `per_micrograph` picks each, listed shuffled."""
    rng = np.random.default_rng(3)
    (folder / "Micrographs").mkdir(parents=True)
    names = [f"Micrographs/mic_{i:03d}.mrc" for i in range(micrographs)]
    rows = []
    for name in names:
        with mrcfile.new(folder / name) as mrc:
            mrc.set_data(rng.standard_normal((size, size)).astype(np.float32))
            mrc.voxel_size = 1.2
        rows += [(name, float(x), float(y)) for y, x in rng.uniform(0, size - 1, (per_micrograph, 2))]
    picks = pd.DataFrame(
        [rows[i] for i in rng.permutation(len(rows))],
        columns=["rlnMicrographName", "rlnCoordinateX", "rlnCoordinateY"],
    )
    optics = pd.DataFrame(
        {"rlnOpticsGroupName": ["opticsGroup1"], "rlnOpticsGroup": [1], "rlnMicrographPixelSize": [1.2]}
        | {"rlnVoltage": [300.0], "rlnSphericalAberration": [2.7], "rlnAmplitudeContrast": [0.1]}
    )
    table = pd.DataFrame({"rlnMicrographName": names, "rlnOpticsGroup": 1})
    starfile.write({"optics": optics, "micrographs": table}, folder / "micrographs.star")
    starfile.write(picks, folder / "coords.star")
    return Project(folder / "micrographs.star", folder / "coords.star", len(rows))


@pytest.fixture
def project(tmp_path: Path) -> Project:
    """Eight micrographs of 256 x 256 with 1,000 particles picked on them."""
    return make_project(tmp_path)
