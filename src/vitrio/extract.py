"""Particles picked on micrographs, cropped into MRC stacks, with the STAR file of them, as RELION has them.

`extract_particles` sorts the picks by micrograph and crops them in batches
that may span several micrographs (`read_patches_indexed_async`), a few
batches under way at once, each written into the stacks it belongs to
(`write_batch_async`) while the next ones are read. A stack is finished as
soon as its last particle is written, so that only the stacks being written
are open.

Each file, stacks and STAR file alike, is written beside its path under a
private, unguessable name and moved into place when complete (by vitrio's
writers and by `vitrio.data.write_star`): a link planted where a file is
written cannot redirect it, and a failure or an interruption removes what
was written, stacks finished already included.

Given a `distributed.Client`, the stacks are cropped on its cluster
instead, one task per micrograph (`vitrio.dask.run_jobs`): a task reads
its micrograph and writes its stack as above, so that running it twice
leaves the same stack, and a task whose worker is lost is run again; what a
killed worker left beside a stack is removed at the end. The STAR file is
written here once every stack is. The micrographs and the stack folder
must be where every worker sees them at the same paths (a shared filesystem).

For instance::

    from vitrio.extract import extract_particles

    done = extract_particles("micrographs.star", "coordinates.star", 256, "Extract/particles.star")
    print(f"{len(done.particles)} particles into {len(done.stacks)} stacks")
"""

from __future__ import annotations

import contextlib
import os
import time
import warnings
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ._arrays import as_casting
from ._concurrency import Completion, ThreadPoolExecutor
from ._functions import loader, query_descriptor, saver, writer_provider
from ._loading import read_patches_indexed_async
from ._saving import write_batch_async
from ._types import ImageDescriptor, ImageLocation
from .dask import remove_leftovers, run_jobs
from .data import PathResolver, particle_optics, read_star, star_table, write_star
from .formats import FormatWarning, open_reader

if TYPE_CHECKING:
    import distributed
    import pandas as pd

__all__ = ["Extraction", "extract_particles"]

COORDINATES = ("rlnMicrographName", "rlnCoordinateX", "rlnCoordinateY")
# How many bytes of particles a batch holds, and how many batches are read (and written) at once.
BATCH_BYTES = 16 << 20
IN_FLIGHT = 2
# How many threads a task on a cluster reads and writes with, unless told.
CLUSTER_THREADS = 2


@dataclass
class Extraction:
    """What `extract_particles` did.

    Attributes:
        particles: The table written as data_particles.
        optics: The table written as data_optics.
        stacks: The stacks written, one per micrograph with picks.
        seconds: How long cropping and writing took.
    """

    particles: pd.DataFrame
    optics: pd.DataFrame
    stacks: list[Path]
    seconds: float


def _stack_names(micrographs: Sequence[str]) -> list[str]:
    """A stack name for each micrograph: its stem, numbered where stems repeat."""
    taken: set[str] = set()
    names = []
    for micrograph in micrographs:
        stem = Path(micrograph).stem
        name, number = f"{stem}.mrcs", 1
        while name in taken:
            number += 1
            name = f"{stem}_{number}.mrcs"
        taken.add(name)
        names.append(name)
    return names


def _star_path(path: Path, root: Path) -> str:
    """How a STAR file names `path`: relative to `root` when inside it, absolute otherwise."""
    relative = os.path.relpath(path, root)
    return os.path.abspath(path) if relative.startswith("..") else relative


