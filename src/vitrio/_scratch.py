"""Scratch: a copy of the images a program keeps going back to, in RAM or in a mapped file.

A scratch is laid out when it is made: for each file, in ascending key
order, the distinct indices asked of it, cut into runs of `run_length`
images. It starts empty. The first read of an image through the scratch
takes in the whole run around it with one read of the file; later reads
copy from the scratch and open no file. Files that do not fit in
`max_size` bytes, after those before them in key order, are read from the
files as if there were no scratch.

A mapped-file scratch lives in a file with a header, the layout, a table of
the sources' sizes and modification times, a state byte and a CRC-32 per
run, and the images. It is allocated in full when made (so a full disk
shows up there, as an `OSError`, and never while taking images in). A
later scratch over the same file and images resumes from it: runs whose
source file changed size or modification time since are dropped, runs
whose CRC does not match are taken in again, and a file that is truncated,
foreign or of another layout is rebuilt. Several processes may share it:
each writes a run's images before marking it present, and two processes
taking in one run write the same bytes.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import mmap
import os
import struct
import threading
import zlib
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ._concurrency import Completion, SynchronousExecutor, ThreadPoolExecutor, run_tasks
from ._fs import PartialFile
from ._providers import FileImageReaderProvider, ImageReaderProvider
from ._types import ImageDescriptor, ImageLocation, as_key, numpy_dtype
from .formats import ImageReader
from .formats._raw import gather

__all__ = [
    "ImageScratch",
    "ScratchImageReaderProvider",
    "create_host_image_scratch",
    "create_mapped_file_image_scratch",
    "create_directory_image_scratch",
    "prefetch_scratch_async",
]

SCRATCH_SUFFIX = ".vitrio-scratch"
_MAGIC = b"VITRIO-SCRATCH\x00\x01"
_HEADER = struct.Struct("<16s32s6QI")  # magic, digest, manifest at/length, stats, states, checksums, data
_HEADER_BYTES = 4096
_ALIGN = 4096
_PRESENT = 1


def _align(offset: int, alignment: int = _ALIGN) -> int:
    return -(-offset // alignment) * alignment


class _HeldFile:
    """One file of a scratch: its images held, and where they lie."""

    def __init__(self, key: str, descriptor: ImageDescriptor, indices: np.ndarray, run_length: int):
        self.key = key
        self.descriptor = descriptor
        self.dtype = numpy_dtype(descriptor.data_type)
        self.indices = indices
        self.core = descriptor.core_extents
        self.image_bytes = math.prod(self.core) * self.dtype.itemsize
        self.run_count = -(-len(indices) // run_length)
        self.dense = bool(len(indices)) and int(indices[0]) == 0 and int(indices[-1]) == len(indices) - 1
        self.nbytes = len(indices) * self.image_bytes
        self.first_run = 0
        self.offset = 0


def _group(locations: Iterable[Any]) -> dict[str, np.ndarray]:
    """The distinct indices asked of each file, by key in ascending order; -1 for a whole file."""
    by_key: dict[str, list[int]] = {}
    for location in locations:
        if isinstance(location, ImageLocation):
            by_key.setdefault(location.key, []).append(location.index_in_stack)
        else:
            by_key.setdefault(as_key(location), []).append(-1)
    return {key: np.unique(np.asarray(by_key[key], dtype=np.int64)) for key in sorted(by_key)}


def _digest(grouped: dict[str, np.ndarray], run_length: int, max_size: int | None) -> bytes:
    digest = hashlib.sha256(f"{run_length}:{max_size}".encode())
    for key, indices in grouped.items():
        digest.update(key.encode() + b"\0")
        digest.update(indices.tobytes() + b"\0")
    return digest.hexdigest()[:32].encode()


def _layout(
    grouped: dict[str, np.ndarray],
    descriptors: dict[str, ImageDescriptor],
    run_length: int,
    max_size: int | None,
) -> list[_HeldFile]:
    """The files held, in key order, until the next one does not fit in `max_size`."""
    held: list[_HeldFile] = []
    total = runs = 0
    for key, indices in grouped.items():
        descriptor = descriptors[key]
        count = descriptor.image_count if descriptor.is_stack else 1
        if indices[0] < 0:
            if len(indices) > 1:
                raise ValueError(f"{key}: is named both whole and by index")
            indices = np.arange(count, dtype=np.int64)
        elif indices[-1] >= count:
            raise IndexError(f"{key}: index {int(indices[-1])} is past the end of a stack of {count}")
        file = _HeldFile(key, descriptor, indices, run_length)
        if max_size is not None and total + file.nbytes > max_size:
            break
        file.first_run, file.offset = runs, total
        runs += file.run_count
        total = _align(total + file.nbytes, 64)
        held.append(file)
    return held


def _check_arguments(locations: Sequence[Any], run_length: int) -> dict[str, np.ndarray]:
    if int(run_length) < 1:
        raise ValueError(f"run_length must be positive: {run_length}")
    grouped = _group(locations)
    if not grouped:
        raise ValueError("nothing to hold: no locations were given")
    return grouped


def _descriptors(keys: Iterable[str], files: ImageReaderProvider) -> dict[str, ImageDescriptor]:
    return {key: files.query_descriptor(key) for key in keys}


def _source_stat(key: str) -> tuple[int, int] | None:
    try:
        stat = os.stat(key)
    except OSError:
        return None
    return (stat.st_size, stat.st_mtime_ns)


class ImageScratch:
    """Copies of the images of some files, taken in from the files on first use.

    Made by `create_host_image_scratch`, `create_mapped_file_image_scratch`
    or `create_directory_image_scratch`; served through a
    `ScratchImageReaderProvider` (`vitrio.loader(scratch=...)`).
    """

    def __init__(
        self,
        files: list[_HeldFile],
        run_length: int,
        data: np.ndarray,
        states: np.ndarray,
        checksums: np.ndarray | None,
        path: str | None = None,
        keep: Any = None,
    ):
        self._files = {file.key: file for file in files}
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
        present = self._states == _PRESENT
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

    def _positions(self, file: _HeldFile, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where each of `indices` lies among the file's images held, and whether it is held at all."""
        if file.dense:
            return indices, indices < len(file.indices)
        positions = np.searchsorted(file.indices, indices)
        held = positions < len(file.indices)
        held[held] = file.indices[positions[held]] == indices[held]
        return positions, held

    def _missing(self, file: _HeldFile, runs: np.ndarray) -> np.ndarray:
        """The runs of `runs` (numbers within the file) that are not held, or fail their CRC."""
        numbers = runs + file.first_run
        missing = self._states[numbers] != _PRESENT
        if self._verified is not None:
            for number in numbers[~missing & ~self._verified[numbers]].tolist():
                if self._checksum(file, number - file.first_run) == int(self._checksums[number]):
                    self._verified[number] = True
                else:
                    self._states[number] = 0
                    missing[np.searchsorted(numbers, number)] = True
        return runs[missing]

    def _run_bounds(self, file: _HeldFile, run: int) -> tuple[int, int]:
        first = run * self._run_length
        return first, min(first + self._run_length, len(file.indices))

    def _checksum(self, file: _HeldFile, run: int) -> int:
        first, last = self._run_bounds(file, run)
        start = file.offset + first * file.image_bytes
        return zlib.crc32(self._data[start : file.offset + last * file.image_bytes])

    def _take_in(self, file: _HeldFile, positions: np.ndarray, files: ImageReaderProvider) -> None:
        """Take in the runs holding `positions` that are not held yet; note the file once it is all in."""
        runs = positions // self._run_length
        missing = self._missing(file, np.unique(runs) if len(runs) > 1 else runs)
        if len(missing):
            reader = files.acquire(file.key)
            try:
                for run in missing.tolist():
                    self._take_in_run(file, run, reader)
            finally:
                files.release(reader)
        whole = np.arange(file.run_count)
        if not len(self._missing(file, whole)):
            self._complete.add(file.key)

    def _take_in_run(self, file: _HeldFile, run: int, reader: ImageReader) -> None:
        number = file.first_run + run
        with self._locks[number % len(self._locks)]:
            if self._states[number] == _PRESENT:
                return
            first, last = self._run_bounds(file, run)
            block = self._images[file.key][first:last]
            reader.read_images(file.indices[first:last], block, np.arange(last - first))
            if self._checksums is not None:
                self._checksums[number] = self._checksum(file, run)
                self._verified[number] = True
            self._states[number] = _PRESENT

    def take_in(self, key: str, indices: np.ndarray, files: ImageReaderProvider) -> None:
        """Take in the runs holding `indices` of the file at `key` that are not held yet, from `files`."""
        file = self._files[key]
        positions, held = self._positions(file, indices)
        self._take_in(file, positions[held], files)

    def serve(
        self, key: str, indices: np.ndarray, out: np.ndarray, slots: np.ndarray, files: ImageReaderProvider
    ) -> None:
        """Read image `indices[j]` of the file at `key` into `out[slots[j]]`, taking in what is missing.

        Images the scratch has no room for are read from `files`.
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
        if key not in self._complete:
            self._take_in(file, positions, files)
        gather(self._images[key], positions, out, slots)

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
        locations: The images to hold: `ImageLocation` objects, or keys of whole files.
        run_length: How many images of a file are taken in together, with one read.
        max_size: How many bytes it may take. Files are held whole in
            ascending key order until the next does not fit; the rest are
            read from the files. Defaults to no limit.
        files: Where the files are asked for their shape. Defaults to
            opening the file at the path a key is.

    Raises:
        ValueError: If `run_length` is not positive or there is nothing to hold.
        IndexError: If an index is past the end of its stack.
    """
    grouped = _check_arguments(locations, run_length)
    held = _layout(grouped, _descriptors(grouped, files or FileImageReaderProvider()), run_length, max_size)
    if not held:
        raise ValueError(f"nothing to hold: the first file does not fit in max_size {max_size}")
    nbytes = held[-1].offset + held[-1].nbytes
    runs = held[-1].first_run + held[-1].run_count
    return ImageScratch(held, run_length, np.empty(nbytes, dtype=np.uint8), np.zeros(runs, np.uint8), None)


