"""The HDF5 plug-in fed mutated files by the fuzzer of ``tests/hardening``: every case reads, or raises
a clean error that names the file, in worker processes under a memory limit, without crashing or
hanging. The workers register the plug-in through a ``sitecustomize`` module put first on their path."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from tests.hardening.corpus import _small_integers
from tests.hardening.fuzzing import Fuzzer, Seed

pytestmark = pytest.mark.timeout(300)

CASES_PER_SEED = 300
FIRST_CASE = 7321
LAYOUTS = {
    "contiguous.h5": ((4, 8, 8), {}),
    "chunked.h5": ((4, 8, 8), {"chunks": (2, 4, 4)}),
    "gzip-shuffle.h5": ((4, 8, 8), {"chunks": (2, 4, 4), "compression": "gzip", "shuffle": True}),
    "stack.hdf5": ((2, 3, 4, 5), {"chunks": (1, 3, 2, 5), "compression": "gzip"}),
}


def test_mutated_hdf5_files_read_or_are_refused_cleanly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(5)
    seeds = []
    for name, (shape, options) in LAYOUTS.items():
        path = tmp_path / name
        with h5py.File(path, "w") as file:
            file.create_dataset("data", data=rng.normal(size=shape).astype(np.float32), **options)
        seeds.append(Seed(f"hdf5-{name}", "hdf5", str(path), tuple(_small_integers(path.read_bytes()))))
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import cryovit.hdf5  # registers the HDF5 format with vitrio\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), *sys.path]))
    work = tmp_path / "work"
    work.mkdir()
    cases = [
        (i, case) for i in range(len(seeds)) for case in [-1, *range(FIRST_CASE, FIRST_CASE + CASES_PER_SEED)]
    ]
    results = list(Fuzzer(seeds, work, workers=2, timeout=60).run(cases))
    assert len(results) == len(cases)
    assert {r.seed for r in results if r.case == -1 and r.outcome == "read"} == {s.name for s in seeds}
    failures = [r for r in results if r.outcome not in ("read", "refused")]
    assert not failures, "\n".join(f"{r.outcome} {r.seed} case {r.case}: {r.problems}" for r in failures[:10])
    assert sum(r.outcome == "refused" for r in results) > len(cases) // 4
