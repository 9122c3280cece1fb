"""Small copick projects for the tests, made through copick's own API (and so written by zarr 2).

`make_static` writes a project's tomograms (and a tool's picks) into one
folder, as a lab's static data; `overlay` opens it under an overlay folder
of its own, where new runs and picks land, as copick's overlay backend
does. Each pick is placed at a known voxel plus a sub-voxel offset, so a
test knows the voxel it must round to.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import copick
import numpy as np
from copick.util.ome import volume_pyramid, write_ome_zarr_3d

SPACING = 10.0  # Å per voxel of the tomograms read
OBJECTS = [
    {"name": "ribosome", "is_particle": True, "label": 1, "radius": 120.0},
    {"name": "membrane", "is_particle": False, "label": 2},
    {"name": "proteasome", "is_particle": True, "label": 3, "radius": 60.0},
]
# Each run's tomogram: TS_00 as copick writes one (chunks of 256^3), TS_01 in small chunks a box spans.
TOMOGRAMS = {"TS_00": ((64, 64, 64), None), "TS_01": ((40, 48, 56), (16, 16, 32))}
# The picks of each run: (object, user, session, voxel (z, y, x), offset (z, y, x), shift in Å (x, y, z)).
PICKS = {
    "TS_00": [
        ("ribosome", "alice", "1", (10, 12, 14), (0.4, -0.4, 0.0), None),
        ("ribosome", "alice", "1", (30, 40, 50), (0.5, 0.49, -0.49), None),
        ("proteasome", "bob", "2", (5, 6, 7), (-0.5, 0.2, 0.3), (3.0, -2.0, 4.0)),
        ("membrane", "alice", "1", (20, 20, 20), (0.0, 0.0, 0.0), None),
        ("ribosome", "tool", "0", (62, 1, 33), (0.3, -0.3, 0.1), None),
    ],
    "TS_01": [
        ("proteasome", "bob", "2", (20, 30, 40), (0.2, -0.2, 0.45), None),
        ("ribosome", "alice", "1", (0, 47, 55), (-0.4, 0.4, 0.4), (-1.0, 1.0, 2.5)),
        ("ribosome", "carol", "3", (8, 9, 10), (0.1, 0.1, 0.1), None),
    ],
}
STATIC_USERS = {"tool"}  # whose picks lie in the static folder; the others' in the overlay


def exact_voxel(voxel: Any, offset: Any) -> np.ndarray:
    """The exact (z, y, x) voxel of a pick: its voxel plus its offset."""
    return np.asarray(voxel, dtype=float) + np.asarray(offset, dtype=float)


def write_config(path: Path, **roots: Any) -> Path:
    """A filesystem project's configuration file at `path`, with `roots` (overlay_root, static_root...)."""
    config = {
        "config_type": "filesystem",
        "name": "test project",
        "version": copick.__version__,
        "pickable_objects": OBJECTS,
        "overlay_fs_args": {"auto_mkdir": True},
        **roots,
    }
    path.write_text(json.dumps(config))
    return path


def write_tomogram(run: Any, volume: np.ndarray, chunks: tuple[int, ...] | None, spacing: float) -> None:
    """The run's tomogram of type "wbp" at SPACING holding `volume`, its metadata saying `spacing`."""
    tomogram = run.new_voxel_spacing(SPACING, exist_ok=True).new_tomogram("wbp")
    if chunks is None and spacing == SPACING:
        tomogram.from_numpy(volume, levels=2)
    else:
        pyramid = volume_pyramid(volume, spacing, 2)
        write_ome_zarr_3d(tomogram.zarr(), pyramid, chunk_size=chunks or (256, 256, 256))


def add_picks(run: Any, picks: list[tuple]) -> None:
    """The picks of `picks` in `run`, a file for each object, user and session."""
    files: dict[tuple[str, str, str], list[tuple]] = {}
    for object_name, user, session, voxel, offset, shift in picks:
        files.setdefault((object_name, user, session), []).append((voxel, offset, shift))
    for (object_name, user, session), points in files.items():
        locations, transforms = [], []
        for voxel, offset, shift in points:
            transform = np.eye(4)
            if shift is not None:
                transform[:3, :3] = [[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]
                transform[:3, 3] = shift
            locations.append(exact_voxel(voxel, offset)[::-1] * SPACING - transform[:3, 3])
            transforms.append(transform)
        run.new_picks(object_name, session, user).from_numpy(np.array(locations), np.array(transforms))


def make_static(folder: Path) -> dict[str, np.ndarray]:
    """The static folder of a project: a tomogram in each run of TOMOGRAMS, the STATIC_USERS' picks,
    and a run TS_02 with neither; the tomograms' values, by run."""
    root = copick.from_file(write_config(folder / "static.json", overlay_root=f"local://{folder}"))
    volumes = {}
    for number, (name, (shape, chunks)) in enumerate(TOMOGRAMS.items()):
        run = root.new_run(name)
        volumes[name] = np.random.default_rng(number).standard_normal(shape).astype(np.float32)
        write_tomogram(run, volumes[name], chunks, SPACING)
        add_picks(run, [pick for pick in PICKS[name] if pick[1] in STATIC_USERS])
    root.new_run("TS_02")
    return volumes


def overlay(static: Path, folder: Path) -> Path:
    """A configuration file reading `static` beneath an overlay in `folder` that holds the other picks."""
    path = write_config(
        folder / "copick.json", static_root=f"local://{static}", overlay_root=f"local://{folder / 'overlay'}"
    )
    root = copick.from_file(path)
    for name, picks in PICKS.items():
        add_picks(root.get_run(name), [pick for pick in picks if pick[1] not in STATIC_USERS])
    return path
