"""How the cost of vitrio.data's epochs grows with the number of images and of files, against the baseline.

    python benchmarks/bench_growth.py [--quick] [--data DIR] [--epochs N] [--batch N] [--cache N]
                                      [--baseline-batches N] [--only G1 G2]

G1: one MRC stack of 1,000,000 images of 16x16 float32 (--quick: 100,000).
G2: 20,000 MRC files of 20 images of 16x16 float32 (--quick: 2,000 files).

vitrio: `DataLoader(Dataset({"image": ImageSource(locations)}), 256,
shuffle=True, loader=vio.loader(workers=2, cache=64))`, numpy output
(`--cache` sets the files kept open).
Baseline: `torch.utils.data.DataLoader(num_workers=2, batch_size=256,
shuffle=True)` over a Dataset that reads one image per item through
mrcfile's memory map, as most training code does.

Each workload and loader is measured in a fresh process of its own, so that
its peak resident memory is its own:

- build: seconds to make the list of every image's location and the
  dataset (vitrio's ImageSource asks every file for its shape);
- first batch: seconds from the start of an epoch to its first batch;
- images/s: after the first batch, to the end of the epoch for vitrio, over
  `--baseline-batches` batches for the baseline, which is far slower;
- peak RSS: the high-water mark of the process's resident memory (VmHWM),
  at the start (the interpreter and its imports) and at the end, and the
  end's share of the bytes of the files. The baseline's is that of its main
  process; its 2 workers come on top.

First batch and images/s are medians over `--epochs` epochs. The files are
written once under `--data` (a folder of the user's), or each run into a
fresh private one; either way they are in the page cache when read.
"""

from __future__ import annotations

import functools
import itertools
import multiprocessing
import os
import resource
import statistics
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import vitrio as vio
from vitrio.data import DataLoader, Dataset, ImageSource

from .workloads import MrcfileImages, benchmark_parser, data_folder, own_folder

__all__ = ["Growth", "Result", "write_stack", "write_files", "measure", "measure_apart", "run", "main"]

SIDE = 16
PER_FILE = 20
CHUNK = 20_000
LOADERS = ("vitrio", "torch")


@dataclass(frozen=True)
class Growth:
    """What one process measures: a loader over every image of some files.

    Attributes:
        workload: Its name in the table.
        loader: 'vitrio' or 'torch' (the baseline).
        paths: The files.
        per_file: The images of each file, all of them read.
        epochs: Epochs whose medians are reported.
        batch: Images per batch.
        cache: Files vitrio's loader keeps open.
        baseline_batches: Batches after the first that the baseline's rate counts.
        start_method: How the baseline's workers start; None for the default of the process that
            measures. `run` gives its own default, that of a training script: the process that
            measures is spawned, and its default is then to spawn.
    """

    workload: str
    loader: str
    paths: list[str]
    per_file: int
    epochs: int = 3
    batch: int = 256
    cache: int = 64
    baseline_batches: int = 200
    start_method: str | None = None


@dataclass(frozen=True)
class Result:
    """What one process measured, as `measure` returns it.

    Attributes:
        images: The images of the dataset.
        file_bytes: The bytes of its files.
        build: Seconds to make the locations and the dataset.
        first: Median seconds to an epoch's first batch.
        rate: Median images per second after the first batch.
        counted: Images the rate of the last epoch counted.
        epoch: Median seconds of an epoch, as far as it was counted.
        start_kib: Peak resident memory before the build, KiB.
        peak_kib: Peak resident memory at the end, KiB.
        anonymous_kib: Resident memory at the end that no file backs, KiB (the rest of a peak is
            mostly pages of the files mapped, which the kernel may drop); 0 where it is not known.
    """

    workload: str
    loader: str
    images: int
    file_bytes: int
    build: float
    first: float
    rate: float
    counted: int
    epoch: float
    start_kib: int
    peak_kib: int
    anonymous_kib: int


