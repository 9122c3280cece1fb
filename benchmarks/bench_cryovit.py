"""Batches of random crops of HDF5 tomograms through cryovit.data, against reading whole tomograms with h5py.

    python benchmarks/bench_cryovit.py [--quick] [--data DIR] [--repeats N]

A batch is 4 random crops of 64x512x512 out of 4 tomograms of 256x1024x1024 float32 (1 GiB each,
h5py's default contiguous layout), collated into a ``BatchedTomogramData``. cryovit reads only the
crops, on 2 threads (``TomogramDataset.__getitems__``, as torch's DataLoader calls it); the baseline,
as tomogram segmentation code does today, reads each whole tomogram with h5py and crops it in memory,
then collates the same way. Both run in the same process, alternating, torch on one thread (so that
its copies do not contend with the readers on a busy machine), and the medians of the batches per
second of each are reported with their ratio. ``--quick`` uses tomograms of
128x512x512 and crops of 32x256x256. The tomograms are written once, under ``DIR``.
"""

from __future__ import annotations

import time
from pathlib import Path

import h5py
import numpy as np
import torch

from cryovit.data import TomogramDataset, collate_tomograms
from cryovit.types import BatchedTomogramData, FileData, TomogramData
from vitrio.bench.workloads import benchmark_parser, data_folder

BATCH = 4


def make_tomograms(folder: Path, shape: tuple[int, int, int], seed: int = 0) -> list[Path]:
    """Writes ``BATCH`` tomograms of random float32 values, a slab at a time, unless they exist."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"tomo{i}.hdf5" for i in range(BATCH)]
    rng = np.random.default_rng(seed)
    slab = max(1, (64 << 20) // (4 * shape[1] * shape[2]))
    for path in paths:
        if path.exists():
            continue
        partial = path.with_suffix(".partial")
        with h5py.File(partial, "w") as file:
            data = file.create_dataset("data", shape=shape, dtype=np.float32)
            for z in range(0, shape[0], slab):
                data[z : z + slab] = rng.standard_normal(
                    (min(slab, shape[0] - z), *shape[1:]), dtype=np.float32
                )
        partial.rename(path)
    return paths


def h5py_batch(
    paths: list[Path], crop: tuple[int, int, int], rng: np.random.Generator
) -> BatchedTomogramData:
    """The baseline: each tomogram read whole with h5py, cropped in memory, then collated."""
    tomograms = []
    for path in paths:
        with h5py.File(path, "r") as file:
            volume = file["data"][()]
        z, y, x = (int(rng.integers(0, n - c + 1)) for n, c in zip(volume.shape, crop))
        box = np.ascontiguousarray(volume[z : z + crop[0], y : y + crop[1], x : x + crop[2]])
        del volume
        tomograms.append(
            TomogramData(
                sample=path.parent.name,
                tomo_name=path.name,
                split_id=None,
                data=torch.from_numpy(box).unsqueeze(0),
                label=torch.zeros(crop, dtype=torch.bool),
                batch_size=[],
            )
        )
    return collate_tomograms(tomograms)


def timed(make_batch) -> float:
    """Batches per second of one call of ``make_batch``."""
    start = time.perf_counter()
    batch = make_batch()
    elapsed = time.perf_counter() - start
    assert batch.num_tomos == BATCH
    return 1.0 / elapsed


def main() -> None:
    parser = benchmark_parser(__doc__, "tomograms of 128x512x512, crops of 32x256x256", data=True)
    parser.add_argument("--repeats", type=int, default=5, help="batches timed for each reader")
    args = parser.parse_args()
    torch.set_num_threads(1)

    shape, crop = ((128, 512, 512), (32, 256, 256)) if args.quick else ((256, 1024, 1024), (64, 512, 512))
    with data_folder(args.data) as folder:
        run(folder, shape, crop, args.repeats)


def run(folder: Path, shape: tuple[int, int, int], crop: tuple[int, int, int], repeats: int) -> None:
    """Time the batches of cryovit and of the h5py baseline on tomograms made in `folder`."""
    paths = make_tomograms(folder / "cryovit-{}x{}x{}".format(*shape), shape)
    dataset = TomogramDataset(
        [FileData(tomo_path=p) for p in paths], crop=(crop[0], crop[1]), workers=2, seed=1
    )
    rng = np.random.default_rng(2)

    def cryovit_batch() -> BatchedTomogramData:
        return collate_tomograms(dataset.__getitems__(range(BATCH)))

    def baseline_batch() -> BatchedTomogramData:
        return h5py_batch(paths, crop, rng)

    cryovit_batch(), baseline_batch()  # warm the page cache and open the files
    rates: dict[str, list[float]] = {"cryovit": [], "h5py": []}
    for _ in range(repeats):
        rates["cryovit"].append(timed(cryovit_batch))
        rates["h5py"].append(timed(baseline_batch))
    medians = {name: float(np.median(values)) for name, values in rates.items()}
    mib = BATCH * np.prod(crop) * 4 / 2**20
    print(f"{BATCH} crops of {crop} out of tomograms of {shape} float32, {repeats} batches each")
    for name, median in medians.items():
        runs = ", ".join(f"{r:.2f}" for r in rates[name])
        print(f"  {name:8s} {median:8.2f} batches/s ({median * mib:8.0f} MiB/s of crops)  runs: {runs}")
    print(f"  ratio    {medians['cryovit'] / medians['h5py']:8.1f}x (goal: at least 3x)")


if __name__ == "__main__":
    main()
