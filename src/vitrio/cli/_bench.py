"""`vitrio bench`: the benchmark workloads against their baselines in one run, as a table and a chart.

The workloads, the loops that time them and the baselines are those of
`vitrio.bench`, which the scripts of benchmarks/ run too, so the command and
the scripts measure the same thing: W1 (one stack), W2 (stacks of 20) and W3 (patches of micrographs),
read in shuffled batches of 256 by vitrio's batch reads and by vitrio.data's
DataLoader, against PyTorch's DataLoader with 2 worker processes reading
one image per item through mrcfile, and (for the batch reads) mrcfile's
memory map gathered with numpy. Rates are medians of a few runs; what
matters is the ratios, measured in the same run on the same files.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sized
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import vitrio as vio
from vitrio.data import Dataset, ImageSource, PatchSource

from ..bench import core, data
from ..bench import workloads as common
from ._common import pyplot, save_figure

__all__ = ["DESCRIPTION", "HELP", "PRESETS", "Preset", "add_arguments", "run"]


HELP = "the benchmark workloads against their baselines"
DESCRIPTION = (
    "Run the workloads of benchmarks/ (W1: one stack, W2: many small stacks, W3: patches "
    "of micrographs) through vitrio's batch reads and vitrio.data's DataLoader, against PyTorch's "
    "DataLoader with worker processes reading through mrcfile and against mrcfile's memory map, in "
    "one run, and print a table; --plot saves a bar chart of it. Needs torch and mrcfile (pip install "
    "'vitrio[bench]'), and matplotlib for --plot; the benchmarks/ scripts of a clone run more workloads."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `vitrio bench`."""
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="small files and few batches")
    size.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--data",
        type=Path,
        help="a folder of yours where the synthetic files are kept between runs "
        "(default: a fresh private one, removed at the end)",
    )
    parser.add_argument("--plot", type=Path, metavar="PNG", help="save a bar chart of the table here")


@dataclass(frozen=True)
class Preset:
    """The size of a run: the workloads' files, batches counted per run, runs per median, patch side."""

    workloads: dict[str, int] = field(default_factory=dict)
    batches: int = 40
    repeats: int = 5
    patch: int = 256


PRESETS = {
    "full": Preset(),
    "quick": Preset({"images": 4000, "micrographs": 4, "micrograph_side": 2048}, batches=12, repeats=3),
    "tiny": Preset(
        {"images": 1024, "side": 32, "micrographs": 2, "micrograph_side": 256}, batches=2, repeats=1, patch=64
    ),
}


def _plot(rows: list[tuple[str, float, float, float | None]], path: Path) -> None:
    plt = pyplot()
    figure, axes = plt.subplots(figsize=(10, 4.8))
    x = np.arange(len(rows))
    bars = (
        ("vitrio, 2 threads", [r[1] for r in rows]),
        ("(a) torch DataLoader, 2 workers, mrcfile", [r[2] for r in rows]),
        ("(b) mrcfile memory map + numpy", [r[3] or 0 for r in rows]),
    )
    for k, (label, rates) in enumerate(bars):
        axes.bar(x + (k - 1) * 0.27, rates, 0.27, label=label)
    axes.set_xticks(x, [r[0] for r in rows], rotation=15, ha="right")
    axes.set_yscale("log")
    axes.set_ylabel("images per second")
    axes.set_title("vitrio against its baselines, same files, same run")
    axes.legend(fontsize=8)
    figure.tight_layout()
    save_figure(figure, path, 120)
    plt.close(figure)


def run(args: argparse.Namespace) -> None:
    """Measure the workloads at the size `args` asks for, print the table and save the chart.

    The files go under `args.data`, which must be the user's, or into a
    fresh private folder removed at the end.
    """
    # what it measures against and draws with: missing, the command stops before any work
    import mrcfile  # noqa: F401
    import torch  # noqa: F401

    if args.plot is not None:
        import matplotlib  # noqa: F401

    preset = PRESETS["tiny" if args.tiny else "quick" if args.quick else "full"]
    with common.data_folder(args.data) as folder:
        work = common.Workloads(folder, **preset.workloads)
        kept = "written on the first run" if args.data else "removed at the end"
        print(f"files under {work.root} ({kept}); medians of {preset.repeats} runs")
        _measure(work, preset, args.plot)


def _measure(work: common.Workloads, preset: Preset, plot: Path | None) -> None:
    """Measure the workloads of `work`, print the table and save the chart to `plot`, if given."""
    print("vitrio: 2 threads; (a) torch DataLoader, 2 workers, mrcfile; (b) mrcfile memory map + numpy")
    print(f"{'workload':<22}{'vitrio img/s':>14}{'(a) torch':>12}{'x (a)':>8}{'(b) mmap':>12}{'x (b)':>8}")
    rng = np.random.default_rng(0)
    rows: list[tuple[str, float, float, float | None]] = []

    def median(measure: Callable[[], float]) -> float:
        return common.median_rate(measure, preset.repeats)[0]

    def add(name: str, ours: float, torch: float, mmap: float | None) -> None:
        rows.append((name, ours, torch, mmap))
        print(core.format_row(*rows[-1]), flush=True)

    def images(name: str, locations: list[vio.ImageLocation], cache: int) -> None:
        loader = vio.loader(workers=2, cache=cache)
        shape = (work.side, work.side)
        add(
            name,
            median(
                lambda: common.timed_rate(
                    lambda: core.vitrio_images(loader, locations, batches(locations), shape)
                )
            ),
            median(lambda: common.torch_baseline_rate(common.MrcfileImages(locations), preset.batches)),
            median(lambda: common.timed_rate(lambda: core.mmap_images(locations, batches(locations)))),
        )
        dataset = Dataset({"image": ImageSource(locations)})
        result = data.measure(
            name, dataset, common.MrcfileImages(locations), cache, preset.repeats, preset.batches
        )
        add(f"{name}, data", result["ours"], result["theirs"], None)

    def batches(items: Sized) -> list[np.ndarray]:
        return core.batches_of(len(items), preset.batches, rng)

    images("W1 one stack", work.w1(), 8)
    images("W2 stacks of 20", work.w2(), 1024)
    paths, picks = work.w3()
    side = preset.patch
    loader = vio.loader(workers=2, cache=64)
    baseline = core.MrcfilePatches(paths, picks, side)
    add(
        f"W3 patches {side}",
        median(
            lambda: common.timed_rate(lambda: core.vitrio_patches(loader, paths, picks, batches(picks), side))
        ),
        median(lambda: common.torch_baseline_rate(baseline, preset.batches)),
        median(lambda: common.timed_rate(lambda: core.mmap_patches(paths, picks, batches(picks), side))),
    )
    source = PatchSource([paths[m] for m in picks[:, 0]], picks[:, 1:], (side, side))
    result = data.measure("W3", Dataset({"image": source}), baseline, 64, preset.repeats, preset.batches)
    add(f"W3 patches {side}, data", result["ours"], result["theirs"], None)
    print("rows marked data: vitrio.data's DataLoader against (a)")
    if plot is not None:
        _plot(rows, plot)
        print(f"saved the chart to {plot}")
