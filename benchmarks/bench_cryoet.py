"""Labelled subvolumes of a copick project, augmented for training: vitrio against copick-torch.

    python benchmarks/bench_cryoet.py [--quick] [--every-item] [--repeats N] [--epochs N] [--data DIR]

(`make bench-cryoet` makes the environment it needs and runs it: copick pins
zarr < 3, so it has one of its own.) A copick project is written with
copick's own API: two runs, each a tomogram (type "wbp", 10 Å voxels) of
256 x 512 x 512 float32 noise in chunks of 256^3 (copick's writer's own),
and picks of two objects, 150 "ribosome" and 50 "proteasome" in each, at
sub-voxel positions with their boxes inside the tomogram; `--quick`:
128 x 256 x 256, 30 and 10 picks. For boxes of 48^3 and 64^3 it times, in
turn and `--repeats` times each:

- copick-torch: its `CopickDataset`, `augment=True` with each of its
  augmentations (brightness, blur, intensity scaling, a flip, quarter
  turns, and a turn about z by any angle, "rotate_z"), each at its default
  chance of 0.2, then each item normalised, in a shuffled PyTorch
  DataLoader, batches of 16, with 0 and with 2 worker processes
  (persistent, so the later epochs start none). It reads each tomogram
  whole when it is made and keeps every subvolume in memory: its first
  epoch counts that. (Its `SimpleCopickDataset` cannot be used augmented:
  its Fourier augmentation, in 3 items of 10, hands a tensor to numpy's
  mean, a TypeError.)
- vitrio: `vio.data.copick_picks(...).dataset()` in a shuffled
  `vio.data.DataLoader` of batches of 16 handing out PyTorch tensors, at its
  defaults (the process's loader and chunk cache, cleared before the first
  epoch), its transform the counterpart of each of copick-torch's
  augmentations at the same chance (`RandomIntensity` as brightness and as
  intensity, `RandomLowPass` as blur, `RandomFlip` of each axis at half the
  chance, `RandomRot90`, `RandomBeamRotation`), then each item standardised
  (`Standardize`) as copick-torch normalises it, on the loader's threads.
  `--every-item` gives both every augmentation at a chance of 1.

The first epoch counts from nothing made to the last batch; the warm
epoch is the median of `--epochs` epochs after it. Prints, for each box,
the seconds of each (the median of the runs, and their range) and vitrio's
speed-up over copick-torch with 0 and with 2 workers.

Before timing it checks that the two read the same values: copick-torch
puts a pick at the voxel its position truncates to, vitrio at the nearest
(rounded), so for every pick vitrio's box at the voxel copick-torch used
(a `TomogramPicks` of those centres) must equal copick-torch's subvolume,
and where the two voxels agree (every fraction of a voxel below a half)
the box `copick_picks` gives must too, with the same object's name.
"""

from __future__ import annotations

import contextlib
import io
import os
import statistics
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import copick
import numpy as np
import torch
from copick.models import PickableObject
from copick_torch.copick import CopickDataset
from copick_torch.pick_utils import pick_centres

import vitrio as vio
from vitrio.bench.workloads import benchmark_parser, data_folder
from vitrio.formats.zarr import OmeZarrFormat

VOXEL, TOMOGRAM_TYPE, BATCH, BOXES = 10.0, "wbp", 16, (48, 64)
FULL = {"shape": (256, 512, 512), "picks": {"ribosome": 150, "proteasome": 50}}
QUICK = {"shape": (128, 256, 256), "picks": {"ribosome": 30, "proteasome": 10}}
COPICK_TORCH_AUGMENTATIONS = ["brightness", "blur", "intensity", "flip", "rotate", "rotate_z"]


def vitrio_augmentations(every_item: bool) -> vio.data.Compose:
    """vitrio's counterparts of copick-torch's augmentations, each at its chance: 0.2 (copick-torch's
    default) or, with `every_item`, 1; the flip is of each axis at half the chance. Then each item
    standardised (`vio.data.Standardize`), as copick-torch normalises its items."""
    chance = 1.0 if every_item else 0.2
    return vio.data.Compose(
        vio.data.RandomIntensity(scale=1.0, offset=(-0.1, 0.1), probability=chance),  # brightness
        vio.data.RandomLowPass(probability=chance),  # blur
        vio.data.RandomIntensity(scale=(0.9, 1.1), offset=0.0, probability=chance),  # intensity
        vio.data.RandomFlip(probability=chance / 2),  # flip
        vio.data.RandomRot90(probability=chance),  # rotate
        vio.data.RandomBeamRotation(probability=chance),  # rotate_z
        vio.data.Standardize(),
    )