def _manifest(held: list[_HeldFile]) -> tuple[bytes, np.ndarray]:
    files = [
        {
            "key": file.key,
            "extents": list(file.descriptor.extents),
            "core_rank": file.descriptor.core_rank,
            "data_type": file.descriptor.data_type.name,
            "count": len(file.indices),
        }
        for file in held
    ]
    indices = np.concatenate([file.indices for file in held])
    return json.dumps({"files": files}).encode(), indices


class _MappedLayout:
    """Where each part of a mapped scratch lies."""

    def __init__(
        self, manifest_bytes: int, index_count: int, file_count: int, run_count: int, data_bytes: int
    ):
        self.manifest = _HEADER_BYTES
        self.indices = _align(self.manifest + manifest_bytes, 8)
        self.stats = self.indices + 8 * index_count
        self.states = self.stats + 16 * file_count
        self.checksums = _align(self.states + run_count, 4)
        self.data = _align(self.checksums + 4 * run_count)
        self.size = self.data + data_bytes


def _open_mapped(
    path: str, digest: bytes, grouped: dict[str, np.ndarray], run_length: int
) -> tuple[list[_HeldFile], np.ndarray, mmap.mmap] | None:
    """The layout, stats and map of a valid scratch file at `path` made for `digest`, or None."""
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return None
    try:
        size = os.fstat(fd).st_size
        head = os.pread(fd, _HEADER.size, 0)
        if len(head) < _HEADER.size:
            return None
        magic, found, at, length, stats, states, checksums, data, crc = _HEADER.unpack(head)
        if magic != _MAGIC or found != digest or zlib.crc32(head[:-4]) != crc or not at < at + length <= size:
            return None
        manifest = json.loads(os.pread(fd, length, at))
        held, runs = [], 0
        counts = [entry["count"] for entry in manifest["files"]]
        layout = _MappedLayout(length, sum(counts), len(counts), 0, 0)
        index_bytes = os.pread(fd, 8 * sum(counts), layout.indices)
        all_indices = np.frombuffer(index_bytes, dtype=np.int64)
        offset = total = 0
        for entry, count in zip(manifest["files"], counts):
            descriptor = ImageDescriptor(entry["extents"], entry["core_rank"], entry["data_type"])
            file = _HeldFile(
                entry["key"], descriptor, all_indices[offset : offset + count].copy(), run_length
            )
            file.first_run, file.offset = runs, total
            runs += file.run_count
            total = _align(total + file.nbytes, 64)
            offset += count
            held.append(file)
        expected = _MappedLayout(length, sum(counts), len(counts), runs, total if held else 0)
        if (stats, states, checksums, data, expected.size) != (
            expected.stats,
            expected.states,
            expected.checksums,
            expected.data,
            size,
        ) or [f.key for f in held] != list(grouped)[: len(held)]:
            return None
        for file in held:
            wanted = grouped[file.key]
            if wanted[0] >= 0 and not np.array_equal(wanted, file.indices):
                return None
        mapping = mmap.mmap(fd, size)
        return held, np.frombuffer(mapping, dtype=np.uint8), mapping
    except (OSError, ValueError, KeyError, TypeError, json.JSONDecodeError):
        return None
    finally:
        os.close(fd)


