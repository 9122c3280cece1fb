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

The STAR files may be at URLs (`s3://`, `https://`, reached with
`storage_options` as fsspec takes them): the micrographs are then those
beside them, read by byte ranges wherever the stacks are cropped (a task
carries the options); the stacks are written locally.

For instance::

    from vitrio.extract import extract_particles

    done = extract_particles("micrographs.star", "coordinates.star", 256, "Extract/particles.star")
    print(f"{len(done.particles)} particles into {len(done.stacks)} stacks")
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .._arrays import as_casting
from .._functions import reader_provider
from .._storage import Storage
from ..data import Compose, particle_optics, read_star, star_table, write_star
from ..data._star import MAX_STAR_BYTES
from ._cropping import Boxes, Cropping, crop, crop_on
from ._picks import header_pixel_size, match_picks, stack_names, stack_pixel_sizes, star_path

if TYPE_CHECKING:
    import distributed
    import pandas as pd

__all__ = ["Extraction", "extract_particles"]

COORDINATES = ("rlnMicrographName", "rlnCoordinateX", "rlnCoordinateY")


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


def _check_output(path: Path, force: bool) -> None:
    """Refuse a directory at `path`, and anything at all there unless `force`."""
    if path.is_dir():
        raise IsADirectoryError(f"{path}: is a directory; name the file to write")
    if os.path.lexists(path) and not force:
        raise FileExistsError(f"{path}: exists already")


