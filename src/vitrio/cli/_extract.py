"""`vitrio extract`: the particles picked on micrographs, cropped into MRC stacks, and their STAR file.

The picks are sorted by micrograph and cropped in batches that may span
several micrographs (`read_patches_indexed_async`), a few batches under way
at once, each written into the stacks it belongs to (`write_batch_async`)
while the next ones are read. A stack is finished as soon as its last
particle is written, so that only the stacks being written are open.

Stacks and the STAR file are written beside their paths and moved into
place when complete; a failure or an interruption removes what was written,
stacks finished already included.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import starfile

import vitrio as vio
from vitrio._loading import read_patches_indexed_async

from ._common import CliError, check_output, describe_briefly, progress
from ._info import describe

__all__ = ["Extraction", "read_star", "star_table", "extract_particles", "run"]

COORDINATES = ("rlnMicrographName", "rlnCoordinateX", "rlnCoordinateY")
# How many bytes of particles a batch holds, and how many batches are read (and written) at once.
BATCH_BYTES = 16 << 20
IN_FLIGHT = 2


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


def read_star(path: Path) -> dict[str, pd.DataFrame]:
    """The data blocks of a STAR file by name, each as a table (a block of single values as one row).

    Raises:
        CliError: If there is no file at `path`, or it cannot be parsed.
    """
    if not path.is_file():
        raise CliError(f"{path}: no such file" if not path.exists() else f"{path}: is not a file")
    try:
        blocks = starfile.read(path, always_dict=True)
    except ValueError as error:
        raise CliError(f"{path}: not a readable STAR file: {error}") from error
    return {
        name: block if isinstance(block, pd.DataFrame) else pd.DataFrame([block])
        for name, block in blocks.items()
    }


def star_table(
    path: Path, blocks: dict[str, pd.DataFrame], columns: Sequence[str], prefer: str = ""
) -> pd.DataFrame:
    """The block of a STAR file that has `columns`: the one named `prefer` if it does, or the first that does.

    Raises:
        CliError: If no block has them, naming the columns the preferred (or first) block lacks.
    """
    if prefer in blocks and set(columns) <= set(blocks[prefer].columns):
        return blocks[prefer].reset_index(drop=True)
    for block in blocks.values():
        if set(columns) <= set(block.columns):
            return block.reset_index(drop=True)
    if not blocks:
        raise CliError(f"{path}: holds no data block (is it a STAR file?)")
    name = prefer if prefer in blocks else next(iter(blocks))
    missing = ", ".join(c for c in columns if c not in blocks[name].columns)
    raise CliError(f"{path}: no column {missing} in data_{name}")


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
    try:
        values = table[name].to_numpy(dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise CliError(f"{path}: {name} holds values that are not numbers ({error})") from error
    if not np.isfinite(values).all():
        raise CliError(
            f"{path}: {name} of row {int(np.flatnonzero(~np.isfinite(values))[0]) + 1} is not a number"
        )
    return values


def _optics(
    micrographs: Path,
    blocks: dict[str, pd.DataFrame],
    table: pd.DataFrame,
    first: Path,
    pixel_size: float | None,
) -> pd.DataFrame:
    """The optics groups of the particles: those of the micrographs, with the pixel size and box to come."""
    optics = blocks.get("optics")
    if optics is not None and "rlnOpticsGroup" in optics.columns:
        size = next((c for c in ("rlnMicrographPixelSize", "rlnImagePixelSize") if c in optics.columns), None)
        if size is None:
            raise CliError(f"{micrographs}: no column rlnMicrographPixelSize in data_optics")
        result = optics.drop(columns=["rlnMicrographPixelSize"], errors="ignore").reset_index(drop=True)
        result["rlnImagePixelSize"] = optics[size].to_numpy(dtype=np.float64)
        return result
    if pixel_size is None:
        sizes = describe(first)["voxel_size"]
        if sizes is None:
            raise CliError(f"{micrographs}: no data_optics block gives the pixel size; give --pixel-size")
        pixel_size = sizes[-1]
    groups = np.unique(table["rlnOpticsGroup"].to_numpy(dtype=np.int64)) if "rlnOpticsGroup" in table else [1]
    return pd.DataFrame(
        {
            "rlnOpticsGroup": groups,
            "rlnOpticsGroupName": [f"opticsGroup{g}" for g in groups],
            "rlnImagePixelSize": float(pixel_size),
        }
    )


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
    micrographs: Path, mics: pd.DataFrame, coordinates: Path, picks: pd.DataFrame, root: Path, box: int
) -> _Picks:
    """Match each pick with its micrograph, and check that every box has its centre on its micrograph.

    Raises:
        CliError: If a pick names a micrograph `micrographs` does not list, a micrograph is not one image
            or is smaller than the box, or a centre lies outside its micrograph.
    """
    number = {name: i for i, name in enumerate(mics["rlnMicrographName"].astype(str))}
    rows = np.array([number.get(name, -1) for name in picks["rlnMicrographName"].astype(str)], np.int64)
    if (rows < 0).any():
        row = int(np.flatnonzero(rows < 0)[0])
        name = picks["rlnMicrographName"].iloc[row]
        raise CliError(f"{coordinates}: micrograph {name} of particle {row + 1} is not in {micrographs}")
    used, images = np.unique(rows, return_inverse=True)
    names = mics["rlnMicrographName"].astype(str).to_numpy()[used]
    paths = [root / name for name in names]
    extents = np.empty((len(paths), 2), dtype=np.int64)
    for i, path in enumerate(paths):
        descriptor = vio.query_descriptor(path)
        if descriptor.is_stack or descriptor.core_rank != 2:
            raise CliError(f"{path}: holds {describe_briefly(descriptor)}, not one micrograph")
        if box > min(descriptor.extents):
            height, width = descriptor.extents
            raise CliError(f"{path}: a box of {box} pixels is larger than the micrograph, {height} x {width}")
        extents[i] = descriptor.extents
    y, x = _column(coordinates, picks, "rlnCoordinateY"), _column(coordinates, picks, "rlnCoordinateX")
    centres = np.rint(np.column_stack([y, x])).astype(np.int64)
    outside = ((centres < 0) | (centres >= extents[images])).any(axis=1)
    if outside.any():
        row = int(np.flatnonzero(outside)[0])
        height, width = extents[images[row]]
        raise CliError(
            f"{coordinates}: particle {row + 1} at x {centres[row, 1]}, y {centres[row, 0]} lies outside "
            f"micrograph {names[images[row]]} of {height} x {width}"
        )
    order = np.argsort(images, kind="stable")
    counts = np.bincount(images)
    in_stack = np.empty(len(order), dtype=np.int64)
    in_stack[order] = np.arange(len(order)) - (np.cumsum(counts) - counts)[images[order]]
    return _Picks(names, paths, rows, images, centres, order, in_stack)


def _crop(
    found: _Picks,
    stacks: list[Path],
    box: int,
    dtype: np.dtype,
    threads: int,
    finished: list[Path],
) -> None:
    """Crop the particles into their stacks, a few batches under way; each stack done joins `finished`.

    A failure or an interruption discards the stacks not finished; those
    finished are for the caller to remove.
    """
    order = found.order
    images, centres = found.images[order], found.centres[order]
    targets = [
        vio.ImageLocation(stacks[i], k) for i, k in zip(images.tolist(), found.in_stack[order].tolist())
    ]
    counts = np.bincount(images, minlength=len(stacks))
    ends = np.cumsum(counts)
    per_batch = max(1, BATCH_BYTES // (box * box * dtype.itemsize))
    executor = vio.ThreadPoolExecutor(threads)
    loader = vio.loader(executor=executor, cache=max(4, 2 * threads))
    sources = [(str(path), -1) for path in found.paths]
    reads: deque[tuple[int, int, np.ndarray, vio.Completion]] = deque()
    writes: deque[tuple[int, int, vio.Completion]] = deque()
    with vio.writer_provider() as writers, progress(len(order), "extracting", "particle") as bar:
        for stack, count in zip(stacks, counts.tolist()):
            writers.declare(stack, vio.ImageDescriptor((count, box, box), 2, dtype))
        saver = vio.saver(writers, executor=executor)

        # A batch leaves its queue once its work is done, so that the `finally` below waits for all that runs.
        def write_oldest_read() -> None:
            first, last, values, completion = reads[0]
            completion.get()
            reads.popleft()
            writes.append((first, last, vio.write_batch_async(saver, values, targets[first:last])))

        def finish_oldest_write() -> None:
            first, last, completion = writes[0]
            completion.get()
            writes.popleft()
            while len(finished) < len(stacks) and ends[len(finished)] <= last:
                writers.close(stacks[len(finished)])
                finished.append(stacks[len(finished)])
            bar.update(last - first)

        try:
            for first in range(0, len(order), per_batch):
                last = min(first + per_batch, len(order))
                values = np.empty((last - first, box, box), dtype=dtype)
                ids, where = images[first:last], centres[first:last]
                completion = read_patches_indexed_async(loader, values, sources, ids, where, fill=0)
                reads.append((first, last, values, completion))
                if len(reads) > IN_FLIGHT:
                    write_oldest_read()
                if len(writes) > IN_FLIGHT:
                    finish_oldest_write()
            while reads:
                write_oldest_read()
            while writes:
                finish_oldest_write()
        finally:
            for *_, completion in (*reads, *writes):
                completion.wait()


def extract_particles(
    micrographs: Path,
    coordinates: Path,
    box: int,
    output: Path,
    *,
    stack_dir: Path | None = None,
    root: Path = Path(),
    pixel_size: float | None = None,
    data_type: np.dtype | str = "float32",
    threads: int | None = None,
    force: bool = False,
) -> Extraction:
    """Crop the particles of `coordinates` out of the micrographs of `micrographs` into MRC stacks.

    Args:
        micrographs: A STAR file listing rlnMicrographName (and, as RELION
            writes it, data_optics with rlnMicrographPixelSize, and the CTF of
            each micrograph, which the particles inherit), relative paths
            relative to `root`.
        coordinates: A STAR file listing rlnMicrographName, rlnCoordinateX
            (the column) and rlnCoordinateY (the row) of each particle; its
            other columns are carried over.
        box: The side of a particle's box; its centre lands at `box // 2`.
            What lies beyond the micrograph is zero.
        output: The particles STAR file to write: data_optics and data_particles.
        stack_dir: Where the stacks go, one per micrograph with picks, named
            after it. Defaults to the directory of `output`. Folders are made
            as needed.
        root: What relative paths of the STAR files are relative to.
        pixel_size: The pixel size in Å, when `micrographs` has no data_optics.
            Defaults to the one the first micrograph's header gives.
        data_type: The type of the stacks.
        threads: How many threads read and write. Defaults to the machine's cores.
        force: Whether to replace outputs that exist.

    Returns:
        What was written.

    Raises:
        CliError: If a STAR file lacks columns or lists no particle, names a
            micrograph the other does not list, a box does not fit a
            micrograph, a particle lies outside its micrograph, or an output
            exists and `force` is false.
        FileNotFoundError, FormatError: If a micrograph is missing or malformed.
    """
    blocks = read_star(micrographs)
    mics = star_table(micrographs, blocks, ["rlnMicrographName"], prefer="micrographs")
    picks = star_table(coordinates, read_star(coordinates), COORDINATES, prefer="particles")
    if picks.empty:
        raise CliError(f"{coordinates}: lists no particles")
    found = _match(micrographs, mics, coordinates, picks, root, box)
    stack_dir = output.parent if stack_dir is None else stack_dir
    stacks = [stack_dir / name for name in _stack_names(found.names)]
    for path in (output, *stacks):
        check_output(path, force)
    optics = _optics(micrographs, blocks, mics, found.paths[0], pixel_size)
    optics["rlnImageSize"] = box
    optics["rlnImageDimensionality"] = 2

    table = picks.copy()
    for column in mics.columns:
        if column not in table.columns:
            table[column] = mics[column].to_numpy()[found.rows]
    if "rlnOpticsGroup" not in table.columns:
        table["rlnOpticsGroup"] = 1
    names = [_star_path(stack, root) for stack in stacks]
    indices, images = found.in_stack.tolist(), found.images.tolist()
    table["rlnImageName"] = [f"{k + 1:06d}@{names[i]}" for k, i in zip(indices, images)]
    first = ["rlnImageName", *COORDINATES, "rlnOpticsGroup"]
    table = table[first + [c for c in table.columns if c not in first]]

    partial = output.with_name(f".{output.name}.{os.getpid()}.partial")
    created = [folder for folder in dict.fromkeys((output.parent, stack_dir)) if not folder.exists()]
    finished: list[Path] = []
    try:
        for folder in created:
            folder.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        _crop(found, stacks, box, np.dtype(data_type), threads or os.cpu_count() or 1, finished)
        seconds = time.perf_counter() - start
        starfile.write({"optics": optics, "particles": table}, partial)
        os.replace(partial, output)
    except BaseException:
        for path in (partial, *finished):
            path.unlink(missing_ok=True)
        for folder in reversed(created):
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise
    return Extraction(table, optics, stacks, seconds)


def run(args: argparse.Namespace) -> None:
    """Extract the particles `args` name, and say how many, how fast, and where."""
    result = extract_particles(
        args.micrographs,
        args.coordinates,
        args.box_size,
        args.output,
        stack_dir=args.stack_dir,
        root=args.root,
        pixel_size=args.pixel_size,
        data_type=args.data_type,
        threads=args.threads,
        force=args.force,
    )
    count = len(result.particles)
    print(
        f"extracted {count} particles of {args.box_size} x {args.box_size} into {len(result.stacks)} stacks "
        f"in {result.stacks[0].parent} ({count / result.seconds:,.0f} particles/s); wrote {args.output}"
    )
