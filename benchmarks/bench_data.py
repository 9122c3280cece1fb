"""Runs `vitrio.bench.data` (W1-W3 against PyTorch's DataLoader); see its docstring, or `--help`.

    python benchmarks/bench_data.py --defaults [--quick] [--repeats N] [--data DIR]

`--defaults` measures instead what the `DataLoader`'s defaults choose, each
against the way it went before, in the same run:

T1: an epoch of 600 subvolumes of 48^3 cropped out of a 256x512x512 float32
    MRC tomogram (a `PatchSource`), batches of 16, shuffled, each subvolume
    normalised to mean 0 and deviation 1 (numpy's and PyTorch's). Before: the
    normalisation applied in the program's loop, one batch after another, as
    a transform ran before (`transform_threads=False` does the same). After:
    `transform=`, run on the loader's threads while the program takes the
    batches before. A third row has the same before (numpy's normalisation in
    the program's loop) and, after, `transform=Standardize()`, vitrio's own.
M3: W3 through the `DataLoader` (256x256 patches around 300 centres on each
    of 20 micrographs of 4096x4096 float32, batches of 256, numpy output).
    Before: every batch read into new memory (`allocator=numpy.empty`).
    After: into the memory of a batch let go of (the default).

Each figure is the median of `--repeats` warm epochs (after one that is not
counted), vitrio reading on 2 threads with 4 batches under way; `--quick`
uses a 128x256x256 tomogram and 4 micrographs of 2048x2048.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Iterable

import numpy as np

import vitrio as vio
from vitrio.bench.data import main
from vitrio.bench.workloads import Workloads, benchmark_parser, data_folder
from vitrio.data import DataLoader, Dataset, PatchSource, Standardize

SUBVOLUMES, SIDE, BATCH = 600, 48, 16


def normalise_numpy(batch: dict) -> dict:
    """Each subvolume of the batch's "image" minus its mean, over its deviation (numpy)."""
    image = batch["image"]
    mean = image.mean(axis=(1, 2, 3), keepdims=True)
    deviation = image.std(axis=(1, 2, 3), keepdims=True)
    return {**batch, "image": (image - mean) / deviation}


def normalise_torch(batch: dict) -> dict:
    """The same in PyTorch, as copick-torch's datasets normalise each item."""
    image = batch["image"]
    mean = image.mean(dim=(1, 2, 3), keepdim=True)
    deviation = image.std(dim=(1, 2, 3), keepdim=True, correction=0)
    return {**batch, "image": (image - mean) / deviation}


def epoch_seconds(
    ways: dict[str, tuple[Iterable, Callable[[dict], object]]], repeats: int
) -> dict[str, float]:
    """The median time of `repeats` epochs of each way (its batches, and the step applied to each batch),
    after one not counted; the ways take their epochs in turn, so that they share the machine's moods."""
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(repeats + 1):
        for name, (batches, step) in ways.items():
            start = time.perf_counter()
            for batch in batches:
                step(batch)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(seconds[1:]) for name, seconds in times.items()}


def transforms(work: Workloads, repeats: int) -> None:
    """T1: the normalisation in the program's loop against transform= on the loader's threads."""
    tomogram = work.w6()
    shape = vio.query_descriptor(tomogram).extents
    rng = np.random.default_rng(2)
    centres = np.column_stack([rng.integers(SIDE // 2, side - SIDE // 2, SUBVOLUMES) for side in shape])
    dataset = Dataset({"image": PatchSource([tomogram] * SUBVOLUMES, centres, (SIDE,) * 3)})
    loader = vio.loader(workers=2, cache=8)

    def data_loader(output: str, **options) -> DataLoader:
        return DataLoader(dataset, BATCH, shuffle=True, seed=0, loader=loader, output=output, **options)

    read = epoch_seconds({"read": (data_loader("numpy"), lambda batch: None)}, repeats)["read"]
    print(f"T1 {SUBVOLUMES} subvolumes of {SIDE}^3, batches of {BATCH}: read alone {read:.3f} s an epoch")
    print(f"{'normalisation':<16}{'in the loop s':>15}{'transform= s':>14}{'speed-up':>10}")
    rows = (
        ("numpy", "numpy", normalise_numpy, normalise_numpy),
        ("torch", "torch", normalise_torch, normalise_torch),
        ("Standardize", "numpy", normalise_numpy, Standardize()),
    )
    for name, output, normalise, transform in rows:
        ways = {
            "before": (data_loader(output, allocator=np.empty), normalise),
            "after": (data_loader(output, transform=transform), lambda batch: None),
        }
        seconds = epoch_seconds(ways, repeats)
        before, after = seconds["before"], seconds["after"]
        print(f"{name:<16}{before:>15.3f}{after:>14.3f}{before / after:>9.2f}x", flush=True)


def recycling(work: Workloads, repeats: int) -> None:
    """M3: W3 through the DataLoader into new arrays against recycled memory."""
    paths, picks = work.w3()
    dataset = Dataset({"image": PatchSource([paths[m] for m in picks[:, 0]], picks[:, 1:], (256, 256))})
    loader = vio.loader(workers=2, cache=64)
    print(f"M3 {len(picks)} patches of 256x256 from {len(paths)} micrographs, batches of 256")
    print(f"{'memory':<16}{'patches/s':>15}")
    ways = {
        name: (
            DataLoader(dataset, 256, shuffle=True, seed=0, loader=loader, allocator=allocator),
            lambda b: None,
        )
        for name, allocator in (("new arrays", np.empty), ("recycled", None))
    }
    rates = {name: len(picks) / seconds for name, seconds in epoch_seconds(ways, repeats).items()}
    for name, rate in rates.items():
        print(f"{name:<16}{rate:>15,.0f}")
    print(f"{'ratio':<16}{rates['recycled'] / rates['new arrays']:>14.2f}x", flush=True)


def defaults() -> None:
    parser = benchmark_parser(__doc__, "small files", data=True)
    parser.add_argument("--defaults", action="store_true", required=True)
    parser.add_argument("--repeats", type=int, default=5, help="epochs counted; medians are reported")
    parser.add_argument("--only", nargs="*", default=["T1", "M3"], help="workloads to run")
    arguments = parser.parse_args()
    with data_folder(arguments.data) as folder:
        if arguments.quick:
            work = Workloads(folder, micrographs=4, micrograph_side=2048, tomogram=(128, 256, 256))
        else:
            work = Workloads(folder, tomogram=(256, 512, 512))
        print(f"medians of {arguments.repeats} warm epochs; vitrio reads on 2 threads, 4 batches under way")
        if "T1" in arguments.only:
            transforms(work, arguments.repeats)
        if "M3" in arguments.only:
            recycling(work, arguments.repeats)


if __name__ == "__main__":
    defaults() if "--defaults" in sys.argv[1:] else main()