def make_project(folder: Path, shape: tuple[int, int, int], picks: dict[str, int], seed: int) -> Path:
    """Write a copick project of two runs with copick's API (tomograms of noise, picks inside); its
    configuration file. Picks keep half the largest box from every face, so no box needs filling."""
    objects = [
        PickableObject(name=name, is_particle=True, label=label, radius=100.0 / label)
        for label, name in enumerate(picks, start=1)
    ]
    config = folder / "copick.json"
    root = copick.new_config(str(config), str(folder / "overlay"), "bench", pickable_objects=objects)
    rng = np.random.default_rng(seed)
    margin = max(BOXES) // 2 + 1
    for number in range(2):
        run = root.new_run(f"TS_{number:02d}")
        tomogram = run.new_voxel_spacing(VOXEL).new_tomogram(TOMOGRAM_TYPE)
        tomogram.from_numpy(rng.standard_normal(shape, dtype=np.float32), levels=1)
        for name, count in picks.items():
            # x, y, z in Å, anywhere in a voxel
            voxels = rng.uniform(margin, np.array(shape[::-1]) - margin, size=(count, 3))
            run.new_picks(name, session_id="0", user_id="bench").from_numpy(voxels * VOXEL)
    return config


def copick_torch_dataset(config: Path, box: int, augment: bool, every_item: bool = False) -> CopickDataset:
    """copick-torch's dataset of the project's picks, with all its augmentations or none; its messages
    kept from the output."""
    with contextlib.redirect_stdout(io.StringIO()):
        return CopickDataset(
            config_path=str(config),
            boxsize=(box,) * 3,
            augment=augment,
            voxel_spacing=VOXEL,
            seed=0,
            augmentations=COPICK_TORCH_AUGMENTATIONS,
            augmentation_prob=1.0 if every_item else 0.2,  # 0.2: its default
        )


def stack(items: list) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch of `CopickDataset`'s items: their subvolumes and classes (its label dicts hold None, which
    PyTorch's collation refuses)."""
    return torch.stack([item[0] for item in items]), torch.tensor([item[1]["class_idx"] for item in items])


def vitrio_picks(config: Path, box: int) -> vio.data.TomogramPicks:
    """The project's picks of tools (session "0", as copick-torch takes them) as vitrio's boxes."""
    return vio.data.copick_picks(
        str(config), box, voxel_spacing=VOXEL, tomogram_type=TOMOGRAM_TYPE, session_id="0"
    )


def copick_torch_centres(config: Path) -> tuple[list[str], np.ndarray, list[str]]:
    """The run, voxel (z, y, x) and object of each of copick-torch's items, in its order: the picks of
    tools (session "0") of each run, their position plus their transform's shift over the voxel size,
    truncated, as `CopickDataset` takes them."""
    runs, centres, names = [], [], []
    for run in copick.from_file(str(config)).runs:
        for picks in run.get_picks():
            if picks.from_tool:
                voxels = np.floor(pick_centres(picks) / VOXEL).astype(np.int64)
                runs += [run.name] * len(voxels)
                centres += [voxel[::-1] for voxel in voxels]
                names += [picks.pickable_object_name] * len(voxels)
    return runs, np.array(centres).reshape(-1, 3), names


def read_all(picks: vio.data.TomogramPicks) -> np.ndarray:
    """Every box of `picks`, in order, as read: no augmentation, no normalisation."""
    loader = vio.data.DataLoader(picks.dataset(), batch_size=64)
    return np.concatenate([batch["image"] for batch in loader])


def check_same_values(config: Path, box: int) -> None:
    """Raise unless vitrio's boxes equal copick-torch's subvolumes at the same voxels (see the module)."""
    theirs = copick_torch_dataset(config, box, augment=False)
    subvolumes, names = np.asarray(theirs._subvolumes), [theirs.keys()[i] for i in theirs._molecule_ids]
    runs, centres, objects = copick_torch_centres(config)
    if names != objects:
        raise AssertionError("copick-torch's items are not the picks in the order expected")
    ours = vitrio_picks(config, box)
    at_their_centres = vio.data.TomogramPicks(
        runs,
        centres,
        (box,) * 3,
        [ours.classes.index(name) for name in names],
        ours.classes,
        ours.files,
        ours.extents,
    )
    if not np.array_equal(read_all(at_their_centres), subvolumes):
        raise AssertionError(f"boxes of {box}^3 at copick-torch's voxels differ from its subvolumes")
    rows = {
        (tomogram, *centre): row
        for row, (tomogram, centre) in enumerate(zip(ours.tomograms.tolist(), ours.centres.tolist()))
    }
    agreed = [(rows[key], item) for item, key in enumerate(zip(runs, *centres.T.tolist())) if key in rows]
    if len(agreed) < len(runs) // 16:
        raise AssertionError(f"only {len(agreed)} of {len(runs)} picks land on the voxel copick-torch uses")
    ours_rows, their_items = (list(column) for column in zip(*agreed))
    boxes = read_all(ours.subset(ours_rows))
    if not np.array_equal(boxes, subvolumes[their_items]):
        raise AssertionError(f"copick_picks' boxes of {box}^3 differ from copick-torch's where both agree")
    if [ours.classes[label] for label in ours.labels[ours_rows]] != [names[i] for i in their_items]:
        raise AssertionError("copick_picks labels picks otherwise than copick-torch")
    print(
        f"{box}^3: the same values at all {len(runs)} of copick-torch's voxels, and through copick_picks "
        f"at the {len(agreed)} picks both place alike"
    )


