"""Writing an OME-Zarr image (NGFF 0.4, Zarr v2): level 0 as written, coarser levels binned from it.

The store is made in a private folder beside its path (`vitrio._partial.PartialFolder`:
mode 0700, made exclusively, opened without following links) and moved onto
the path when finished, so an unfinished store never stands there. Zarr
writes it through the folder's descriptor (`_folder_store`), never by its
path: another user who can write the store's folder and exchanges the
hidden folder for a link cannot send a chunk, a mode change or the final
rename through it. Images of a stack lie in chunks of their own, so
threads writing different images never touch one chunk.

Level `k` bins level `k - 1` by 2 along the space axes (odd extents round
up): floating-point and complex values are averaged, integers and booleans
(label volumes) are sampled, every other voxel, so that labels stay labels.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import secrets
import stat
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

import numpy as np

from ..._partial import PartialFolder
from ..._types import ImageDescriptor, numpy_dtype
from .._contract import ImageWriter
from ._ngff import write_multiscales

__all__ = ["OmeZarrWriter", "CODECS"]

CODECS = {
    "zstd": {"id": "zstd", "level": 3},
    "blosc": {"id": "blosc", "cname": "zstd", "clevel": 3, "shuffle": 2},
    "gzip": {"id": "gzip", "level": 5},
    None: None,
}
"""The compressions a store may be written with, by name (None: none), as numcodecs configures them."""


def _bin(values: np.ndarray, factor: int) -> np.ndarray:
    """`values` binned by `factor` along every axis: averaged for inexact types, sampled otherwise."""
    if values.dtype.kind not in "fc":
        return values[(slice(None, None, factor),) * values.ndim]
    padded = np.pad(values, [(0, -n % factor) for n in values.shape], mode="edge")
    shape = [x for n in padded.shape for x in (n // factor, factor)]
    return padded.reshape(shape).mean(axis=tuple(range(1, 2 * values.ndim, 2)), dtype=values.dtype)


@functools.cache
def _folder_store() -> type:
    """The class of the Zarr store that a private folder open at a descriptor holds (zarr is imported
    only by what writes a store)."""
    from zarr.abc.store import Store

    class FolderStore(Store):
        """The store in the private folder open at `folder`, whose keys are read and written by their
        paths from that descriptor: no one else may enter the folder to plant a link on them, and the
        last name is opened without following one. A file is made exclusively, mode 0600 (folders
        0700), beside its key and renamed onto it."""

        supports_writes = True
        supports_deletes = True
        supports_listing = False

        def __init__(self, folder: int):
            super().__init__()
            self.folder = folder

        def __eq__(self, other: object) -> bool:
            return isinstance(other, FolderStore) and other.folder == self.folder

        async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
            if byte_range is not None:
                raise NotImplementedError("a store being written is read whole, by key")
            return await asyncio.to_thread(self._read, key, prototype)

        async def get_partial_values(
            self, prototype: Any, key_ranges: Iterable[tuple[str, Any]]
        ) -> list[Any]:
            return [await self.get(key, prototype, byte_range) for key, byte_range in key_ranges]

        async def exists(self, key: str) -> bool:
            try:
                return stat.S_ISREG(os.stat(key, dir_fd=self.folder, follow_symlinks=False).st_mode)
            except (FileNotFoundError, NotADirectoryError):
                return False

        async def set(self, key: str, value: Any) -> None:
            self._check_writable()
            await asyncio.to_thread(self._write, key, value.as_buffer_like())

        async def delete(self, key: str) -> None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(key, dir_fd=self.folder)

        def list(self) -> AsyncIterator[str]:
            raise NotImplementedError("a store being written is not listed")

        def list_prefix(self, prefix: str) -> AsyncIterator[str]:
            raise NotImplementedError("a store being written is not listed")

        def list_dir(self, prefix: str) -> AsyncIterator[str]:
            raise NotImplementedError("a store being written is not listed")

        def _read(self, key: str, prototype: Any) -> Any:
            try:
                fd = os.open(key, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=self.folder)
            except (FileNotFoundError, NotADirectoryError):
                return None
            with open(fd, "rb") as file:
                return prototype.buffer.from_bytes(file.read())

        def _write(self, key: str, data: Any) -> None:
            parts = key.split("/")[:-1]
            for depth in range(1, len(parts) + 1):
                with contextlib.suppress(FileExistsError):
                    os.mkdir("/".join(parts[:depth]), 0o700, dir_fd=self.folder)
            partial = f"{key}.{secrets.token_hex(8)}.partial"
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
            try:
                with open(os.open(partial, flags, 0o600, dir_fd=self.folder), "wb") as file:
                    file.write(data)
                os.replace(partial, key, src_dir_fd=self.folder, dst_dir_fd=self.folder)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(partial, dir_fd=self.folder)
                raise

    return FolderStore


class OmeZarrWriter(ImageWriter):
    """A new OME-Zarr image being written.

    Args:
        key: The path of the store (a directory ending `.zarr`).
        descriptor: What it holds: up to two stacking axes, then a 2-D image or 3-D volume.
        levels: How many scale levels to write (1: no pyramid).
        chunks: The extent of a chunk along each space axis.
        codec: The compression: "zstd", "blosc", "gzip", or None.
        voxel_size: Å per voxel of level 0 along the space axes (one value for all), or None.

    Raises:
        ValueError: If the descriptor does not fit an OME-Zarr image, an option is out of range, or
            the store's directory does not exist.
    """

    def __init__(
        self,
        key: str,
        descriptor: ImageDescriptor,
        levels: int,
        chunks: int | Sequence[int] | None,
        codec: str | None,
        voxel_size: float | Sequence[float] | None,
    ):
        super().__init__(key, descriptor)
        rank = descriptor.core_rank
        if rank not in (2, 3):
            raise ValueError(f"{key}: an OME-Zarr image is 2-D or 3-D, not {descriptor}")
        if codec not in CODECS:
            raise ValueError(f"{key}: codec {codec!r} is not one of {list(CODECS)}")
        if int(levels) < 1:
            raise ValueError(f"{key}: levels must be positive, not {levels}")
        try:
            self._dtype = numpy_dtype(descriptor.data_type)
        except TypeError as error:
            raise ValueError(f"{key}: {error}") from None
        size = None if voxel_size is None else np.broadcast_to(np.asarray(voxel_size, float), (rank,))
        stack_rank = len(descriptor.stack_extents)
        self._attributes = write_multiscales(rank, stack_rank, int(levels), size, os.path.basename(key))
        if chunks is None:
            chunks = 64 if rank == 3 else 256
        side = np.broadcast_to(np.asarray(chunks, int), (rank,))
        if side.min() < 1:
            raise ValueError(f"{key}: chunks must be positive, not {chunks}")
        self._chunks = tuple(side.tolist())
        self._levels = int(levels)
        self._codec = codec
        try:
            self._partial = PartialFolder(key)
        except FileNotFoundError:
            folder = os.path.dirname(os.path.abspath(key))
            raise ValueError(f"{key}: no directory {folder} to write the store in") from None
        import zarr

        try:
            self._group = zarr.create_group(_folder_store()(self._partial.fd), zarr_format=2)
            self._arrays = [self._create(0, descriptor.extents)]
        except BaseException:
            self.discard()
            raise

    def _create(self, level: int, extents: tuple[int, ...]) -> Any:
        import numcodecs

        stack = len(self.descriptor.stack_extents)
        chunks = (1,) * stack + tuple(min(c, max(n, 1)) for c, n in zip(self._chunks, extents[stack:]))
        return self._group.create_array(
            str(level),
            shape=extents,
            dtype=self._dtype,
            chunks=chunks,
            compressors=None if self._codec is None else numcodecs.get_codec(dict(CODECS[self._codec])),
            filters=None,
            fill_value=0,
            chunk_key_encoding={"name": "v2", "separator": "/"},
        )

    def write_run(self, start: int, sources: Sequence[np.ndarray]) -> None:
        stack = self.descriptor.stack_extents
        for offset, source in enumerate(sources):
            index = np.unravel_index(start + offset, stack) if stack else ()
            values = np.asarray(source).astype(self._dtype, copy=False)
            if values.shape != tuple(self.core_extents):
                raise ValueError(f"{self.key}: an image of shape {values.shape}, not {self.core_extents}")
            self._arrays[0][tuple(int(i) for i in index)] = values

    def flush(self) -> None:
        """Nothing to do: every write lands in the store's files as it is made."""

    def finish(self) -> None:
        """Bin the coarser levels, write the metadata, and move the store onto its path.

        Raises:
            FileExistsError: If something stands at the path now.
        """
        try:
            stack = self.descriptor.stack_extents
            for level in range(1, self._levels):
                extents = (*stack, *(-(-n // 2**level) for n in self.core_extents))
                self._arrays.append(self._create(level, extents))
                for index in np.ndindex(*stack) if stack else [()]:
                    self._arrays[level][index] = _bin(self._arrays[level - 1][index], 2)
            self._group.attrs.update(self._attributes)
        except BaseException:
            self.discard()
            raise
        self._partial.publish()

    def discard(self) -> None:
        self._partial.discard()
