"""vitrio.data's DataLoader against PyTorch's with worker processes, on the workloads W1-W3, in one run.

    python benchmarks/bench_data.py [--quick] [--data DIR] [--epochs N] [--batches N] [--only W1 W2 W3]

W1: shuffled batches of 256 images 128x128 float32 from one 20,000-image stack.
W2: the same from 1,000 stacks of 20 images.
W3: 256x256 patches around 300 random centres on each of 20 micrographs of
    4096x4096 float32 (a PatchSource), batches in shuffled order.

vitrio: `DataLoader(dataset, 256, shuffle=True, output="torch")` over a
`vio.loader(workers=2, cache=...)`, 4 batches under way. Baseline, in the
same run: `torch.utils.data.DataLoader(num_workers=2, batch_size=256,
shuffle=True)` over a Dataset that reads one image (or crops one patch) per
item through mrcfile's memory map, as most training code does.

Each epoch counts `--batches` batches after its first one; the medians over
`--epochs` epochs are reported: images per second, their ratio, the time to
the first batch of an epoch, and, for vitrio, the time one batch takes to
read alone. `--quick` uses small files (4,000 images; 4 micrographs of
2048x2048) and fewer batches. The files are written once under `--data`
(a folder of the user's), or each run into a fresh private one.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

import vitrio as vio
from vitrio.data import DataLoader, Dataset, ImageSource, PatchSource

from .core import MrcfilePatches
from .workloads import MrcfileImages, Workloads, benchmark_parser, data_folder

BATCH = 256


def epoch(batches: Iterable, count: int, size: Callable[[object], int]) -> tuple[float, float]:
    """The seconds to an epoch's first batch, and the images per second of the `count` batches after it."""
    start = time.perf_counter()
    iterator = iter(batches)
    next(iterator)
    first = time.perf_counter()
    images = sum(size(batch) for batch in itertools.islice(iterator, count))
    rate = images / (time.perf_counter() - first)
    del iterator
    return first - start, rate


def one_batch_read(dataset: Dataset, loader, repeats: int) -> float:
    """The median seconds one batch of random rows takes to read, with nothing else under way."""
    rng = np.random.default_rng(0)
    times = []
    for _ in range(repeats):
        rows = rng.choice(len(dataset), BATCH, replace=False)
        start = time.perf_counter()
        dataset.read_async(rows, loader=loader).get()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(name: str, dataset: Dataset, baseline, cache: int, epochs: int, batches: int) -> dict:
    """The medians of vitrio's and the baseline's epochs over one workload."""
    import torch

    loader = vio.loader(workers=2, cache=cache)
    ours = DataLoader(dataset, BATCH, shuffle=True, seed=0, loader=loader, output="torch")
    theirs = torch.utils.data.DataLoader(  # spawned, as torch_baseline_rate's: a fork of threads may hang
        baseline, batch_size=BATCH, shuffle=True, num_workers=2, multiprocessing_context="spawn"
    )
    epoch(ours, 2, lambda batch: len(batch["image"]))
    ours_epochs = [epoch(ours, batches, lambda batch: len(batch["image"])) for _ in range(epochs)]
    theirs_epochs = [epoch(theirs, batches, len) for _ in range(epochs)]
    return {
        "name": name,
        "ours": statistics.median(rate for _, rate in ours_epochs),
        "theirs": statistics.median(rate for _, rate in theirs_epochs),
        "ours_first": statistics.median(first for first, _ in ours_epochs),
        "theirs_first": statistics.median(first for first, _ in theirs_epochs),
        "one_batch": one_batch_read(dataset, loader, max(epochs, 3)),
    }


def row(result: dict) -> str:
    ratio = result["ours"] / result["theirs"]
    return (
        f"{result['name']:<16}{result['ours']:>13,.0f}{result['theirs']:>13,.0f}{ratio:>8.1f}"
        f"{result['ours_first'] * 1e3:>13.1f}{result['one_batch'] * 1e3:>12.1f}"
        f"{result['theirs_first'] * 1e3:>14.1f}"
    )


def main() -> None:
    parser = benchmark_parser(__doc__, "small files and few batches", data=True)
    parser.add_argument("--epochs", type=int, default=5, help="epochs of each loader; medians are reported")
    parser.add_argument("--batches", type=int, help="batches counted per epoch after the first")
    parser.add_argument("--only", nargs="*", default=["W1", "W2", "W3"], help="workloads to run")
    arguments = parser.parse_args()
    with data_folder(arguments.data) as folder:
        _run(arguments, folder)


def _run(arguments: argparse.Namespace, folder: Path) -> None:
    """Measure what `arguments` asks for, on synthetic files kept in `folder`."""
    import torch  # noqa: F401 (the baseline's DataLoader: missing, the run stops before any work)

    if arguments.quick:
        work = Workloads(folder, images=4000, micrographs=4, micrograph_side=2048, picks=800)
        batches, epochs = arguments.batches or 10, min(arguments.epochs, 3)
    else:
        work = Workloads(folder)
        batches, epochs = arguments.batches or 40, arguments.epochs
    print(
        f"{batches} batches of {BATCH} per epoch after the first, medians of {epochs} epochs; "
        "vitrio: 2 threads, torch: 2 worker processes"
    )
    print(
        f"{'workload':<16}{'vitrio img/s':>13}{'torch img/s':>13}{'ratio':>8}"
        f"{'1st batch ms':>13}{'1 batch ms':>12}{'torch 1st ms':>14}"
    )
    if "W1" in arguments.only:
        locations = work.w1()
        dataset = Dataset({"image": ImageSource(locations)})
        print(row(measure("W1 one stack", dataset, MrcfileImages(locations), 8, epochs, batches)), flush=True)
    if "W2" in arguments.only:
        locations = work.w2()
        dataset = Dataset({"image": ImageSource(locations)})
        print(
            row(measure("W2 stacks of 20", dataset, MrcfileImages(locations), 1024, epochs, batches)),
            flush=True,
        )
    if "W3" in arguments.only:
        paths, picks = work.w3()
        source = PatchSource([paths[m] for m in picks[:, 0]], picks[:, 1:], (256, 256))
        dataset = Dataset({"image": source})
        baseline = MrcfilePatches(paths, picks, 256)
        print(row(measure("W3 patches", dataset, baseline, 64, epochs, batches)), flush=True)


if __name__ == "__main__":
    main()
