"""The conformance suite every format runs through (zarr-style): one class, subclassed per format.

A subclass names its extension, the types it holds exactly and whether it
holds volumes, and may override `make` to produce files some other way than
vitrio's writer (a read-only format makes its files with an independent
writer, or points at fixtures). Every test goes through the public API, or
through the reader contract of `vitrio.formats` (`read_run`,
`read_images`, `read_region`) as a provider hands readers out.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

import vitrio as vio


def sample(rng: np.random.Generator, shape, dtype) -> np.ndarray:
    """Values of `dtype` that every type conversion keeps apart."""
    dtype = np.dtype(dtype)
    if dtype.kind == "c":
        return (rng.integers(-99, 99, size=shape) + 1j * rng.integers(-99, 99, size=shape)).astype(dtype)
    if dtype.kind == "f":
        return (rng.integers(-999, 999, size=shape) / 8).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -999), min(info.max, 999), size=shape, endpoint=True).astype(dtype)


class FormatConformance:
    """What every format with files to read must do. Subclass it as `TestSomething` to run it."""

    extension: ClassVar[str]
    dtypes: ClassVar[tuple[str, ...]] = ("float32",)
    volumes: ClassVar[bool] = True
    """Whether the format holds volumes and stacks of volumes; if not, making one must raise ValueError."""
    image_is_stack: ClassVar[bool] = False
    """Whether a single image reads back as a stack of one (as a `.mrcs` file does)."""

    def make(self, path: Path, values: np.ndarray, core_rank: int) -> None:
        """Make a file at `path` holding `values`, the last `core_rank` axes one image or volume."""
        vio.write(values, path, vio.ImageDescriptor(values.shape, core_rank, values.dtype))

    # -------------------------------------------------------------- helpers

    def _file(self, tmp_path: Path, rng, shape, core_rank: int, dtype=None, name: str = "f"):
        values = sample(rng, shape, dtype or self.dtypes[0])
        path = tmp_path / (name + self.extension)
        self.make(path, values, core_rank)
        return path, values

    def _refuses_volumes(self, tmp_path: Path, rng, shape) -> bool:
        """For a format without volumes: check that making one is refused and leaves nothing."""
        if self.volumes:
            return False
        with pytest.raises(ValueError):
            self._file(tmp_path, rng, shape, 3)
        assert os.listdir(tmp_path) == []
        return True

    # -------------------------------------------------------------- whole files

    def test_image(self, tmp_path, rng):
        path, values = self._file(tmp_path, rng, (13, 17), 2)
        extents = (1, 13, 17) if self.image_is_stack else (13, 17)
        assert vio.query_descriptor(path) == vio.ImageDescriptor(extents, 2, values.dtype)
        np.testing.assert_array_equal(vio.read(path), values.reshape(extents))

    def test_stack(self, tmp_path, rng):
        path, values = self._file(tmp_path, rng, (5, 13, 17), 2)
        assert vio.query_descriptor(path) == vio.ImageDescriptor((5, 13, 17), 2, values.dtype)
        np.testing.assert_array_equal(vio.read(path), values)
        for index in range(5):
            np.testing.assert_array_equal(vio.read(vio.ImageLocation(path, index)), values[index])

    def test_volume(self, tmp_path, rng):
        if self._refuses_volumes(tmp_path, rng, (6, 13, 17)):
            return
        path, values = self._file(tmp_path, rng, (6, 13, 17), 3)
        assert vio.query_descriptor(path) == vio.ImageDescriptor((6, 13, 17), 3, values.dtype)
        np.testing.assert_array_equal(vio.read(path), values)

    def test_volume_stack(self, tmp_path, rng):
        if self._refuses_volumes(tmp_path, rng, (3, 4, 9, 7)):
            return
        path, values = self._file(tmp_path, rng, (3, 4, 9, 7), 3)
        assert vio.query_descriptor(path) == vio.ImageDescriptor((3, 4, 9, 7), 3, values.dtype)
        np.testing.assert_array_equal(vio.read(path), values)
        np.testing.assert_array_equal(vio.read(vio.ImageLocation(path, 2)), values[2])

    def test_descriptor_round_trip_of_every_type(self, tmp_path, rng):
        for dtype in self.dtypes:
            path, values = self._file(tmp_path, rng, (3, 5, 4), 2, dtype, name=f"t-{dtype}")
            assert vio.query_descriptor(path) == vio.ImageDescriptor((3, 5, 4), 2, dtype), dtype
            read = vio.read(path)
            assert read.dtype == np.dtype(dtype)
            np.testing.assert_array_equal(read, values)

    def test_read_as_another_type(self, tmp_path, rng):
        path, values = self._file(tmp_path, rng, (4, 5, 6), 2)
        wide = "complex128" if values.dtype.kind == "c" else "float64"
        np.testing.assert_array_equal(vio.read(path, data_type=wide), values.astype(wide))
        out = np.zeros((5, 6), dtype=wide)
        vio.read(vio.ImageLocation(path, 3), out=out)
        np.testing.assert_array_equal(out, values[3])

    # -------------------------------------------------------------- batches

    def test_runs_into_shuffled_slots(self, tmp_path, rng):
        path, values = self._file(tmp_path, rng, (12, 7, 6), 2)
        indices = [3, 4, 5, 9, 10, 0, 1, 2, 11, 6, 6]
        slots = rng.permutation(len(indices))
        locations = [None] * len(indices)
        for slot, index in zip(slots, indices):
            locations[slot] = vio.ImageLocation(path, index)
        expected = values[[location.index_in_stack for location in locations]]
        for dtype in (values.dtype, np.complex128 if values.dtype.kind == "c" else np.float64):
            destination = np.zeros((len(indices), 7, 6), dtype=dtype)
            vio.read_batch_async(vio.loader(workers=3), destination, locations).get()
            np.testing.assert_array_equal(destination, expected.astype(dtype))
        strided = np.zeros((len(indices), 14, 6), dtype=values.dtype)
        vio.read_batch_async(vio.loader(workers=2), strided[:, 1::2], locations).get()
        np.testing.assert_array_equal(strided[:, 1::2], expected)
        assert not strided[:, ::2].any()

    def test_whole_files_in_a_batch(self, tmp_path, rng):
        first, a = self._file(tmp_path, rng, (3, 5, 4), 2, name="a")
        second, b = self._file(tmp_path, rng, (3, 5, 4), 2, name="b")
        destination = np.zeros((3, 3, 5, 4), dtype=a.dtype)
        vio.read_batch_async(vio.loader(workers=2), destination, [second, first, second]).get()
        np.testing.assert_array_equal(destination, np.stack([b, a, b]))

    def test_patches(self, tmp_path, rng):
        path, values = self._file(tmp_path, rng, (2, 16, 18), 2)
        centres = np.array([[8, 9], [0, 17], [15, 0]])
        destination = np.full((3, 5, 4), 1, dtype=values.dtype)
        vio.read_patches_async(vio.loader(workers=2), destination, vio.ImageLocation(path, 1), centres).get()
        np.testing.assert_array_equal(destination[0], values[1, 6:11, 7:11])
        np.testing.assert_array_equal(destination[1][2:, :3], values[1, 0:3, 15:18])
        assert (destination[1][:2] == 1).all() and (destination[1][:, 3] == 1).all()
        np.testing.assert_array_equal(destination[2][:3, 2:], values[1, 13:16, 0:2])
        assert (destination[2][3:] == 1).all() and (destination[2][:, :2] == 1).all()

    # -------------------------------------------------------------- the reader contract

    def test_reader_contract(self, tmp_path, rng):
        path, values = self._file(tmp_path, rng, (6, 11, 9), 2)
        readers = vio.reader_provider()
        reader = readers.acquire(path)
        try:
            assert reader.key == os.fspath(path)
            assert reader.descriptor == vio.ImageDescriptor((6, 11, 9), 2, values.dtype)
            assert reader.image_count == 6 and tuple(reader.core_extents) == (11, 9)
            outs = [np.zeros((11, 9), values.dtype) for _ in range(3)]
            reader.read_run(2, outs)
            np.testing.assert_array_equal(np.stack(outs), values[2:5])
            out = np.zeros((4, 11, 9), np.complex128)
            reader.read_images(np.array([5, 0, 1, 5]), out, np.array([3, 1, 0, 2]))
            np.testing.assert_array_equal(out, values[[1, 0, 5, 5]])
            region = np.zeros((3, 4), np.float64 if values.dtype.kind != "c" else np.complex128)
            reader.read_region(4, (slice(2, 5), slice(5, 9)), region)
            np.testing.assert_array_equal(region, values[4, 2:5, 5:9])
            with pytest.raises(IndexError, match=path.name):
                reader.read_run(5, [np.zeros((11, 9), values.dtype)] * 2)
            with pytest.raises(IndexError, match=path.name):
                reader.read_region(6, (slice(0, 1), slice(0, 1)), np.zeros((1, 1)))
        finally:
            readers.release(reader)

    def test_volume_regions(self, tmp_path, rng):
        if self._refuses_volumes(tmp_path, rng, (2, 5, 8, 7)):
            return
        path, values = self._file(tmp_path, rng, (2, 5, 8, 7), 3)
        readers = vio.reader_provider()
        reader = readers.acquire(path)
        try:
            out = np.zeros((2, 3, 4), values.dtype)
            reader.read_region(1, (slice(3, 5), slice(5, 8), slice(0, 4)), out)
            np.testing.assert_array_equal(out, values[1, 3:5, 5:8, 0:4])
        finally:
            readers.release(reader)

    # -------------------------------------------------------------- errors

    def test_errors_name_the_file(self, tmp_path, rng):
        path, values = self._file(tmp_path, rng, (3, 32, 32), 2)
        with pytest.raises(IndexError, match=path.name):
            vio.read(vio.ImageLocation(path, 3))
        size = os.path.getsize(path)
        with open(path, "r+b") as file:
            file.truncate(size // 2)
        with pytest.raises((ValueError, OSError, IndexError), match=path.name):
            vio.read(vio.ImageLocation(path, 2))
        (tmp_path / ("empty" + self.extension)).write_bytes(b"")
        with pytest.raises(ValueError, match="empty"):
            vio.read(tmp_path / ("empty" + self.extension))
