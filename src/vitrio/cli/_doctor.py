"""`vitrio doctor`: a one-page report of where reading a dataset's time would go, and the settings to use."""

from __future__ import annotations

import argparse
import json
import textwrap
from typing import Any

from vitrio.bench.advice import size, time_shares
from vitrio.bench.doctor import diagnose

__all__ = ["report", "run"]


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
        head = f"  {advice['setting']:<11}{value!s:<20} "
        lines += textwrap.wrap(advice["reason"], 100, initial_indent=head, subsequent_indent=" " * len(head))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Diagnose the dataset `args.paths` name and print the report, or with `args.json` the figures."""
    figures = diagnose(args.paths, args.seconds, args.memory, args.scratch_dir, args.threads)
    print(json.dumps(figures, indent=2, ensure_ascii=False) if args.json else report(figures))
    return 0
