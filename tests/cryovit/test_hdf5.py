"""Tests of cryovit.hdf5: the vitrio format plug-in that reads a dataset of an HDF5 file, and its writer."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

import vitrio as vio
from cryovit.hdf5 import Hdf5Format, hdf5_format, is_hdf5, label_names, write_datasets

LAYOUTS = {
    "contiguous": {},
    "chunked": {"chunks": (2, 3, 4)},
    "gzip": {"chunks": (3, 5, 5), "compression": "gzip"},
}


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(99)


def h5_file(path: Path, **datasets: tuple[np.ndarray, dict]) -> Path:
    with h5py.File(path, "w") as file:
        for name, (values, options) in datasets.items():
            file.create_dataset(name.replace("__", "/"), data=values, **options)
    return path


@pytest.mark.parametrize("layout", LAYOUTS)
def test_vitrio_reads_the_data_of_an_hdf5_file(tmp_path: Path, rng: np.random.Generator, layout: str) -> None:
    values = rng.standard_normal((5, 7, 9)).astype(np.float32)
    path = h5_file(tmp_path / "t.hdf5", data=(values, LAYOUTS[layout]))
    assert vio.query_descriptor(path) == vio.ImageDescriptor((5, 7, 9), 3, "float32")
    np.testing.assert_array_equal(vio.read(path), values)
    np.testing.assert_array_equal(vio.read(path, data_type="float64"), values.astype(np.float64))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_patches_are_the_numpy_slices(tmp_path: Path, rng: np.random.Generator, layout: str) -> None:
    values = rng.integers(-1000, 1000, (5, 7, 9)).astype(np.int16)
    path = h5_file(tmp_path / "t.h5", data=(values, LAYOUTS[layout]))
    centres = np.array([[2, 3, 4], [0, 0, 0], [4, 6, 8]])
    out = np.full((3, 3, 4, 4), -1, np.float32)
    vio.read_patches_async(vio.loader(workers=2), out, path, centres).get()
    np.testing.assert_array_equal(out[0], values[1:4, 1:5, 2:6])
    # patches over the edge: what lies outside keeps what the destination held
    np.testing.assert_array_equal(out[1, 1:, 2:, 2:], values[:2, :2, :2])
    assert (out[1, 0] == -1).all()
    np.testing.assert_array_equal(out[2, :2, :3, :3], values[3:, 4:, 6:])
    assert (out[2, 2:] == -1).all()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_stack_of_volumes(tmp_path: Path, rng: np.random.Generator, layout: str) -> None:
    values = rng.standard_normal((3, 4, 5, 6)).astype(np.float32)
    options = {k: (1, *v) if k == "chunks" else v for k, v in LAYOUTS[layout].items()}
    path = h5_file(tmp_path / "stack.h5", data=(values, options))
    assert vio.query_descriptor(path) == vio.ImageDescriptor((3, 4, 5, 6), 3, "float32")
    out = np.empty((2, 4, 5, 6), np.float32)
    vio.read_batch_async(
        vio.loader(workers=1), out, [vio.ImageLocation(path, 2), vio.ImageLocation(path, 0)]
    ).get()
    np.testing.assert_array_equal(out, values[[2, 0]])
    patch = np.empty((1, 2, 3, 4), np.float32)
    vio.read_patches_async(vio.loader(workers=1), patch, vio.ImageLocation(path, 1), [[2, 2, 3]]).get()
    np.testing.assert_array_equal(patch[0], values[1, 1:3, 1:4, 1:5])


@pytest.mark.parametrize("layout", ["contiguous", "gzip"])
def test_the_format_of_another_dataset(tmp_path: Path, rng: np.random.Generator, layout: str) -> None:
    mito = rng.random((4, 5, 6)) > 0.5
    path = h5_file(
        tmp_path / "t.h5", data=(np.zeros((4, 5, 6), np.float32), {}), labels__mito=(mito, LAYOUTS[layout])
    )
    labels = hdf5_format("labels/mito")
    assert issubclass(labels, Hdf5Format) and labels is hdf5_format("labels/mito")
    assert hdf5_format("data") is Hdf5Format and labels.dataset == "labels/mito"
    read = vio.read(path, readers=vio.reader_provider(formats=[labels]))
    assert read.dtype == np.bool_
    np.testing.assert_array_equal(read, mito)
    assert not vio.read(path).any()


def test_a_missing_dataset_names_the_file_and_those_there_are(tmp_path: Path) -> None:
    path = h5_file(tmp_path / "t.h5", volume=(np.zeros((2, 3, 4), np.float32), {}))
    with pytest.raises(vio.FormatError, match=r"t\.h5.*'data'.*\['volume'\]"):
        vio.read(path)
    flat = h5_file(tmp_path / "flat.h5", data=(np.zeros(5, np.float32), {}))
    with pytest.raises(vio.FormatError, match="not an image or volume"):
        vio.read(flat)


def test_a_broken_hdf5_file_is_a_format_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.h5"
    path.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(100))
    with pytest.raises(vio.FormatError, match="broken"):
        vio.read(path)


def test_label_names_and_is_hdf5(tmp_path: Path) -> None:
    zeros = (np.zeros((2, 2, 2), np.uint8), {})
    path = h5_file(tmp_path / "t.h5", data=zeros, labels__mito=zeros, labels__granule=zeros)
    assert label_names(path) == ["granule", "mito"]
    assert label_names(h5_file(tmp_path / "plain.h5", data=zeros)) == []
    other = tmp_path / "t.mrc"
    vio.write_single(np.zeros((2, 2, 2), np.float32), other)
    assert is_hdf5(path) and not is_hdf5(other)
    with pytest.raises(FileNotFoundError, match="missing.h5: no such file"):
        is_hdf5(tmp_path / "missing.h5")
    with pytest.raises(FileNotFoundError, match="missing.h5: no such file"):
        label_names(tmp_path / "missing.h5")


def test_write_datasets(tmp_path: Path, rng: np.random.Generator) -> None:
    values = rng.standard_normal((3, 4, 5)).astype(np.float32)
    path = tmp_path / "out.hdf5"
    write_datasets(path, {"data": values, "labels/mito": values > 0})
    with h5py.File(path, "r") as file:
        np.testing.assert_array_equal(file["data"][()], values)
        np.testing.assert_array_equal(file["labels/mito"][()], values > 0)
        assert file["data"].chunks is None
    with pytest.raises(TypeError):
        write_datasets(tmp_path / "failed.hdf5", {"data": values, "bad": np.array([object()])})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.hdf5"]
