"""The core's workloads W1-W4 against the baselines, in one run: medians and ratios.

    python benchmarks/bench_core.py [--quick] [--data DIR] [--repeats N]

W1: shuffled batches of 256 images 128x128 float32 from one 20,000-image stack.
W2: the same from 1,000 stacks of 20 images.
W3: 256x256 patches around 300 random centres on each of 20 micrographs of
    4096x4096 float32, batches in shuffled order.
W4: int16 and float16 stacks read into float32.
W5: bare read_batch_async of 80 shuffled batches of W1's stack into one array.
W6r: vio.read of a whole 256x1024x1024 float32 tomogram.
W6p: read_patches_async of 64 patches 64x128x128 of that tomogram, 4 calls.
--profile: under each row, the faults, context switches, processor time, cycles per
    byte and dTLB misses per item of vitrio's runs (`vitrio.bench.counters`).
W1c, W2c: W1 and W2 with the files' readers closed and the files evicted
    from the page cache before each epoch (posix_fadvise DONTNEED), read by a
    loader that reads ahead (as the DataLoader's) against one that does not,
    in the same run; and the time to read one batch of a cold epoch alone, and
    the bytes read from storage meanwhile, by those loaders and by a new one
    that knows no layout yet (as a program's first epoch).

Each row gives images/s, bytes/s, the share of one-thread memcpy (np.copyto
of 512 MB, best of 3, measured in the same run) and the ratio to the
baselines: medians of --repeats runs, each measured after a first epoch
that is not (one that reads every image once, for W1, W2, W4 and W5; one
run of the workload for the others): the files in the page cache, the
readers open and their maps touched, the layouts kept. For the cold rows
the page cache is emptied before every run.

Baselines, in the same run: (a) torch's DataLoader with 2 worker processes
over a Dataset that reads one image per item with mrcfile; (b) mrcfile's
memory map with numpy fancy indexing. vitrio reads with 2 threads and keeps
4 batches in flight, as a training loop's loader would, each batch into the
memory of one read before and let go of (`vitrio.data.RecyclingAllocator`);
the rows "W1 new arrays" and "W3 new arrays" read each into a new array
(`numpy.empty`), whose pages the kernel faults in and clears first. The rows
"W1 at defaults" and "W3 at defaults" read whole epochs as the code a user
writes first: a shuffled `vitrio.data.DataLoader` on `vio.loader(workers=2)`,
with no cache, allocator or format configured, against whole epochs of the
tuned reads ("tuned") in the same run.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import statistics
import time
from pathlib import Path

import numpy as np

import vitrio as vio
from vitrio.data import RecyclingAllocator

from .counters import Counters, describe, storage_bytes
from .workloads import (
    MrcfileImages,
    Workloads,
    benchmark_parser,
    data_folder,
    evict,
    in_flight,
    median_rate,
    memcpy_rate,
    timed_rate,
    torch_baseline_rate,
)

BATCH = 256


def batches_of(count: int, batches: int, rng: np.random.Generator) -> list[np.ndarray]:
    order = rng.permutation(count)
    return [order[i * BATCH : (i + 1) * BATCH] for i in range(min(batches, count // BATCH))]


def vitrio_images(loader, locations, batches, shape, dtype="float32", allocate=np.empty) -> int:
    """Reads the batches with IN_FLIGHT under way at once, each into an array `allocate` makes."""

    def reads():
        for rows in batches:
            out = allocate((len(rows), *shape), np.dtype(dtype))
            yield vio.read_batch_async(loader, out, [locations[i] for i in rows]), len(rows)

    return in_flight(reads())


def mmap_images(locations, batches, dtype="float32") -> int:
    """Baseline (b): each file memory-mapped once by mrcfile, each batch gathered by fancy indexing."""
    import mrcfile

    maps = {}
    done = 0
    for rows in batches:
        by_file: dict[str, list[int]] = {}
        for i in rows:
            by_file.setdefault(locations[i].key, []).append(locations[i].index_in_stack)
        parts = []
        for key, indices in by_file.items():
            if key not in maps:
                maps[key] = mrcfile.mmap(key, mode="r", permissive=True)
            parts.append(maps[key].data[np.asarray(indices)].astype(dtype, copy=False))
        done += sum(len(p) for p in parts)
        np.concatenate(parts)
    for mrc in maps.values():
        mrc.close()
    return done


def vitrio_patches(loader, paths, picks, batches, side, allocate=np.empty) -> int:
    """Crops the batches of patches with IN_FLIGHT under way at once, each into an array `allocate` makes."""
    images = [(str(p), -1) for p in paths]

    def reads():
        for rows in batches:
            out = allocate((len(rows), side, side), np.dtype(np.float32))
            ids, centres = picks[rows, 0], picks[rows, 1:]
            yield vio.read_patches_indexed_async(loader, out, images, ids, centres, fill=0), len(rows)

    return in_flight(reads())


def defaults_loader(source, threads: int):
    """The code a user writes first: a shuffled `DataLoader` of batches of BATCH over `source`, on
    `vio.loader(workers=threads)` with nothing tuned (no cache, allocator or format configured); the
    last batch short of BATCH is left out, as the tuned reads leave it."""
    dataset = vio.data.Dataset({"image": source})
    return vio.data.DataLoader(
        dataset, BATCH, shuffle=True, seed=0, drop_last=True, loader=vio.loader(workers=threads)
    )


def epoch_of(loader) -> int:
    """The next epoch of the DataLoader `loader`, whole; the items read."""
    return sum(len(batch["image"]) for batch in loader)


def mmap_patches(paths, picks, batches, side) -> int:
    """Baseline (b) for patches: slicing mrcfile's memory map of each micrograph, zero outside."""
    import mrcfile

    maps = [mrcfile.mmap(p, mode="r", permissive=True) for p in paths]
    done = 0
    for rows in batches:
        out = np.zeros((len(rows), side, side), dtype=np.float32)
        for slot, (m, y, x) in enumerate(picks[rows].tolist()):
            data = maps[m].data
            y0, x0 = y - side // 2, x - side // 2
            ya, xa = max(y0, 0), max(x0, 0)
            yb, xb = min(y0 + side, data.shape[0]), min(x0 + side, data.shape[1])
            out[slot, ya - y0 : yb - y0, xa - x0 : xb - x0] = data[ya:yb, xa:xb]
        done += len(rows)
    for mrc in maps:
        mrc.close()
    return done