def _status(field: str) -> int | None:
    """A field of Linux's /proc/self/status in KiB, or None where there is none."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def peak_kib() -> int:
    """The high-water mark of this process's resident memory, KiB.

    Linux's VmHWM where there is one: `ru_maxrss` of a child starts at its
    parent's peak, as the kernel keeps the larger of the two across fork and
    exec, so it would count the process that started the measurement.
    """
    peak = _status("VmHWM")
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss if peak is None else peak


def write_stack(folder: Path, images: int, seed: int = 0) -> Path:
    """One stack of `images` images of 16x16 float32 under `folder`, written in chunks if not there yet."""
    path = own_folder(folder) / f"g1-{images}x{SIDE}.mrcs"
    if path.exists():
        return path
    partial = path.with_name("partial-" + path.name)  # the extension names the format
    partial.unlink(missing_ok=True)
    rng = np.random.default_rng(seed)
    writers = vio.writer_provider()
    writers.declare(partial, vio.ImageDescriptor((images, SIDE, SIDE), 2, "float32"))
    saver = vio.saver(writers, workers=2)
    for first in range(0, images, CHUNK):
        count = min(CHUNK, images - first)
        values = rng.standard_normal((count, SIDE, SIDE), dtype=np.float32)
        locations = [vio.ImageLocation(partial, i) for i in range(first, first + count)]
        vio.write_batch_async(saver, values, locations).get()
    writers.close(partial)
    partial.rename(path)
    return path


def write_files(folder: Path, files: int, seed: int = 0) -> list[Path]:
    """`files` stacks of 20 images of 16x16 float32 in a folder under `folder`, written if not there yet."""
    folder = own_folder(own_folder(folder) / f"g2-{files}x{PER_FILE}x{SIDE}")
    paths = [folder / f"stack{i:05d}.mrcs" for i in range(files)]
    if not paths[-1].exists():  # written in order, the last one last
        rng = np.random.default_rng(seed)
        for path in paths:
            vio.write_stack(rng.standard_normal((PER_FILE, SIDE, SIDE), dtype=np.float32), path)
    return paths


def epoch(batches: Iterable, count: int | None, size: Callable[[object], int]) -> tuple[float, float, int]:
    """The seconds to an epoch's first batch, and the seconds and images of the `count` batches after it.

    `count` None counts to the end of the epoch.
    """
    start = time.perf_counter()
    iterator = iter(batches)
    next(iterator)
    first = time.perf_counter()
    images = sum(size(batch) for batch in itertools.islice(iterator, count))
    elapsed = time.perf_counter() - first
    del iterator
    return first - start, elapsed, images


def measure(growth: Growth) -> Result:
    """Build the dataset of `growth` and go through its epochs, in this process."""
    if growth.loader not in LOADERS:
        raise ValueError(f"no loader {growth.loader!r}: {', '.join(LOADERS)}")
    if growth.loader == "torch":
        import torch  # before the start: its memory is part of the baseline's start, its time of no build
    start_kib = peak_kib()
    file_bytes = sum(os.path.getsize(path) for path in growth.paths)
    started = time.perf_counter()
    locations = [vio.ImageLocation(path, i) for path in growth.paths for i in range(growth.per_file)]
    if growth.loader == "vitrio":
        dataset = Dataset({"image": ImageSource(locations)})
        build = time.perf_counter() - started
        batches: Iterable = DataLoader(
            dataset, growth.batch, shuffle=True, seed=0, loader=vio.loader(workers=2, cache=growth.cache)
        )
        count, size = None, lambda batch: len(batch["image"])
    else:
        baseline = MrcfileImages(locations)
        build = time.perf_counter() - started
        batches = torch.utils.data.DataLoader(
            baseline,
            batch_size=growth.batch,
            shuffle=True,
            num_workers=2,
            multiprocessing_context=growth.start_method,
        )
        count, size = growth.baseline_batches, len
    epochs = [epoch(batches, count, size) for _ in range(growth.epochs)]
    return Result(
        workload=growth.workload,
        loader=growth.loader,
        images=len(locations),
        file_bytes=file_bytes,
        build=build,
        first=statistics.median(first for first, _, _ in epochs),
        rate=statistics.median(images / seconds for _, seconds, images in epochs),
        counted=epochs[-1][2],
        epoch=statistics.median(first + seconds for first, seconds, _ in epochs),
        start_kib=start_kib,
        peak_kib=peak_kib(),
        anonymous_kib=_status("RssAnon") or 0,
    )


def measure_apart(growth: Growth) -> Result:
    """`measure` in a fresh process (spawned, not forked), so that its memory is its own."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(measure, growth).result()


