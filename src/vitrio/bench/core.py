"""The core's workloads W1-W4 against the baselines, in one run: medians and ratios.

    python benchmarks/bench_core.py [--quick] [--data DIR] [--repeats N]

W1: shuffled batches of 256 images 128x128 float32 from one 20,000-image stack.
W2: the same from 1,000 stacks of 20 images.
W3: 256x256 patches around 300 random centres on each of 20 micrographs of
    4096x4096 float32, batches in shuffled order.
W4: int16 and float16 stacks read into float32.

Baselines, in the same run: (a) torch's DataLoader with 2 worker processes
over a Dataset that reads one image per item with mrcfile; (b) mrcfile's
memory map with numpy fancy indexing. vitrio reads with 2 threads and keeps
4 batches in flight, as a training loop's loader would.
"""

from __future__ import annotations

import argparse
from collections import deque
from pathlib import Path

import mrcfile
import numpy as np

import vitrio as vio

from .workloads import (
    MrcfileImages,
    Workloads,
    data_folder,
    median_rate,
    timed_rate,
    torch_baseline_rate,
)

BATCH = 256
IN_FLIGHT = 4


def batches_of(count: int, batches: int, rng: np.random.Generator) -> list[np.ndarray]:
    order = rng.permutation(count)
    return [order[i * BATCH : (i + 1) * BATCH] for i in range(min(batches, count // BATCH))]


def vitrio_images(loader, locations, batches, shape, dtype="float32") -> int:
    """Reads the batches with IN_FLIGHT under way at once, each into arrays of its own."""
    pending: deque = deque()
    done = 0
    for rows in batches:
        out = np.empty((len(rows), *shape), dtype=dtype)
        pending.append(vio.read_batch_async(loader, out, [locations[i] for i in rows]))
        if len(pending) >= IN_FLIGHT:
            pending.popleft().get()
        done += len(rows)
    while pending:
        pending.popleft().get()
    return done


def mmap_images(locations, batches, dtype="float32") -> int:
    """Baseline (b): each file memory-mapped once by mrcfile, each batch gathered by fancy indexing."""
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


def vitrio_patches(loader, paths, picks, batches, side) -> int:
    images = [(str(p), -1) for p in paths]
    pending: deque = deque()
    done = 0
    for rows in batches:
        out = np.empty((len(rows), side, side), dtype=np.float32)
        pending.append(
            vio.read_patches_indexed_async(loader, out, images, picks[rows, 0], picks[rows, 1:], fill=0)
        )
        if len(pending) >= IN_FLIGHT:
            pending.popleft().get()
        done += len(rows)
    while pending:
        pending.popleft().get()
    return done


def mmap_patches(paths, picks, batches, side) -> int:
    """Baseline (b) for patches: slicing mrcfile's memory map of each micrograph, zero outside."""
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
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small files and few batches")
    parser.add_argument(
        "--data",
        type=Path,
        help="a folder of yours where the synthetic files are kept between runs (default: a fresh private "
        "one, removed at the end)",
    )
    parser.add_argument(
        "--repeats", type=int, default=5, help="runs of each measurement; the median is reported"
    )
    parser.add_argument("--only", nargs="*", default=["W1", "W2", "W3", "W4"], help="workloads to run")
    args = parser.parse_args()
    with data_folder(args.data) as folder:
        _run(args, folder)


def _run(args: argparse.Namespace, folder: Path) -> None:
    """Measure what `args` asks for, on synthetic files kept in `folder`."""
    if args.quick:
        work = Workloads(folder, images=4000, micrographs=4, micrograph_side=2048, picks=300)
        batches, repeats = 12, min(args.repeats, 3)
    else:
        work = Workloads(folder)
        batches, repeats = 40, args.repeats
    rng = np.random.default_rng(0)
    shape = (work.side, work.side)
    rows = []

    def measure(name, ours, mmap, torch_dataset):
        rate, _ = median_rate(lambda: timed_rate(ours), repeats)
        mmap_rate = median_rate(lambda: timed_rate(mmap), repeats)[0] if mmap else None
        torch_rate = median_rate(lambda: torch_baseline_rate(torch_dataset, batches), repeats)[0]
        rows.append((name, rate, torch_rate, mmap_rate))
        print(format_row(*rows[-1]), flush=True)

    print(f"{'workload':<22}{'vitrio img/s':>14}{'(a) torch':>12}{'x (a)':>8}{'(b) mmap':>12}{'x (b)':>8}")
    stacks = (("W1", "W1 one stack", work.w1, 8), ("W2", "W2 1000 stacks", work.w2, 1024))
    for key, name, files, cache in stacks:
        if key not in args.only:
            continue
        locations = files()
        loader = vio.loader(workers=2, cache=cache)
        measure(
            name,
            lambda loader=loader, locations=locations: vitrio_images(
                loader, locations, batches_of(len(locations), batches, rng), shape
            ),
            lambda locations=locations: mmap_images(locations, batches_of(len(locations), batches, rng)),
            MrcfileImages(locations),
        )
    if "W3" in args.only:
        paths, picks = work.w3()
        loader = vio.loader(workers=2, cache=64)
        measure(
            "W3 patches 256",
            lambda: vitrio_patches(loader, paths, picks, batches_of(len(picks), batches, rng), 256),
            lambda: mmap_patches(paths, picks, batches_of(len(picks), batches, rng), 256),
            MrcfilePatches(paths, picks, 256),
        )
    if "W4" in args.only:
        loader = vio.loader(workers=2, cache=8)
        for dtype, locations in work.w4().items():
            measure(
                f"W4 {dtype}->float32",
                lambda loc=locations: vitrio_images(loader, loc, batches_of(len(loc), batches, rng), shape),
                lambda loc=locations: mmap_images(loc, batches_of(len(loc), batches, rng)),
                MrcfileImages(locations),
            )


def format_row(name, rate, torch_rate, mmap_rate) -> str:
    mmap_text = f"{mmap_rate:>12,.0f}{rate / mmap_rate:>8.2f}" if mmap_rate else f"{'-':>12}{'-':>8}"
    return f"{name:<22}{rate:>14,.0f}{torch_rate:>12,.0f}{rate / torch_rate:>8.2f}{mmap_text}"


if __name__ == "__main__":
    main()