class MrcfilePatches:
    """A torch Dataset cropping one patch per item out of a micrograph opened with mrcfile."""

    def __init__(self, paths, picks, side):
        self.paths, self.picks, self.side = [str(p) for p in paths], picks, side

    def __len__(self) -> int:
        return len(self.picks)

    def __getitem__(self, item):
        import mrcfile
        import torch

        m, y, x = self.picks[item].tolist()
        out = np.zeros((self.side, self.side), dtype=np.float32)
        with mrcfile.mmap(self.paths[m], mode="r", permissive=True) as mrc:
            data = mrc.data
            y0, x0 = y - self.side // 2, x - self.side // 2
            ya, xa = max(y0, 0), max(x0, 0)
            yb, xb = min(y0 + self.side, data.shape[0]), min(x0 + self.side, data.shape[1])
            out[ya - y0 : yb - y0, xa - x0 : xb - x0] = data[ya:yb, xa:xb]
        return torch.from_numpy(out)


def main() -> None:
    parser = benchmark_parser(__doc__, "small files and few batches", data=True)
    parser.add_argument(
        "--repeats", type=int, default=5, help="runs of each measurement; the median is reported"
    )
    parser.add_argument(
        "--only",
        nargs="*",
        default=["W1", "W2", "W3", "W4", "W5", "W6", "W1c", "W2c"],
        help="workloads to run (W6 is W6r and W6p)",
    )
    parser.add_argument("--threads", type=int, default=2, help="vitrio's reading threads")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="under each row, what the kernel counted while vitrio's runs of it ran: faults, context "
        "switches and processor time per item, and perf stat's cycles per byte and dTLB misses where "
        "the machine counts them",
    )
    args = parser.parse_args()
    with data_folder(args.data) as folder:
        _run(args, folder)


