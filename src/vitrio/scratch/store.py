"""The scratch at run time: images taken in from their files a run at a time, and served from it.

A scratch starts empty. The first read of an image through it takes in the
whole run around it with one read of the file; later reads copy from the
scratch and open no file. Its bytes lie in RAM (`create_host_image_scratch`)
or in a mapped file (`vitrio.scratch.mapped`), which also keeps a CRC-32 of
each run, checked the first time the run is served. Its images are those of
readers of one configuration (`ImageReaderProvider.configuration`), those
it was made with: readers of another that would take images in are refused.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._arrays import gather
from .._providers import FileImageReaderProvider, ImageReaderProvider
from .._types import ImageDescriptor
from ..formats import ImageReader
from .plan import HeldFile, check_arguments, descriptors, layout

__all__ = ["ImageScratch", "PRESENT", "create_host_image_scratch"]

PRESENT = 1
"""The state of a run whose images are in the scratch."""


class ImageScratch:
    """Copies of the images of some files, taken in from the files on first use.

    Made by `create_host_image_scratch`, `create_mapped_file_image_scratch`
    or `create_directory_image_scratch`; served through a
    `ScratchImageReaderProvider` (`vitrio.loader(scratch=...)`).
    """

    def __init__(
        self,
        files: list[HeldFile],
        run_length: int,
        data: np.ndarray,
        states: np.ndarray,
        checksums: np.ndarray | None,
        made_by: str | None,
        path: str | None = None,
        keep: Any = None,
    ):
        self._files = {file.key: file for file in files}
        self._made_by = made_by
        self._checked: ImageReaderProvider | None = None  # the last readers found of `made_by`
        self._run_length = run_length
        self._data = data
        self._states = states
        self._checksums = checksums
        self._verified = np.zeros(len(states), dtype=bool) if checksums is not None else None
        self._locks = [threading.Lock() for _ in range(64)]
        self._complete: set[str] = set()
        self._path = path
        self._keep = keep
        self._images = {
            file.key: data[file.offset : file.offset + file.nbytes]
            .view(file.dtype)
            .reshape((len(file.indices), *file.core))
            for file in files
        }

    @property
    def run_length(self) -> int:
        """How many images of a file are taken in together."""
        return self._run_length

    @property
    def path(self) -> str | None:
        """The file the scratch lives in, or None for one in RAM."""
        return self._path

    @property
    def keys(self) -> tuple[str, ...]:
        """The files whose images the scratch holds, in ascending order."""
        return tuple(self._files)

    @property
    def size(self) -> int:
        """The bytes of images the scratch has room for."""
        return sum(file.nbytes for file in self._files.values())

    @property
    def held_count(self) -> int:
        """How many images have been taken in so far."""
        present = self._states == PRESENT
        total = 0
        for file in self._files.values():
            runs = present[file.first_run : file.first_run + file.run_count]
            counts = np.minimum(
                self._run_length, len(file.indices) - np.arange(file.run_count) * self._run_length
            )
            total += int(counts[runs].sum())
        return total

    def holds(self, key: str) -> bool:
        """Whether the scratch has room for images of the file at `key`."""
        return key in self._files

    def descriptor(self, key: str) -> ImageDescriptor:
        """What the file at `key` holds, as it was when the scratch was laid out."""
        return self._files[key].descriptor

    def indices(self, key: str) -> np.ndarray:
        """The indices of the images of the file at `key` the scratch has room for, ascending."""
        return self._files[key].indices

    def _positions(self, file: HeldFile, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where each of `indices` lies among the file's images held, and whether it is held at all."""
        if file.dense:
            return indices, indices < len(file.indices)
        positions = np.searchsorted(file.indices, indices)
        held = positions < len(file.indices)
        held[held] = file.indices[positions[held]] == indices[held]
        return positions, held

    def _missing(self, file: HeldFile, runs: np.ndarray) -> np.ndarray:
        """The runs of `runs` (numbers within the file) that are not held, or fail their CRC."""
        numbers = runs + file.first_run
        missing = self._states[numbers] != PRESENT
        if self._verified is not None:
            for number in numbers[~missing & ~self._verified[numbers]].tolist():
                if self._checksum(file, number - file.first_run) == int(self._checksums[number]):
                    self._verified[number] = True
                else:
                    self._states[number] = 0
                    missing[np.searchsorted(numbers, number)] = True
        return runs[missing]

    def _run_bounds(self, file: HeldFile, run: int) -> tuple[int, int]:
        first = run * self._run_length
        return first, min(first + self._run_length, len(file.indices))

    def _checksum(self, file: HeldFile, run: int) -> int:
        first, last = self._run_bounds(file, run)
        start = file.offset + first * file.image_bytes
        return zlib.crc32(self._data[start : file.offset + last * file.image_bytes])

    def _take_in(self, file: HeldFile, positions: np.ndarray, files: ImageReaderProvider) -> None:
        """Take in the runs holding `positions` that are not held yet; note the file once it is all in."""
        runs = positions // self._run_length
        missing = self._missing(file, np.unique(runs) if len(runs) > 1 else runs)
        if len(missing):
            self._check_readers(file, files)
            reader = files.acquire(file.key)
            try:
                for run in missing.tolist():
                    self._take_in_run(file, run, reader)
            finally:
                files.release(reader)
        whole = np.arange(file.run_count)
        if not len(self._missing(file, whole)):
            self._complete.add(file.key)

    def _check_readers(self, file: HeldFile, files: ImageReaderProvider) -> None:
        """Refuse readers of another configuration than those the scratch was made with, where both tell.

        Raises:
            ValueError: If `files` read the files otherwise (other formats or settings).
        """
        if files is self._checked:
            return
        found = files.configuration()
        if found is not None and self._made_by is not None and found != self._made_by:
            where = f"at {self._path}" if self._path else "in RAM"
            raise ValueError(
                f"{file.key}: the scratch {where} was made with readers of other formats or settings than "
                f"those that read it now ({files!r}): make it with files=, the loader's readers"
            )
        self._checked = files

    def _take_in_run(self, file: HeldFile, run: int, reader: ImageReader) -> None:
        number = file.first_run + run
        with self._locks[number % len(self._locks)]:
            if self._states[number] == PRESENT:
                return
            first, last = self._run_bounds(file, run)
            block = self._images[file.key][first:last]
            reader.read_images(file.indices[first:last], block, np.arange(last - first))
            if self._checksums is not None:
                self._checksums[number] = self._checksum(file, run)
                self._verified[number] = True
            self._states[number] = PRESENT

    def take_in(self, key: str, indices: np.ndarray, files: ImageReaderProvider) -> None:
        """Take in the runs holding `indices` of the file at `key` that are not held yet, from `files`."""
        file = self._files[key]
        positions, held = self._positions(file, indices)
        self._take_in(file, positions[held], files)

    def serve(
        self, key: str, indices: np.ndarray, out: np.ndarray, slots: np.ndarray, files: ImageReaderProvider
    ) -> int:
        """Read image `indices[j]` of the file at `key` into `out[slots[j]]`, taking in what is missing.

        Images the scratch has no room for are read from `files`.

        Returns:
            How many of the images were served from what the scratch held already.
        """
        file = self._files[key]
        positions, held = self._positions(file, indices)
        if not held.all():
            reader = files.acquire(key)
            try:
                reader.read_images(indices[~held], out, slots[~held])
            finally:
                files.release(reader)
            positions, slots = positions[held], slots[held]
        served = len(positions)
        if key not in self._complete:
            runs = file.first_run + positions // self._run_length
            served = int(np.count_nonzero(self._states[runs] == PRESENT))
            self._take_in(file, positions, files)
        gather(self._images[key], positions, out, slots)
        return served

    def image(self, key: str, index: int, files: ImageReaderProvider) -> np.ndarray:
        """Image `index` of the file at `key` as the scratch holds it, taken in if missing.

        Raises:
            KeyError: If the scratch has no room for that image.
        """
        file = self._files[key]
        positions, held = self._positions(file, np.asarray([index], dtype=np.int64))
        if not held[0]:
            raise KeyError(f"{key}: image {index} is not in the scratch")
        self._take_in(file, positions, files)
        return self._images[key][int(positions[0])]

    def __repr__(self) -> str:
        where = f" at {self._path}" if self._path else " in RAM"
        return f"<ImageScratch of {len(self._files)} files, {self.size} bytes{where}>"


