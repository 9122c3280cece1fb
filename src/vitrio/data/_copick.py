"""`copick_picks`: the picks of a copick project as labelled subvolumes of its tomograms.

The project is read through copick's own API (the `copick` extra): its
runs, voxel spacings, tomograms, pickable objects and picks, whatever
backend holds them (a local folder, a static root under an overlay, S3).
The conventions, from copick's data model (`copick.models.CopickPoint`,
and its converters of RELION, Dynamo and TOM coordinates in
`copick.util.formats`): a pick's location is in Å from the corner origin,
so the centre of voxel index i lies at i times the voxel spacing (as
OME-NGFF's scale without a translation has it, which copick writes); the
translation of a pick's transformation is a shift in Å added to its
location, so the particle is at location plus that translation. A
tomogram is an OME-Zarr store, its level 0 (the full resolution) at the
voxel spacing that holds it, which vitrio reads itself.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._fs import read_whole
from .._functions import query_metadata, reader_provider
from .._storage import is_url, local_path
from ._extras import missing
from ._picks import TomogramPicks, nearest_voxels

__all__ = ["copick_picks"]

# How far the voxel size of a tomogram's OME-Zarr metadata may be from the spacing asked, relatively:
# copick names a voxel spacing by its size rounded to the third decimal.
_VOXEL_SIZE_TOLERANCE = 1e-3

MAX_CONFIGURATION_BYTES = 16 << 20
"""The largest copick configuration read (a project's has a few kilobytes)."""
MAX_PICKS_BYTES = 256 << 20
"""The largest picks file read (a point takes about 300 bytes of JSON: some 800,000 points)."""


def copick_picks(
    project: Any,
    shape: int | Sequence[int],
    *,
    voxel_spacing: float,
    tomogram_type: str,
    objects: Sequence[str] | None = None,
    user_id: str | Sequence[str] | None = None,
    session_id: str | Sequence[str] | None = None,
    runs: Sequence[str] | None = None,
    data_type: Any = None,
    fill: Any = 0,
    storage_options: Any = None,
) -> TomogramPicks:
    """Read the picks of a copick project as boxes of its tomograms, labelled by their objects.

    Each point of the picks of `objects` (in `runs`, by `user_id` and
    `session_id`) becomes a box of `shape` around it in its run's tomogram
    of `tomogram_type` at `voxel_spacing`. Its position is its location
    plus the translation of its transformation, in Å with the centre of
    voxel index i at i times the voxel spacing (copick's convention); its
    voxel is that position over the voxel spacing, rounded to the nearest
    voxel (a half rounds up), never truncated, and what rounding moved it
    by stays in the table. A run is a tomogram of the picks, by its name.
    The tomogram is read at its level 0, the full resolution, whose voxel
    size in its OME-Zarr metadata must be the spacing asked.

    The picks are in the order of their runs (by name, or as `runs` names
    them), then of their objects (as `objects` names them), users and
    sessions, then of their points in copick's picks file: whatever order
    the backend lists them in, the same project gives the same rows.

    A run that has none of these picks is passed over, whether it has the
    tomogram or not; a run with picks but without the tomogram is an error,
    so that no pick is left out unsaid (name the runs to read in `runs`).

    The table returned has a row for each pick: `tomogram` and `run` (the
    run's name), `object`, `user_id`, `session_id`, `instance_id`, `score`,
    `location_x`, `location_y`, `location_z` (Å, as the picks file gives
    them), `transformation` (the point's 4x4 matrix, the identity where it
    gives none), `voxel_z`, `voxel_y`, `voxel_x` (the voxel the box is
    centred on), `offset_z`, `offset_y`, `offset_x` (the exact position less
    that voxel, in voxels, from -0.5 to 0.5) and `label`.

    Args:
        project: The copick configuration file, or a copick root already opened.
        shape: The side of a box, or its (z, y, x) shape, in voxels of the tomograms read.
        voxel_spacing: The voxel spacing of the tomograms to read, in Å, as the project names it.
        tomogram_type: The type of tomogram to read (`"wbp"`, `"denoised"`, ...).
        objects: The names of the pickable objects whose picks to read, in the order of their
            labels. Defaults to the project's objects that are particles, in its order.
        user_id: The user (or users) whose picks to read. Defaults to every user's.
        session_id: The session (or sessions) whose picks to read. Defaults to every session's.
        runs: The names of the runs to read. Defaults to every run of the project.
        data_type: The type to read the boxes as. Defaults to the one the first tomogram holds.
        fill: The value of a box beyond its tomogram.
        storage_options: What fsspec takes to reach a tomogram at a URL (`s3://`), such as the
            project's `static_fs_args`: the tomograms are opened with them, and so is `.patches`;
            the `DataLoader` reading the boxes needs them too, `loader=vio.loader(storage_options=...)`
            (docs/cryoet.md).

    Returns:
        The picks: `.patches` (a PatchSource), `.labels`, `.classes` (the object names),
        `.tomograms` (run names), `.files` (the tomograms' keys), `.table`.

    Raises:
        ValueError: Naming the project: if it is no copick configuration, an object or run named is
            not in it or named twice, no object is a
            particle, a run with picks has no tomogram of that type at that spacing, a tomogram's
            voxel size is not the spacing, or a pick is not in Å, not a number, or outside its
            tomogram (naming its run and object).
        FileNotFoundError: If the configuration file or a tomogram's store is not found.
        ModuleNotFoundError: If copick is not installed (`pip install 'vitrio[copick]'`).
    """
    box = (shape,) * 3 if np.ndim(shape) == 0 else tuple(shape)
    root, name = _open(project)
    classes = _classes(root, name, objects)
    rows: list[dict[str, Any]] = []
    exact: list[np.ndarray] = []
    files: dict[str, str] = {}
    extents: dict[str, tuple[int, ...]] = {}
    voxel_sizes: dict[str, float | None] = {}
    for run in _runs(root, name, runs):
        points, positions = _points(run, name, classes, user_id, session_id)
        if not points:
            continue
        key, extent, voxel_size = _tomogram(run, name, voxel_spacing, tomogram_type, storage_options)
        files[run.name], extents[run.name], voxel_sizes[run.name] = key, extent, voxel_size
        voxels = positions[:, ::-1] / voxel_spacing
        _check_inside(name, run.name, points, positions, voxels, extent)
        rows.extend(points)
        exact.append(voxels)
    exact_voxels = np.concatenate(exact) if exact else np.zeros((0, 3))
    return _picks(
        rows, exact_voxels, box, classes, files, extents, voxel_sizes, data_type, fill, storage_options
    )


def _open(project: Any) -> tuple[Any, str]:
    """The copick root of `project` and how errors name it."""
    if not isinstance(project, str | os.PathLike):
        return project, f"copick project {getattr(project.config, 'name', None)!r}"
    try:
        import copick
    except ModuleNotFoundError as error:
        raise missing(error, "copick_picks") from None
    path = os.fspath(project)
    text = read_whole(path, MAX_CONFIGURATION_BYTES, "copick configuration")  # a regular file, bounded
    try:
        return copick.from_string(text.decode()), path
    except (
        ValueError
    ) as error:  # not UTF-8, JSON or a configuration copick's model takes: none names the file
        raise ValueError(f"{path}: not a copick configuration: {error}") from None


def _classes(root: Any, name: str, objects: Sequence[str] | None) -> list[str]:
    """The names of the objects whose picks are read, in the order of their labels."""
    known = [o.name for o in root.pickable_objects]
    if objects is None:
        particles = [o.name for o in root.pickable_objects if o.is_particle]
        if not particles:
            raise ValueError(f"{name}: none of its pickable objects {known} is a particle; name them")
        return particles
    chosen = [objects] if isinstance(objects, str) else list(objects)
    unknown = [o for o in chosen if o not in known]
    if unknown:
        raise ValueError(f"{name}: objects {unknown} are not among its pickable objects {known}")
    if len(set(chosen)) != len(chosen):
        raise ValueError(f"{name}: objects {chosen} name one twice")
    return chosen


def _runs(root: Any, name: str, runs: Sequence[str] | None) -> list[Any]:
    """The runs of the project to read, by name or all."""
    if runs is None:
        return sorted(root.runs, key=lambda run: run.name)
    chosen = [runs] if isinstance(runs, str) else list(runs)
    if len(set(chosen)) != len(chosen):
        raise ValueError(f"{name}: runs {chosen} name one twice")
    found = []
    for run_name in chosen:
        run = root.get_run(run_name)
        if run is None:
            raise ValueError(f"{name}: the project has no run {run_name!r}")
        found.append(run)
    return found


def _points(
    run: Any, name: str, classes: list[str], user_id: Any, session_id: Any
) -> tuple[list[dict[str, Any]], np.ndarray]:
    """A row of the table for each point of the run's picks of `classes`, and its (x, y, z) position in Å."""
    rows, positions = [], []
    for label, object_name in enumerate(classes):
        found = run.get_picks(object_name=object_name, user_id=user_id, session_id=session_id)
        for picks in sorted(found, key=lambda picks: (picks.user_id, picks.session_id)):
            where = (
                f"{name}: run {run.name!r}, picks of {object_name!r} by user {picks.user_id!r} "
                f"in session {picks.session_id!r}"
            )
            meta = _picks_file(picks, where)
            points, unit = meta.points or [], meta.unit
            if points and unit != "angstrom":
                raise ValueError(f"{where}: locations are in {unit}, not angstrom")
            for point in points:
                location = np.array([point.location.x, point.location.y, point.location.z], dtype=float)
                transformation = np.asarray(point.transformation, dtype=float)
                position = location + transformation[:3, 3]
                if not np.isfinite(position).all():
                    raise ValueError(f"{where}: a location or shift is not a number: {position.tolist()}")
                rows.append(
                    {
                        "tomogram": run.name,
                        "run": run.name,
                        "object": object_name,
                        "user_id": picks.user_id,
                        "session_id": picks.session_id,
                        "instance_id": point.instance_id,
                        "score": point.score,
                        "location_x": location[0],
                        "location_y": location[1],
                        "location_z": location[2],
                        "transformation": transformation,
                        "label": label,
                    }
                )
                positions.append(position)
    return rows, np.asarray(positions, dtype=float).reshape(-1, 3)


def _picks_file(picks: Any, where: str) -> Any:
    """The picks' file (copick's `CopickPicksFile`), read by vitrio through one open, as a regular file
    of at most `MAX_PICKS_BYTES` (what is checked is what is read), and made as copick makes it from
    the file's JSON. Picks that no file holds (copick's other backends) are loaded by copick.

    Raises:
        ValueError: If the file is not such a file, or not one copick's model takes, naming it.
    """
    fs, path = getattr(picks, "fs", None), getattr(picks, "path", None)
    try:
        if fs is None or path is None:
            picks.load()
            return picks.meta
        return type(picks.meta)(**json.loads(_bounded(fs, path)))
    except (OSError, ValueError, TypeError, RecursionError) as error:  # the model's errors are ValueErrors
        raise ValueError(f"{where}: {error}") from None


def _bounded(fs: Any, path: str) -> bytes:
    """The file at `path` of the fsspec filesystem `fs`, of at most `MAX_PICKS_BYTES`: a local one as
    `read_whole` reads it (a FIFO refused, never waited on), one in object storage refused unread where
    it says it is larger, and read no further than that.

    Raises:
        OSError, ValueError: If it is not a regular file, or is larger.
    """
    protocols = {fs.protocol} if isinstance(fs.protocol, str) else set(fs.protocol)
    if protocols & {"file", "local"}:
        return read_whole(fs._strip_protocol(path), MAX_PICKS_BYTES, "picks file")
    info = fs.info(path)
    if info.get("type") != "file":
        raise OSError(f"{path}: not a regular file; it is not read")
    if (info.get("size") or 0) > MAX_PICKS_BYTES:  # as it says; a size it hides is caught as it is read
        raise ValueError(
            f"{path}: {info['size']} bytes, more than the {MAX_PICKS_BYTES} a picks file may have; not read"
        )
    with fs.open(path, "rb") as file:
        data = file.read(MAX_PICKS_BYTES + 1)
    if len(data) > MAX_PICKS_BYTES:
        raise ValueError(f"{path}: more than the {MAX_PICKS_BYTES} bytes a picks file may have; not read")
    return data


def _tomogram(
    run: Any, name: str, voxel_spacing: float, tomogram_type: str, storage_options: Any
) -> tuple[str, tuple[int, ...], float]:
    """The key, (z, y, x) extents and voxel size of the run's tomogram of that type at that spacing."""
    where = f"{name}: run {run.name!r}"
    spacing = run.get_voxel_spacing(voxel_spacing)
    if spacing is None:
        held = sorted(vs.voxel_size for vs in run.voxel_spacings)
        raise ValueError(
            f"{where} has picks but no voxel spacing {voxel_spacing:g} Å (it has {held}); "
            "name the runs to read in runs="
        )
    tomograms = spacing.get_tomograms(tomogram_type)
    if len(tomograms) != 1:
        held = sorted({t.tomo_type for t in spacing.tomograms})
        count = "no" if not tomograms else f"{len(tomograms)}"
        raise ValueError(
            f"{where} has picks but {count} tomograms of type {tomogram_type!r} at voxel spacing "
            f"{voxel_spacing:g} Å (it has {held}); name the runs to read in runs="
        )
    store = tomograms[0].zarr()
    key = store.fs.unstrip_protocol(store.path)
    key = key if is_url(key) else local_path(key)
    level = f"{key}#0"  # the full resolution, whatever level a configuration reads by default
    metadata = query_metadata(level, storage_options=storage_options)
    if metadata.descriptor.is_stack or len(metadata.descriptor.core_extents) != 3:
        raise ValueError(f"{where}: {key} is not one volume: {metadata.descriptor}")
    sizes = metadata.voxel_size
    if sizes is not None and not np.allclose(sizes, voxel_spacing, rtol=_VOXEL_SIZE_TOLERANCE, atol=0):
        raise ValueError(
            f"{where}: the tomogram of type {tomogram_type!r} at voxel spacing {voxel_spacing:g} Å, "
            f"{key}, has voxels of {', '.join(f'{s:g}' for s in sizes)} Å (z, y, x) at level 0"
        )
    return level, tuple(metadata.descriptor.core_extents), float(voxel_spacing)


def _check_inside(
    name: str,
    run: str,
    points: list[dict[str, Any]],
    positions: np.ndarray,
    voxels: np.ndarray,
    extent: tuple[int, ...],
) -> None:
    """Refuse a point whose nearest voxel is outside its tomogram, naming its run and object."""
    nearest = nearest_voxels(voxels)
    outside = np.flatnonzero(((nearest < 0) | (nearest >= extent)).any(axis=1))
    if len(outside):
        row = int(outside[0])
        point = points[row]
        raise ValueError(
            f"{name}: run {run!r}, a pick of {point['object']!r} by user {point['user_id']!r} in session "
            f"{point['session_id']!r} at {positions[row].tolist()} Å (x, y, z) lies outside the "
            f"tomogram: voxel {nearest[row].tolist()} (z, y, x) of extents {list(extent)}"
        )


def _picks(
    rows: list[dict[str, Any]],
    exact: np.ndarray,
    box: tuple[int, ...],
    classes: list[str],
    files: dict[str, str],
    extents: dict[str, tuple[int, ...]],
    voxel_sizes: dict[str, float | None],
    data_type: Any,
    fill: Any,
    storage_options: Any,
) -> TomogramPicks:
    """The picks of the rows gathered, with their table."""
    import pandas as pd

    voxels = nearest_voxels(exact)
    table = pd.DataFrame(rows, columns=_COLUMNS)
    for axis, letter in enumerate("zyx"):
        table[f"voxel_{letter}"] = voxels[:, axis]
    for axis, letter in enumerate("zyx"):
        table[f"offset_{letter}"] = exact[:, axis] - voxels[:, axis]
    labels = table["label"].to_numpy(dtype=np.int64)
    table = table[[c for c in table.columns if c != "label"] + ["label"]]
    return TomogramPicks(
        table["tomogram"].to_numpy(dtype=object),
        voxels,
        box,
        labels,
        classes,
        files,
        extents,
        voxel_sizes,
        table,
        data_type,
        fill,
        None if storage_options is None else reader_provider(storage_options=storage_options),
    )


_COLUMNS = [
    "tomogram",
    "run",
    "object",
    "user_id",
    "session_id",
    "instance_id",
    "score",
    "location_x",
    "location_y",
    "location_z",
    "transformation",
    "label",
]
