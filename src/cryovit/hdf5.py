"""HDF5 tomograms for vitrio: a format plug-in that reads one dataset of an HDF5 file, and a writer.

A CryoViT HDF5 file holds the tomogram under ``data`` and each label volume under ``labels/<name>``.
vitrio names a file by its path alone, so the dataset a reader serves is a property of the format
class: ``Hdf5Format`` (registered with vitrio when this module is imported, so that ``vio.read`` of an
``.h5`` file gives its ``data``) reads ``data``, and ``hdf5_format(name)`` makes the format that reads
dataset ``name`` instead, for a loader or provider made with ``formats=[hdf5_format(name), ...]``. The
two kinds of readers then never share a cache entry, since each provider has its own.

A dataset stored contiguously (h5py's default when it has no chunks or filters) is read like any raw
array of vitrio: memory mapped at the offset HDF5 reports, so a crop copies only its own bytes. A
chunked or compressed dataset is read through h5py, whose ``read_region`` selects the crop as a
hyperslab, so HDF5 decodes only the chunks the crop touches. h5py serialises its calls under a global
lock; reads of such datasets from many threads are safe, one at a time.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import h5py
import numpy as np

import vitrio as vio
from vitrio.formats import FormatError, ImageReader, RawArrayReader

__all__ = ["Hdf5Format", "hdf5_format", "is_hdf5", "label_names", "write_datasets"]

_MAGIC = b"\x89HDF\r\n\x1a\n"


def _descriptor(key: str, name: str, dataset: h5py.Dataset) -> vio.ImageDescriptor:
    if dataset.ndim < 2:
        raise FormatError(f"{key}: dataset {name!r} of shape {dataset.shape} is not an image or volume")
    try:
        return vio.ImageDescriptor(dataset.shape, min(dataset.ndim, 3), dataset.dtype)
    except (TypeError, ValueError) as error:
        raise FormatError(f"{key}: dataset {name!r} holds values of type {dataset.dtype}") from error


class _Hdf5DatasetReader(ImageReader):
    """Reads a chunked, compressed or unallocated dataset through h5py, crops as hyperslabs."""

    def __init__(
        self, key: str, fd: int, file: h5py.File, dataset: h5py.Dataset, descriptor: vio.ImageDescriptor
    ):
        super().__init__(key, descriptor)
        self._fd = fd  # owned as the format contract says; h5py reads through a handle of its own
        self._file = file
        self._dataset = dataset
        self._whole = tuple(slice(None) for _ in descriptor.core_extents)

    def _stack_index(self, index: int) -> tuple[int, ...]:
        stack = self.descriptor.stack_extents
        return tuple(int(i) for i in np.unravel_index(index, stack)) if stack else ()

    def _read(self, selection: tuple[int | slice, ...], out: np.ndarray) -> None:
        numeric = out.dtype.kind in "iuf" and self._dataset.dtype.kind in "iuf"
        if numeric and out.flags.c_contiguous:
            self._dataset.read_direct(out, selection)
        else:
            np.copyto(out, self._dataset[selection], casting="unsafe")

    def read_run(self, start: int, outs: Sequence[np.ndarray]) -> None:
        self.check_run(start, len(outs))
        for i, out in enumerate(outs):
            self._read(self._stack_index(start + i) + self._whole, out)

    def read_region(self, index: int, region: tuple[slice, ...], out: np.ndarray) -> None:
        self.check_run(index, 1)
        self._read(self._stack_index(index) + tuple(region), out)

    def close(self) -> None:
        self._file.close()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


@vio.register_format
class Hdf5Format(vio.Format):
    """HDF5 files (``.h5 .hdf5 .hdf``), read as the dataset named by the class attribute ``dataset``.

    A dataset of 2 dimensions is an image, of 3 a volume, of more a stack of volumes. Read only.
    """

    name = "hdf5"
    read_extensions = (".h5", ".hdf5", ".hdf")
    dataset = "data"

    @classmethod
    def recognizes(cls, head: bytes, extension: str) -> bool:
        return head.startswith(_MAGIC) or extension in cls.read_extensions

    @classmethod
    def open(cls, key: str, fd: int, head: bytes) -> ImageReader:
        try:
            file = h5py.File(key, "r")
        except OSError as error:
            raise FormatError(f"{key}: not a readable HDF5 file: {error}") from error
        try:
            dataset = file.get(cls.dataset)
            if not isinstance(dataset, h5py.Dataset):
                raise FormatError(f"{key}: no dataset {cls.dataset!r}; the file holds {_names(file)}")
            descriptor = _descriptor(key, cls.dataset, dataset)
            offset = dataset.id.get_offset() if dataset.chunks is None and not dataset.is_virtual else None
            if offset is None:
                return _Hdf5DatasetReader(key, fd, file, dataset, descriptor)
            file_dtype = dataset.dtype
        except BaseException:
            file.close()
            raise
        file.close()
        return RawArrayReader(key, fd, descriptor, file_dtype, offset)


def _names(file: h5py.File) -> list[str]:
    names: list[str] = []
    file.visititems(lambda name, item: names.append(name) if isinstance(item, h5py.Dataset) else None)
    return names


@functools.cache
def hdf5_format(dataset: str = "data") -> type[Hdf5Format]:
    """The format that reads HDF5 files as their dataset ``dataset``; not registered.

    Args:
        dataset: The path of the dataset in the file, such as ``"labels/mito"``.

    Returns:
        ``Hdf5Format`` for ``"data"``, otherwise a subclass of it (the same one for the same name).
    """
    if dataset == Hdf5Format.dataset:
        return Hdf5Format
    doc = f"HDF5 files, read as their dataset {dataset!r}."
    return type(f"Hdf5Format[{dataset}]", (Hdf5Format,), {"dataset": dataset, "__doc__": doc})


def is_hdf5(path: str | os.PathLike[str]) -> bool:
    """Whether the file at ``path`` is an HDF5 file, by its contents.

    Args:
        path: The file.

    Returns:
        True for an HDF5 file, False for any other file.

    Raises:
        FileNotFoundError: If there is no file at ``path``.
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{os.fspath(path)}: no such file")
    return bool(h5py.is_hdf5(path))


def label_names(path: str | os.PathLike[str]) -> list[str]:
    """The names of the label volumes of an HDF5 file: the datasets of its group ``labels``.

    Args:
        path: The HDF5 file.

    Returns:
        The names, sorted; empty if the file has no ``labels`` group.

    Raises:
        FileNotFoundError: If there is no file at ``path``.
        OSError: If the file is not HDF5.
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{os.fspath(path)}: no such file")
    with h5py.File(path, "r") as file:
        group = file.get("labels")
        if not isinstance(group, h5py.Group):
            return []
        return sorted(name for name, item in group.items() if isinstance(item, h5py.Dataset))


def write_datasets(path: str | os.PathLike[str], arrays: Mapping[str, Any]) -> None:
    """Writes arrays as the datasets of a new HDF5 file, contiguous and uncompressed.

    The file is written beside ``path`` and moved onto it once complete, so a failed write leaves
    nothing at ``path``.

    Args:
        path: The file to write; its folder must exist.
        arrays: The dataset path (such as ``"preds"`` or ``"labels/mito"``) and values of each dataset.
    """
    target = Path(path)
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    try:
        with h5py.File(partial, "w") as file:
            for name, values in arrays.items():
                file.create_dataset(name, data=np.asarray(values))
        os.replace(partial, target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