def create_host_image_scratch(
    locations: Sequence[Any],
    run_length: int,
    max_size: int | None = None,
    files: ImageReaderProvider | None = None,
) -> ImageScratch:
    """A scratch in RAM for the images `locations` name.

    Args:
        locations: The images to hold: `ImageLocation` objects, or keys of
            whole files, or an `ImageLocationGrouping` of them.
        run_length: How many images of a file are taken in together, with one read.
        max_size: How many bytes it may take. Files are held whole in
            ascending key order until the next does not fit; the rest are
            read from the files. Defaults to no limit.
        files: Where the files are asked for their shape. Defaults to
            opening the file at the path a key is. The images are taken in
            by readers of its configuration alone (formats and their
            settings, `ImageReaderProvider.configuration`): give the loader's
            readers where they read otherwise (EER fractions, other formats).

    Raises:
        ValueError: If `run_length` is not positive or there is nothing to hold.
        IndexError: If an index is past the end of its stack.
    """
    grouped = check_arguments(locations, run_length)
    files = files or FileImageReaderProvider()
    held = layout(grouped, descriptors(grouped, files), run_length, max_size)
    if not held:
        raise ValueError(f"nothing to hold: the first file does not fit in max_size {max_size}")
    nbytes = held[-1].offset + held[-1].nbytes
    runs = held[-1].first_run + held[-1].run_count
    data, states = np.empty(nbytes, dtype=np.uint8), np.zeros(runs, np.uint8)
    return ImageScratch(held, run_length, data, states, None, files.configuration())
