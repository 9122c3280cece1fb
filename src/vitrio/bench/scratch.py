"""Epochs through each kind of scratch against the first epoch from the files, on W1 and W2.

    python benchmarks/bench_scratch.py [--quick] [--data DIR] [--repeats N]

For each workload and kind of scratch: the first epoch (reading the files
and taking the images in), then the median of the next epochs served from
the scratch, against gathering the same batches out of a numpy array
already in memory (`numpy.take` into a new array per batch) in the same run.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import vitrio as vio

from .workloads import Workloads, benchmark_parser, data_folder, in_flight

BATCH = 256


def epoch(loader, locations, order, shape) -> float:
    """Images per second of one epoch in shuffled batches, IN_FLIGHT under way at once."""

    def reads():
        for first in range(0, len(order), BATCH):
            rows = order[first : first + BATCH]
            out = np.empty((len(rows), *shape), np.float32)
            yield vio.read_batch_async(loader, out, [locations[i] for i in rows]), len(rows)

    start = time.perf_counter()
    in_flight(reads())
    return len(order) / (time.perf_counter() - start)


def in_memory(values: np.ndarray, order) -> float:
    start = time.perf_counter()
    for first in range(0, len(order), BATCH):
        rows = order[first : first + BATCH]
        np.take(values, rows, axis=0, out=np.empty((len(rows), *values.shape[1:]), values.dtype))
    return len(order) / (time.perf_counter() - start)


def make(kind: str, locations, directory: Path) -> vio.ImageScratch:
    if kind == "host":
        return vio.create_host_image_scratch(locations, 16)
    if kind == "mapped":
        return vio.create_mapped_file_image_scratch(locations, directory / "m.scratch", 16)
    return vio.create_directory_image_scratch(locations, directory, 16, budget=1 << 34)


def main() -> None:
    parser = benchmark_parser(__doc__, "small files", data=True)
    parser.add_argument(
        "--repeats", type=int, default=3, help="epochs after the first; the median is reported"
    )
    args = parser.parse_args()
    with data_folder(args.data) as folder:
        _run(args, folder)


def _run(args: argparse.Namespace, folder: Path) -> None:
    """Measure what `args` asks for, on synthetic files kept in `folder`."""
    work = Workloads(folder, images=4000 if args.quick else 20_000)
    shape = (work.side, work.side)
    rng = np.random.default_rng(0)
    print(
        f"{'workload':<10}{'scratch':<11}{'1st epoch':>12}{'next epochs':>13}{'x 1st':>8}"
        f"{'in memory':>12}{'vs memory':>11}"
    )
    for name, locations, cache in (("W1", work.w1(), 8), ("W2", work.w2(), 1024)):
        values = np.empty((len(locations), *shape), np.float32)
        vio.read_batch_async(vio.loader(workers=2, cache=cache), values, locations).get()
        memory = statistics.median(
            in_memory(values, rng.permutation(len(locations))) for _ in range(args.repeats)
        )
        with tempfile.TemporaryDirectory(dir=folder) as directory:
            for kind in ("host", "mapped", "directory"):
                loader = vio.loader(workers=2, cache=cache, scratch=make(kind, locations, Path(directory)))
                first = epoch(loader, locations, rng.permutation(len(locations)), shape)
                rates = [
                    epoch(loader, locations, rng.permutation(len(locations)), shape)
                    for _ in range(args.repeats)
                ]
                later = statistics.median(rates)
                print(
                    f"{name:<10}{kind:<11}{first:>12,.0f}{later:>13,.0f}{later / first:>8.2f}"
                    f"{memory:>12,.0f}{later / memory:>11.2f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
