"""Small synthetic stacks written in temporary directories, and the numpy arrays they hold."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import vitrio as vio


@dataclass
class Stacks:
    """Stacks of images written to files, the arrays they hold, and a location and value for each row."""

    paths: list[Path]
    arrays: list[np.ndarray]

    @property
    def locations(self) -> list[vio.ImageLocation]:
        return [vio.ImageLocation(p, i) for p, a in zip(self.paths, self.arrays) for i in range(len(a))]

    @property
    def images(self) -> np.ndarray:
        return np.concatenate(self.arrays)


def write_stacks(
    root: Path, counts: tuple[int, ...], shape: tuple[int, int] = (12, 10), seed: int = 0
) -> Stacks:
    """Write a float32 MRC stack of `count` random images for each count."""
    rng = np.random.default_rng(seed)
    paths, arrays = [], []
    for number, count in enumerate(counts):
        array = rng.standard_normal((count, *shape)).astype(np.float32)
        path = root / f"stack{number}.mrcs"
        vio.write_stack(array, path)
        paths.append(path)
        arrays.append(array)
    return Stacks(paths, arrays)


@pytest.fixture
def stacks(tmp_path: Path) -> Stacks:
    """Three stacks of 7, 5 and 9 images of 12x10 float32: 21 rows."""
    return write_stacks(tmp_path, (7, 5, 9))


@pytest.fixture
def loader():
    """A loader of two threads keeping a few files open."""
    return vio.loader(workers=2, cache=8)
