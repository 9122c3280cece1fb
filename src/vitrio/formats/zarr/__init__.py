"""OME-Zarr images (NGFF 0.4 and 0.5, Zarr v2 and v3), local or in object storage.

A key names an image group and optionally a scale level: `tomo.zarr`
(level 0, the finest), `tomo.zarr#2` or `tomo.zarr#scale=2` (level 2, the
third entry of the `multiscales` datasets), `tomo.zarr/labels/membrane`,
`s3://bucket/path/tomo.zarr#1`, `https://host/tomo.zarr`. The registry
hands such keys to this format before it opens anything (`claims_key`).
A level is read as the descriptor its array and axes give: the stacking
axes (time, channel), then the image or volume, which the space axes
make; `voxel_size` is in ångströms, from the axes' units and the level's
scale.

Reads fetch and decode only the chunks their boxes touch, on the calling
(loader's) threads, and keep the decoded chunks in a bounded cache shared
by the readers of a store, so a chunk several patches share is decoded
once. Remote stores are taken as unchanging while read; local ones are
checked for rewritten metadata on each open. A store at a URL is reached
with the options of the `Storage` it is opened through (fsspec's
`storage_options`: credentials, `anon=True`, `endpoint_url`), bounded in time
by its configuration. `OmeZarrFormat.configured` sets the scale level, the
cache's size and the writing options.

The format is always registered. Reading needs no zarr package (its
metadata is parsed and its chunks decoded here, so it works beside zarr 2):
numcodecs decodes the compressors other than gzip and zlib, google-crc32c
checks crc32c checksums (of sharded arrays), fsspec fetches remote stores
(the `zarr-read` extra). Writing needs zarr 3 (the `zarr` extra). Each is
imported when first needed, so that `import vitrio` stays quick. Writing
makes a local NGFF 0.4 store (Zarr v2) with a pyramid of `levels` levels,
`chunks` and a compression; see `_writer`. Modules: `_keys` (key
spelling), `_ngff` (NGFF metadata), `_store` (fetching), `_metadata` (Zarr
metadata), `_codecs` (decoding), `_cache` (the chunk cache), `_reader`,
`_writer`. Hostile stores are bounded: nothing under a local store is read
through a link, metadata files are capped, every codec stage's output is
checked against the size the array gives, and a read may not touch far
more chunks than it returns values (see `_reader`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, ClassVar

from ..._storage import ByteSource, Storage
from ..._types import ImageDescriptor
from .._contract import Format, FormatError, ImageReader, ImageWriter
from ._cache import ChunkCache
from ._keys import names_store, parse_key
from ._reader import Level, OmeZarrReader, level_stamp, open_level
from ._store import open_store
from ._writer import CODECS, OmeZarrWriter

__all__ = ["OmeZarrFormat", "OmeZarrReader", "OmeZarrWriter", "ChunkCache", "parse_key", "zarr_installed"]


def zarr_installed() -> bool:
    """Whether zarr 3, which writing a store needs (the `zarr` extra), can be imported; reading needs
    no zarr."""
    try:
        import zarr
    except ImportError:
        return False
    major = str(getattr(zarr, "__version__", "")).partition(".")[0]
    return major.isdigit() and int(major) >= 3


class OmeZarrFormat(Format):
    """OME-Zarr image groups, claimed by key (see the module).

    Class attributes:
        level: The scale level read when a key names none.
        storage_options: What fsspec takes to open remote stores, used instead of the options of the
            storage a store is opened through where given (as `configured` gives them).
        chunk_cache: The cache of decoded chunks the readers of this format share (of the
            configuration's `zarr_cache_bytes`, unless `configured` gives a size).
        levels, chunks, codec, voxel_size: How stores are written (see `OmeZarrWriter`).
    """

    name = "ome-zarr"
    read_extensions = (".zarr",)
    write_extensions = (".zarr",)
    stores_voxel_size = True
    level: ClassVar[int] = 0
    storage_options: ClassVar[Mapping[str, Any]] = {}
    chunk_cache: ClassVar[ChunkCache] = ChunkCache()
    levels: ClassVar[int] = 3
    chunks: ClassVar[int | Sequence[int] | None] = None
    codec: ClassVar[str | None] = "zstd"
    voxel_size: ClassVar[float | Sequence[float] | None] = None
    _metadata: ClassVar[OrderedDict[Hashable, Level]] = OrderedDict()
    _metadata_lock: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    def configured(
        cls,
        *,
        level: int | None = None,
        storage_options: Mapping[str, Any] | None = None,
        cache_bytes: int | None = None,
        levels: int | None = None,
        chunks: int | Sequence[int] | None = None,
        codec: str | None = "zstd",
        voxel_size: float | Sequence[float] | None = None,
    ) -> type[OmeZarrFormat]:
        """A format (not registered) reading and writing OME-Zarr stores with these options.

        Args:
            level: The scale level read when a key names none (`scale=`); 0 by default.
            storage_options: What fsspec takes to open remote stores (`anon=True`, `key`/`secret`,
                `endpoint_url`, `client_kwargs`...), instead of those of the storage a store is opened
                through (the `storage_options` a loader or `read` is given, which are the usual way).
            cache_bytes: The size of a chunk cache of its own; None shares this format's.
            levels: How many scale levels to write (1 writes no pyramid); 3 by default.
            chunks: The chunk extent along each space axis when writing (64 for volumes, 256 for images).
            codec: The compression written: "zstd", "blosc", "gzip", or None.
            voxel_size: Å per voxel of level 0 when writing, one value or one per space axis, where
                the write is given none.

        Raises:
            ValueError: If an option is out of range.
        """
        if level is not None and int(level) < 0:
            raise ValueError(f"level must not be negative: {level}")
        if levels is not None and int(levels) < 1:
            raise ValueError(f"levels must be positive: {levels}")
        if codec not in CODECS:
            raise ValueError(f"codec {codec!r} is not one of {list(CODECS)}")
        namespace = {
            "__doc__": "OME-Zarr stores read and written with options of their own.",
            "__module__": __name__,
            "level": cls.level if level is None else int(level),
            "storage_options": dict(cls.storage_options if storage_options is None else storage_options),
            "chunk_cache": cls.chunk_cache if cache_bytes is None else ChunkCache(cache_bytes),
            "levels": cls.levels if levels is None else int(levels),
            "chunks": chunks,
            "codec": codec,
            "voxel_size": voxel_size,
        }
        return type(cls)("ConfiguredOmeZarrFormat", (cls,), namespace)

    @classmethod
    def recognizes(cls, head: bytes, extension: str) -> bool:
        """False: a store is a directory or a URL, claimed by its key (`claims_key`), never by bytes."""
        return False

    @classmethod
    def claims_key(cls, key: str) -> bool:
        """Whether `key` names a Zarr store: a URL, a `.zarr` path, or a directory with Zarr metadata."""
        return names_store(key)

    @classmethod
    def open(cls, key: str, source: ByteSource, head: bytes) -> ImageReader:
        source.close()
        return cls.open_key(key, Storage())

    @classmethod
    def open_key(cls, key: str, storage: Storage) -> ImageReader:
        """A reader of the scale level `key` names (or `level`) of the image of the store `key` names.

        Raises:
            FileNotFoundError: If there is no store at `key`.
            FormatError: If the store is not an OME-Zarr image, lacks the level, or is malformed.
            OSError: If a remote store cannot be reached.
        """
        try:
            parsed = parse_key(key)
        except ValueError as error:
            raise FormatError(str(error)) from None
        number = cls.level if parsed.level is None else parsed.level
        if cls.storage_options:
            storage = Storage(cls.storage_options, storage.configuration)
        index = (parsed.store, parsed.remote, storage.digest(), number)
        with cls._metadata_lock:
            level = cls._metadata.get(index)
        if level is not None and parsed.remote:  # remote stores are taken as unchanging
            return OmeZarrReader(key, level, cls.chunk_cache, storage.configuration.zarr_chunks_at_once)
        try:
            store = open_store(parsed.store, parsed.remote, storage.options, storage.configuration)
        except NotADirectoryError as error:
            raise FormatError(str(error)) from None
        if level is None or level_stamp(store, level.path) != level.stamp:
            level = open_level(store, number)
            with cls._metadata_lock:
                cls._metadata[index] = level
                while len(cls._metadata) > storage.configuration.zarr_levels_kept:
                    cls._metadata.popitem(last=False)
        return OmeZarrReader(key, level, cls.chunk_cache, storage.configuration.zarr_chunks_at_once)

    @classmethod
    def create(
        cls, key: str, descriptor: ImageDescriptor, voxel_size: Sequence[float] | None = None
    ) -> ImageWriter:
        """Start writing a local OME-Zarr store at `key` with this format's writing options.

        The `voxel_size` a write is given (Å, one per space axis) wins over the format's, which is
        only a default.

        Raises:
            ValueError: If `key` is a URL or names a level, or the descriptor or an option does not fit.
            ModuleNotFoundError: If zarr 3 is not installed (`pip install 'vitrio[zarr]'`).
        """
        parsed = parse_key(key)
        if parsed.remote or parsed.level is not None:
            raise ValueError(f"{key}: OME-Zarr stores are written to local paths, without a level")
        if not zarr_installed():
            raise ModuleNotFoundError(
                f"{key}: writing OME-Zarr needs zarr 3 or later, and none is installed here (reading needs "
                "no zarr): pip install 'vitrio[zarr]'",
                name="zarr",
            )
        size = cls.voxel_size if voxel_size is None else voxel_size
        return OmeZarrWriter(key, descriptor, cls.levels, cls.chunks, cls.codec, size)

    @classmethod
    def clear_cache(cls) -> None:
        """Drop the decoded chunks and the metadata kept (after a remote store changed)."""
        cls.chunk_cache.clear()
        with cls._metadata_lock:
            cls._metadata.clear()
