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

import collections
import contextlib
import functools
import itertools
import math
import os
import threading
import zlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import h5py
import numpy as np

import vitrio as vio
from vitrio.formats import FormatError, ImageReader, RawArrayReader, new_file, open_readonly

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

DECODE_FLOOR = 64 << 20
"""Bytes of compressed chunks any read may decode, however little of them it needs."""

DECODE_FACTOR = 64
"""How many times the bytes a read needs its compressed chunks may decode to, above ``DECODE_FLOOR``."""

MAX_RATIO = 4096
"""The most bytes a file's compressed chunks may decode to per byte stored (deflate reaches ~1032)."""

CHUNK_CACHE = 64 << 20
"""Bytes of decoded chunks a reader keeps, most recently used first."""


_DECODED_FILTERS = {h5py.h5z.FILTER_DEFLATE: "gzip", h5py.h5z.FILTER_SHUFFLE: "shuffle"}

_H5PY_ERRORS = (OSError, RuntimeError, KeyError, ValueError, TypeError, SystemError)
"""What h5py raises for a malformed file: libhdf5's errors, as whichever of these it maps them to, and
``SystemError`` for one raised in a callback (such as a link name that is not UTF-8)."""


@contextlib.contextmanager
def _malformed(key: str) -> Iterator[None]:
    """Turns what h5py raises for a malformed file into a ``FormatError`` naming the file."""
    try:
        yield
    except FormatError:
        raise
    except _H5PY_ERRORS as error:
        raise FormatError(f"{key}: malformed HDF5 file: {error}") from error


def _descriptor(key: str, name: str, dataset: h5py.Dataset) -> vio.ImageDescriptor:
    if dataset.ndim < 2:
        raise FormatError(f"{key}: dataset {name!r} of shape {dataset.shape} is not an image or volume")
    try:
        return vio.ImageDescriptor(dataset.shape, min(dataset.ndim, 3), dataset.dtype)
    except (TypeError, ValueError) as error:
        raise FormatError(f"{key}: dataset {name!r} holds values of type {dataset.dtype}") from error


def _link_kind(link: Any) -> str | None:
    """What a link that is not a hard link points at, or None for a hard link."""
    if isinstance(link, h5py.SoftLink):
        return f"a soft link to {link.path!r}"
    if isinstance(link, h5py.ExternalLink):
        return f"an external link to {link.path!r} in {link.filename!r}"
    return None


def _stored_dataset(key: str, file: h5py.File, name: str) -> h5py.Dataset:
    """Dataset ``name`` of ``file``, reached through hard links only and stored in the file itself.

    Raises:
        FormatError: If there is no such dataset, a link on its path is soft or external, or its
            values lie in other files (external raw storage, a virtual dataset).
    """
    node: Any = file
    parts = [part for part in name.split("/") if part]
    for depth, part in enumerate(parts):
        link = node.get(part, getlink=True) if isinstance(node, h5py.Group) else None
        if link is None:
            raise FormatError(f"{key}: no dataset {name!r}; the file holds {_names(file)}")
        kind = _link_kind(link)
        if kind is not None:
            path = "/".join(parts[: depth + 1])
            raise FormatError(f"{key}: {path!r} is {kind}; links out of the dataset's path are not followed")
        node = node[part]
    if not isinstance(node, h5py.Dataset):
        raise FormatError(f"{key}: no dataset {name!r}; the file holds {_names(file)}")
    if node.is_virtual:
        raise FormatError(f"{key}: dataset {name!r} is virtual, mapped from other files, which are not read")
    if node.external:
        files = sorted({os.fsdecode(entry[0]) for entry in node.external})
        raise FormatError(f"{key}: dataset {name!r} is stored in other files {files}, which are not read")
    return node


