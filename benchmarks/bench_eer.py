"""Rendering an EER movie into fractions: vitrio's reader against imagecodecs' decoder and numpy sums.

A synthetic movie (4096 x 4096, 400 frames, about 100 events per 1000 pixels
in each frame, compression 65001) is written once into a temporary folder;
a few distinct frames are encoded and repeated to keep generating it quick.
Both sides render the same fractions from the same threads, each fraction a
task: vitrio's `read_run` of a configured EER reader, and imagecodecs'
`eer_decode` of each frame added into the fraction with numpy. Both parse the
container with tifffile inside the timing. Medians of a few runs are printed.

Usage:
    .venv/bin/python benchmarks/bench_eer.py [--quick] [--threads 2] [--repeats 3]
"""

from __future__ import annotations

import os
import statistics
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import imagecodecs
import numpy as np
import tifffile

from vitrio.bench.workloads import benchmark_parser
from vitrio.formats import open_reader
from vitrio.formats.eer import EerFormat
from vitrio.testing.eer import encode_frame, random_events, write_eer

CODE = (7, 2, 2)  # compression 65001: 7 bits of run, 2 + 2 sub-pixel bits


def write_movie(path: Path, shape: tuple[int, int], frames: int, distinct: int, density: float) -> int:
    """Write an EER movie of `frames` frames cycling through `distinct` random ones; return its events."""
    rng = np.random.default_rng(0)
    events = [random_events(rng, shape, CODE, density) for _ in range(distinct)]
    encoded = [encode_frame(e, shape, CODE, shape[0]) for e in events]
    write_eer(path, [encoded[frame % distinct] for frame in range(frames)], shape, 65001)
    return sum(len(events[frame % distinct]) for frame in range(frames))


def run_fractions(task, fractions: int, threads: int) -> None:
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(task, range(fractions)))


def render_vitrio(path: Path, fractions: int, threads: int, keep: dict | None = None) -> None:
    """Render every fraction with vitrio into a per-thread image (kept in `keep` by index if given)."""
    local = threading.local()
    with open_reader(path, [EerFormat.configured(fractions)]) as reader:

        def task(index: int) -> None:
            if not hasattr(local, "out"):
                local.out = np.empty(reader.core_extents, dtype=np.uint16)
            reader.read_run(index, [local.out])
            if keep is not None and index in keep:
                keep[index] = local.out.copy()

        run_fractions(task, fractions, threads)


def render_imagecodecs(path: Path, fractions: int, threads: int, keep: dict | None = None) -> None:
    """Render every fraction by decoding frames with imagecodecs and adding them with numpy."""
    with tifffile.TiffFile(path) as tif:
        strips = [(page.dataoffsets[0], page.databytecounts[0]) for page in tif.pages]
        shape = tif.pages[0].shape
    frames = len(strips)
    local = threading.local()
    fd = os.open(path, os.O_RDONLY)
    try:

        def task(index: int) -> None:
            if not hasattr(local, "out"):
                local.out = np.empty(shape, dtype=np.uint16)
            out = local.out
            out.fill(0)
            for frame in range(index * frames // fractions, (index + 1) * frames // fractions):
                offset, count = strips[frame]
                out += imagecodecs.eer_decode(os.pread(fd, count, offset), shape, *CODE)
            if keep is not None and index in keep:
                keep[index] = out.copy()

        run_fractions(task, fractions, threads)
    finally:
        os.close(fd)


def timed(function, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = benchmark_parser(__doc__, "a 1024 x 1024 movie of 100 frames, 10 fractions")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--distinct", type=int, default=8, help="distinct frames encoded")
    arguments = parser.parse_args()
    size, frames, fractions = (1024, 100, 10) if arguments.quick else (4096, 400, 40)
    shape = (size, size)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "movie.eer"
        start = time.perf_counter()
        events = write_movie(path, shape, frames, min(arguments.distinct, frames), 0.1)
        print(
            f"movie: {size} x {size}, {frames} frames, {events / frames / 1e6:.2f} M events a frame, "
            f"{path.stat().st_size / 1e6:.0f} MB, written in {time.perf_counter() - start:.1f} s"
        )
        print(
            f"rendering {fractions} fractions with {arguments.threads} threads, {arguments.repeats} runs each"
        )

        ours: dict = {0: None, fractions - 1: None}
        theirs: dict = dict(ours)
        render_vitrio(path, fractions, arguments.threads, ours)
        render_imagecodecs(path, fractions, arguments.threads, theirs)
        for index in ours:
            if not np.array_equal(ours[index], theirs[index]):
                raise SystemExit(f"fraction {index} differs between vitrio and imagecodecs")

        results = {}
        for name, render in (("vitrio", render_vitrio), ("imagecodecs + numpy", render_imagecodecs)):
            times = timed(lambda render=render: render(path, fractions, arguments.threads), arguments.repeats)
            results[name] = statistics.median(times)
            runs = ", ".join(f"{t:.3f}" for t in times)
            print(
                f"{name:>20}: median {results[name]:.3f} s ({runs}); "
                f"{events / results[name] / 1e6:.0f} M events/s, {frames / results[name]:.0f} frames/s"
            )
        print(f"speed-up of vitrio: {results['imagecodecs + numpy'] / results['vitrio']:.2f}x")


if __name__ == "__main__":
    main()
