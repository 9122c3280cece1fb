"""Reading a scale level of an OME-Zarr image: its metadata, and boxes of it assembled from its chunks.

A read gathers the chunks its boxes touch, takes those the store's chunk
cache holds, fetches the others (one request each, many at once for a
remote store) and decodes them on the calling thread, then copies the
part of each chunk a box covers into its out. The chunks of one call are
fetched in groups of the configuration's `zarr_chunks_at_once`, so that a
large read holds few at a time.
What metadata may declare is bounded: a chunk's size (`MAX_CHUNK_BYTES`),
what all the chunks decode to (`MAX_OVERHANG` times what the array holds,
or `OVERHANG_FLOOR`), and the chunks
a read may decode for the values it returns (`FREE_CHUNKS`,
`VALUES_PER_CHUNK`).
"""

from __future__ import annotations

import errno
import itertools
import math
from collections.abc import Hashable, Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np

from ..._types import ImageDescriptor, as_numerical_type
from .._contract import FormatError, ImageReader
from ._cache import ChunkCache
from ._codecs import CODECS, ChunkCodec, chunk_codec, codec_names
from ._metadata import ArrayMetadata, array_metadata, group_attributes
from ._ngff import parse_multiscales
from ._store import Store

__all__ = [
    "Level",
    "open_level",
    "OmeZarrReader",
    "MAX_CHUNK_BYTES",
    "MAX_OVERHANG",
    "OVERHANG_FLOOR",
    "FREE_CHUNKS",
    "VALUES_PER_CHUNK",
]

MAX_CHUNK_BYTES = 1 << 30
"""The largest decoded chunk read: a chunk past it is refused before anything is fetched."""

MAX_OVERHANG = 64
"""How many times what an array holds its chunks may decode to, all together, past `OVERHANG_FLOOR`."""

OVERHANG_FLOOR = 64 << 20
"""What an array's chunks may decode to, all together, however small the array: one chunk of 256^3
float32 values, as copick writes tomograms of any size."""

FREE_CHUNKS = 1 << 14
"""How many chunks any read may touch, whatever it returns."""

VALUES_PER_CHUNK = 256
"""How many values a read must return for each chunk it touches past `FREE_CHUNKS`."""

Box = list[tuple[int, int]]


class Level(NamedTuple):
    """A scale level of an image, as its metadata says.

    Attributes:
        store: Where it lies.
        path: The path of its array in the store.
        descriptor: Its extents (stacking axes, then the image or volume) and type.
        voxel_size: Å per voxel along the space axes, slowest first; None if the metadata has no length.
        chunks: The extents of a chunk (of a shard, for sharded arrays).
        fill: The value of chunks that are not stored.
        key_of: The name of a chunk in the array, by its coordinates in the chunk grid.
        codec: How a stored chunk decodes, and the most bytes it may take.
        stamp: What tells this version of the metadata from a rewritten one.
    """

    store: Store
    path: str
    descriptor: ImageDescriptor
    voxel_size: tuple[float, ...] | None
    chunks: tuple[int, ...]
    fill: Any
    key_of: Any
    codec: ChunkCodec
    stamp: Hashable


def _metadata_stamp(store: Store, group: str, array: str) -> Hashable:
    names = ("zarr.json", ".zattrs", ".zgroup")
    return tuple(store.stamp(f"{p}/{n}".lstrip("/")) for p in (group, array) for n in (*names, ".zarray"))


def level_stamp(store: Store, level_path: str) -> Hashable:
    """What tells the present metadata of the level at `level_path` (and its group) from a rewritten one."""
    return _metadata_stamp(store, "", level_path)