def _build_mapped(path: str, digest: bytes, held: list[_HeldFile]) -> tuple[np.ndarray, mmap.mmap]:
    """Write an empty scratch file, allocated in full, beside `path`, move it onto `path` and map it.

    Processes that mapped the file it replaces keep their own copy.
    """
    manifest, indices = _manifest(held)
    runs = held[-1].first_run + held[-1].run_count
    layout = _MappedLayout(len(manifest), len(indices), len(held), runs, held[-1].offset + held[-1].nbytes)
    fields = (layout.manifest, len(manifest), layout.stats, layout.states, layout.checksums, layout.data)
    header = _HEADER.pack(_MAGIC, digest, *fields, 0)
    header = header[:-4] + struct.pack("<I", zlib.crc32(header[:-4]))
    stats = np.array([_source_stat(file.key) or (-1, -1) for file in held], dtype=np.int64)
    partial = PartialFile(path)
    fd = partial.fd
    try:
        try:
            os.posix_fallocate(fd, 0, layout.size)
        except OSError as error:
            raise OSError(
                error.errno, f"{path}: no room for a scratch of {layout.size} bytes: {error.strerror}"
            ) from error
        os.pwrite(fd, manifest, layout.manifest)
        os.pwrite(fd, indices.astype("<i8").tobytes(), layout.indices)
        os.pwrite(fd, stats.tobytes(), layout.stats)
        os.pwrite(fd, header, 0)
        mapping = mmap.mmap(fd, layout.size)
        partial.publish(0o600)
    except BaseException:
        partial.discard()
        raise
    return np.frombuffer(mapping, dtype=np.uint8), mapping


