"""The reader of an HDF5 dataset read through h5py: chunked, compressed or unallocated ones."""

from __future__ import annotations

from collections.abc import Sequence

import h5py
import numpy as np

import vitrio as vio
from vitrio.formats import ByteSource, ImageReader

from ._hdf5_chunks import CompressedChunks, is_compressed
from ._hdf5_file import malformed


class Hdf5DatasetReader(ImageReader):
    """Reads a chunked, compressed or unallocated dataset through h5py, crops as hyperslabs.

    A compressed dataset is read a chunk at a time, through ``CompressedChunks``.
    """

    def __init__(
        self,
        key: str,
        source: ByteSource,
        file: h5py.File,
        dataset: h5py.Dataset,
        descriptor: vio.ImageDescriptor,
    ):
        super().__init__(key, descriptor)
        self._source = source  # owned as the format contract says; h5py reads through a file object over it
        self._file = file
        self._dataset = dataset
        self._whole = tuple(slice(None) for _ in descriptor.core_extents)
        self._compressed = CompressedChunks(key, dataset) if is_compressed(dataset) else None

    def _stack_index(self, index: int) -> tuple[int, ...]:
        stack = self.descriptor.stack_extents
        return tuple(int(i) for i in np.unravel_index(index, stack)) if stack else ()

    def _read(self, selection: tuple[int | slice, ...], out: np.ndarray) -> None:
        if self._compressed is not None:
            self._compressed.read(selection, out)
            return
        numeric = out.dtype.kind in "iuf" and self._dataset.dtype.kind in "iuf"
        if numeric and out.flags.c_contiguous:
            self._dataset.read_direct(out, selection)
        else:
            np.copyto(out, self._dataset[selection], casting="unsafe")

    def read_run(self, start: int, outs: Sequence[np.ndarray]) -> None:
        self.check_run(start, len(outs))
        with malformed(self.key):
            for i, out in enumerate(outs):
                self._read(self._stack_index(start + i) + self._whole, out)

    def read_region(self, index: int, region: tuple[slice, ...], out: np.ndarray) -> None:
        self.check_run(index, 1)
        with malformed(self.key):
            self._read(self._stack_index(index) + tuple(region), out)

    def close(self) -> None:
        if self._compressed is not None:
            self._compressed.clear()
        self._file.close()
        self._source.close()