def _read_star(path: str | Path, storage: Storage) -> dict[str, pd.DataFrame]:
    """The blocks of the STAR file at `path`, a path or a URL."""
    if not storage.is_remote(str(path)):
        return read_star(path)
    with storage.local_copy(str(path), MAX_STAR_BYTES) as local:
        return read_star(local)


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
    prepare: Compose | None = None,
    storage_options: Mapping[str, Any] | Storage | None = None,
) -> Extraction:
    """Crop the particles of `coordinates` out of the micrographs of `micrographs` into MRC stacks.

    Args:
        micrographs: A STAR file listing rlnMicrographName (and, as RELION
            writes it, data_optics with rlnMicrographPixelSize, and the CTF of
            each micrograph, which the particles inherit), relative paths
            found as `root` says; or its URL, the micrographs then beside it.
        coordinates: A STAR file listing rlnMicrographName, rlnCoordinateX
            (the column) and rlnCoordinateY (the row) of each particle; its
            other columns are carried over. Or its URL.
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
            Defaults to the one the first micrograph's header gives; where it
            gives none, or another micrograph's header gives another, the
            extraction stops before anything is written.
        data_type: The type of the stacks.
        threads: How many threads read and write: here, or in each task on a
            cluster. Defaults to the machine's cores here, `cluster_threads` of the configuration there.
        force: Whether to replace outputs that exist.
        progress: Called with the number of particles written, after each
            batch (each stack, on a cluster).
        client: A `distributed.Client` whose cluster crops the stacks, a task
            per micrograph; None to crop them here. The stacks are the same.
        casting: None to refuse a `data_type` that cannot hold every value of the
            micrographs' type; "unsafe" to convert as numpy's `casting="unsafe"` does
            (as `vitrio.read`; the published vitrio's conversion).
        prepare: Transforms of the particles (`vitrio.data.Compose`), run on
            each batch of boxes read as float32, before the conversion to
            `data_type`, a floating type. After a `FourierCrop` the stacks,
            rlnImageSize and rlnImagePixelSize are those of the cropped images.
        storage_options: What fsspec takes to reach STAR files and micrographs
            at URLs (`{"anon": True}`, credentials), as `vitrio.read` takes it (or a
            `vitrio.Storage`); a task on a cluster receives it with its storage.

    Returns:
        What was written.

    Raises:
        ValueError: If a STAR file is unreadable, lacks columns or lists no
            particle, names a micrograph the other does not list, a box does
            not fit a micrograph, a particle lies outside its micrograph, or
            the pixel size is nowhere to be found, or `prepare` is given for a
            `data_type` that is not floating.
        FileExistsError: If an output exists and `force` is false.
        IsADirectoryError: If an output is a directory.
        NotADirectoryError: If the folder of an output is a file.
        FileNotFoundError, FormatError: If a STAR file or a micrograph is
            missing, or a micrograph is malformed.
    """
    storage = Storage.of(storage_options)
    micrographs, coordinates = (
        p if storage.is_remote(p) else Path(p) for p in map(os.fspath, (micrographs, coordinates))
    )
    output, root = Path(output), None if root is None else Path(root)
    blocks = _read_star(micrographs, storage)
    mics = star_table(micrographs, blocks, ["rlnMicrographName"], prefer="micrographs")
    picks = star_table(coordinates, _read_star(coordinates, storage), COORDINATES, prefer="particles")
    if picks.empty:
        raise ValueError(f"{coordinates}: lists no particles")
    cluster_threads = storage.configuration.cluster_threads
    workers = threads or ((os.cpu_count() or 1) if client is None else cluster_threads)
    readers = reader_provider(max(4, 2 * workers), storage_options=storage)  # opened once
    found = match_picks(micrographs, mics, coordinates, picks, root, box, readers, storage)
    stack_dir = output.parent if stack_dir is None else Path(stack_dir)
    stacks = [stack_dir / name for name in stack_names(found.names)]
    for folder in (output.parent, stack_dir):
        if folder.exists() and not folder.is_dir():
            raise NotADirectoryError(f"{folder}: is not a folder to write in")
    for path in (output, *stacks):
        _check_output(path, force)
    if blocks.get("optics") is None and pixel_size is None:
        pixel_size = header_pixel_size(found, micrographs)
    if pixel_size is not None and not (math.isfinite(pixel_size) and pixel_size > 0):
        raise ValueError(f"a pixel size is a positive number of Å, not {pixel_size}")
    optics = particle_optics(micrographs, mics, blocks.get("optics"), box, pixel_size)
    if prepare is not None:
        if np.dtype(data_type).kind != "f":
            raise ValueError(f"prepared particles are stored in a floating type, not {np.dtype(data_type)}")
        size = prepare.apply(np.zeros((1, box, box), np.float32)).shape[-1]
        optics["rlnImagePixelSize"] = optics["rlnImagePixelSize"] * box / size
        optics["rlnImageSize"] = size

    table = picks.copy()
    for column in mics.columns:
        if column not in table.columns:
            table[column] = mics[column].to_numpy()[found.rows]
    if "rlnOpticsGroup" not in table.columns:
        table["rlnOpticsGroup"] = 1
    names = [star_path(stack, Path() if root is None else root) for stack in stacks]
    indices, images = found.in_stack.tolist(), found.images.tolist()
    table["rlnImageName"] = [f"{k + 1:06d}@{names[i]}" for k, i in zip(indices, images)]
    first = ["rlnImageName", *COORDINATES, "rlnOpticsGroup"]
    table = table[first + [c for c in table.columns if c not in first]]

    # the missing folders of the outputs and those above them, the highest first: removed if it fails
    wanted = (output.parent, stack_dir)
    missing = {p for folder in wanted for p in (folder, *folder.parents) if not p.exists()}
    created = sorted(missing, key=lambda folder: len(folder.absolute().parts))
    finished: list[Path] = []
    stack_folder = None  # the stacks' folder as it was when they were written, which alone loses them
    try:
        for folder in created:
            folder.mkdir(parents=True, exist_ok=True)
        stack_folder = os.open(stack_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        start = time.perf_counter()
        dtype = np.dtype(data_type)
        casting = as_casting(casting)
        report = progress or (lambda _: None)
        sizes = stack_pixel_sizes(found, table, optics)
        boxes = Boxes(box, dtype, workers, casting, prepare, storage)
        cropping = Cropping(found, stacks, boxes, finished, report, sizes)
        if client is None:
            crop(cropping, readers)
        else:
            crop_on(client, cropping)
        seconds = time.perf_counter() - start
        write_star({"optics": optics, "particles": table}, output)
    except BaseException:
        for path in finished if stack_folder is not None else ():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path.name, dir_fd=stack_folder)
        for folder in reversed(created):
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise
    finally:
        if stack_folder is not None:
            os.close(stack_folder)
    return Extraction(table, optics, stacks, seconds)
