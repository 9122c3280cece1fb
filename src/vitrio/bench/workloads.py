"""What the benchmarks share: synthetic data made once, timing by medians, the mrcfile baselines.

The data goes into a fresh private folder, removed at the end, unless the
user names one (`--data`), which must be theirs: a fixed folder in the
shared temporary directory would let another user plant a link there and
have the benchmark write gigabytes wherever it points.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import stat
import statistics
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

import vitrio as vio
from vitrio.formats import open_readonly

__all__ = [
    "Workloads",
    "IN_FLIGHT",
    "benchmark_parser",
    "in_flight",
    "median_rate",
    "timed_rate",
    "data_folder",
    "own_folder",
    "MrcfileImages",
    "torch_baseline_rate",
    "evict",
    "memcpy_rate",
]


def own_folder(path: Path) -> Path:
    """Make `path` a private folder if nothing is there, or check that the folder there is the user's own.

    Args:
        path: The folder; its parents are made as needed.

    Returns:
        `path`.

    Raises:
        PermissionError: If `path`, or the symbolic link it is, belongs to another user.
        NotADirectoryError: If `path` is not a folder.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    me, link, target = os.geteuid(), os.lstat(path), os.stat(path)
    owned = [(link, "the symbolic link")] if stat.S_ISLNK(link.st_mode) else []
    for status, what in [*owned, (target, "the folder")]:
        if status.st_uid != me:
            raise PermissionError(
                f"{path}: {what} belongs to uid {status.st_uid}, not to you (uid {me}); "
                "name a folder of your own"
            )
    if not stat.S_ISDIR(target.st_mode):
        raise NotADirectoryError(f"{path}: is not a folder")
    return path


IN_FLIGHT = 4


def in_flight(reads: Iterable[tuple[Any, int]]) -> int:
    """Wait for each read (a Completion and how many items it reads), IN_FLIGHT under way at once; the
    items read."""
    pending: deque = deque()
    done = 0
    for completion, items in reads:
        pending.append(completion)
        if len(pending) >= IN_FLIGHT:
            pending.popleft().get()
        done += items
    while pending:
        pending.popleft().get()
    return done


