"""What counting the reads costs: W1 through the DataLoader and the core's batches, statistics on and off.

    python benchmarks/bench_stats.py [--quick] [--data DIR] [--repeats N]

W1 (shuffled batches of 256 images 128x128 float32 from one stack) is read
by `DataLoader(dataset, 256, shuffle=True, count_reads=...)` over
`vio.loader(workers=2)`, and by `read_batch_async` with 4 batches under way
on a loader whose counters are on or off. The runs alternate, on and off,
after an epoch of each that is not measured (the stack in the page cache);
each row gives the median images/s of --repeats runs and the median CPU
time of the process an image (`time.process_time`, all threads: steadier
than the rate on a machine shared with other work), and the cost of
counting in each: 1 - on / off of the rates, on / off - 1 of the CPU times.
The DataLoader's clock of time waited for data runs either way.

On a machine shared with other work both vary by more than the cost, so the
last row measures the counting alone (`timeit`): a counted task that notes
a native read of 64 runs of one file, as W1's batches of 256 images make 4
of on 2 threads, and its share of a batch's time at the rate read without
counting.
"""

from __future__ import annotations

import statistics
import time
import timeit
from collections import deque
from pathlib import Path

import numpy as np

import vitrio as vio
from vitrio._counters import ReadCounters, note_runs
from vitrio._native import CHECK_FIELDS, RUN_FIELDS
from vitrio.bench.workloads import Workloads, benchmark_parser, data_folder
from vitrio.data import DataLoader, Dataset, ImageSource

BATCH = 256


def data_loader_rate(dataset: Dataset, loader, count_reads: bool) -> int:
    images = 0
    for batch in DataLoader(dataset, BATCH, shuffle=True, loader=loader, count_reads=count_reads):
        images += len(batch["image"])
    return images


def core_rate(locations, loader, count_reads: bool, rng: np.random.Generator) -> int:
    loader.counters.enabled = count_reads
    order = rng.permutation(len(locations))
    pending: deque = deque()
    for first in range(0, len(order) - BATCH + 1, BATCH):
        out = np.empty((BATCH, 128, 128), np.float32)
        pending.append(
            vio.read_batch_async(loader, out, [locations[i] for i in order[first : first + BATCH]])
        )
        if len(pending) >= 4:
            pending.popleft().get()
    while pending:
        pending.popleft().get()
    return len(order) // BATCH * BATCH


class _OneFile:
    """What a native read of runs of one file hands `note_runs`: a `KnownFiles` of one layout, no map."""

    layouts = [vio.ImageLocation("w1.mrcs", 0)]
    maps = (None,)
    checks = np.zeros((1, CHECK_FIELDS), np.int64)


def counting_seconds(repeats: int = 20_000) -> float:
    """Seconds the counting of one task takes: its wrapper, and the note of its 64 runs of one file."""
    runs, slots = np.zeros((64, RUN_FIELDS), np.int64), np.ones((64, 2), np.int64)
    task = ReadCounters().counted([lambda: note_runs(_OneFile, runs, slots, 65536, 1e-3, 0)])[0]
    return min(timeit.repeat(task, number=repeats, repeat=5)) / repeats


def measured(run, on: bool) -> tuple[float, float]:
    """Images a second of one run, and CPU seconds of the process an image."""
    wall, cpu = time.perf_counter(), time.process_time()
    images = run(on)
    return images / (time.perf_counter() - wall), (time.process_time() - cpu) / images


def main() -> None:
    parser = benchmark_parser(__doc__, "a stack of 4,000 images, 5 repeats", data=True)
    parser.add_argument("--repeats", type=int, help="runs of each, on and off (default: 9, or 5 --quick)")
    args = parser.parse_args()
    repeats = args.repeats or (5 if args.quick else 9)
    with data_folder(args.data) as folder:
        locations = Workloads(Path(folder), images=4000 if args.quick else 20_000).w1()
        loader = vio.loader(workers=2)
        dataset = Dataset({"image": ImageSource(locations, data_type="float32")})
        rng = np.random.default_rng(0)
        rows = {
            "W1 DataLoader": lambda on: data_loader_rate(dataset, loader, on),
            "W1 read_batch_async": lambda on: core_rate(locations, loader, on, rng),
        }
        print(
            f"{len(locations)} images of 128x128 float32, batches of {BATCH}, 2 threads, {repeats} runs each"
        )
        for name, run in rows.items():
            run(True), run(False)
            runs: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
            for _ in range(repeats):
                for on in (True, False):
                    runs[on].append(measured(run, on))
            (on, on_cpu), (off, off_cpu) = (
                [statistics.median(column) for column in zip(*runs[case])] for case in (True, False)
            )
            if name == "W1 read_batch_async":
                batch = BATCH / off
            print(
                f"{name:<20} images/s on {on:>8,.0f} off {off:>8,.0f} cost {1 - on / off:+.2%}; "
                f"CPU µs an image on {on_cpu * 1e6:.2f} off {off_cpu * 1e6:.2f} "
                f"cost {on_cpu / off_cpu - 1:+.2%}"
            )
        alone = counting_seconds()
        print(
            f"counting alone: {alone * 1e6:.1f} µs a task, 4 tasks a batch: {4 * alone * 1e6:.0f} µs of a "
            f"batch's {batch * 1e6:,.0f} µs, {4 * alone / batch:.2%}"
        )


if __name__ == "__main__":
    main()