def open_level(store: Store, level: int) -> Level:
    """Level `level` of the OME-Zarr image at the root of `store`.

    Raises:
        FileNotFoundError: If the store holds no Zarr metadata at all.
        FormatError: If it is not an OME-Zarr image, has no such level, or its array is of a type,
            codec or chunking not read.
    """
    try:
        multiscale = parse_multiscales(group_attributes(store))
    except ValueError as error:
        raise FormatError(f"{store.name}: {error}") from None
    if not 0 <= level < len(multiscale.levels):
        raise FormatError(f"{store.name}: has scale levels 0 to {len(multiscale.levels) - 1}, not {level}")
    chosen = multiscale.levels[level]
    where = f"{store.name}: array {chosen.path!r}"
    try:
        metadata = array_metadata(store, chosen.path)
    except ValueError as error:
        raise FormatError(f"{store.name}: level {level}: {error}") from None
    unsafe = [name for name in codec_names(metadata) if name not in CODECS]
    if unsafe:
        raise FormatError(f"{where}: uses codecs {unsafe}, not read (only {sorted(CODECS)})")
    dtype = metadata.dtype
    try:
        data_type = as_numerical_type(dtype)
    except TypeError:
        raise FormatError(f"{where}: holds values of type {metadata.data_type}, not numbers") from None
    shape = metadata.shape
    if len(shape) != len(multiscale.axes):
        raise FormatError(f"{where}: has {len(shape)} axes, the metadata names {len(multiscale.axes)}")
    chunks = _chunk_shape(metadata, shape, dtype.itemsize, where)
    fill = metadata.fill_value
    try:
        codec = chunk_codec(metadata, chunks, fill)
    except ValueError as error:
        raise FormatError(f"{where}: {error}") from None
    return Level(
        store=store,
        path=chosen.path,
        descriptor=ImageDescriptor(shape, multiscale.core_rank, data_type),
        voxel_size=chosen.voxel_size,
        chunks=chunks,
        fill=fill,
        key_of=metadata.encode_chunk_key,
        codec=codec,
        stamp=level_stamp(store, chosen.path),
    )


