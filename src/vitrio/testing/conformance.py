"""The conformance suites, as zarr ships its store tests: one test class per contract, subclassed per
format and per reader provider, here and in a plug-in's own tests. Needs pytest.

`FormatConformance` is what every format with files to read must do;
`ProviderConformance` what every reader provider must do (and, in
`vitrio.testing.wrapping`, `WrapperConformance` what a provider in front of
another passes on). A subclass named
`Test...` in a test module runs the suite; it sets the class attributes
that describe what it tests and overrides the hooks (`make`, `readers`,
`provider`...) where the defaults do not fit. Every test goes through the
public API, or through the reader contract of `vitrio.formats`
(`read_run`, `read_images`, `read_region`) as a provider hands readers out.
Each test reads with warnings of type `vitrio.FormatWarning` as errors: a
well-made file reads without one.
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

import vitrio as vio

__all__ = ["FormatConformance", "ProviderConformance", "sample"]


def sample(rng: np.random.Generator, shape: tuple[int, ...], dtype) -> np.ndarray:
    """Values of `dtype` that every type conversion keeps apart (small integers, eighths, complex pairs).

    Args:
        rng: Where the values come from.
        shape: The shape of the array.
        dtype: Any numeric numpy type, or bool.

    Returns:
        The array.
    """
    dtype = np.dtype(dtype)
    if dtype.kind == "c":
        return (rng.integers(-99, 99, size=shape) + 1j * rng.integers(-99, 99, size=shape)).astype(dtype)
    if dtype.kind == "f":
        return (rng.integers(-999, 999, size=shape) / 8).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -999), min(info.max, 999), size=shape, endpoint=True).astype(dtype)


def _wide(dtype: np.dtype) -> np.dtype:
    """The type any value of `dtype` converts to exactly: complex128 or float64."""
    return np.dtype(np.complex128 if dtype.kind == "c" else np.float64)


class FormatConformance:
    """What every format with files to read must do. Subclass it as `TestSomething` to run it.

    Class attributes:
        extension: The extension of the files made.
        dtypes: The types the format holds exactly; the first is used where one type will do.
        volumes: Whether the format holds volumes and stacks of volumes; if not, making one must
            raise ValueError and leave no file.
        image_is_stack: Whether a single image reads back as a stack of one (as a `.mrcs` file does).
        item_rank: The rank of the items of the stacks the tests make: 2 (images), or 3 for a format
            whose stacks hold volumes only.

    Hooks:
        make: Makes a file of given values; vitrio's writer by default. A read-only format makes
            its files with an independent writer.
        sample: The values a test stores; `sample` by default.
        readers: The provider the tests read through; `vitrio.reader_provider()` by default.
    """

    pytestmark: ClassVar = [pytest.mark.filterwarnings("error::vitrio.FormatWarning")]

    extension: ClassVar[str]
    dtypes: ClassVar[tuple[str, ...]] = ("float32",)
    volumes: ClassVar[bool] = True
    image_is_stack: ClassVar[bool] = False
    item_rank: ClassVar[int] = 2

    # -------------------------------------------------------------- hooks

    def make(self, path: Path, values: np.ndarray, core_rank: int) -> None:
        """Make a file at `path` holding `values`, the last `core_rank` axes one image or volume.

        Raises:
            ValueError: If the format cannot hold such values (and then no file is left).
        """
        vio.write(values, path, vio.ImageDescriptor(values.shape, core_rank, values.dtype))

    def sample(self, rng: np.random.Generator, shape: tuple[int, ...], dtype) -> np.ndarray:
        """The values a test stores in a file: `sample`'s."""
        return sample(rng, shape, dtype)

    def readers(self, paths: Sequence[Path]) -> vio.ImageReaderProvider:
        """The provider the tests read the files at `paths` through, once they are made."""
        return vio.reader_provider()

    @pytest.fixture
    def rng(self) -> np.random.Generator:
        """The generator of the values of one test."""
        return np.random.default_rng(20141)

    # -------------------------------------------------------------- helpers

    def _core(self, rows: int, columns: int) -> tuple[int, ...]:
        """The extents of an item of a stack of `rows` x `columns` (and 3 sections, for volumes)."""
        return (rows, columns) if self.item_rank == 2 else (3, rows, columns)

    def _region(self, rows: slice, columns: slice) -> tuple[slice, ...]:
        """A box of an item, of those rows and columns (and sections 1 to 2, for volumes)."""
        return (rows, columns) if self.item_rank == 2 else (slice(1, 3), rows, columns)

    def _file(self, tmp_path: Path, rng, shape, core_rank: int, dtype=None, name: str = "f"):
        values = self.sample(rng, shape, dtype or self.dtypes[0])
        path = tmp_path / (name + self.extension)
        self.make(path, values, core_rank)
        return path, values

    def _stack(self, tmp_path: Path, rng, count: int, rows: int, columns: int, dtype=None, name: str = "f"):
        shape = (count, *self._core(rows, columns))
        return self._file(tmp_path, rng, shape, self.item_rank, dtype, name)

    def _read(self, key, **options) -> np.ndarray:
        path = Path(key.key if isinstance(key, vio.ImageLocation) else key)
        return vio.read(key, readers=self.readers([path]), **options)

    def _loader(self, paths: Sequence[Path], workers: int) -> vio.ImageLoader:
        return vio.ImageLoader(vio.ThreadPoolExecutor(workers), self.readers(paths))

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
        assert vio.query_descriptor(path, self.readers([path])) == vio.ImageDescriptor(
            extents, 2, values.dtype
        )
        np.testing.assert_array_equal(self._read(path), values.reshape(extents))

    def test_stack(self, tmp_path, rng):
        path, values = self._stack(tmp_path, rng, 5, 13, 17)
        expected = vio.ImageDescriptor(values.shape, self.item_rank, values.dtype)
        assert vio.query_descriptor(path, self.readers([path])) == expected
        np.testing.assert_array_equal(self._read(path), values)
        for index in range(5):
            np.testing.assert_array_equal(self._read(vio.ImageLocation(path, index)), values[index])

    def test_volume(self, tmp_path, rng):
        if self._refuses_volumes(tmp_path, rng, (6, 13, 17)):
            return
        path, values = self._file(tmp_path, rng, (6, 13, 17), 3)
        expected = vio.ImageDescriptor((6, 13, 17), 3, values.dtype)
        assert vio.query_descriptor(path, self.readers([path])) == expected
        np.testing.assert_array_equal(self._read(path), values)

    def test_volume_stack(self, tmp_path, rng):
        if self._refuses_volumes(tmp_path, rng, (3, 4, 9, 7)):
            return
        path, values = self._file(tmp_path, rng, (3, 4, 9, 7), 3)
        expected = vio.ImageDescriptor((3, 4, 9, 7), 3, values.dtype)
        assert vio.query_descriptor(path, self.readers([path])) == expected
        np.testing.assert_array_equal(self._read(path), values)
        np.testing.assert_array_equal(self._read(vio.ImageLocation(path, 2)), values[2])

    def test_descriptor_round_trip_of_every_type(self, tmp_path, rng):
        for dtype in self.dtypes:
            path, values = self._stack(tmp_path, rng, 3, 5, 4, dtype, name=f"t-{dtype}")
            expected = vio.ImageDescriptor(values.shape, self.item_rank, dtype)
            assert vio.query_descriptor(path, self.readers([path])) == expected, dtype
            read = self._read(path)
            assert read.dtype == np.dtype(dtype)
            np.testing.assert_array_equal(read, values)

    def test_read_as_another_type(self, tmp_path, rng):
        path, values = self._stack(tmp_path, rng, 4, 5, 6)
        wide = _wide(values.dtype)
        np.testing.assert_array_equal(self._read(path, data_type=wide), values.astype(wide))
        out = np.zeros(self._core(5, 6), dtype=wide)
        self._read(vio.ImageLocation(path, 3), out=out)
        np.testing.assert_array_equal(out, values[3])

    # -------------------------------------------------------------- batches

    def test_runs_into_shuffled_slots(self, tmp_path, rng):
        path, values = self._stack(tmp_path, rng, 12, 7, 6)
        indices = [3, 4, 5, 9, 10, 0, 1, 2, 11, 6, 6]
        slots = rng.permutation(len(indices))
        locations = [None] * len(indices)
        for slot, index in zip(slots, indices):
            locations[slot] = vio.ImageLocation(path, index)
        expected = values[[location.index_in_stack for location in locations]]
        for dtype in (values.dtype, _wide(values.dtype)):
            destination = np.zeros((len(indices), *self._core(7, 6)), dtype=dtype)
            vio.read_batch_async(self._loader([path], 3), destination, locations).get()
            np.testing.assert_array_equal(destination, expected.astype(dtype))
        strided = np.zeros((len(indices), *self._core(14, 6)), dtype=values.dtype)
        vio.read_batch_async(self._loader([path], 2), strided[..., 1::2, :], locations).get()
        np.testing.assert_array_equal(strided[..., 1::2, :], expected)
        assert not strided[..., ::2, :].any()

    def test_whole_files_in_a_batch(self, tmp_path, rng):
        first, a = self._stack(tmp_path, rng, 3, 5, 4, name="a")
        second, b = self._stack(tmp_path, rng, 3, 5, 4, name="b")
        destination = np.zeros((3, *a.shape), dtype=a.dtype)
        vio.read_batch_async(self._loader([first, second], 2), destination, [second, first, second]).get()
        np.testing.assert_array_equal(destination, np.stack([b, a, b]))

    def test_patches(self, tmp_path, rng):
        path, values = self._stack(tmp_path, rng, 2, 16, 18)
        centres = np.array([[8, 9], [0, 17], [15, 0]])
        patch = (5, 4)
        if self.item_rank == 3:  # patches one section deep, of the middle section
            centres = np.concatenate([np.ones((3, 1), int), centres], axis=1)
            patch = (1, *patch)
        destination = np.full((3, *patch), 1, dtype=values.dtype)
        location = vio.ImageLocation(path, 1)
        vio.read_patches_async(self._loader([path], 2), destination, location, centres).get()
        planes, image = (destination[:, 0], values[1, 1]) if self.item_rank == 3 else (destination, values[1])
        np.testing.assert_array_equal(planes[0], image[6:11, 7:11])
        np.testing.assert_array_equal(planes[1][2:, :3], image[0:3, 15:18])
        assert (planes[1][:2] == 1).all() and (planes[1][:, 3] == 1).all()
        np.testing.assert_array_equal(planes[2][:3, 2:], image[13:16, 0:2])
        assert (planes[2][3:] == 1).all() and (planes[2][:, :2] == 1).all()

    # -------------------------------------------------------------- the reader contract

    def test_reader_contract(self, tmp_path, rng):
        path, values = self._stack(tmp_path, rng, 6, 11, 9)
        core = self._core(11, 9)
        readers = self.readers([path])
        reader = readers.acquire(path)
        try:
            assert reader.key == os.fspath(path)
            assert reader.descriptor == vio.ImageDescriptor(values.shape, self.item_rank, values.dtype)
            assert reader.image_count == 6 and tuple(reader.core_extents) == core
            outs = [np.zeros(core, values.dtype) for _ in range(3)]
            reader.read_run(2, outs)
            np.testing.assert_array_equal(np.stack(outs), values[2:5])
            out = np.zeros((4, *core), _wide(values.dtype))
            reader.read_images(np.array([5, 0, 1, 5]), out, np.array([3, 1, 0, 2]))
            np.testing.assert_array_equal(out, values[[1, 0, 5, 5]])
            region = self._region(slice(2, 5), slice(5, 9))
            box = np.zeros(values[4][region].shape, _wide(values.dtype))
            reader.read_region(4, region, box)
            np.testing.assert_array_equal(box, values[4][region])
            with pytest.raises(IndexError, match=path.name):
                reader.read_run(5, [np.zeros(core, values.dtype)] * 2)
            corner = self._region(slice(0, 1), slice(0, 1))
            with pytest.raises(IndexError, match=path.name):
                reader.read_region(6, corner, np.zeros(values[0][corner].shape))
        finally:
            readers.release(reader)

    def test_volume_regions(self, tmp_path, rng):
        if self._refuses_volumes(tmp_path, rng, (2, 5, 8, 7)):
            return
        path, values = self._file(tmp_path, rng, (2, 5, 8, 7), 3)
        readers = self.readers([path])
        reader = readers.acquire(path)
        try:
            out = np.zeros((2, 3, 4), values.dtype)
            reader.read_region(1, (slice(3, 5), slice(5, 8), slice(0, 4)), out)
            np.testing.assert_array_equal(out, values[1, 3:5, 5:8, 0:4])
        finally:
            readers.release(reader)

    def test_a_reader_closed_leaves_no_file_open(self, tmp_path, rng):
        """A reader owns the byte source it is opened with, and closing it lets the file go."""
        path, values = self._stack(tmp_path, rng, 3, 8, 8)
        with vio.formats.open_reader(path) as reader:
            out = np.zeros((3, *self._core(8, 8)), values.dtype)
            reader.read_run(0, list(out))
        np.testing.assert_array_equal(out, values)
        assert ProviderConformance._open_files(tmp_path) == 0

    # -------------------------------------------------------------- errors

    def test_errors_name_the_file(self, tmp_path, rng):
        path, values = self._stack(tmp_path, rng, 3, 32, 32)
        with pytest.raises(IndexError, match=path.name):
            self._read(vio.ImageLocation(path, 3))
        size = os.path.getsize(path)
        with open(path, "r+b") as file:
            file.truncate(size // 2)
        with pytest.raises((ValueError, OSError, IndexError), match=path.name):
            self._read(vio.ImageLocation(path, 2))
        empty = tmp_path / ("empty" + self.extension)
        empty.write_bytes(b"")
        with pytest.raises(ValueError, match=empty.name):
            self._read(empty)


class ProviderConformance:
    """What every reader provider must do. Subclass it as `TestSomething` to run it.

    The provider is made by the hook `provider` over files `make` makes (a
    stack of images in a `.mrcs` file by default); it must serve them right
    from many threads, refuse what it cannot serve naming the file, and
    keep no file open that it does not account for.

    Class attributes:
        extension: The extension of the files `make` makes.
        file_count: How many files the tests make.
    """

    pytestmark: ClassVar = [pytest.mark.filterwarnings("error::vitrio.FormatWarning")]

    extension: ClassVar[str] = ".mrcs"
    file_count: ClassVar[int] = 3

    # -------------------------------------------------------------- hooks

    def provider(self, paths: Sequence[Path]) -> vio.ImageReaderProvider:
        """The provider under test, over the files at `paths` (made by `make`)."""
        raise NotImplementedError

    def make(self, path: Path, rng: np.random.Generator) -> np.ndarray:
        """Make a file at `path`; return the stack of images a reader of it from `provider` serves."""
        values = sample(rng, (4, 12, 10), np.float32)
        vio.write_stack(values, path)
        return values

    @pytest.fixture
    def rng(self) -> np.random.Generator:
        """The generator of the values of one test."""
        return np.random.default_rng(20141)

    @pytest.fixture
    def files(self, tmp_path: Path, rng) -> dict[Path, np.ndarray]:
        """The files of one test, and what they hold."""
        made = {}
        for number in range(self.file_count):
            path = tmp_path / f"{number}{self.extension}"
            made[path] = self.make(path, rng)
        return made

    # -------------------------------------------------------------- helpers

    @staticmethod
    def _read_all(provider: vio.ImageReaderProvider, key) -> np.ndarray:
        """Every image of the file at `key`, through one reader of `provider`."""
        reader = provider.acquire(key)
        try:
            out = np.empty((reader.image_count, *reader.core_extents), reader.descriptor.data_type.value)
            reader.read_run(0, list(out))
            return out
        finally:
            provider.release(reader)

    @staticmethod
    def _open_files(folder: Path) -> int:
        """How many descriptors of this process are open on files in `folder` (other threads of the
        process, a test's leftovers among them, open and close files elsewhere meanwhile)."""
        count = 0
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                count += os.readlink(f"/proc/self/fd/{fd}").startswith(f"{folder}{os.sep}")
        return count

    # -------------------------------------------------------------- serving

    def test_serves_each_file_by_its_key(self, files):
        provider = self.provider(list(files))
        for path, values in files.items():
            for key in (path, str(path)):
                reader = provider.acquire(key)
                try:
                    assert reader.key == os.fspath(path)
                    assert reader.image_count == len(values)
                    assert tuple(reader.core_extents) == values.shape[1:]
                finally:
                    provider.release(reader)
            np.testing.assert_array_equal(self._read_all(provider, path), values)

    def test_query_descriptor(self, files):
        provider = self.provider(list(files))
        for path, values in files.items():
            descriptor = provider.query_descriptor(path)
            assert descriptor.extents == values.shape and descriptor.core_rank == 2
            reader = provider.acquire(path)
            try:
                assert reader.descriptor == descriptor
            finally:
                provider.release(reader)

    def test_one_file_held_twice(self, files):
        """A reader stays usable while held, whatever becomes of another reader of its file."""
        provider = self.provider(list(files))
        path, values = next(iter(files.items()))
        first = provider.acquire(path)
        second = provider.acquire(path)
        for reader in (first, second):
            try:
                out = np.empty((len(values), *values.shape[1:]), reader.descriptor.data_type.value)
                reader.read_run(0, list(out))
                np.testing.assert_array_equal(out, values)
            finally:
                provider.release(reader)
        np.testing.assert_array_equal(self._read_all(provider, path), values)

    def test_a_loader_reads_through_it(self, files, rng):
        provider = self.provider(list(files))
        locations = [vio.ImageLocation(p, i) for p, v in files.items() for i in range(len(v))]
        order = rng.permutation(len(locations))
        chosen = [locations[i] for i in order]
        by_key = {os.fspath(path): values for path, values in files.items()}
        expected = np.stack([by_key[location.key][location.index_in_stack] for location in chosen])
        out = np.zeros(expected.shape, np.float64)
        loader = vio.ImageLoader(vio.ThreadPoolExecutor(3), provider)
        vio.read_batch_async(loader, out, chosen).get()
        np.testing.assert_array_equal(out, expected)

    def test_many_threads_at_once(self, files, rng):
        provider = self.provider(list(files))
        paths = list(files)
        draws = rng.integers(0, len(paths), size=(8, 40))
        failures: list[BaseException] = []
        start = threading.Barrier(len(draws))

        def work(picks: np.ndarray) -> None:
            try:
                start.wait()
                for pick in picks.tolist():
                    np.testing.assert_array_equal(self._read_all(provider, paths[pick]), files[paths[pick]])
            except BaseException as error:  # noqa: BLE001 - handed to the test's thread
                failures.append(error)

        threads = [threading.Thread(target=work, args=(picks,)) for picks in draws]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not failures, failures[0]

    # -------------------------------------------------------------- failures and files

    def test_a_missing_file_is_named(self, files, tmp_path):
        provider = self.provider(list(files))
        gone = tmp_path / ("gone" + self.extension)
        for _ in range(2):
            with pytest.raises(FileNotFoundError, match=gone.name):
                provider.acquire(gone)
        path, values = next(iter(files.items()))
        np.testing.assert_array_equal(self._read_all(provider, path), values)

    def test_a_file_of_no_format_is_named(self, files, tmp_path):
        provider = self.provider(list(files))
        junk = tmp_path / "junk.bin"
        junk.write_bytes(b"not an image " * 100)
        with pytest.raises(ValueError, match=junk.name):
            provider.acquire(junk)

    def test_no_file_left_open(self, files):
        gc.collect()  # what earlier tests left for the collector to close
        folder = next(iter(files)).parent
        before = self._open_files(folder)
        provider = self.provider(list(files))
        made = self._open_files(folder)
        for _ in range(2):
            for path in files:
                self._read_all(provider, path)
        settled = self._open_files(folder)
        assert settled - made <= len(files), f"{settled - made} more files open after serving {len(files)}"
        for _ in range(20):
            for path in files:
                self._read_all(provider, path)
        assert self._open_files(folder) == settled, "files opened anew stay open"
        del provider
        gc.collect()
        assert self._open_files(folder) == before, "dropping the provider leaves files open, or closes others"
