"""`TomogramPicks`: labelled subvolumes of tomograms, a box around each pick with its class and tomogram.

What a reader of picks (a RELION 5 tomography set, `tomogram_picks`; a
copick project) gives: the file, extents and voxel size of each tomogram,
and for each pick its tomogram, its centre in whole voxels of the file read,
and its label. Background boxes, class balance and splits by tomogram work
on those arrays alone (`_picks_sampling.py`), whatever read the picks.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .._types import integer_array
from ._dataset import Dataset, resolve_rows
from ._patches import PatchSource
from ._picks_sampling import background_centres, class_weights, split_by_tomogram

if TYPE_CHECKING:
    import pandas as pd

    from .._providers import ImageReaderProvider

__all__ = ["TomogramPicks", "nearest_voxels"]


def nearest_voxels(positions: np.ndarray) -> np.ndarray:
    """Exact (z, y, x) positions in voxels, each at its nearest voxel (a half rounds up), as int64."""
    return np.floor(positions + 0.5).astype(np.int64)


class TomogramPicks:
    """Picks in tomograms as labelled subvolumes: a box of `shape` around each, its label, its tomogram.

    The box of a pick is cropped out of its tomogram with the pick's voxel at
    index extent // 2 of the box, as `PatchSource` (and RELION) has it.

    Args:
        tomograms: The name of the tomogram of each pick.
        centres: The voxel of each pick in its tomogram's file, (z, y, x), whole voxels.
        shape: The shape of a box, (z, y, x).
        labels: The label of each pick, an integer indexing `classes`.
        classes: What each label stands for (a class number, a name), in the order of the labels.
        files: The file (a key) of each tomogram, by name.
        extents: The (z, y, x) extents of each tomogram's file, by name.
        voxel_sizes: The voxel size of each tomogram's file in Å, by name; None where it is unknown.
        table: The table the picks were read from, a row for each pick, or None.
        data_type: The type to read the boxes as. Defaults to the one the first tomogram holds.
        fill: The value of a box beyond its tomogram.
        readers: Where the tomograms are asked for their type: a provider given the storage options
            of tomograms at URLs. Defaults to a `reader_provider()`. The boxes are read by the
            `DataLoader`'s loader, which needs those options too.

    Raises:
        ValueError: If the arrays are not one for each pick, a label is not one of `classes`, a
            tomogram has no file or extents, or a centre lies outside its tomogram (naming it).
    """

    def __init__(
        self,
        tomograms: Sequence[str],
        centres: Any,
        shape: Sequence[int],
        labels: Any,
        classes: Sequence[Any],
        files: Mapping[str, str],
        extents: Mapping[str, Sequence[int]],
        voxel_sizes: Mapping[str, float | None] | None = None,
        table: pd.DataFrame | None = None,
        data_type: Any = None,
        fill: Any = 0,
        readers: ImageReaderProvider | None = None,
    ):
        self._tomograms = np.asarray(tomograms, dtype=object).reshape(-1)
        voxels = np.asarray(centres)
        if voxels.size == 0:
            voxels = voxels.reshape(0, 3)
        if voxels.ndim != 2 or voxels.shape[1] != 3:
            raise ValueError(
                f"centres are a (z, y, x) row for each pick, not an array of shape {voxels.shape}"
            )
        self._centres = integer_array(voxels, "voxel centres are integers (round them first)")
        self._labels = integer_array(np.asarray(labels).reshape(-1), "labels are integers")
        self._shape = tuple(int(extent) for extent in shape)
        self._classes = list(classes)
        self._files = dict(files)
        self._extents = {name: tuple(int(e) for e in extent) for name, extent in extents.items()}
        self._voxel_sizes = dict(voxel_sizes or {})
        self._table = table
        self._read_options = {"data_type": data_type, "fill": fill, "readers": readers}
        count = len(self._tomograms)
        if len(self._centres) != count or len(self._labels) != count:
            raise ValueError(
                f"{count} tomograms, {len(self._centres)} centres and {len(self._labels)} labels: "
                "give one of each for every pick"
            )
        if table is not None and len(table) != count:
            raise ValueError(f"a table of {len(table)} rows for {count} picks")
        if len(self._shape) != 3 or min(self._shape) < 1:
            raise ValueError(f"a box is three positive extents (z, y, x), not {shape!r}")
        if count and (self._labels.min() < 0 or self._labels.max() >= len(self._classes)):
            raise ValueError(
                f"labels index the {len(self._classes)} classes; they run {self._labels.min()}"
                f" to {self._labels.max()}"
            )
        for name in np.unique(self._tomograms).tolist() if count else []:
            if name not in self._files or name not in self._extents:
                raise ValueError(f"tomogram {name!r} of a pick has no file or extents")
            rows = np.flatnonzero(self._tomograms == name)
            outside = (self._centres[rows] < 0) | (self._centres[rows] >= self._extents[name])
            if outside.any():
                row = int(rows[np.flatnonzero(outside.any(axis=1))[0]])
                raise ValueError(
                    f"pick {row} lies outside tomogram {name!r} ({self._files[name]}): voxel "
                    f"{self._centres[row].tolist()} (z, y, x) of extents {list(self._extents[name])}"
                )

    def __len__(self) -> int:
        return len(self._tomograms)

    @property
    def shape(self) -> tuple[int, int, int]:
        """The (z, y, x) shape of a box."""
        return self._shape  # type: ignore[return-value]

    @property
    def labels(self) -> np.ndarray:
        """The label of each pick, indexing `classes`."""
        return _read_only(self._labels)

    @property
    def classes(self) -> list[Any]:
        """What each label stands for, in the order of the labels."""
        return list(self._classes)

    @property
    def tomograms(self) -> np.ndarray:
        """The name of the tomogram of each pick."""
        return _read_only(self._tomograms)

    @property
    def centres(self) -> np.ndarray:
        """The voxel of each pick in its tomogram's file, (z, y, x)."""
        return _read_only(self._centres)

    @property
    def table(self) -> pd.DataFrame | None:
        """The table the picks were read from, a row for each, with what was derived of it; or None."""
        return self._table

    @property
    def files(self) -> dict[str, str]:
        """The file of each tomogram, by name."""
        return dict(self._files)

    @property
    def extents(self) -> dict[str, tuple[int, ...]]:
        """The (z, y, x) extents of each tomogram's file, by name."""
        return dict(self._extents)

    @property
    def voxel_sizes(self) -> dict[str, float | None]:
        """The voxel size in Å of each tomogram's file, by name; None where it is unknown."""
        return {name: self._voxel_sizes.get(name) for name in self._files}

    @functools.cached_property
    def patches(self) -> PatchSource:
        """The boxes, a `PatchSource` of a row for each pick."""
        if not len(self):
            raise ValueError("there are no picks to make boxes of")
        images = [self._files[name] for name in self._tomograms.tolist()]
        return PatchSource(images, self._centres, self._shape, check=False, **self._read_options)

    def dataset(self, image: str = "image", label: str = "label", **columns: Any) -> Dataset:
        """A `Dataset` of the boxes under `image` and the labels under `label`, and any other columns."""
        return Dataset({image: self.patches, label: self._labels, **columns})

    def class_weights(self) -> np.ndarray:
        """A weight for each class, inverse to its share of the picks, as `class_weights` gives them."""
        return class_weights(self._labels, len(self._classes))

    def subset(self, rows: Any) -> TomogramPicks:
        """The picks of `rows` (integers, a slice or a mask, as a dataset takes them), in that order,
        with every tomogram and class kept."""
        rows = resolve_rows(rows, len(self))
        table = None if self._table is None else self._table.iloc[rows].reset_index(drop=True)
        return self._with(
            self._tomograms[rows], self._centres[rows], self._labels[rows], self._classes, table
        )

    def split(self, fractions: Sequence[float], seed: int) -> list[TomogramPicks]:
        """Split the picks by tomogram, as `split_by_tomogram` does: no tomogram's picks in two parts."""
        return [self.subset(rows) for rows in split_by_tomogram(self._tomograms, fractions, seed)]

    def with_background(
        self,
        count: int,
        min_distance: float,
        seed: int,
        epoch: int = 0,
        name: Any = "background",
    ) -> TomogramPicks:
        """These picks and `count` boxes of background, labelled with a class of their own.

        The background centres are drawn as `background_centres` draws them,
        away from every pick of these tomograms: so give it all the picks of
        a tomogram (a split by tomogram keeps them), not a selection of
        classes. The class `name` is added after the others (or taken where
        it is one of them); a background row of `table` has its tomogram,
        label, voxel and offset (0), and is empty elsewhere.

        Args:
            count: How many background boxes, spread over the tomograms as evenly as can be.
            min_distance: The least distance in voxels from a background centre to any pick.
            seed: With `epoch`, what decides the centres.
            epoch: The epoch they are drawn for: each draws others.
            name: What the background's label stands for.
        """
        names = sorted(set(self._tomograms.tolist()))
        centres, tomograms = background_centres(
            {n: self._centres[self._tomograms == n] for n in names},
            {n: self._extents[n] for n in names},
            self._shape,
            count,
            min_distance,
            seed,
            epoch,
        )
        classes = self._classes if name in self._classes else [*self._classes, name]
        labels = np.full(len(centres), classes.index(name), dtype=np.int64)
        table = self._table
        if table is not None:
            import pandas as pd

            added = pd.DataFrame({"tomogram": tomograms, "label": labels})
            for axis, letter in enumerate("zyx"):
                added[f"voxel_{letter}"] = centres[:, axis]
                added[f"offset_{letter}"] = 0.0
            table = pd.concat([table, added], ignore_index=True)
        return self._with(
            np.concatenate([self._tomograms, np.asarray(tomograms, dtype=object)]),
            np.concatenate([self._centres, centres]),
            np.concatenate([self._labels, labels]),
            classes,
            table,
        )

    def _with(self, tomograms: Any, centres: Any, labels: Any, classes: Any, table: Any) -> TomogramPicks:
        return TomogramPicks(
            tomograms,
            centres,
            self._shape,
            labels,
            classes,
            self._files,
            self._extents,
            self._voxel_sizes,
            table,
            **self._read_options,
        )

    def __repr__(self) -> str:
        counts = np.bincount(self._labels, minlength=len(self._classes)).tolist()
        held = ", ".join(f"{c!r}: {n}" for c, n in zip(self._classes, counts))
        return (
            f"TomogramPicks({len(self)} picks in {len(set(self._tomograms.tolist()))} tomograms, {{{held}}})"
        )


def _read_only(values: np.ndarray) -> np.ndarray:
    view = values.view()
    view.flags.writeable = False
    return view
