"""vitrio on a Dask cluster: extraction on one process against a LocalCluster, and lazy arrays summed.

Two workloads, on synthetic files written once into a temporary folder:

- Extraction: 20,000 particles of 256 x 256 from 40 float32 micrographs of
  4096 x 4096 (`--quick`: 2,000 of 128 x 128 from 8 of 2048 x 2048), by
  `extract_particles` in this process, then on a `LocalCluster` of
  `--workers` worker processes (one task per micrograph). The cluster is
  started before the clock starts; its start is printed apart.
- Sum: 1,000 MRC stacks of 20 images of 128 x 128 (`--quick`: 200), summed by
  `vitrio.dask.from_locations(...).sum().compute()` on dask's threads and on
  the LocalCluster, against a `dask.array` made of `mrcfile.mmap` of each
  file, summed on dask's threads. The building of each array is timed with it.

The files are read from the page cache, as they were just written. The runs
of one process and of the cluster take turns, each after the output of the
last is removed and the page cache's dirty pages are written out (`os.sync`),
so that neither pays for the other's writes. Medians of `--repeats` runs are printed.

Usage:
    .venv/bin/python benchmarks/bench_dask.py [--quick] [--workers 2] [--repeats 3]
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import dask
import dask.array as da
import distributed
import mrcfile
import numpy as np
import pandas as pd
import starfile

import vitrio as vio
import vitrio.dask as vd
from vitrio.bench.workloads import benchmark_parser
from vitrio.extract import extract_particles

SIZES = {
    False: {"micrographs": 40, "side": 4096, "particles": 20_000, "box": 256, "stacks": 1000},
    True: {"micrographs": 8, "side": 2048, "particles": 2_000, "box": 128, "stacks": 200},
}
IMAGES_PER_STACK, IMAGE_SIDE = 20, 128


def write_project(folder: Path, micrographs: int, side: int, particles: int) -> tuple[Path, Path]:
    """Micrographs and their STAR files, `particles` picks spread evenly over them."""
    rng = np.random.default_rng(0)
    (folder / "Micrographs").mkdir(parents=True)
    names = [f"Micrographs/mic_{i:03d}.mrc" for i in range(micrographs)]
    for name in names:
        vio.write_single(rng.standard_normal((side, side), dtype=np.float32), folder / name, voxel_size=1.0)
    picks = pd.DataFrame(
        {
            "rlnMicrographName": [names[i % micrographs] for i in range(particles)],
            "rlnCoordinateX": rng.uniform(0, side - 1, particles),
            "rlnCoordinateY": rng.uniform(0, side - 1, particles),
        }
    )
    optics = pd.DataFrame(
        {"rlnOpticsGroupName": ["g1"], "rlnOpticsGroup": [1], "rlnMicrographPixelSize": [1.0]}
    )
    table = pd.DataFrame({"rlnMicrographName": names, "rlnOpticsGroup": 1})
    starfile.write({"optics": optics, "micrographs": table}, folder / "micrographs.star")
    starfile.write(picks, folder / "coords.star")
    return folder / "micrographs.star", folder / "coords.star"


def write_stacks(folder: Path, count: int) -> list[Path]:
    """`count` MRC stacks of 20 float32 images of 128 x 128."""
    folder.mkdir()
    rng = np.random.default_rng(1)
    block = rng.standard_normal((IMAGES_PER_STACK, IMAGE_SIDE, IMAGE_SIDE), dtype=np.float32)
    paths = [folder / f"stack_{i:04d}.mrcs" for i in range(count)]
    for i, path in enumerate(paths):
        vio.write_stack(block + i, path)
    return paths


def median_seconds(
    runs: dict[str, Callable[[], object]], repeats: int, between: Callable[[], object] = lambda: None
) -> dict[str, float]:
    """The median time of `repeats` runs of each of `runs`, taking turns, `between` called before each."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            between()
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = benchmark_parser(__doc__, "small files")
    parser.add_argument("--workers", type=int, default=2, help="worker processes of the LocalCluster")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    sizes = SIZES[args.quick]
    with tempfile.TemporaryDirectory(prefix="vitrio-bench-dask-") as temporary:
        folder = Path(temporary)
        start = time.perf_counter()
        micrographs, coordinates = write_project(
            folder / "project", sizes["micrographs"], sizes["side"], sizes["particles"]
        )
        stacks = write_stacks(folder / "stacks", sizes["stacks"])
        print(f"wrote the files in {time.perf_counter() - start:.1f} s")
        output = folder / "Extract"

        def clear() -> None:
            shutil.rmtree(output, ignore_errors=True)
            os.sync()

        def extract(client=None) -> None:
            extract_particles(
                micrographs, coordinates, sizes["box"], output / "particles.star", client=client
            )

        count, box = sizes["particles"], sizes["box"]
        print(f"\nextraction: {count:,} particles of {box} x {box} from {sizes['micrographs']} micrographs")
        start = time.perf_counter()
        cluster = vd.local_cluster(args.workers)
        client = distributed.Client(cluster)
        print(f"  (LocalCluster of {args.workers} workers started in {time.perf_counter() - start:.1f} s)")
        try:
            runs = {"one process": extract, f"LocalCluster, {args.workers} workers": lambda: extract(client)}
            for name, seconds in median_seconds(runs, args.repeats, clear).items():
                print(f"  {name:34s} {seconds:7.2f} s  {count / seconds:9,.0f} particles/s")

            locations = [vio.ImageLocation(p, i) for p in stacks for i in range(IMAGES_PER_STACK)]
            expected = float(np.float64(IMAGES_PER_STACK * IMAGE_SIDE * IMAGE_SIDE) * sum(range(len(stacks))))

            def vitrio_sum() -> float:
                return float(vd.from_locations(locations).sum(dtype=np.float64).compute())

            def mmap_sum() -> float:
                arrays = [da.from_array(mrcfile.mmap(p, mode="r").data, chunks=-1) for p in stacks]
                return float(da.concatenate(arrays).sum(dtype=np.float64).compute())

            print(
                f"\nsum of {len(locations):,} images of {IMAGE_SIDE} x {IMAGE_SIDE} in {len(stacks)} stacks"
            )
            with dask.config.set(scheduler="threads"):
                runs = {"vitrio from_locations, threads": vitrio_sum, "mrcfile.mmap, threads": mmap_sum}
                results = median_seconds(runs, args.repeats)
            on_cluster = f"vitrio from_locations, {args.workers} workers"
            results |= median_seconds({on_cluster: vitrio_sum}, args.repeats)
            for name, seconds in results.items():
                print(f"  {name:34s} {seconds:7.2f} s  {len(locations) / seconds:9,.0f} images/s")
            block_sum = float(
                np.random.default_rng(1)
                .standard_normal((20, 128, 128), dtype=np.float32)
                .sum(dtype=np.float64)
            )
            assert abs(vitrio_sum() - (expected + len(stacks) * block_sum)) < 1e-3 * expected
        finally:
            client.close()
            cluster.close()


if __name__ == "__main__":
    main()