def _check_ratio(key: str, name: str, dataset: h5py.Dataset, chunk_bytes: int) -> None:
    """Refuse a compressed dataset whose stored chunks decode to more than ``MAX_RATIO`` times their size."""
    counts = [0, 0]

    def visit(info: Any) -> None:
        counts[0] += 1
        counts[1] += info.size

    dataset.id.chunk_iter(visit)
    chunks, stored = counts
    if chunks * chunk_bytes > MAX_RATIO * max(stored, 1):
        raise FormatError(
            f"{key}: dataset {name!r} stores {chunks} chunks of {chunk_bytes} bytes in {stored} bytes, "
            f"more than {MAX_RATIO} times as many decoded as stored"
        )


def _filters(key: str, dataset: h5py.Dataset) -> list[int]:
    """The filters of a chunked dataset, in the order they were applied when it was written.

    Raises:
        FormatError: If one is not a filter decoded here (``_DECODED_FILTERS``).
    """
    plist = dataset.id.get_create_plist()
    filters = []
    for i in range(plist.get_nfilters()):
        code, _, _, name = plist.get_filter(i)
        if code not in _DECODED_FILTERS:
            raise FormatError(
                f"{key}: dataset {dataset.name!r} is stored with filter {name.decode(errors='replace')!r} "
                f"({code}), which is not read: only {' and '.join(_DECODED_FILTERS.values())} are"
            )
        filters.append(code)
    return filters