def _column(path: Path, table: pd.DataFrame, name: str) -> np.ndarray:
    """The numbers of column `name` of the table read from `path`, checked to be finite."""
    try:
        values = table[name].to_numpy(dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{path}: {name} holds values that are not numbers ({error})") from error
    if not np.isfinite(values).all():
        raise ValueError(
            f"{path}: {name} of row {int(np.flatnonzero(~np.isfinite(values))[0]) + 1} is not a number"
        )
    return values


def _header_pixel_size(path: Path) -> float | None:
    """The pixel size in Å along x that the header of the micrograph at `path` gives, or None."""
    with warnings.catch_warnings():  # reading its descriptor warned already
        warnings.simplefilter("ignore", FormatWarning)
        with open_reader(str(path)) as reader:
            voxel_size = reader.voxel_size
    return None if voxel_size is None else voxel_size[-1]


@dataclass
class _Picks:
    """The picks matched with the micrographs they were picked on.

    Attributes:
        names: The micrographs picked on, as the STAR files name them, in the order of the micrographs STAR.
        paths: Where each of them is.
        rows: The row of each pick's micrograph in the micrographs table.
        images: The number of each pick's micrograph in `names`.
        centres: The centre of each pick, (y, x), rounded.
        order: The picks sorted by micrograph, in the order of the coordinates within each.
        in_stack: The index of each pick in the stack of its micrograph, in the order of the coordinates.
    """

    names: np.ndarray
    paths: list[Path]
    rows: np.ndarray
    images: np.ndarray
    centres: np.ndarray
    order: np.ndarray
    in_stack: np.ndarray


def _match(
    micrographs: Path,
    mics: pd.DataFrame,
    coordinates: Path,
    picks: pd.DataFrame,
    root: Path | None,
    box: int,
) -> _Picks:
    """Match each pick with its micrograph, and check that every box has its centre on its micrograph.

    Raises:
        ValueError: If a pick names a micrograph `micrographs` does not list, a micrograph is not one image
            or is smaller than the box, or a centre lies outside its micrograph.
    """
    number = {name: i for i, name in enumerate(mics["rlnMicrographName"].astype(str))}
    rows = np.array([number.get(name, -1) for name in picks["rlnMicrographName"].astype(str)], np.int64)
    if (rows < 0).any():
        row = int(np.flatnonzero(rows < 0)[0])
        name = picks["rlnMicrographName"].iloc[row]
        raise ValueError(f"{coordinates}: micrograph {name} of particle {row + 1} is not in {micrographs}")
    used, images = np.unique(rows, return_inverse=True)
    names = mics["rlnMicrographName"].astype(str).to_numpy()[used]
    resolve = PathResolver(micrographs, root)
    paths = [Path(resolve(name)) for name in names]
    extents = np.empty((len(paths), 2), dtype=np.int64)
    for i, path in enumerate(paths):
        descriptor = query_descriptor(path)
        if descriptor.is_stack or descriptor.core_rank != 2:
            kind = "a stack" if descriptor.is_stack else "a volume"
            shape = " x ".join(map(str, descriptor.extents))
            raise ValueError(f"{path}: holds {kind} of {shape}, not one micrograph")
        if box > min(descriptor.extents):
            height, width = descriptor.extents
            raise ValueError(
                f"{path}: a box of {box} pixels is larger than the micrograph, {height} x {width}"
            )
        extents[i] = descriptor.extents
    y, x = _column(coordinates, picks, "rlnCoordinateY"), _column(coordinates, picks, "rlnCoordinateX")
    centres = np.rint(np.column_stack([y, x])).astype(np.int64)
    outside = ((centres < 0) | (centres >= extents[images])).any(axis=1)
    if outside.any():
        row = int(np.flatnonzero(outside)[0])
        height, width = extents[images[row]]
        raise ValueError(
            f"{coordinates}: particle {row + 1} at x {centres[row, 1]}, y {centres[row, 0]} lies outside "
            f"micrograph {names[images[row]]} of {height} x {width}"
        )
    order = np.argsort(images, kind="stable")
    counts = np.bincount(images)
    in_stack = np.empty(len(order), dtype=np.int64)
    in_stack[order] = np.arange(len(order)) - (np.cumsum(counts) - counts)[images[order]]
    return _Picks(names, paths, rows, images, centres, order, in_stack)


def _stack_pixel_sizes(found: _Picks, table: pd.DataFrame, optics: pd.DataFrame) -> list[float | None]:
    """The pixel size in Å of each micrograph's stack: its optics group's, None where that is unknown."""
    by_group = dict(zip(optics["rlnOpticsGroup"].tolist(), optics["rlnImagePixelSize"].tolist()))
    groups = table["rlnOpticsGroup"].to_numpy()
    first_pick = np.unique(found.images, return_index=True)[1]
    sizes: list[float | None] = [None] * len(found.paths)
    for image, pick in zip(np.unique(found.images).tolist(), first_pick.tolist()):
        size = by_group.get(groups[pick])
        sizes[image] = float(size) if size is not None and size > 0 and size == size else None
    return sizes


def _crop(
    found: _Picks,
    stacks: list[Path],
    box: int,
    dtype: np.dtype,
    threads: int,
    finished: list[Path],
    progress: Callable[[int], object],
    pixel_sizes: Sequence[float | None],
    casting: str | None = None,
) -> None:
    """Crop the particles into their stacks, a few batches under way; each stack done joins `finished`.

    Each stack's header says its pixel size, `pixel_sizes[i]` Å (None for none); `casting` is
    as `vitrio.read` takes it.

    A failure or an interruption discards the stacks not finished; those
    finished are for the caller to remove.
    """
    order = found.order
    images, centres = found.images[order], found.centres[order]
    targets = [ImageLocation(stacks[i], k) for i, k in zip(images.tolist(), found.in_stack[order].tolist())]
    counts = np.bincount(images, minlength=len(stacks))
    ends = np.cumsum(counts)
    per_batch = max(1, BATCH_BYTES // (box * box * dtype.itemsize))
    executor = ThreadPoolExecutor(threads)
    reading = loader(executor=executor, cache=max(4, 2 * threads))
    sources = [(str(path), -1) for path in found.paths]
    reads: deque[tuple[int, int, np.ndarray, Completion]] = deque()
    writes: deque[tuple[int, int, Completion]] = deque()
    with writer_provider() as writers:
        for stack, count, size in zip(stacks, counts.tolist(), pixel_sizes):
            writers.declare(stack, ImageDescriptor((count, box, box), 2, dtype), voxel_size=size)
        writing = saver(writers, executor=executor)

        # A batch leaves its queue once its work is done, so that the `finally` below waits for all that runs.
        def write_oldest_read() -> None:
            first, last, values, completion = reads[0]
            completion.get()
            reads.popleft()
            writes.append((first, last, write_batch_async(writing, values, targets[first:last])))

        def finish_oldest_write() -> None:
            first, last, completion = writes[0]
            completion.get()
            writes.popleft()
            while len(finished) < len(stacks) and ends[len(finished)] <= last:
                writers.close(stacks[len(finished)])
                finished.append(stacks[len(finished)])
            progress(last - first)

        try:
            for first in range(0, len(order), per_batch):
                last = min(first + per_batch, len(order))
                values = np.empty((last - first, box, box), dtype=dtype)
                ids, where = images[first:last], centres[first:last]
                completion = read_patches_indexed_async(
                    reading, values, sources, ids, where, fill=0, casting=casting
                )
                reads.append((first, last, values, completion))
                if len(reads) > IN_FLIGHT:
                    write_oldest_read()
                if len(writes) > IN_FLIGHT:
                    finish_oldest_write()
            while reads:
                write_oldest_read()
            while writes:
                finish_oldest_write()
        except BaseException:
            for stack in stacks[len(finished) :]:
                writers.discard(stack)  # the writes under way stop at their next image
            raise
        finally:
            for *_, completion in (*reads, *writes):
                completion.wait()


@dataclass(frozen=True)
class _StackJob:
    """What a task on a cluster crops: the particles of one micrograph into its stack, by path.

    Attributes:
        micrograph: The micrograph's path.
        centres: The centre of each particle, (y, x), in the order of the stack.
        stack: The stack to write.
        box: The side of a particle's box.
        data_type: The type of the stack.
        threads: How many threads read and write.
        pixel_size: The pixel size its header says, in Å.
        casting: As `vitrio.read` takes it.
    """

    micrograph: str
    centres: np.ndarray
    stack: str
    box: int
    data_type: str
    threads: int
    pixel_size: float | None
    casting: str | None = None


def _crop_stack(job: _StackJob) -> int:
    """Crop the particles of `job` into its stack, and how many; what runs twice leaves the same stack."""
    count = len(job.centres)
    zeros, order = np.zeros(count, np.int64), np.arange(count)
    found = _Picks(
        np.array([job.micrograph]), [Path(job.micrograph)], zeros, zeros, job.centres, order, order
    )
    stack, data_type = [Path(job.stack)], np.dtype(job.data_type)
    _crop(found, stack, job.box, data_type, job.threads, [], lambda _: None, [job.pixel_size], job.casting)
    return count


def _crop_on(
    client: distributed.Client,
    found: _Picks,
    stacks: list[Path],
    box: int,
    dtype: np.dtype,
    threads: int,
    finished: list[Path],
    progress: Callable[[int], object],
    pixel_sizes: Sequence[float | None],
    casting: str | None = None,
) -> None:
    """Crop the particles into their stacks on the cluster of `client`, one task per micrograph.

    A failure cancels the tasks left and counts every stack as finished, for the caller to remove.
    """
    centres = found.centres[found.order]
    ends = np.cumsum(np.bincount(found.images, minlength=len(stacks))).tolist()
    jobs = [
        _StackJob(
            os.path.abspath(path),
            centres[end - count : end],
            os.path.abspath(stack),
            box,
            dtype.str,
            threads,
            size,
            casting,
        )
        for path, stack, end, count, size in zip(
            found.paths, stacks, ends, np.diff([0, *ends]).tolist(), pixel_sizes
        )
    ]

    def done(n: int, count: Any) -> None:
        finished.append(stacks[n])
        progress(count)

    try:
        run_jobs(client, _crop_stack, jobs, "vitrio-extract", done)
    except BaseException:
        finished[:] = stacks
        raise
    finally:
        remove_leftovers(stacks)


def _check_output(path: Path, force: bool) -> None:
    """Refuse a directory at `path`, and anything at all there unless `force`."""
    if path.is_dir():
        raise IsADirectoryError(f"{path}: is a directory; name the file to write")
    if os.path.lexists(path) and not force:
        raise FileExistsError(f"{path}: exists already")


def extract_particles(
    micrographs: str | os.PathLike[str],
    coordinates: str | os.PathLike[str],
    box: int,
    output: str | os.PathLike[str],
    *,
    stack_dir: str | os.PathLike[str] | None = None,
    root: str | os.PathLike[str] | None = None,
    pixel_size: float | None = None,
    data_type: np.dtype | str = "float32",
    threads: int | None = None,
    force: bool = False,
    progress: Callable[[int], object] | None = None,
    client: distributed.Client | None = None,
    casting: str | None = None,
) -> Extraction:
    """Crop the particles of `coordinates` out of the micrographs of `micrographs` into MRC stacks.

    Args:
        micrographs: A STAR file listing rlnMicrographName (and, as RELION
            writes it, data_optics with rlnMicrographPixelSize, and the CTF of
            each micrograph, which the particles inherit), relative paths
            found as `root` says.
        coordinates: A STAR file listing rlnMicrographName, rlnCoordinateX
            (the column) and rlnCoordinateY (the row) of each particle; its
            other columns are carried over.
        box: The side of a particle's box; its centre lands at `box // 2`.
            What lies beyond the micrograph is zero.
        output: The particles STAR file to write: data_optics and data_particles,
            the particles in the order of `coordinates`, each rlnImageName
            relative to `root` when its stack is inside it.
        stack_dir: Where the stacks go, one per micrograph with picks, named
            after it. Defaults to the directory of `output`. Folders are made
            as needed.
        root: The project or data directory the micrographs' relative paths
            are under (docs/paths-and-types.md), and what the written
            rlnImageName are relative to. Defaults to finding the micrographs
            beside the micrographs STAR file or in the two folders above it,
            and to names relative to the working directory.
        pixel_size: The pixel size in Å, when `micrographs` has no data_optics.
            Defaults to the one the first micrograph's header gives.
        data_type: The type of the stacks.
        threads: How many threads read and write: here, or in each task on a
            cluster. Defaults to the machine's cores here, `CLUSTER_THREADS` there.
        force: Whether to replace outputs that exist.
        progress: Called with the number of particles written, after each
            batch (each stack, on a cluster).
        client: A `distributed.Client` whose cluster crops the stacks, a task
            per micrograph; None to crop them here. The stacks are the same.
        casting: None to refuse a `data_type` that cannot hold every value of the
            micrographs' type; "unsafe" to convert as numpy's `casting="unsafe"` does
            (as `vitrio.read`; the published vitrio's conversion).

    Returns:
        What was written.

    Raises:
        ValueError: If a STAR file is unreadable, lacks columns or lists no
            particle, names a micrograph the other does not list, a box does
            not fit a micrograph, a particle lies outside its micrograph, or
            the pixel size is nowhere to be found.
        FileExistsError: If an output exists and `force` is false.
        IsADirectoryError: If an output is a directory.
        NotADirectoryError: If the folder of an output is a file.
        FileNotFoundError, FormatError: If a STAR file or a micrograph is
            missing, or a micrograph is malformed.
    """
    micrographs, coordinates, output = Path(micrographs), Path(coordinates), Path(output)
    root = None if root is None else Path(root)
    blocks = read_star(micrographs)
    mics = star_table(micrographs, blocks, ["rlnMicrographName"], prefer="micrographs")
    picks = star_table(coordinates, read_star(coordinates), COORDINATES, prefer="particles")
    if picks.empty:
        raise ValueError(f"{coordinates}: lists no particles")
    found = _match(micrographs, mics, coordinates, picks, root, box)
    stack_dir = output.parent if stack_dir is None else Path(stack_dir)
    stacks = [stack_dir / name for name in _stack_names(found.names)]
    for folder in (output.parent, stack_dir):
        if folder.exists() and not folder.is_dir():
            raise NotADirectoryError(f"{folder}: is not a folder to write in")
    for path in (output, *stacks):
        _check_output(path, force)
    if blocks.get("optics") is None and pixel_size is None:
        pixel_size = _header_pixel_size(found.paths[0])
    optics = particle_optics(micrographs, mics, blocks.get("optics"), box, pixel_size)

    table = picks.copy()
    for column in mics.columns:
        if column not in table.columns:
            table[column] = mics[column].to_numpy()[found.rows]
    if "rlnOpticsGroup" not in table.columns:
        table["rlnOpticsGroup"] = 1
    names = [_star_path(stack, Path() if root is None else root) for stack in stacks]
    indices, images = found.in_stack.tolist(), found.images.tolist()
    table["rlnImageName"] = [f"{k + 1:06d}@{names[i]}" for k, i in zip(indices, images)]
    first = ["rlnImageName", *COORDINATES, "rlnOpticsGroup"]
    table = table[first + [c for c in table.columns if c not in first]]

    created = [folder for folder in dict.fromkeys((output.parent, stack_dir)) if not folder.exists()]
    finished: list[Path] = []
    try:
        for folder in created:
            folder.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        dtype = np.dtype(data_type)
        casting = as_casting(casting)
        report = progress or (lambda _: None)
        sizes = _stack_pixel_sizes(found, table, optics)
        if client is None:
            workers = threads or os.cpu_count() or 1
            _crop(found, stacks, box, dtype, workers, finished, report, sizes, casting)
        else:
            workers = threads or CLUSTER_THREADS
            _crop_on(client, found, stacks, box, dtype, workers, finished, report, sizes, casting)
        seconds = time.perf_counter() - start
        write_star({"optics": optics, "particles": table}, output)
    except BaseException:
        for path in finished:
            path.unlink(missing_ok=True)
        for folder in reversed(created):
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise
    return Extraction(table, optics, stacks, seconds)
