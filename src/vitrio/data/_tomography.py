"""`tomogram_picks`: the particles of a RELION 5 (or WarpTools) tomography set as labelled subvolumes.

The conventions, from RELION 5's documentation of the tomogram set
(relion.readthedocs.io, release-5.0, Reference/STA/Datatypes/tomogram_set):
rlnTomoTiltSeriesPixelSize is the pixel size of the tilt series, to which
the sizes rlnTomoSizeX/Y/Z refer; rlnTomoReconstructedTomogram is the
tomogram reconstructed at the binning rlnTomoTomogramBinning of that tilt
series. So a tomogram's voxel is the tilt series' pixel times the binning,
and its extents are the sizes over the binning. A particle's rlnCoordinate
X/Y/Z are in pixels of the unbinned tilt series, zero at the centre of the
first voxel (WarpTools' particle file reference says the same);
rlnCenteredCoordinateX/Y/ZAngst are in Å from the centre of the tomogram,
half its size (RELION 5's ParticleSet), and rlnOriginX/Y/ZAngst shift it:
the particle lies at the coordinate minus the origin.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .._functions import query_metadata
from ._paths import PathResolver
from ._picks import TomogramPicks, nearest_voxels
from ._star import read_star, star_table

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["tomogram_picks"]

_AXES = "XYZ"
_PIXELS = [f"rlnCoordinate{a}" for a in _AXES]
_ANGSTROMS = [f"rlnCenteredCoordinate{a}Angst" for a in _AXES]
_ORIGINS = [f"rlnOrigin{a}Angst" for a in _AXES]
_SUBTOMOGRAM_ANGLES = ["rlnTomoSubtomogramRot", "rlnTomoSubtomogramTilt", "rlnTomoSubtomogramPsi"]
# How far a voxel size in a tomogram's header may be from the table's, relatively: headers hold float32.
_PIXEL_SIZE_TOLERANCE = 1e-3


def tomogram_picks(
    particles: str | os.PathLike[str],
    tomograms: str | os.PathLike[str],
    shape: int | Sequence[int],
    label: str | None = None,
    *,
    classes: Sequence[Any] | None = None,
    file_column: str = "rlnTomoReconstructedTomogram",
    files: Mapping[str, str | os.PathLike[str]] | None = None,
    binning: float | None = None,
    root: str | os.PathLike[str] | None = None,
    check_header: bool = True,
    data_type: Any = None,
    fill: Any = 0,
) -> TomogramPicks:
    """Read the particles of a RELION 5 tomography set as boxes of their tomograms, with their labels.

    Each particle names its tomogram (rlnTomoName), found in the tomograms
    table, and is placed by rlnCoordinateX/Y/Z (pixels of the unbinned tilt
    series) or rlnCenteredCoordinateX/Y/ZAngst (Å from the tomogram's
    centre), less rlnOriginX/Y/ZAngst where it has them, as the module says.
    Its voxel in the tomogram read is that position over the binning,
    rounded to the nearest voxel (a half rounds up); what rounding moved it
    by stays in the table. The tomogram's voxel size is the tilt series'
    pixel size times the binning, checked against the voxel size its file's
    header gives, if any.

    The table returned is the particles', its rows numbered from zero, with
    `tomogram` (rlnTomoName as text), `voxel_z`, `voxel_y`, `voxel_x` (the
    voxel the box is centred on), `offset_z`, `offset_y`, `offset_x` (the
    exact position less that voxel, in voxels of the file, from -0.5 to
    0.5) and `label` added.

    Args:
        particles: The particles STAR file (its block `particles`, or the first with rlnTomoName).
        tomograms: The tomograms STAR file (its block `global`, or the first with rlnTomoName).
        shape: The side of a box, or its (z, y, x) shape, in voxels of the tomograms read.
        label: The column of the particles whose values are the classes, such as rlnClassNumber
            or a column of names; None gives every particle the one class "particle".
        classes: The classes in the order of their labels. Defaults to the distinct values of the
            column, sorted.
        file_column: The column of the tomograms table naming each tomogram's file, such as
            rlnTomoReconstructedTomogramHalf1 for a half.
        files: The file of each tomogram by its name, instead of `file_column`: for a table that
            names none, as WarpTools' tomograms table does.
        binning: The binning of every tomogram, where the table has no rlnTomoTomogramBinning.
        root: The folder the tomograms' paths are relative to (RELION's project folder). Defaults
            to the folder of the tomograms table, then the two above it.
        check_header: Whether to check the table's voxel size against each file's header. A header
            known to be wrong (written by a tool that leaves 1 Å) is passed over with False.
        data_type: The type to read the boxes as. Defaults to the one the first tomogram holds.
        fill: The value of a box beyond its tomogram.

    Returns:
        The picks: `.patches` (a PatchSource), `.labels`, `.classes`, `.tomograms`, `.table`.

    Raises:
        FileNotFoundError: If a STAR file or a tomogram's file is not found (naming the paths tried).
        ValueError: Naming the file: if a column needed is missing, a particle's tomogram is not in
            the tomograms table, the binning is unknown, a voxel size in a header differs from the
            table's (naming both files and both sizes), a particle in Å is in a tomogram of unknown
            pixel size or size, a particle lies outside its tomogram, has subtomogram angles as well
            as an origin, or its label is not one of `classes`.
        ModuleNotFoundError: If pandas is not installed (`pip install 'vitrio[star]'`).
    """
    box = (shape,) * 3 if np.ndim(shape) == 0 else tuple(shape)
    table = star_table(particles, read_star(particles), ["rlnTomoName"], prefer="particles")
    needed = ["rlnTomoName"] if files is not None else ["rlnTomoName", file_column]
    set_table = star_table(tomograms, read_star(tomograms), needed, prefer="global")
    names = table["rlnTomoName"].astype(str).to_numpy()
    located = _Files(tomograms, file_column, files, root)
    geometry = _Tomograms(tomograms, set_table, located, binning, check_header)
    positions = np.full((len(table), 3), np.nan)
    for name in sorted(set(names.tolist())):
        rows = np.flatnonzero(names == name)
        positions[rows] = geometry.voxels(particles, name, table.iloc[rows])
    unplaced = np.flatnonzero(~np.isfinite(positions).all(axis=1))
    if len(unplaced):
        raise ValueError(f"{particles}: particle {unplaced[0]} has a coordinate that is not a number")
    voxels = nearest_voxels(positions)
    labels, classes = _labels(particles, table, label, classes)
    table = table.copy()
    table["tomogram"] = names
    for axis, letter in enumerate("zyx"):
        table[f"voxel_{letter}"] = voxels[:, axis]
    for axis, letter in enumerate("zyx"):
        table[f"offset_{letter}"] = positions[:, axis] - voxels[:, axis]
    table["label"] = labels
    try:
        return TomogramPicks(
            names,
            voxels,
            box,
            labels,
            classes,
            geometry.files,
            geometry.extents,
            geometry.voxel_sizes,
            table,
            data_type,
            fill,
        )
    except ValueError as error:
        raise ValueError(f"{particles}: {error}") from None


class _Tomograms:
    """The tomograms of a tomograms table: their files, extents, voxel sizes, and where a particle lies."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        table: pd.DataFrame,
        files: _Files,
        binning: float | None,
        check_header: bool,
    ):
        self._path = path
        names = table["rlnTomoName"].astype(str)
        if names.duplicated().any():
            raise ValueError(f"{path}: tomogram {names[names.duplicated()].iloc[0]!r} is named twice")
        self._rows = dict(zip(names, table.to_dict("records")))
        self._locate, self._binning, self._check = files, binning, check_header
        self.files: dict[str, str] = {}
        self.extents: dict[str, tuple[int, ...]] = {}
        self.voxel_sizes: dict[str, float | None] = {}
        self._geometry: dict[str, tuple[float, float | None, np.ndarray | None]] = {}

    def voxels(self, particles: Any, name: str, rows: pd.DataFrame) -> np.ndarray:
        """The exact (z, y, x) voxels, in the file of tomogram `name`, of its particles `rows`."""
        binning, pixel_size, size = self._open(particles, name)
        columns = set(rows.columns)
        if set(_PIXELS) <= columns:
            pixels = rows[_PIXELS].to_numpy(dtype=np.float64)
        elif set(_ANGSTROMS) <= columns:
            if pixel_size is None or size is None:
                missing = (
                    "pixel size (rlnTomoTiltSeriesPixelSize)" if pixel_size is None else "rlnTomoSizeX/Y/Z"
                )
                raise ValueError(
                    f"{particles}: particles of tomogram {name!r} are placed in Å, but {self._path} "
                    f"gives no {missing} for it, nor does its file's header"
                )
            read = np.asarray(self.extents[name][::-1]) * binning
            if (np.abs(read - size) > binning).any():
                raise ValueError(
                    f"tomogram {name!r}: {self._path} gives it a size of {size.tolist()} pixels (x, y, z), "
                    f"but {self.files[name]} holds {list(self.extents[name][::-1])} voxels, "
                    f"{read.tolist()} at binning {binning:g}: its centre is not where the table says"
                )
            pixels = rows[_ANGSTROMS].to_numpy(dtype=np.float64) / pixel_size + size / 2
        else:
            raise ValueError(f"{particles}: no columns {', '.join(_PIXELS)} nor {', '.join(_ANGSTROMS)}")
        if set(_ORIGINS) <= columns:
            origins = rows[_ORIGINS].to_numpy(dtype=np.float64)
            turned = set(_SUBTOMOGRAM_ANGLES) <= columns and rows[_SUBTOMOGRAM_ANGLES].to_numpy().any()
            if origins.any() and turned:
                raise ValueError(
                    f"{particles}: particles of tomogram {name!r} have origins in the frame of their "
                    "subtomograms (rlnTomoSubtomogramRot/Tilt/Psi), which are not applied here"
                )
            if origins.any():
                if pixel_size is None:
                    raise ValueError(
                        f"{particles}: particles of tomogram {name!r} have origins in Å, but its pixel "
                        "size is unknown"
                    )
                pixels = pixels - origins / pixel_size
        return pixels[:, ::-1] / binning

    def _open(self, particles: Any, name: str) -> tuple[float, float | None, np.ndarray | None]:
        """The binning, unbinned pixel size (None if unknown) and unbinned (x, y, z) size of a tomogram."""
        if name in self._geometry:
            return self._geometry[name]
        row = self._rows.get(name)
        if row is None:
            raise ValueError(f"{particles}: tomogram {name!r} of a particle is not in {self._path}")
        binning = _number(row, "rlnTomoTomogramBinning", self._binning)
        if binning is None or not binning > 0:
            raise ValueError(
                f"{self._path}: no rlnTomoTomogramBinning for tomogram {name!r}; give the binning"
            )
        key = self._locate(name, row)
        metadata = query_metadata(key)
        if metadata.descriptor.is_stack or len(metadata.descriptor.core_extents) != 3:
            raise ValueError(f"{key}: tomogram {name!r} is not one volume: {metadata.descriptor}")
        pixel_size = _number(row, "rlnTomoTiltSeriesPixelSize", None)
        voxel_size = None if pixel_size is None else pixel_size * binning
        header = metadata.voxel_size
        checked = header is not None and voxel_size is not None and self._check
        if checked and not np.allclose(header, voxel_size, rtol=_PIXEL_SIZE_TOLERANCE, atol=0):
            raise ValueError(
                f"tomogram {name!r}: {self._path} gives a voxel size of {voxel_size:g} Å "
                f"({pixel_size:g} Å x binning {binning:g}), but the header of {key} gives "
                f"{', '.join(f'{v:g}' for v in header)} Å (z, y, x); pass check_header=False "
                "if the header is wrong"
            )
        if voxel_size is None and header is not None and len(set(header)) == 1:
            voxel_size = header[0]
            pixel_size = voxel_size / binning
        sizes = [_number(row, f"rlnTomoSize{a}", None) for a in _AXES]
        size = None if None in sizes else np.asarray(sizes, dtype=np.float64)
        self.files[name] = key
        self.extents[name] = tuple(metadata.descriptor.core_extents)
        self.voxel_sizes[name] = voxel_size
        self._geometry[name] = (binning, pixel_size, size)
        return self._geometry[name]