HEADER = (
    f"{'workload':<24}{'loader':<8}{'build s':>9}{'1st batch ms':>14}{'images/s':>11}{'x torch':>9}"
    f"{'start RSS MB':>14}{'peak RSS MB':>13}{'RSS/files':>11}{'anon MB':>9}"
)


def row(result: Result, baseline: Result | None) -> str:
    """A line of the table for `result`, with its ratio to the baseline's rate if there is one."""
    ratio = f"{result.rate / baseline.rate:>9.1f}" if baseline and baseline is not result else f"{'':>9}"
    return (
        f"{result.workload:<24}{result.loader:<8}{result.build:>9.2f}{result.first * 1e3:>14.1f}"
        f"{result.rate:>11,.0f}{ratio}{result.start_kib / 1024:>14.0f}{result.peak_kib / 1024:>13.0f}"
        f"{result.peak_kib * 1024 / result.file_bytes:>11.2f}{result.anonymous_kib / 1024:>9.0f}"
    )


def run(
    folder: Path,
    stack_images: int,
    files: int,
    epochs: int = 3,
    batch: int = 256,
    cache: int = 64,
    baseline_batches: int = 200,
    only: Iterable[str] = ("G1", "G2"),
    loaders: Iterable[str] = LOADERS,
    out: Callable[[str], None] | None = None,
) -> list[Result]:
    """Write what is missing of G1 and G2 under `folder`, measure each loader on each apart, print the table.

    Args:
        out: Where each line of the table goes, as it is measured; default: standard output.

    Returns:
        The results, in the order of the table.
    """
    out = out or functools.partial(print, flush=True)
    only, loaders = list(only), list(loaders)
    start = multiprocessing.get_start_method()
    workloads: list[tuple[str, list[Path], int]] = []
    if "G1" in only:
        workloads.append(
            (f"G1 1 stack of {stack_images:,}", [write_stack(folder, stack_images)], stack_images)
        )
    if "G2" in only:
        workloads.append((f"G2 {files:,} files of {PER_FILE}", write_files(folder, files), PER_FILE))
    out(
        f"images of {SIDE}x{SIDE} float32, batches of {batch}; medians of {epochs} epochs; "
        f"vitrio: 2 threads, {cache} files open, whole epochs; "
        f"torch: 2 worker processes, {baseline_batches} batches an epoch; "
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}"
    )
    out(HEADER)
    results = []
    for name, paths, per_file in workloads:
        measured = {}
        for loader in sorted(loaders, key=lambda name: name != "torch"):  # the baseline first, for the ratio
            growth = Growth(
                name,
                loader,
                [str(p) for p in paths],
                per_file,
                epochs=epochs,
                batch=batch,
                cache=cache,
                baseline_batches=baseline_batches,
                start_method=start,
            )
            measured[loader] = measure_apart(growth)
        for loader in loaders:
            results.append(measured[loader])
            out(row(measured[loader], measured.get("torch")))
    out(f"load average at the end {os.getloadavg()[0]:.2f}")
    return results


def main() -> None:
    parser = benchmark_parser(__doc__, "a tenth of the images and of the files", data=True)
    parser.add_argument("--epochs", type=int, default=3, help="epochs of each loader; medians are reported")
    parser.add_argument("--batch", type=int, default=256, help="images per batch")
    parser.add_argument("--cache", type=int, default=64, help="files vitrio's loader keeps open")
    parser.add_argument(
        "--baseline-batches",
        type=int,
        help="batches the baseline's rate counts an epoch (default 200; quick 20)",
    )
    parser.add_argument("--only", nargs="*", default=["G1", "G2"], help="workloads to run")
    arguments = parser.parse_args()
    stack_images, files = (100_000, 2_000) if arguments.quick else (1_000_000, 20_000)
    baseline_batches = arguments.baseline_batches or (20 if arguments.quick else 200)
    with data_folder(arguments.data) as folder:
        run(
            folder,
            stack_images,
            files,
            arguments.epochs,
            arguments.batch,
            arguments.cache,
            baseline_batches,
            arguments.only,
        )


if __name__ == "__main__":
    main()
