"""The mapped-file scratch: its file's format, and resuming or rebuilding it.

The file has a header, the layout (a JSON manifest of the files held and
their indices), a table of the sources' stamps (size, modification time,
inode and change time; of a file at a URL, its size and version, as
`ImageReaderProvider.stamp` asks), a
state byte and a CRC-32 per run, and the images. It is allocated in full
when made (so a full disk shows up there, as an `OSError`, and never while
taking images in), privately (mode 0600) beside its path and renamed onto
it. A later scratch over the same file and images resumes from it: runs
whose source file's stamp changed since are dropped (a file replaced by
another of the same size and modification time, as `cp -p` or a restore
leaves it, has another inode or change time),
runs whose CRC does not match are taken in again, and a file that is
truncated, foreign, of another layout or made for readers of another
configuration (`ImageReaderProvider.configuration`: formats, their
settings) is rebuilt. So is one this user
cannot trust (`vitrio.scratch.private`): a symbolic link is never followed,
and a file of another user, or one that group or others may write, is never
read, since anyone can write a valid header and CRC. Several processes may
share the file: each writes a run's images before marking it present, and
two processes taking in one run write the same bytes.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import mmap
import os
import struct
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._partial import PartialFile, writing_in
from .._providers import FileImageReaderProvider, ImageReaderProvider
from .._storage import is_url
from .._types import ImageDescriptor, as_key
from .plan import HeldFile, align, check_arguments, descriptors, digest, layout, place
from .private import open_own_file
from .store import ImageScratch

__all__ = ["HEADER_BYTES", "create_mapped_file_image_scratch", "mapped_scratch"]

_MAGIC = b"VITRIO-SCRATCH\x00\x02"
_HEADER = struct.Struct("<16s32s6QI")  # magic, digest, manifest at/length, stats, states, checksums, data
HEADER_BYTES = 4096
"""The bytes of a scratch file before its manifest."""


class _MappedLayout:
    """Where each part of a mapped scratch lies."""

    def __init__(
        self, manifest_bytes: int, index_count: int, file_count: int, run_count: int, data_bytes: int
    ):
        self.manifest = HEADER_BYTES
        self.indices = align(self.manifest + manifest_bytes, 8)
        self.stats = self.indices + 8 * index_count
        self.states = self.stats + 8 * _STAMP_FIELDS * file_count
        self.checksums = align(self.states + run_count, 4)
        self.data = align(self.checksums + 4 * run_count)
        self.size = self.data + data_bytes


_STAMP_FIELDS = 4


def _source_stat(key: str, files: ImageReaderProvider) -> tuple[int, ...] | None:
    """What tells the file at `key` now from what it was: its size, modification time, inode and change
    time (which no copy carries over); of a file at a URL, its size and version, as the server says."""
    if is_url(key):
        stamp = files.stamp(key)
        return None if stamp is None else (*stamp, 0, 0)
    try:
        status = os.stat(key)
    except OSError:
        return None
    return (status.st_size, status.st_mtime_ns, status.st_ino, status.st_ctime_ns)


def _manifest(held: list[HeldFile]) -> tuple[bytes, np.ndarray]:
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


def _open_mapped(
    fd: int, fingerprint: bytes, grouped: dict[str, np.ndarray], run_length: int
) -> tuple[list[HeldFile], np.ndarray, mmap.mmap] | None:
    """The layout and map of the scratch file open at `fd`, if valid and made for `fingerprint`; or None."""
    try:
        size = os.fstat(fd).st_size
        head = os.pread(fd, _HEADER.size, 0)
        if len(head) < _HEADER.size:
            return None
        magic, found, at, length, stats, states, checksums, data, crc = _HEADER.unpack(head)
        if (
            magic != _MAGIC
            or found != fingerprint
            or zlib.crc32(head[:-4]) != crc
            or not at < at + length <= size
        ):
            return None
        manifest = json.loads(os.pread(fd, length, at))
        counts = [entry["count"] for entry in manifest["files"]]
        index_bytes = os.pread(fd, 8 * sum(counts), _MappedLayout(length, 0, 0, 0, 0).indices)
        all_indices = np.frombuffer(index_bytes, dtype=np.int64)
        held, offset = [], 0
        for entry, count in zip(manifest["files"], counts):
            descriptor = ImageDescriptor(entry["extents"], entry["core_rank"], entry["data_type"])
            indices = all_indices[offset : offset + count].copy()
            held.append(HeldFile(entry["key"], descriptor, indices, run_length))
            offset += count
        if not held:
            return None
        runs, total = place(held)
        expected = _MappedLayout(length, sum(counts), len(counts), runs, total)
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


def _build_mapped(
    path: str, fingerprint: bytes, held: list[HeldFile], files: ImageReaderProvider
) -> tuple[np.ndarray, mmap.mmap]:
    """Write an empty scratch file, allocated in full, beside `path`, move it onto `path` and map it.

    Processes that mapped the file it replaces keep their own copy.

    Raises:
        OSError: If the disk has no room for it, or it cannot be put at `path`.
    """
    manifest, indices = _manifest(held)
    runs = held[-1].first_run + held[-1].run_count
    parts = _MappedLayout(len(manifest), len(indices), len(held), runs, held[-1].offset + held[-1].nbytes)
    fields = (parts.manifest, len(manifest), parts.stats, parts.states, parts.checksums, parts.data)
    header = _HEADER.pack(_MAGIC, fingerprint, *fields, 0)
    header = header[:-4] + struct.pack("<I", zlib.crc32(header[:-4]))
    unknown = (-1,) * _STAMP_FIELDS
    stats = np.array([_source_stat(file.key, files) or unknown for file in held], dtype=np.int64)
    partial = PartialFile(path)
    fd = partial.fd
    try:
        try:
            os.posix_fallocate(fd, 0, parts.size)
        except OSError as error:
            raise OSError(
                error.errno, f"{path}: no room for a scratch of {parts.size} bytes: {error.strerror}"
            ) from error
        os.pwrite(fd, manifest, parts.manifest)
        os.pwrite(fd, indices.astype("<i8").tobytes(), parts.indices)
        os.pwrite(fd, stats.tobytes(), parts.stats)
        os.pwrite(fd, header, 0)
        mapping = mmap.mmap(fd, parts.size)
        try:
            partial.publish(0o600)
        except OSError as error:
            raise OSError(
                error.errno, f"{path}: the scratch file cannot be put there: {error.strerror}"
            ) from error
    except BaseException:
        partial.discard()
        raise
    return np.frombuffer(mapping, dtype=np.uint8), mapping


def _invalidate_changed(
    held: list[HeldFile], data: np.ndarray, parts: _MappedLayout, files: ImageReaderProvider
) -> None:
    """Drop the runs of files whose stamp (`_source_stat`) changed since it was recorded."""
    stats = data[parts.stats : parts.stats + 8 * _STAMP_FIELDS * len(held)].view(np.int64)
    stats = stats.reshape(len(held), _STAMP_FIELDS)
    states = data[parts.states : parts.states + (held[-1].first_run + held[-1].run_count)]
    for i, file in enumerate(held):
        now = _source_stat(file.key, files)
        if now is not None and tuple(stats[i]) != now:
            states[file.first_run : file.first_run + file.run_count] = 0
            stats[i] = now


def mapped_scratch(
    grouped: dict[str, np.ndarray],
    path: str,
    run_length: int,
    max_size: int | None,
    files: ImageReaderProvider | None,
    folder: int | None = None,
    of: str = "",
) -> ImageScratch:
    """The scratch of the locations `grouped` (by `plan.group`) in the file at `path`, resumed or made.

    With `folder`, the descriptor of the folder of `path`, the file is opened and made in that folder.
    The file is made for the configuration of `files` and `of`, what the images `files` hand out are
    of, if not the stored ones (`plan.digest`): a file made for others is rebuilt.

    Raises:
        ValueError: If the first file does not fit in `max_size`.
        IndexError: If an index is past the end of its stack.
        OSError: If the file cannot be made, or the disk has no room for it.
    """
    files = files or FileImageReaderProvider()
    made_by = files.configuration()
    planned = digest(grouped, run_length, max_size, made_by, of)
    fd = open_own_file(path, folder)
    try:
        opened = None
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
            opened = _open_mapped(fd, planned, grouped, run_length)
        if opened is None:
            held = layout(grouped, descriptors(grouped, files), run_length, max_size)
            if not held:
                raise ValueError(f"nothing to hold: the first file does not fit in max_size {max_size}")
            pinned = contextlib.nullcontext() if folder is None else writing_in(os.path.dirname(path), folder)
            with pinned:
                data, mapping = _build_mapped(path, planned, held, files)
        else:
            held, data, mapping = opened
        runs = held[-1].first_run + held[-1].run_count
        where = _MappedLayout(
            _HEADER.unpack_from(data, 0)[3],
            sum(len(f.indices) for f in held),
            len(held),
            runs,
            held[-1].offset + held[-1].nbytes,
        )
        _invalidate_changed(held, data, where, files)
    except BaseException:
        if fd is not None:
            _remove_if_still_empty(path, fd, folder)
        raise
    finally:
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)  # the map holds a duplicate of `fd`, which would keep the lock
            os.close(fd)
    states = data[where.states : where.states + runs]
    checksums = data[where.checksums : where.checksums + 4 * runs].view(np.uint32)
    return ImageScratch(held, run_length, data[where.data :], states, checksums, made_by, path, keep=mapping)


def _remove_if_still_empty(path: str, fd: int, folder: int | None) -> None:
    """Remove the empty file `fd` that opening made at `path` (in the folder open at `folder`, if given),
    unless another has replaced it since."""
    mine = os.fstat(fd)
    name = path if folder is None else os.path.basename(path)
    try:
        there = os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return
    if mine.st_size == 0 and (there.st_dev, there.st_ino) == (mine.st_dev, mine.st_ino):
        os.unlink(name, dir_fd=folder)


def create_mapped_file_image_scratch(
    locations: Sequence[Any],
    path: Any,
    run_length: int,
    max_size: int | None = None,
    files: ImageReaderProvider | None = None,
) -> ImageScratch:
    """A scratch in a memory-mapped file at `path`, which may exceed RAM and outlives the process.

    A later scratch over the same file and images, made with readers of
    the same configuration, resumes from it, except
    the images whose source files changed since (size, modification time,
    inode or change time); a source that cannot be found keeps its images. Several
    processes of this user may use it at once. The file is readable by
    this user alone.

    Args:
        locations: The images to hold: `ImageLocation` objects, or keys of whole files.
        path: The scratch file. One that is truncated, foreign or of other
            images or readers is rebuilt, and so is a symbolic link (never followed), a
            file of another user, or one that group or others may write.
        run_length: How many images of a file are taken in together, with one read.
        max_size: How many bytes of images it may hold, as `create_host_image_scratch` takes it.
        files: Where the files are asked for their shape: readers of the configuration of those
            that take the images in (as `create_host_image_scratch` says).

    Raises:
        ValueError: If `run_length` is not positive or there is nothing to hold.
        IndexError: If an index is past the end of its stack.
        OSError: If the file cannot be made or put at `path` (another
            user's file there in a folder with the sticky bit), or the disk
            has no room for it.
    """
    grouped = check_arguments(locations, run_length)
    return mapped_scratch(grouped, as_key(path), int(run_length), max_size, files)