class _Files:
    """Where the file of each tomogram is: given by name, or in a column of the tomograms table."""

    def __init__(
        self,
        table: str | os.PathLike[str],
        column: str,
        given: Mapping[str, str | os.PathLike[str]] | None,
        root: str | os.PathLike[str] | None,
    ):
        self._table, self._column = table, column
        self._given = None if given is None else {str(name): os.fspath(path) for name, path in given.items()}
        self._resolve = PathResolver(table, root)

    def __call__(self, name: str, row: dict[str, Any]) -> str:
        """The file of tomogram `name`, of the row `row` of the tomograms table."""
        if self._given is None:
            return self._resolve(row[self._column])
        if name not in self._given:
            raise ValueError(f"files names no file for tomogram {name!r} of {self._table}")
        return self._given[name]


def _number(row: dict[str, Any], column: str, default: float | None) -> float | None:
    value = row.get(column)
    return default if value is None or value != value else float(value)


def _labels(
    path: Any, table: pd.DataFrame, column: str | None, classes: Sequence[Any] | None
) -> tuple[np.ndarray, list[Any]]:
    """The label of each particle and the classes they index."""
    if column is None:
        return np.zeros(len(table), dtype=np.int64), ["particle"] if classes is None else list(classes)
    if column not in table.columns:
        raise ValueError(f"{path}: no column {column} to label the particles by")
    values = table[column].to_numpy()
    values = values.astype(str) if values.dtype == object else values
    distinct = np.unique(values)
    order = list(distinct.tolist()) if classes is None else list(classes)
    lookup = {value: number for number, value in enumerate(order)}
    unknown = [value for value in distinct.tolist() if value not in lookup]
    if unknown:
        raise ValueError(f"{path}: {column} has values {unknown[:5]} that are not among the classes {order}")
    return np.asarray([lookup[value] for value in values.tolist()], dtype=np.int64), order