def _invalidate_changed(held: list[_HeldFile], data: np.ndarray, layout: _MappedLayout) -> None:
    """Drop the runs of files whose size or modification time changed since they were recorded."""
    stats = data[layout.stats : layout.stats + 16 * len(held)].view(np.int64).reshape(len(held), 2)
    states = data[layout.states : layout.states + (held[-1].first_run + held[-1].run_count)]
    for i, file in enumerate(held):
        now = _source_stat(file.key)
        if now is not None and tuple(stats[i]) != now:
            states[file.first_run : file.first_run + file.run_count] = 0
            stats[i] = now


def create_mapped_file_image_scratch(
    locations: Sequence[Any],
    path: Any,
    run_length: int,
    max_size: int | None = None,
    files: ImageReaderProvider | None = None,
) -> ImageScratch:
    """A scratch in a memory-mapped file at `path`, which may exceed RAM and outlives the process.

    A later scratch over the same file and images resumes from it, except
    the images whose source files changed since (size or modification
    time); a source that cannot be found keeps its images. Several
    processes may use it at once.

    Args:
        locations: The images to hold: `ImageLocation` objects, or keys of whole files.
        path: The scratch file. One that is truncated, foreign or of other images is rebuilt.
        run_length: How many images of a file are taken in together, with one read.
        max_size: How many bytes of images it may hold, as `create_host_image_scratch` takes it.
        files: Where the files are asked for their shape.

    Raises:
        ValueError: If `run_length` is not positive or there is nothing to hold.
        IndexError: If an index is past the end of its stack.
        OSError: If the file cannot be made, or the disk has no room for it.
    """
    grouped = _check_arguments(locations, run_length)
    path = as_key(path)
    digest = _digest(grouped, int(run_length), max_size)
    lock = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        opened = _open_mapped(path, digest, grouped, int(run_length))
        if opened is None:
            descriptors = _descriptors(grouped, files or FileImageReaderProvider())
            held = _layout(grouped, descriptors, int(run_length), max_size)
            if not held:
                raise ValueError(f"nothing to hold: the first file does not fit in max_size {max_size}")
            data, mapping = _build_mapped(path, digest, held)
        else:
            held, data, mapping = opened
        manifest_length = _HEADER.unpack_from(data, 0)[3]
        runs = held[-1].first_run + held[-1].run_count
        layout = _MappedLayout(
            manifest_length,
            sum(len(f.indices) for f in held),
            len(held),
            runs,
            held[-1].offset + held[-1].nbytes,
        )
        _invalidate_changed(held, data, layout)
    finally:
        os.close(lock)
    states = data[layout.states : layout.states + runs]
    checksums = data[layout.checksums : layout.checksums + 4 * runs].view(np.uint32)
    return ImageScratch(held, int(run_length), data[layout.data :], states, checksums, path, keep=mapping)