def epoch_seconds(loader: Iterable, epochs: int, started: tuple[float, float]) -> list[tuple[float, float]]:
    """(wall, CPU) seconds of a first epoch through `loader`, counted from `started` (the wall clock and
    this process's CPU time then), and of `epochs` more."""
    seconds = []
    wall, used = started
    for _ in range(epochs + 1):
        for _batch in loader:
            pass
        now, cpu = time.perf_counter(), cpu_seconds(loader)
        seconds.append((now - wall, cpu - used))
        wall, used = now, cpu
    return seconds


def cpu_seconds(loader: Any) -> float:
    """The CPU-seconds this process has used, and the worker processes of a PyTorch DataLoader that
    keeps them (read from /proc: Linux)."""
    total = time.process_time()
    for worker in getattr(getattr(loader, "_iterator", None), "_workers", []):
        with open(f"/proc/{worker.pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()  # from the state on: utime, stime at 11, 12
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def copick_torch_epochs(
    config: Path, box: int, workers: int, epochs: int, every_item: bool
) -> list[tuple[float, float]]:
    """(wall, CPU) seconds of copick-torch's first epoch (making its dataset included) and of `epochs`
    more."""
    started = time.perf_counter(), time.process_time()
    dataset = copick_torch_dataset(config, box, augment=True, every_item=every_item)
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=BATCH,
        shuffle=True,
        num_workers=workers,
        persistent_workers=workers > 0,
        collate_fn=stack,
    )
    seconds = epoch_seconds(loader, epochs, started)
    del loader  # its workers end
    return seconds


def vitrio_epochs(config: Path, box: int, epochs: int, every_item: bool) -> list[tuple[float, float]]:
    """(wall, CPU) seconds of vitrio's first epoch (from a cleared chunk cache, reading the project
    included) and of `epochs` more."""
    OmeZarrFormat.clear_cache()
    started = time.perf_counter(), time.process_time()
    dataset = vitrio_picks(config, box).dataset()
    loader = vio.data.DataLoader(
        dataset,
        BATCH,
        shuffle=True,
        seed=0,
        output="torch",
        transform=vitrio_augmentations(every_item),
    )
    return epoch_seconds(loader, epochs, started)


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):7.2f} ({min(values):.2f}-{max(values):.2f})"


def measure(config: Path, box: int, epochs: int, repeats: int, every_item: bool) -> None:
    ways = {
        "copick-torch, 0 workers": lambda: copick_torch_epochs(config, box, 0, epochs, every_item),
        "copick-torch, 2 workers": lambda: copick_torch_epochs(config, box, 2, epochs, every_item),
        "vitrio": lambda: vitrio_epochs(config, box, epochs, every_item),
    }
    firsts: dict[str, list[float]] = {name: [] for name in ways}
    warms: dict[str, list[float]] = {name: [] for name in ways}
    warm_cpus: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(repeats):
        for name, epochs_of in ways.items():
            (first, _), *later = epochs_of()
            firsts[name].append(first)
            warms[name].append(statistics.median(wall for wall, _ in later))
            warm_cpus[name].append(statistics.median(cpu for _, cpu in later))
    print(f"\nboxes of {box}^3: seconds an epoch, median of {repeats} runs (range)")
    print(f"{'':24} {'first epoch':>21} {'warm epoch':>21} {'warm epoch CPU':>21}")
    for name in ways:
        print(
            f"{name:24} {summary(firsts[name]):>21} {summary(warms[name]):>21} {summary(warm_cpus[name]):>21}"
        )
    for name in list(ways)[:2]:
        first, warm, cpu = (
            statistics.median(times[name]) / statistics.median(times["vitrio"])
            for times in (firsts, warms, warm_cpus)
        )
        print(
            f"vitrio's speed-up over {name}: first epoch {first:.2f}x, warm epoch {warm:.2f}x "
            f"(CPU-seconds: {cpu:.2f}x)"
        )


def main() -> None:
    parser = benchmark_parser(__doc__, "tomograms of 128 x 256 x 256 and 40 picks in each", data=True)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each way, in turn")
    parser.add_argument("--epochs", type=int, default=3, help="warm epochs of each run")
    parser.add_argument(
        "--every-item", action="store_true", help="every augmentation of both on every item (see above)"
    )
    args = parser.parse_args()
    size = QUICK if args.quick else FULL
    with data_folder(args.data) as folder:
        project = folder / ("copick-quick" if args.quick else "copick")
        config = project / "copick.json"
        if not config.exists():
            started = time.perf_counter()
            make_project(project, size["shape"], size["picks"], seed=0)
            print(f"copick project written in {time.perf_counter() - started:.1f} s")
        count = 2 * sum(size["picks"].values())
        print(
            f"2 tomograms of {size['shape']} float32 in chunks of 256^3, {count} picks of 2 objects; "
            f"batches of {BATCH}, {args.epochs} warm epochs a run; vitrio on "
            f"a thread per core; PyTorch on {torch.get_num_threads()} threads; "
            + ("every augmentation on every item" if args.every_item else "each augmentation at 0.2")
        )
        for box in BOXES:
            check_same_values(config, box)
        for box in BOXES:
            measure(config, box, args.epochs, args.repeats, args.every_item)


if __name__ == "__main__":
    main()
