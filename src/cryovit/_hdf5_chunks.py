"""The chunks of a compressed HDF5 dataset, decoded here from their stored bytes within bounds.

libhdf5's gzip filter inflates whatever a stream holds, so a chunk is decoded here instead: each
stage of its filters may produce the chunk's declared bytes and no more. The bounds on what a read
may decode, and the cache of decoded chunks, are those of ``cryovit.hdf5``'s docstring.
"""

from __future__ import annotations

import collections
import itertools
import math
import threading
import zlib
from typing import Any

import h5py
import numpy as np

from vitrio.formats import FormatError

DECODE_FLOOR = 64 << 20
"""Bytes of compressed chunks any read may decode, however little of them it needs."""

DECODE_FACTOR = 64
"""How many times the bytes a read needs its compressed chunks may decode to, above ``DECODE_FLOOR``."""

MAX_RATIO = 4096
"""The most bytes a file's compressed chunks may decode to per byte stored (deflate reaches ~1032)."""

CHUNK_CACHE = 64 << 20
"""Bytes of decoded chunks a reader keeps, most recently used first."""


_DECODED_FILTERS = {h5py.h5z.FILTER_DEFLATE: "gzip", h5py.h5z.FILTER_SHUFFLE: "shuffle"}


def is_compressed(dataset: h5py.Dataset) -> bool:
    """Whether ``dataset`` is chunked with filters, so read through ``CompressedChunks``."""
    return dataset.chunks is not None and dataset.id.get_create_plist().get_nfilters() > 0


class CompressedChunks:
    """Reads selections of a compressed dataset chunk by chunk, each chunk decoded whole once and
    kept while there is room in its cache (``CHUNK_CACHE`` bytes); safe from many threads.

    Raises:
        FormatError: If the dataset has a filter not decoded here, or its stored chunks decode to
            more than ``MAX_RATIO`` times their size.
    """

    def __init__(self, key: str, dataset: h5py.Dataset):
        self._key = key
        self._dataset = dataset
        self._chunks: tuple[int, ...] = dataset.chunks
        self._chunk_bytes = math.prod(self._chunks) * dataset.dtype.itemsize
        self._filters = _filters(key, dataset)
        _check_ratio(key, dataset.name, dataset, self._chunk_bytes)
        self._cache: collections.OrderedDict[tuple[int, ...], np.ndarray] = collections.OrderedDict()
        self._cached_bytes = 0
        self._lock = threading.Lock()

    def read(self, selection: tuple[int | slice, ...], out: np.ndarray) -> None:
        """Reads ``selection`` of the dataset into ``out``, decoding each chunk it touches at most once.

        Raises:
            FormatError: If the chunks it touches would decode to more than the bounds allow, or one
                is stored or decodes to other than a chunk's bytes.
        """
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
                f"{self._key}: reading {region} of dataset {self._dataset.name!r} would decode "
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

    def clear(self) -> None:
        """Drops the decoded chunks kept."""
        with self._lock:
            self._cache.clear()
            self._cached_bytes = 0

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
                f"{self._key}: the chunk at {low} of {dataset.name!r} is stored in {stored.size} bytes, more "
                f"than a chunk of {self._chunk_bytes} bytes takes"
            )
        skipped, data = dataset.id.read_direct_chunk(low)
        for stage in reversed(range(len(self._filters))):
            if skipped >> stage & 1:
                continue
            if self._filters[stage] == h5py.h5z.FILTER_DEFLATE:
                data = _inflate(
                    data, self._chunk_bytes, f"{self._key}: the chunk at {low} of {dataset.name!r}"
                )
            else:
                data = _unshuffle(data, dataset.dtype.itemsize)
        if len(data) != self._chunk_bytes:
            raise FormatError(
                f"{self._key}: the chunk at {low} of {dataset.name!r} decodes to {len(data)} bytes, "
                f"not the {self._chunk_bytes} of a chunk of {self._chunks}"
            )
        return np.frombuffer(data, dataset.dtype).reshape(self._chunks)


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