def create_directory_image_scratch(
    locations: Sequence[Any],
    directory: Any,
    run_length: int,
    budget: int,
    files: ImageReaderProvider | None = None,
) -> ImageScratch:
    """A mapped-file scratch in a directory shared by every program of a machine.

    The file is named after its images and layout, so a program asking for
    the same images finds it. To stay within `budget` bytes, the least
    recently used scratch files of the directory (only files ending
    `.vitrio-scratch`) are removed first; a scratch that alone exceeds the
    budget holds what fits in it.

    Args:
        locations: The images to hold.
        directory: The shared directory, made if missing.
        run_length: How many images of a file are taken in together.
        budget: How many bytes the scratch files of the directory may take together.
        files: Where the files are asked for their shape.

    Raises:
        ValueError: If `run_length` or `budget` is not positive, or there is nothing to hold.
    """
    if int(budget) < 1:
        raise ValueError(f"budget must be positive: {budget}")
    grouped = _check_arguments(locations, run_length)
    directory = as_key(directory)
    os.makedirs(directory, exist_ok=True)
    name = _digest(grouped, int(run_length), int(budget)).decode() + SCRATCH_SUFFIX
    path = os.path.join(directory, name)
    descriptors = None if os.path.exists(path) else _descriptors(grouped, files or FileImageReaderProvider())
    if descriptors is not None:
        held = _layout(grouped, descriptors, int(run_length), int(budget))
        needed = sum(file.nbytes for file in held) + _HEADER_BYTES
        _evict(directory, int(budget) - needed, keep=name)
    scratch = create_mapped_file_image_scratch(
        grouped_locations(grouped), path, run_length, int(budget), files
    )
    os.utime(path)
    return scratch


def grouped_locations(grouped: dict[str, np.ndarray]) -> list[Any]:
    """The locations of a grouping, back as a list."""
    return [
        key if index < 0 else ImageLocation(key, index)
        for key, indices in grouped.items()
        for index in indices.tolist()
    ]