def benchmark_parser(doc: str, quick: str, data: bool = False) -> argparse.ArgumentParser:
    """A benchmark's parser: `doc`, its module's docstring, as its description; `--quick` (`quick` says
    what it makes smaller); with `data`, `--data`, the folder `data_folder` takes."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=quick)
    if data:
        parser.add_argument(
            "--data",
            type=Path,
            help="a folder of yours where the synthetic files are kept between runs (default: a fresh "
            "private one, removed at the end)",
        )
    return parser


@contextlib.contextmanager
def data_folder(given: Path | None) -> Iterator[Path]:
    """The folder benchmark data goes in while the block runs.

    Args:
        given: A folder of the user's, where the data is kept between runs
            (made if missing), or None for a fresh private folder in the
            temporary directory, removed when the block ends.

    Raises:
        PermissionError, NotADirectoryError: As `own_folder`, for `given`.
    """
    if given is not None:
        yield own_folder(given)
        return
    with tempfile.TemporaryDirectory(prefix="vitrio-bench-") as folder:
        yield Path(folder)


class Workloads:
    """The synthetic files of the workloads, written on first use.

    W1: one stack of `images` images of `side`x`side` float32.
    W2: `images / 20` stacks of 20 such images.
    W3: `micrographs` micrographs of `micrograph_side` squared float32 and `picks` centres on each.
    W4: the W1 stack as int16 and as float16.
    W6: one tomogram of `tomogram` float32 voxels (slowest axis first).
    """

    def __init__(
        self,
        root: Path,
        images: int = 20_000,
        side: int = 128,
        micrographs: int = 20,
        micrograph_side: int = 4096,
        picks: int = 300,
        seed: int = 0,
        tomogram: tuple[int, int, int] = (256, 1024, 1024),
    ):
        self.root = own_folder(own_folder(Path(root)) / f"{images}x{side}-{micrographs}x{micrograph_side}")
        self.images, self.side = images, side
        self.micrographs, self.micrograph_side, self.picks = micrographs, micrograph_side, picks
        self.rng = np.random.default_rng(seed)
        self.tomogram = tomogram

    def _stack(self, name: str, dtype: str) -> Path:
        path = self.root / name
        if not path.exists():
            chunk = 2000
            writers = vio.writer_provider()
            writers.declare(path, vio.ImageDescriptor((self.images, self.side, self.side), 2, dtype))
            saver = vio.saver(writers, workers=2)
            for first in range(0, self.images, chunk):
                count = min(chunk, self.images - first)
                values = self.rng.standard_normal((count, self.side, self.side), dtype=np.float32) * 100
                locations = [vio.ImageLocation(path, i) for i in range(first, first + count)]
                vio.write_batch_async(saver, values, locations).get()
            writers.close(path)
        return path

    def w1(self) -> list[vio.ImageLocation]:
        path = self._stack("w1.mrcs", "float32")
        return [vio.ImageLocation(path, i) for i in range(self.images)]

    def w2(self) -> list[vio.ImageLocation]:
        per_stack = 20
        paths = [self.root / "w2" / f"stack{i:05d}.mrcs" for i in range(self.images // per_stack)]
        if not paths[-1].exists():
            own_folder(paths[0].parent)
            for path in paths:
                values = self.rng.standard_normal((per_stack, self.side, self.side), dtype=np.float32)
                vio.write_stack(values, path)
        return [vio.ImageLocation(p, i) for p in paths for i in range(per_stack)]

    def w3(self) -> tuple[list[Path], np.ndarray]:
        """The micrographs, and a row (micrograph, y, x) per pick."""
        paths = [self.root / "w3" / f"micrograph{i:03d}.mrc" for i in range(self.micrographs)]
        if not paths[-1].exists():
            own_folder(paths[0].parent)
            side = self.micrograph_side
            for path in paths:
                vio.write_single(self.rng.standard_normal((side, side), dtype=np.float32), path)
        rng = np.random.default_rng(1)
        picks = np.concatenate(
            [
                np.column_stack(
                    [np.full(self.picks, m), rng.integers(0, self.micrograph_side, (self.picks, 2))]
                )
                for m in range(self.micrographs)
            ]
        )
        return paths, picks

    def w6(self) -> Path:
        """The tomogram."""
        path = self.root / "w6-{}x{}x{}.mrc".format(*self.tomogram)
        if not path.exists():
            vio.write_single(self.rng.standard_normal(self.tomogram, dtype=np.float32), path)
        return path

    def w4(self) -> dict[str, list[vio.ImageLocation]]:
        out = {}
        for dtype in ("int16", "float16"):
            path = self._stack(f"w4-{dtype}.mrcs", dtype)
            out[dtype] = [vio.ImageLocation(path, i) for i in range(self.images)]
        return out


def evict(paths: list[Path]) -> None:
    """Drop the pages of `paths` from the page cache (`posix_fadvise` DONTNEED), for cold reads."""
    for path in paths:
        fd = open_readonly(os.fspath(path))
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def memcpy_rate(size: int = 512 << 20) -> float:
    """Bytes per second of one thread's `numpy.copyto` of `size` bytes, the best of 3."""
    source, target = np.ones(size, np.uint8), np.zeros(size, np.uint8)
    best = 0.0
    for _ in range(3):
        start = time.perf_counter()
        np.copyto(target, source)
        best = max(best, size / (time.perf_counter() - start))
    return best


def median_rate(run: Callable[[], float], repeats: int) -> tuple[float, list[float]]:
    """The median of `repeats` rates that `run` measures, and the rates."""
    rates = [run() for _ in range(repeats)]
    return statistics.median(rates), rates


def timed_rate(items: Callable[[], int]) -> float:
    """Items per second of one call of `items`, which returns how many it did."""
    start = time.perf_counter()
    count = items()
    return count / (time.perf_counter() - start)


class MrcfileImages:
    """A torch Dataset that reads one image per item with mrcfile, as most training code does today."""

    def __init__(self, locations: list[vio.ImageLocation]):
        self.items = [(str(loc.key), loc.index_in_stack) for loc in locations]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, item: int):
        import mrcfile
        import torch

        path, index = self.items[item]
        with mrcfile.mmap(path, mode="r", permissive=True) as mrc:
            return torch.from_numpy(np.array(mrc.data[index], dtype=np.float32))


def torch_baseline_rate(dataset, batches: int, batch_size: int = 256) -> float:
    """Images per second of torch's DataLoader (2 worker processes, shuffled) over `dataset`.

    It counts `batches` batches after the first, so the start of the workers
    is not what is measured. They are spawned, not forked: a fork of a process
    with threads (vitrio's pools, a test runner's) may hold a lock that no
    thread of the child releases, and wait for it forever.
    """
    import torch

    loader = torch.utils.data.DataLoader(
        dataset, batch_size=batch_size, shuffle=True, num_workers=2, multiprocessing_context="spawn"
    )
    iterator = iter(loader)
    next(iterator)
    start = time.perf_counter()
    count = sum(len(batch) for _, batch in zip(range(batches), iterator))
    elapsed = time.perf_counter() - start
    del iterator
    return count / elapsed


os.environ.setdefault("OMP_NUM_THREADS", "1")
