"""`vitrio doctor`: a one-page report of where reading a dataset's time would go, and the settings to use."""

from __future__ import annotations

import argparse
import json
import textwrap
from typing import Any

from vitrio.bench.advice import size, time_shares
from vitrio.bench.doctor import diagnose

from ._common import positive, positive_number

__all__ = ["DESCRIPTION", "HELP", "add_arguments", "report", "run"]


def _images_per_second(rate: float) -> str:
    return f"{rate:>12,.0f}"


def report(figures: dict[str, Any]) -> str:
    """The figures of `vitrio.bench.doctor.diagnose` as a page of text."""
    dataset, machine, sample = figures["dataset"], figures["machine"], figures["sample"]
    kinds = ", ".join(f"{part['files']} {kind}" for kind, part in dataset["kinds"].items())
    lines = [
        f"dataset   {dataset['files']} files ({kinds}), {dataset['images']:,} images, "
        f"{size(dataset['bytes_on_disk'])} on disk, {size(dataset['bytes_as_images'])} as images",
        f"machine   {machine['threads']} threads, memcpy "
        f"{size(machine['memcpy_bytes_per_second'])}/s a thread, "
        f"{size(machine['memory'])} memory available, {size(machine['scratch_free'])} free in "
        f"{machine['scratch_directory']}",
        f"sampled   {sample['images']} images of {sample['files']} files, cold then warm, on one thread",
        "",
        "format        share  open ms  cold images/s  warm images/s",
    ]
    for name, row in figures["formats"].items():
        packed = " (compressed)" if row["compressed"] else ""
        lines.append(
            f"{name:<12} {row['share']:>5.0%} {row['open_seconds'] * 1e3:>8.2f} "
            f"{1 / max(row['cold_seconds'], 1e-9):>14,.0f} {1 / row['warm_seconds']:>14,.0f}{packed}"
        )
    shares = time_shares(figures)
    lines += [
        "",
        "where an image's time goes in a first epoch: "
        + ", ".join(f"{name} {share:.0%}" for name, share in shares.items()),
        "",
        "expected images/s    "
        + "".join(
            f"{threads + (' thread' if threads == '1' else ' threads'):>12}"
            for threads in figures["expected"]
        ),
    ]
    for case, label in (("cold", "first epoch"), ("warm", "page cache"), ("scratch", "from a scratch")):
        rates = "".join(_images_per_second(rates[case]) for rates in figures["expected"].values())
        lines.append(f"  {label:<19}{rates}")
    lines += ["", "recommended"]
    for advice in figures["recommendations"]:
        value = advice["value"]
        if advice["setting"] == "scratch" and value != "none":
            value = f"{value} ({size(advice['budget'])})"
        head = f"  {advice['setting']:<17}{value!s:<20} "
        lines += textwrap.wrap(advice["reason"], 100, initial_indent=head, subsequent_indent=" " * len(head))
    return "\n".join(lines)


HELP = "where reading a dataset's time would go, and the settings to use"
DESCRIPTION = (
    "Measure, on a sample of a few seconds, what reading a dataset costs: each format's open, cold and "
    "warm read of an image on one thread, one thread's memcpy; count its files and bytes, compare them "
    "with the memory and the scratch directory's free space, and print where the time would go, the "
    "images per second to expect on 1, 2 and N threads, and the settings to read with (workers, cache, "
    "scratch and its budget, read-ahead, converting compressed files), each with its reason. Reads only "
    "the sample; writes nothing."
)


def _bytes(text: str) -> int:
    """A `--memory` argument: bytes, or a number with a unit of k, M, G or T (powers of 1,000)."""
    units = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
    scale = units.get(text[-1:].lower(), 1)
    try:
        value = float(text[:-1] if scale > 1 else text) * scale
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"not a size in bytes (such as 64G): {text!r}")
    return int(value)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `vitrio doctor`."""
    parser.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="a STAR or .cs file of particles, a .txt list of stacks, image files, folders, OME-Zarr "
        "stores or their URLs",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument(
        "--seconds", type=positive_number, default=3.0, help="how long to spend sampling files (default: 3)"
    )
    parser.add_argument(
        "--memory", type=_bytes, help="the memory to plan for, such as 64G (default: what is available now)"
    )
    parser.add_argument(
        "--scratch-dir", help="where a directory scratch would go (default: the temporary directory)"
    )
    parser.add_argument("--threads", type=positive, help="the most threads to plan for (default: the cores)")


def run(args: argparse.Namespace) -> int:
    """Diagnose the dataset `args.paths` name and print the report, or with `args.json` the figures."""
    figures = diagnose(args.paths, args.seconds, args.memory, args.scratch_dir, args.threads)
    print(json.dumps(figures, indent=2, ensure_ascii=False) if args.json else report(figures))
    return 0