def _evict(directory: str, room: int, keep: str) -> None:
    """Remove the least recently used scratch files of `directory` until the rest take `room` bytes."""
    entries = []
    with os.scandir(directory) as found:
        for entry in found:
            if (
                entry.name.endswith(SCRATCH_SUFFIX)
                and entry.name != keep
                and entry.is_file(follow_symlinks=False)
            ):
                stat = entry.stat(follow_symlinks=False)
                entries.append((stat.st_mtime_ns, stat.st_size, entry.path))
    entries.sort()
    total = sum(size for _, size, _ in entries)
    for _, size, path in entries:
        if total <= max(room, 0):
            break
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        total -= size


class _ScratchReader(ImageReader):
    """Serves the images of one file from a scratch, reading from the files what it has no room for."""

    def __init__(self, scratch: ImageScratch, key: str, files: ImageReaderProvider):
        super().__init__(key, scratch.descriptor(key))
        self._scratch = scratch
        self._files = files

    def read_images(self, indices: np.ndarray, out: np.ndarray, slots: np.ndarray) -> None:
        self.check_indices(indices)
        self._scratch.serve(self.key, indices, out, slots, self._files)

    def read_run(self, start: int, outs: Sequence[np.ndarray]) -> None:
        self.check_run(start, len(outs))
        indices = np.arange(start, start + len(outs), dtype=np.int64)
        for index, out in zip(indices.tolist(), outs):
            self._scratch.serve(self.key, np.asarray([index]), out[None], np.zeros(1, np.int64), self._files)

    def read_region(self, index: int, region: tuple[slice, ...], out: np.ndarray) -> None:
        self.check_run(index, 1)
        try:
            image = self._scratch.image(self.key, index, self._files)
        except KeyError:
            reader = self._files.acquire(self.key)
            try:
                reader.read_region(index, region, out)
            finally:
                self._files.release(reader)
            return
        np.copyto(out, image[region], casting="unsafe")


class ScratchImageReaderProvider(ImageReaderProvider):
    """Serves the files a scratch holds from it, and the others from `backing`.

    A file the scratch holds is opened only to take images in, so once they
    are all in, reading them opens no file at all.

    Args:
        backing: What opens the files.
        scratch: The scratch in front of them.
    """

    def __init__(self, backing: ImageReaderProvider, scratch: ImageScratch):
        if not isinstance(scratch, ImageScratch):
            raise TypeError(f"scratch is an ImageScratch, not {type(scratch).__name__}")
        self._backing = backing
        self._scratch = scratch
        self._readers: dict[str, _ScratchReader] = {}

    @property
    def backing(self) -> ImageReaderProvider:
        """What opens the files."""
        return self._backing

    @property
    def scratch(self) -> ImageScratch:
        """The scratch in front of the files."""
        return self._scratch

    def acquire(self, key) -> ImageReader:
        key = as_key(key)
        if not self._scratch.holds(key):
            return self._backing.acquire(key)
        reader = self._readers.get(key)
        if reader is None:
            reader = self._readers.setdefault(key, _ScratchReader(self._scratch, key, self._backing))
        return reader

    def release(self, reader: ImageReader) -> None:
        if not isinstance(reader, _ScratchReader):
            self._backing.release(reader)

    def __repr__(self) -> str:
        return f"ScratchImageReaderProvider({self._backing!r}, {self._scratch!r})"


def prefetch_scratch_async(
    scratch: ImageScratch,
    locations: Sequence[Any],
    executor: ThreadPoolExecutor | SynchronousExecutor,
    files: ImageReaderProvider | None = None,
) -> Completion:
    """Take the images `locations` name into `scratch` ahead of need, one task per file.

    Locations the scratch has no room for are left out.

    Args:
        scratch: Where to take them in.
        locations: The images.
        executor: Where the tasks run, such as a loader's `executor`.
        files: What opens the files. Defaults to opening the file at the path a key is.

    Returns:
        A `Completion` of the tasks.
    """
    files = files or FileImageReaderProvider()
    grouped = _group(locations)

    def task(key: str, indices: np.ndarray) -> None:
        if indices[0] < 0:
            indices = scratch._files[key].indices
        scratch.take_in(key, indices, files)

    tasks = [
        lambda key=key, indices=indices: task(key, indices)
        for key, indices in grouped.items()
        if scratch.holds(key)
    ]
    return run_tasks(executor, tasks)