def _run(args: argparse.Namespace, folder: Path) -> None:
    """Measure what `args` asks for, on synthetic files kept in `folder`."""
    import mrcfile  # the baselines' reader: missing, the run stops before any work

    if args.quick:
        work = Workloads(
            folder, images=4000, micrographs=4, micrograph_side=2048, picks=300, tomogram=(64, 512, 512)
        )
        batches, repeats = 12, min(args.repeats, 3)
    else:
        work = Workloads(folder)
        batches, repeats = 40, args.repeats
    rng = np.random.default_rng(0)
    shape = (work.side, work.side)
    image_bytes = work.side * work.side * 4
    threads = args.threads
    memcpy = memcpy_rate()
    print(f"one-thread memcpy: {memcpy / 1e9:.2f} GB/s; vitrio reads with {threads} threads")
    print(HEADER)

    def measure(name, ours, item_bytes, baselines, first=None):
        """Print the row of `ours` (items done per call) against `baselines`, (label, items per call) or
        (label, rate per call) for torch's, after `first` (default: `ours`) has run once."""
        (
            first or ours
        )()  # a first epoch: the files into the page cache, the readers opened, the layouts kept
        done = []

        def counted() -> int:
            done.append(ours())
            return done[-1]

        counters = Counters() if args.profile else contextlib.nullcontext()
        with counters:
            rate, _ = median_rate(lambda: timed_rate(counted), repeats)
        against = []
        for label, baseline in baselines:
            if label != "torch":  # torch's DataLoader leaves out its first batch itself
                baseline()
            measured = baseline if label == "torch" else lambda b=baseline: timed_rate(b)
            against.append((label, median_rate(measured, repeats)[0]))
        print(format_line(name, rate, rate * item_bytes, memcpy, against), flush=True)
        if args.profile:
            print(f"{'  profile':<24}{describe(counters.counts, sum(done), item_bytes)}", flush=True)

    def torch_baseline(dataset):
        return "torch", lambda: torch_baseline_rate(dataset, batches)

    def every_image(loader, locations, dtype="float32"):
        """A first epoch that reads every image once, as training's first epoch does."""
        return lambda: vitrio_images(
            loader, locations, np.array_split(np.arange(len(locations)), 80), shape, dtype
        )

    recycled = RecyclingAllocator()

    def tuned(loader, locations) -> int:
        """A whole epoch of `locations` in tuned reads, as the rows at defaults read one."""
        return vitrio_images(
            loader, locations, batches_of(len(locations), len(locations), rng), shape, allocate=recycled
        )

    stacks = (("W1", "W1 one stack", work.w1, 8), ("W2", "W2 1000 stacks", work.w2, 64))
    for key, name, files, cache in stacks:
        if key not in args.only:
            continue
        locations = files()
        loader = vio.loader(workers=threads, cache=cache)
        if key == "W1":
            measure(
                "W1 new arrays",
                lambda loader=loader, locations=locations: vitrio_images(
                    loader, locations, batches_of(len(locations), batches, rng), shape
                ),
                image_bytes,
                [],
                every_image(loader, locations),
            )
        if key == "W1":
            users = defaults_loader(vio.data.ImageSource(locations), threads)
            measure(
                "W1 at defaults",
                lambda users=users: epoch_of(users),
                image_bytes,
                [("tuned", lambda loader=loader, locations=locations: tuned(loader, locations))],
            )
        measure(
            name,
            lambda loader=loader, locations=locations: vitrio_images(
                loader, locations, batches_of(len(locations), batches, rng), shape, allocate=recycled
            ),
            image_bytes,
            [
                torch_baseline(MrcfileImages(locations)),
                (
                    "mmap",
                    lambda locations=locations: mmap_images(
                        locations, batches_of(len(locations), batches, rng)
                    ),
                ),
            ],
            every_image(loader, locations),
        )
    if "W3" in args.only:
        paths, picks = work.w3()
        loader = vio.loader(workers=threads, cache=64)
        patches = vio.data.PatchSource([str(paths[m]) for m in picks[:, 0]], picks[:, 1:], (256, 256))
        users = defaults_loader(patches, threads)
        measure(
            "W3 at defaults",
            lambda: epoch_of(users),
            256 * 256 * 4,
            [
                (
                    "tuned",
                    lambda: vitrio_patches(
                        loader, paths, picks, batches_of(len(picks), len(picks), rng), 256, allocate=recycled
                    ),
                )
            ],
        )
        measure(
            "W3 new arrays",
            lambda: vitrio_patches(loader, paths, picks, batches_of(len(picks), batches, rng), 256),
            256 * 256 * 4,
            [],
        )
        measure(
            "W3 patches 256",
            lambda: vitrio_patches(
                loader, paths, picks, batches_of(len(picks), batches, rng), 256, allocate=recycled
            ),
            256 * 256 * 4,
            [
                torch_baseline(MrcfilePatches(paths, picks, 256)),
                ("mmap", lambda: mmap_patches(paths, picks, batches_of(len(picks), batches, rng), 256)),
            ],
        )
    if "W4" in args.only:
        loader = vio.loader(workers=threads, cache=8)
        for dtype, locations in work.w4().items():
            measure(
                f"W4 {dtype}->float32",
                lambda loc=locations: vitrio_images(
                    loader, loc, batches_of(len(loc), batches, rng), shape, allocate=recycled
                ),
                image_bytes,
                [
                    torch_baseline(MrcfileImages(locations)),
                    ("mmap", lambda loc=locations: mmap_images(loc, batches_of(len(loc), batches, rng))),
                ],
                every_image(loader, locations),
            )
    if "W5" in args.only:
        locations = work.w1()
        loader = vio.loader(workers=threads, cache=8)
        count = min(80, len(locations) // BATCH)
        target = np.empty((count * BATCH, *shape), np.float32)

        def bare() -> int:
            order = rng.permutation(len(locations))[: count * BATCH]
            chosen = [locations[i] for i in order]
            pending = [
                vio.read_batch_async(loader, target[b : b + BATCH], chosen[b : b + BATCH])
                for b in range(0, len(chosen), BATCH)
            ]
            for completion in pending:
                completion.get()
            return len(chosen)

        measure(
            "W5 bare batches",
            bare,
            image_bytes,
            [torch_baseline(MrcfileImages(locations))],
            every_image(loader, locations),
        )
    if {"W6", "W6r", "W6p"} & set(args.only):
        tomogram = work.w6()
        volume_bytes = int(np.prod(work.tomogram)) * 4
        loader = vio.loader(workers=threads, cache=8)

        def mrcfile_read() -> int:
            mrcfile.read(tomogram)
            return 1

        if {"W6", "W6r"} & set(args.only):
            measure(
                "W6r whole tomogram",
                lambda: (vio.read(tomogram, readers=loader.readers), 1)[1],
                volume_bytes,
                [("mrcfile", mrcfile_read)],
            )
        patch = (64, 128, 128)
        patches = np.empty((64, *patch), np.float32)

        def centres() -> np.ndarray:
            return rng.integers(0, work.tomogram, (len(patches), 3))

        def ours_patches() -> int:
            for _ in range(4):
                vio.read_patches_async(loader, patches, tomogram, centres()).get()
            return 4 * len(patches)

        def mmap_volume_patches() -> int:
            with mrcfile.mmap(tomogram, mode="r", permissive=True) as mrc:
                data = mrc.data
                for _ in range(4):
                    for slot, centre in enumerate(centres().tolist()):
                        origin = [c - p // 2 for c, p in zip(centre, patch)]
                        low = [max(o, 0) for o in origin]
                        high = [min(o + p, e) for o, p, e in zip(origin, patch, data.shape)]
                        patches[slot][tuple(slice(a - o, b - o) for a, b, o in zip(low, high, origin))] = (
                            data[tuple(slice(a, b) for a, b in zip(low, high))]
                        )
            return 4 * len(patches)

        if {"W6", "W6p"} & set(args.only):
            measure(
                "W6p tomogram patches",
                ours_patches,
                int(np.prod(patch)) * 4,
                [("mmap", mmap_volume_patches)],
            )
    cold = (("W1c", "W1c one stack, cold", work.w1, 8), ("W2c", "W2c 1000 stacks, cold", work.w2, 64))
    for key, name, files, cache in cold:
        if key not in args.only:
            continue
        locations = files()
        paths = sorted({Path(loc.key) for loc in locations})
        plain = vio.loader(workers=threads, cache=cache)
        ahead = vio.ImageLoader(plain.executor, plain.readers, read_ahead=True)

        def epoch(loader, locations=locations, paths=paths) -> int:
            order = batches_of(len(locations), batches, rng)
            loader.readers.clear()  # their maps would keep the files' pages in memory
            evict(paths)
            return vitrio_images(loader, locations, order, shape, allocate=recycled)

        def first_batch(make, locations=locations, paths=paths) -> tuple[float, float]:
            """Seconds to read one batch of a cold epoch alone by the loader `make()` gives, and the MB
            the process read from storage meanwhile (NaN where the system does not say)."""
            (rows,) = batches_of(len(locations), 1, rng)
            loader = make()
            loader.readers.clear()
            evict(paths)
            before, start = storage_bytes(), time.perf_counter()
            vitrio_images(loader, locations, [rows], shape, allocate=recycled)
            seconds, after = time.perf_counter() - start, storage_bytes()
            return seconds, (after - before) / 1e6 if None not in (before, after) else math.nan

        def new_loader(cache=cache) -> vio.ImageLoader:
            """A loader that reads ahead and knows no layout yet, as a program's first epoch has."""
            made = vio.loader(workers=threads, cache=cache)
            return vio.ImageLoader(made.executor, made.readers, read_ahead=True)

        epoch(plain)  # learns the layouts, as a first epoch does
        measure(name, lambda a=ahead: epoch(a), image_bytes, [("no hints", lambda p=plain: epoch(p))])
        latency = {}
        makers = [("hints", lambda a=ahead: a), ("no hints", lambda p=plain: p), ("new loader", new_loader)]
        for label, make in makers:
            runs = [first_batch(make) for _ in range(repeats)]
            latency[label] = (statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs))
        print(
            f"{'  its first batch':<24}"
            + "  ".join(
                f"{label} {seconds * 1e3:,.1f} ms ({megabytes:,.0f} MB read)"
                for label, (seconds, megabytes) in latency.items()
            )
        )


HEADER = f"{'workload':<24}{'img/s':>10}{'MB/s':>9}{'memcpy':>8}   ratio to the baselines (img/s)"


def format_row(name, rate, torch_rate, mmap_rate) -> str:
    """A line of `vitrio bench`'s table: vitrio's rate and its ratio to baselines (a) and (b)."""
    mmap_text = f"{mmap_rate:>12,.0f}{rate / mmap_rate:>8.2f}" if mmap_rate else f"{'-':>12}{'-':>8}"
    return f"{name:<22}{rate:>14,.0f}{torch_rate:>12,.0f}{rate / torch_rate:>8.2f}{mmap_text}"


def format_line(name, rate, byte_rate, memcpy, against) -> str:
    """A line of the table: the rates, the share of memcpy, and the ratio to each baseline."""
    ratios = "  ".join(f"x{rate / other:.2f} {label} ({other:,.0f})" for label, other in against)
    return f"{name:<24}{rate:>10,.0f}{byte_rate / 1e6:>9,.0f}{byte_rate / memcpy:>8.2f}   {ratios}"


if __name__ == "__main__":
    main()