def _chunk_shape(
    metadata: ArrayMetadata, shape: tuple[int, ...], itemsize: int, where: str
) -> tuple[int, ...]:
    """The extents of the array's chunks (shards), refused if too large or far larger than the array."""
    chunks = metadata.chunks
    nbytes = math.prod(chunks) * itemsize
    if len(chunks) != len(shape) or min(chunks, default=1) < 1 or nbytes > MAX_CHUNK_BYTES:
        raise FormatError(f"{where}: chunks of {chunks} values, not read (at most {MAX_CHUNK_BYTES} bytes)")
    count = math.prod(-(-max(n, 1) // c) for c, n in zip(chunks, shape))
    held = math.prod(max(n, 1) for n in shape) * itemsize
    if count * nbytes > max(OVERHANG_FLOOR, MAX_OVERHANG * held):
        raise FormatError(
            f"{where}: chunks of {chunks} values for an array of {shape}: far larger than the array, "
            f"not read (its chunks may decode to at most {OVERHANG_FLOOR >> 20} MiB or {MAX_OVERHANG} "
            "times what the array holds)"
        )
    return chunks


class OmeZarrReader(ImageReader):
    """A scale level of an OME-Zarr image, read box by box from its chunks.

    Args:
        key: The key it was opened by.
        level: The level.
        cache: The cache of decoded chunks it shares with the other readers of its store.
        chunks_at_once: How many chunks a read fetches and holds at a time.
    """

    def __init__(self, key: str, level: Level, cache: ChunkCache, chunks_at_once: int):
        super().__init__(key, level.descriptor)
        self.level = level
        self.voxel_size = level.voxel_size
        self.voxel_size_source = None if level.voxel_size is None else "OME-Zarr scale"
        self._cache = cache
        self._chunks_at_once = chunks_at_once
        self._stack = level.descriptor.stack_extents
        self._token = (level.store.token, level.path, level.stamp)

    def read_run(self, start: int, outs: Sequence[np.ndarray]) -> None:
        self.check_run(start, len(outs))
        whole = [(0, n) for n in self.core_extents]
        self._read_boxes([self._box(start + i, whole) for i in range(len(outs))], outs)

    def read_region(self, index: int, region: tuple[slice, ...], out: np.ndarray) -> None:
        self.read_regions(index, [region], [out])

    def read_regions(
        self, index: int, regions: Sequence[tuple[slice, ...]], outs: Sequence[np.ndarray]
    ) -> None:
        self.check_run(index, 1)
        boxes = []
        for region in regions:
            if len(region) != len(self.core_extents):
                raise ValueError(f"{self.key}: a region {region} of an image of shape {self.core_extents}")
            spans = [s.indices(n) for s, n in zip(region, self.core_extents)]
            if any(step != 1 for _, _, step in spans):
                raise ValueError(f"{self.key}: a region {region} with steps; regions are boxes")
            boxes.append(self._box(index, [(a, max(a, b)) for a, b, _ in spans]))
        self._read_boxes(boxes, outs)

    def _box(self, index: int, core: Box) -> Box:
        stack = np.unravel_index(index, self._stack) if self._stack else ()
        return [(int(i), int(i) + 1) for i in stack] + core

    def _read_boxes(self, boxes: Sequence[Box], outs: Sequence[np.ndarray]) -> None:
        chunks = self.level.chunks
        ranges = {
            number: [range(low // c, (high - 1) // c + 1) for (low, high), c in zip(box, chunks)]
            for number, box in enumerate(boxes)
            if all(high > low for low, high in box)
        }
        touched = sum(math.prod(len(r) for r in spans) for spans in ranges.values()) * self.level.codec.pieces
        values = sum(math.prod(high - low for low, high in boxes[number]) for number in ranges)
        if touched > max(FREE_CHUNKS, values // VALUES_PER_CHUNK):
            raise FormatError(
                f"{self.level.store.name}: a read of {values} values would decode {touched} chunks of "
                f"{self.level.chunks} values (or their inner chunks): chunks too small for it to finish "
                f"in reasonable time (a read may decode {FREE_CHUNKS} chunks, or one per "
                f"{VALUES_PER_CHUNK} values it returns)"
            )
        pairs = [(number, coords) for number, spans in ranges.items() for coords in itertools.product(*spans)]
        start = 0
        while start < len(pairs):
            group: dict[tuple[int, ...], None] = {}
            end = start
            while end < len(pairs) and (len(group) < self._chunks_at_once or pairs[end][1] in group):
                group[pairs[end][1]] = None
                end += 1
            found = self._cache.get_many([(self._token, c) for c in group], self._load)
            for number, coords in pairs[start:end]:
                self._copy(found[(self._token, coords)], coords, boxes[number], outs[number])
            start = end

    def _copy(self, chunk: np.ndarray, coords: tuple[int, ...], box: Box, out: np.ndarray) -> None:
        source, target = [], []
        for (low, high), c, at in zip(box, self.level.chunks, coords):
            origin = c * at
            a, b = max(low, origin), min(high, origin + c)
            source.append(slice(a - origin, b - origin))
            target.append(slice(a - low, b - low))
        rank = len(self._stack)
        part = chunk[tuple(source)][(0,) * rank]
        np.copyto(out[tuple(target[rank:])], part, casting="unsafe")

    def _clip(self, coords: tuple[int, ...]) -> tuple[slice, ...]:
        return tuple(
            slice(0, min(c, n - c * at))
            for c, n, at in zip(self.level.chunks, self.descriptor.extents, coords)
        )

    def _load(self, keys: list[tuple[Hashable, tuple[int, ...]]]) -> Iterator[tuple[Hashable, np.ndarray]]:
        """Fetch the chunks of `keys` (at once, for a remote store), then decode them one by one.

        A chunk is kept as the part of it inside the array, in memory of its own: a chunk overhanging
        the array's end is copied, so that nothing else of it stays alive.
        """
        level = self.level
        coords = [key[1] for key in keys]
        names = [f"{level.path}/{level.key_of(c)}" for c in coords]
        fetched = level.store.get_many(names, level.codec.limit)
        for key, c, name, blob in zip(keys, coords, names, fetched):
            where = f"{level.store.name}: chunk {name}"
            clip = self._clip(c)
            if blob is None:
                yield key, np.broadcast_to(level.fill, tuple(s.stop for s in clip))
                continue
            if isinstance(blob, ValueError):
                raise FormatError(f"{where}: {blob}") from blob
            if isinstance(blob, OSError) and blob.errno is not None:  # its class and errno kept
                blob.add_note(where)
                raise blob
            if isinstance(blob, BaseException):
                raise OSError(errno.EIO, f"{where}: {type(blob).__name__}: {blob}") from blob
            try:
                chunk = level.codec.decode(blob)
            except (ValueError, RuntimeError, TypeError) as error:
                raise FormatError(f"{where}: cannot be decoded ({error}); cut short or corrupt") from error
            part = chunk[clip]
            yield key, part.copy() if part.size < chunk.size else part
