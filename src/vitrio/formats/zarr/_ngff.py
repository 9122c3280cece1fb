"""The NGFF `multiscales` metadata of an OME-Zarr image: read (0.4 and 0.5) and written (0.4).

An image is a list of scale levels (`datasets`), each a Zarr array at a
path of the group, with the same axes: up to two stacking axes (time,
channel) and then two or three space axes, the image or volume. A level's
voxel size is the product of its `scale` transformation and the
multiscale's own, along the space axes, in the axes' units.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from ..._types import ANGSTROMS_PER_UNIT

__all__ = ["Level", "Multiscale", "parse_multiscales", "write_multiscales", "STACK_AXES"]

_TYPES = {"x": "space", "y": "space", "z": "space", "c": "channel", "t": "time"}
"""The axis types of NGFF 0.3's axes, which were names only."""

STACK_AXES = ({"name": "c", "type": "channel"}, {"name": "t", "type": "time"})
"""The axes written for one and for two stacking axes (time before channel)."""


class Level(NamedTuple):
    """One scale level: the path of its array in the group and its voxel size (Å, None if unknown)."""

    path: str
    voxel_size: tuple[float, ...] | None


class Multiscale(NamedTuple):
    """What the `multiscales` metadata says: the rank of an image or volume, and the levels."""

    core_rank: int
    axes: tuple[str, ...]
    levels: tuple[Level, ...]


def _list(value: Any, what: str) -> Sequence[Any]:
    """`value` if it is a JSON list, () if absent."""
    if value is None:
        return ()
    if not isinstance(value, Sequence) or isinstance(value, str):
        raise ValueError(f"{what} is {value!r}, not a list")
    return value


def _scale(transformations: Any, rank: int, where: str) -> list[float]:
    scale = [1.0] * rank
    for item in _list(transformations, f"{where}: 'coordinateTransformations'"):
        if isinstance(item, Mapping) and item.get("type") == "scale":
            values = _list(item.get("scale"), f"{where}: a scale")
            try:
                numbers = [float(v) for v in values if isinstance(v, (int, float))]
            except OverflowError:  # an integer past a float's range
                numbers = []
            if len(values) != rank or len(numbers) != rank:
                raise ValueError(f"{where}: a scale of {values!r} is not {rank} numbers, one per axis")
            scale = [a * b for a, b in zip(scale, numbers)]
    return scale


def parse_multiscales(attributes: Mapping[str, Any]) -> Multiscale:
    """The first multiscale image of a group's attributes (NGFF 0.4, or 0.5 under `ome`).

    Raises:
        ValueError: If there is no `multiscales` entry, or it is malformed: no datasets, axes that
            are not up to two stacking axes followed by two or three space axes.
    """
    attributes = attributes.get("ome", attributes)
    multiscales = attributes.get("multiscales") if isinstance(attributes, Mapping) else None
    if not isinstance(multiscales, Sequence) or not multiscales or not isinstance(multiscales[0], Mapping):
        raise ValueError("no NGFF 'multiscales' metadata: not an OME-Zarr image")
    image = multiscales[0]
    axes = []
    for axis in _list(image.get("axes"), "'axes'"):
        if isinstance(axis, str):
            axis = {"name": axis, "type": _TYPES.get(axis)}
        if not isinstance(axis, Mapping):
            raise ValueError(f"an axis of the 'multiscales' metadata is {axis!r}")
        axes.append(axis)
    kinds = [axis.get("type") for axis in axes]
    core_rank = next((i for i, k in enumerate(reversed(kinds)) if k != "space"), len(kinds))
    if core_rank not in (2, 3) or len(axes) - core_rank > 2:
        raise ValueError(f"axes {[a.get('name') for a in axes]}: not two or three space axes last")
    units = [axis.get("unit") for axis in axes[len(axes) - core_rank :]]
    factors = (
        [ANGSTROMS_PER_UNIT[unit] for unit in units]
        if all(isinstance(u, str) and u in ANGSTROMS_PER_UNIT for u in units)
        else None
    )
    rank = len(axes)
    overall = _scale(image.get("coordinateTransformations"), rank, "multiscales")
    levels = []
    for dataset in _list(image.get("datasets"), "'datasets'"):
        path = dataset.get("path") if isinstance(dataset, Mapping) else None
        if not isinstance(path, str) or not path or path.startswith("/") or ".." in path.split("/"):
            raise ValueError(f"a dataset of the 'multiscales' metadata has path {path!r}")
        scale = _scale(dataset.get("coordinateTransformations"), rank, f"dataset {path!r}")
        size = None
        if factors is not None:
            size = tuple(a * b * f for a, b, f in zip(scale[-core_rank:], overall[-core_rank:], factors))
        levels.append(Level(path, size if size and all(math.isfinite(s) and s > 0 for s in size) else None))
    if not levels:
        raise ValueError("the 'multiscales' metadata lists no datasets")
    return Multiscale(core_rank, tuple(str(a.get("name")) for a in axes), tuple(levels))


def write_multiscales(
    core_rank: int, stack_rank: int, levels: int, voxel_size: Sequence[float] | None, name: str
) -> dict[str, Any]:
    """The group attributes of an NGFF 0.4 image of `levels` levels at paths `0`, `1`, ...

    Level `k` is binned by `2**k` along the space axes. With a voxel size, the space axes are in
    ångströms and the scales are voxel sizes; without, the scales are the binnings.

    Raises:
        ValueError: If `stack_rank` is above 2 (NGFF has time and channel only).
    """
    if stack_rank > 2:
        raise ValueError(f"an OME-Zarr image stacks along at most 2 axes (time, channel), not {stack_rank}")
    space = ["z", "y", "x"][3 - core_rank :]
    unit = {} if voxel_size is None else {"unit": "angstrom"}
    axes = [*reversed(STACK_AXES[:stack_rank]), *({"name": n, "type": "space", **unit} for n in space)]
    base = [1.0] * core_rank if voxel_size is None else [float(v) for v in voxel_size]
    datasets = [
        {
            "path": str(level),
            "coordinateTransformations": [
                {"type": "scale", "scale": [1.0] * stack_rank + [b * 2**level for b in base]}
            ],
        }
        for level in range(levels)
    ]
    return {"multiscales": [{"version": "0.4", "name": name, "axes": axes, "datasets": datasets}]}
