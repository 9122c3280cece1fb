"""Writing an OME-Zarr image (NGFF 0.4, Zarr v2): level 0 as written, coarser levels binned from it.

The store is made in a private directory beside its path (mode 0700,
created exclusively) and moved onto the path when finished, so an
unfinished store never stands there and no one can plant links inside it
while it is written. Images of a stack lie in chunks of their own, so
threads writing different images never touch one chunk.

Level `k` bins level `k - 1` by 2 along the space axes (odd extents round
up): floating-point and complex values are averaged, integers and booleans
(label volumes) are sampled, every other voxel, so that labels stay labels.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..._fs import created_mode, track_partial, untrack_partial
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
        folder, name = os.path.split(os.path.abspath(key))
        if not os.path.isdir(folder):
            raise ValueError(f"{key}: no directory {folder} to write the store in")
        import zarr.storage

        self._partial = tempfile.mkdtemp(prefix=f".{name}.", suffix=".partial", dir=folder)
        track_partial(self, self._partial)
        try:
            self._group = zarr.open_group(zarr.storage.LocalStore(self._partial), mode="w", zarr_format=2)
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
            if os.path.lexists(self.key):
                raise FileExistsError(f"{self.key}: exists already; an OME-Zarr store is not overwritten")
            mode = created_mode()
            os.chmod(self._partial, mode | (mode & 0o444) >> 2)  # searchable where readable
            os.rename(self._partial, self.key)
            untrack_partial(self)
        except BaseException:
            self.discard()
            raise

    def discard(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(self._partial)
        untrack_partial(self)
