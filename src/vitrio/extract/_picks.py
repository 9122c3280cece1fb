"""The picks of `extract_particles` matched with their micrographs; what the stacks are named and sized."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .._concurrency import run_tasks, shared_pool
from .._functions import query_metadata
from .._providers import ImageReaderProvider
from .._storage import Storage
from ..data import PathResolver

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Picks", "header_pixel_size", "match_picks", "stack_names", "stack_pixel_sizes", "star_path"]


def stack_names(micrographs: Sequence[str]) -> list[str]:
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


def star_path(path: Path, root: Path) -> str:
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


def header_pixel_size(found: Picks, micrographs: str | Path) -> float:
    """The pixel size in Å along x that the header of the first micrograph gives, for a `micrographs`
    STAR file without data_optics.

    Raises:
        ValueError: If that header gives none, or another micrograph's gives another size.
    """
    first = found.pixel_sizes[0]
    if first is None:
        raise ValueError(
            f"{micrographs}: no data_optics block gives the pixel size, nor does the header of "
            f"{found.paths[0]}; pass --pixel-size (pixel_size=)"
        )
    for path, size in zip(found.paths, found.pixel_sizes):
        if size is not None and not math.isclose(size, first, rel_tol=1e-6):
            raise ValueError(
                f"{micrographs}: no data_optics block gives the pixel size, and the headers of the "
                f"micrographs differ: {first:g} Å in {found.paths[0]}, {size:g} Å in {path}; pass "
                "--pixel-size (pixel_size=)"
            )
    return first


@dataclass
class Picks:
    """The picks matched with the micrographs they were picked on.

    Attributes:
        names: The micrographs picked on, as the STAR files name them, in the order of the micrographs STAR.
        paths: Where each of them is: a path, or a URL.
        rows: The row of each pick's micrograph in the micrographs table.
        images: The number of each pick's micrograph in `names`.
        centres: The centre of each pick, (y, x), rounded.
        order: The picks sorted by micrograph, in the order of the coordinates within each.
        in_stack: The index of each pick in the stack of its micrograph, in the order of the coordinates.
    """

    names: np.ndarray
    paths: list[str]
    rows: np.ndarray
    images: np.ndarray
    centres: np.ndarray
    order: np.ndarray
    in_stack: np.ndarray
    pixel_sizes: list[float | None] = field(default_factory=list)
    """The pixel size in Å along x that each micrograph's header gives (None where none)."""


def match_picks(
    micrographs: str | Path,
    mics: pd.DataFrame,
    coordinates: str | Path,
    picks: pd.DataFrame,
    root: Path | None,
    box: int,
    readers: ImageReaderProvider,
    storage: Storage,
) -> Picks:
    """Match each pick with its micrograph, and check that every box has its centre on its micrograph.

    The micrographs of a `micrographs` at a URL are beside it, reached through `storage`. Their
    headers are read through `readers`, many at once on the opening pool (those at URLs wait on the
    network).

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
    resolve = PathResolver(micrographs, root, storage)
    paths = [resolve(name) for name in names]
    extents = np.empty((len(paths), 2), dtype=np.int64)
    headers: list[Any] = [None] * len(paths)

    def ask(i: int) -> None:
        headers[i] = query_metadata(paths[i], readers=readers)

    pool = shared_pool("opening", storage.configuration.opening_threads)
    run_tasks(pool, [lambda i=i: ask(i) for i in range(len(paths))]).get()
    pixel_sizes = [None if header.voxel_size is None else header.voxel_size[-1] for header in headers]
    for i, (path, descriptor) in enumerate(zip(paths, (header.descriptor for header in headers))):
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
    return Picks(names, paths, rows, images, centres, order, in_stack, pixel_sizes)


def stack_pixel_sizes(found: Picks, table: pd.DataFrame, optics: pd.DataFrame) -> list[float | None]:
    """The pixel size in Å of each micrograph's stack: its optics group's, None where that is unknown."""
    by_group = dict(zip(optics["rlnOpticsGroup"].tolist(), optics["rlnImagePixelSize"].tolist()))
    groups = table["rlnOpticsGroup"].to_numpy()
    first_pick = np.unique(found.images, return_index=True)[1]
    sizes: list[float | None] = [None] * len(found.paths)
    for image, pick in zip(np.unique(found.images).tolist(), first_pick.tolist()):
        size = by_group.get(groups[pick])
        sizes[image] = float(size) if size is not None and size > 0 and size == size else None
    return sizes
