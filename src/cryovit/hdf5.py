"""HDF5 tomograms for vitrio: a format plug-in that reads one dataset of an HDF5 file, and a writer.

A CryoViT HDF5 file holds the tomogram under ``data`` and each label volume under ``labels/<name>``.
vitrio names a file by its path alone, so the dataset a reader serves is a property of the format
class: ``Hdf5Format`` (registered with vitrio when this module is imported, so that ``vio.read`` of an
``.h5`` file gives its ``data``) reads ``data``, and ``hdf5_format(name)`` makes the format that reads
dataset ``name`` instead, for a loader or provider made with ``formats=[hdf5_format(name), ...]``. The
two kinds of readers then never share a cache entry, since each provider has its own.

A dataset stored contiguously (h5py's default when it has no chunks or filters) is read like any raw
array of vitrio: memory mapped at the offset HDF5 reports, so a crop copies only its own bytes. A
chunked dataset is read through h5py, a crop as a hyperslab. h5py serialises its calls under a
global lock; reads of such datasets from many threads are safe, one at a time.

A file may come from anyone, so a reader reads its own file and bounds the work it does:

- The dataset must be stored in the file: a dataset with external raw storage, a virtual dataset,
  or a soft or external link on the dataset's path is refused (``FormatError``), since each of them
  reads another file, which could be any file the user can read.
- A chunk of a compressed (filtered) dataset is decoded whole, whatever part of it a read needs.
  The chunks a read touches may decode to at most ``max(DECODE_FLOOR, DECODE_FACTOR * needed)``
  bytes, and the file's chunks to at most ``MAX_RATIO`` times the bytes they are stored in;
  beyond, the read is refused. Decoded chunks are kept (up to ``CHUNK_CACHE`` bytes a reader), so
  the crops of a batch that fall in one chunk decode it once.
- Those bounds count the bytes a chunk declares, so the chunk's stored bytes are decoded here
  rather than by libhdf5 (whose gzip filter inflates whatever a stream holds): each stage of its
  filters may produce the chunk's declared bytes and no more, the inflation streamed and stopped
  there. The filters decoded are gzip (deflate) and shuffle, what h5py writes; a dataset with any
  other filter (szip, lzf, a checksum, a plug-in) is refused.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from typing import Any

import h5py
import numpy as np

import vitrio as vio
from vitrio.formats import ByteSource, FormatError, ImageReader, RawArrayReader, new_file

from ._hdf5_chunks import CHUNK_CACHE, DECODE_FACTOR, DECODE_FLOOR, MAX_RATIO
from ._hdf5_file import image_descriptor, link_kind, malformed, open_file, regular_file, stored_dataset
from ._hdf5_reader import Hdf5DatasetReader

__all__ = [
    "CHUNK_CACHE",
    "DECODE_FACTOR",
    "DECODE_FLOOR",
    "MAX_RATIO",
    "Hdf5Format",
    "hdf5_format",
    "is_hdf5",
    "label_names",
    "write_datasets",
]

_MAGIC = b"\x89HDF\r\n\x1a\n"


@vio.register_format
class Hdf5Format(vio.Format):
    """HDF5 files (``.h5 .hdf5 .hdf``), read as the dataset named by the class attribute ``dataset``.

    A dataset of 2 dimensions is an image, of 3 a volume, of more a stack of volumes. Read only. A
    dataset whose values lie in other files, or that is reached through a soft or external link, is
    refused, and so is a compressed one whose chunks decode to far more than a read needs.
    """

    name = "hdf5"
    read_extensions = (".h5", ".hdf5", ".hdf")
    dataset = "data"

    @classmethod
    def recognizes(cls, head: bytes, extension: str) -> bool:
        return head.startswith(_MAGIC) or extension in cls.read_extensions

    @classmethod
    def open(cls, key: str, source: ByteSource, head: bytes) -> ImageReader:
        file = open_file(key, source)
        try:
            with malformed(key):
                dataset = stored_dataset(key, file, cls.dataset)
                descriptor = image_descriptor(key, cls.dataset, dataset)
                offset = dataset.id.get_offset() if dataset.chunks is None else None
                if offset is None:
                    return Hdf5DatasetReader(key, source, file, dataset, descriptor)
                file_dtype = dataset.dtype
        except BaseException:
            file.close()
            raise
        file.close()
        return RawArrayReader(key, source, descriptor, file_dtype, offset)


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
        OSError: If it is not a regular file (a FIFO, a device).
    """
    with regular_file(path) as fd:
        size = os.fstat(fd).st_size
        offsets = [0] + [512 << k for k in range(48) if 512 << k < size]  # where a user block may end
        return any(os.pread(fd, len(_MAGIC), at) == _MAGIC for at in offsets)


def label_names(path: str | os.PathLike[str]) -> list[str]:
    """The names of the label volumes of an HDF5 file: the entries of its group ``labels``.

    A soft or external link among them is named but not followed (reading it is refused).

    Args:
        path: The HDF5 file.

    Returns:
        The names, sorted; empty if the file has no ``labels`` group.

    Raises:
        FileNotFoundError: If there is no file at ``path``.
        OSError: If the file is not HDF5, or not a regular file.
        FormatError: If ``labels`` is a soft or external link, or the file is malformed.
    """
    with (
        regular_file(path) as fd,
        open(fd, "rb", closefd=False) as stream,
        h5py.File(stream, "r") as file,
        malformed(os.fspath(path)),
    ):
        link = file.get("labels", getlink=True)
        if link is None:
            return []
        kind = link_kind(link)
        if kind is not None:
            raise FormatError(f"{os.fspath(path)}: 'labels' is {kind}; links are not followed")
        group = file["labels"]
        if not isinstance(group, h5py.Group):
            return []
        return sorted(
            name
            for name in group
            if link_kind(group.get(name, getlink=True)) is not None or isinstance(group[name], h5py.Dataset)
        )


def write_datasets(path: str | os.PathLike[str], arrays: Mapping[str, Any]) -> None:
    """Writes arrays as the datasets of a new HDF5 file, contiguous and uncompressed.

    The file is made beside ``path`` under an unguessable name, exclusively and without following
    links, and moved onto ``path`` once complete, so a failed write leaves nothing at ``path``.

    Args:
        path: The file to write; its folder must exist.
        arrays: The dataset path (such as ``"preds"`` or ``"labels/mito"``) and values of each dataset.

    Raises:
        FileNotFoundError: If the folder of ``path`` does not exist.
    """
    with new_file(path) as partial, partial.file() as stream, h5py.File(stream, "w") as file:
        for name, values in arrays.items():
            file.create_dataset(name, data=np.asarray(values))