def _stored_bound(chunk_bytes: int) -> int:
    """The most bytes a chunk of ``chunk_bytes`` takes stored: gzip adds at most 5 bytes per 16 KiB block
    to what it cannot compress, and 6 to the whole."""
    return chunk_bytes + 5 * (chunk_bytes // 16384 + 1) + 64


def _inflate(data: bytes, limit: int, what: str) -> bytes:
    """The zlib stream ``data`` inflated, refused as soon as it would exceed ``limit`` bytes.

    Raises:
        FormatError: If the stream is corrupt, ends early, or holds more than ``limit`` bytes.
    """
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(data, limit)
        more = b"" if inflater.eof else inflater.decompress(inflater.unconsumed_tail, 1)
    except zlib.error as error:
        raise FormatError(f"{what}: corrupt gzip stream: {error}") from error
    if more:
        raise FormatError(f"{what}: its gzip stream decodes to more than the {limit} bytes of a chunk")
    if not inflater.eof:
        raise FormatError(f"{what}: its gzip stream ends early, after {len(out)} bytes")
    return out


def _unshuffle(data: bytes, itemsize: int) -> bytes:
    """The bytes HDF5's shuffle filter wrote as ``itemsize`` planes (the first byte of every value, then
    the second...), back in the order of the values; bytes past the last whole value stay as they are."""
    count = len(data) // itemsize
    planes = np.frombuffer(data, np.uint8, count * itemsize).reshape(itemsize, count)
    return planes.T.tobytes() + data[count * itemsize :]


class _Hdf5DatasetReader(ImageReader):
    """Reads a chunked, compressed or unallocated dataset through h5py, crops as hyperslabs.

    A compressed dataset is read a chunk at a time, each chunk decoded whole once and kept while
    there is room in the reader's cache, within the bounds of the module's docstring.
    """

    def __init__(
        self, key: str, fd: int, file: h5py.File, dataset: h5py.Dataset, descriptor: vio.ImageDescriptor
    ):
        super().__init__(key, descriptor)
        self._fd = fd  # owned as the format contract says; h5py reads through a handle of its own
        self._file = file
        self._dataset = dataset
        self._whole = tuple(slice(None) for _ in descriptor.core_extents)
        filtered = dataset.chunks is not None and dataset.id.get_create_plist().get_nfilters() > 0
        self._chunks: tuple[int, ...] | None = dataset.chunks if filtered else None
        if self._chunks is not None:
            self._chunk_bytes = math.prod(self._chunks) * dataset.dtype.itemsize
            self._filters = _filters(key, dataset)
            _check_ratio(key, dataset.name, dataset, self._chunk_bytes)
        self._cache: collections.OrderedDict[tuple[int, ...], np.ndarray] = collections.OrderedDict()
        self._cached_bytes = 0
        self._lock = threading.Lock()

    def _stack_index(self, index: int) -> tuple[int, ...]:
        stack = self.descriptor.stack_extents
        return tuple(int(i) for i in np.unravel_index(index, stack)) if stack else ()

    def _read(self, selection: tuple[int | slice, ...], out: np.ndarray) -> None:
        if self._chunks is not None:
            self._read_chunks(selection, out)
            return
        numeric = out.dtype.kind in "iuf" and self._dataset.dtype.kind in "iuf"
        if numeric and out.flags.c_contiguous:
            self._dataset.read_direct(out, selection)
        else:
            np.copyto(out, self._dataset[selection], casting="unsafe")

    def _read_chunks(self, selection: tuple[int | slice, ...], out: np.ndarray) -> None:
        """Reads a selection of a compressed dataset chunk by chunk, each decoded at most once."""
        shape = self._dataset.shape
        bounds = []
        for item, extent in zip(selection, shape):
            if isinstance(item, slice):
                start, stop, _ = item.indices(extent)
                bounds.append((start, stop))
            else:
                bounds.append((item, item + 1))
        squeezed = [axis for axis, item in enumerate(selection) if not isinstance(item, slice)]
        target = np.expand_dims(out, squeezed) if squeezed else out
        needed = math.prod(stop - start for start, stop in bounds) * self._dataset.dtype.itemsize
        grid = [range(start // c, (stop - 1) // c + 1) for (start, stop), c in zip(bounds, self._chunks)]
        decoded = math.prod(len(axis) for axis in grid) * self._chunk_bytes
        if decoded > max(DECODE_FLOOR, DECODE_FACTOR * needed):
            region = tuple(slice(start, stop) for start, stop in bounds)
            raise FormatError(
                f"{self.key}: reading {region} of dataset {self._dataset.name!r} would decode "
                f"{decoded} bytes of chunks for {needed} bytes; chunks of {self._chunks} are too large"
            )
        for corner in itertools.product(*grid):
            low = [i * c for i, c in zip(corner, self._chunks)]
            chunk = self._chunk(tuple(corner), low)
            inside = tuple(
                slice(max(start, a) - a, min(stop, a + n) - a)
                for (start, stop), a, n in zip(bounds, low, chunk.shape)
            )
            place = tuple(
                slice(max(start, a) - start, min(stop, a + n) - start)
                for (start, stop), a, n in zip(bounds, low, chunk.shape)
            )
            np.copyto(target[place], chunk[inside], casting="unsafe")

    def _chunk(self, corner: tuple[int, ...], low: list[int]) -> np.ndarray:
        """The decoded chunk at grid position ``corner`` (starting at ``low``), from the cache or the file."""
        with self._lock:
            chunk = self._cache.get(corner)
            if chunk is not None:
                self._cache.move_to_end(corner)
                return chunk
            chunk = self._decode(tuple(low))
            if chunk.nbytes <= CHUNK_CACHE:
                self._cache[corner] = chunk
                self._cached_bytes += chunk.nbytes
                while self._cached_bytes > CHUNK_CACHE:
                    self._cached_bytes -= self._cache.popitem(last=False)[1].nbytes
            return chunk

    def _decode(self, low: tuple[int, ...]) -> np.ndarray:
        """The whole chunk starting at ``low``, decoded from its stored bytes within its declared size."""
        dataset = self._dataset
        stored = dataset.id.get_chunk_info_by_coord(low)
        if stored.byte_offset is None:
            return np.full(self._chunks, dataset.fillvalue, dataset.dtype)
        if stored.size > _stored_bound(self._chunk_bytes):  # what read_direct_chunk would allocate
            raise FormatError(
                f"{self.key}: the chunk at {low} of {dataset.name!r} is stored in {stored.size} bytes, more "
                f"than a chunk of {self._chunk_bytes} bytes takes"
            )
        skipped, data = dataset.id.read_direct_chunk(low)
        for stage in reversed(range(len(self._filters))):
            if skipped >> stage & 1:
                continue
            if self._filters[stage] == h5py.h5z.FILTER_DEFLATE:
                data = _inflate(
                    data, self._chunk_bytes, f"{self.key}: the chunk at {low} of {dataset.name!r}"
                )
            else:
                data = _unshuffle(data, dataset.dtype.itemsize)
        if len(data) != self._chunk_bytes:
            raise FormatError(
                f"{self.key}: the chunk at {low} of {dataset.name!r} decodes to {len(data)} bytes, "
                f"not the {self._chunk_bytes} of a chunk of {self._chunks}"
            )
        return np.frombuffer(data, dataset.dtype).reshape(self._chunks)

    def read_run(self, start: int, outs: Sequence[np.ndarray]) -> None:
        self.check_run(start, len(outs))
        with _malformed(self.key):
            for i, out in enumerate(outs):
                self._read(self._stack_index(start + i) + self._whole, out)

    def read_region(self, index: int, region: tuple[slice, ...], out: np.ndarray) -> None:
        self.check_run(index, 1)
        with _malformed(self.key):
            self._read(self._stack_index(index) + tuple(region), out)

    def close(self) -> None:
        with self._lock:
            self._cache.clear()
            self._cached_bytes = 0
        self._file.close()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


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
    def open(cls, key: str, fd: int, head: bytes) -> ImageReader:
        file = _open_file(key, fd)
        try:
            with _malformed(key):
                dataset = _stored_dataset(key, file, cls.dataset)
                descriptor = _descriptor(key, cls.dataset, dataset)
                offset = dataset.id.get_offset() if dataset.chunks is None else None
                if offset is None:
                    return _Hdf5DatasetReader(key, fd, file, dataset, descriptor)
                file_dtype = dataset.dtype
        except BaseException:
            file.close()
            raise
        file.close()
        return RawArrayReader(key, fd, descriptor, file_dtype, offset)


def _open_file(key: str, fd: int) -> h5py.File:
    """The HDF5 file open at ``fd``, read through that descriptor and never opened again by its path.

    Raises:
        FormatError: If it is not a readable HDF5 file.
    """
    try:
        return h5py.File(open(fd, "rb", closefd=False), "r")  # noqa: SIM115 - the reader owns the descriptor
    except _H5PY_ERRORS as error:
        raise FormatError(f"{key}: not a readable HDF5 file: {error}") from error


@contextlib.contextmanager
def _regular_file(path: str | os.PathLike[str]) -> Iterator[int]:
    """A descriptor of the regular file at ``path``, opened without blocking (a FIFO or device refused).

    Raises:
        FileNotFoundError: If there is no file at ``path``.
        OSError: If it is not a regular file.
    """
    key = os.fspath(path)
    try:
        fd = open_readonly(key)
    except FileNotFoundError:
        raise FileNotFoundError(f"{key}: no such file") from None
    try:
        yield fd
    finally:
        os.close(fd)


def _names(file: h5py.File) -> list[str]:
    """The datasets of a file reached through hard links, without opening what other links point at."""
    names: list[str] = []

    def visit(name: bytes, info: Any) -> None:
        path = name.decode(errors="replace")
        if info.type == h5py.h5l.TYPE_HARD and isinstance(file.get(path), h5py.Dataset):
            names.append(path)

    file.id.links.visit(visit, info=True)
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
        OSError: If it is not a regular file (a FIFO, a device).
    """
    with _regular_file(path) as fd:
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
        _regular_file(path) as fd,
        open(fd, "rb", closefd=False) as stream,
        h5py.File(stream, "r") as file,
        _malformed(os.fspath(path)),
    ):
        link = file.get("labels", getlink=True)
        if link is None:
            return []
        kind = _link_kind(link)
        if kind is not None:
            raise FormatError(f"{os.fspath(path)}: 'labels' is {kind}; links are not followed")
        group = file["labels"]
        if not isinstance(group, h5py.Group):
            return []
        return sorted(
            name
            for name in group
            if _link_kind(group.get(name, getlink=True)) is not None or isinstance(group[name], h5py.Dataset)
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
