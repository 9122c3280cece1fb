"""The layout of a file whose images lie uncompressed at an offset, and reading them with one native call.

A reader of such a file gives its layout (`RawArrayReader.layout`): where the
images lie, in what type, and what the file was (size, mtime, inode) when its
header was parsed. With it, `read_runs` reads images of files whose readers
are closed with one native call: open, `pread`s, close, converting in the same
pass, without the GIL. A file whose reader is open is read out of its map.
"""

from __future__ import annotations

import errno
import math
import os
import weakref
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from .._arrays import holds_values
from .._native import (
    CHECK_FIELDS,
    CHECK_KIND,
    KIND_BF16,
    KIND_BYTES,
    KIND_F16,
    KIND_F32,
    KIND_I8,
    KIND_I16,
    KIND_U8,
    KIND_U16,
    READ_CHANGED,
    READ_OPEN,
    READ_SHORT,
    SWAP,
)
from .._native import read_runs as _read_runs
from .._types import ImageDescriptor

__all__ = ["KnownFiles", "Plan", "RawLayout", "read_runs", "value_kind"]

_KINDS = {
    np.dtype(np.uint8): KIND_U8,
    np.dtype(np.int8): KIND_I8,
    np.dtype(np.uint16): KIND_U16,
    np.dtype(np.int16): KIND_I16,
    np.dtype(np.float16): KIND_F16,
    np.dtype(np.float32): KIND_F32,
}
_FLOATS = {KIND_F32, KIND_F16, KIND_BF16}


def _kind(dtype: np.dtype) -> int | None:
    """The kind of values of `dtype` (in native byte order), or None; ml_dtypes' bfloat16 (numpy has none)
    is told by its name, so that ml_dtypes, whose import takes most of a second, is not imported here."""
    return KIND_BF16 if dtype.name == "bfloat16" else _KINDS.get(dtype)


class Plan(NamedTuple):
    """How `read_runs` reads an image of a file into a type of destination."""

    stored: int
    """The kind of the values in the file, with `SWAP` if of the other byte order."""
    wanted: int
    """The kind of the destination's values."""
    values: int
    """Values per image (bytes, if both kinds are `KIND_BYTES`)."""


def value_kind(dtype: np.dtype) -> int | None:
    """The kind `vitrio._native` gives values of `dtype` (other byte order included), or None."""
    dtype = np.dtype(dtype)
    kind = _kind(dtype.newbyteorder("=")) if dtype.fields is None else None
    if kind is None:
        return None
    return kind if dtype.isnative or dtype.itemsize == 1 else kind | SWAP


class RawLayout:
    """Where the images of a file lie and in what type, as its header said, and what the file was then.

    Attributes:
        key: The file's key.
        descriptor: What the file holds.
        offset: Where image 0 starts.
        dtype: The type and byte order of the stored values.
        image_bytes: The bytes of one image as stored.
        check: (size, mtime in ns, inode, device) of the file when its header was parsed.

    Args:
        key, descriptor, offset, dtype: The attributes above.
        status: The file's status when its header was parsed.
        mapped: The map of the file's reader, while it lives (a weak reference is kept).
    """

    __slots__ = ("key", "path", "descriptor", "core_extents", "image_count", "offset", "dtype")
    __slots__ += ("image_bytes", "check", "_plans", "_rows", "_map")

    def __init__(
        self,
        key: str,
        descriptor: ImageDescriptor,
        offset: int,
        dtype: np.dtype,
        status: os.stat_result,
        mapped: Any = None,
    ):
        self.key, self.path, self.descriptor = key, os.fsencode(key), descriptor
        self.core_extents = descriptor.core_extents
        self.image_count = descriptor.image_count
        self.offset, self.dtype = offset, dtype
        self.image_bytes = math.prod(self.core_extents) * dtype.itemsize
        self.check = (status.st_size, status.st_mtime_ns, status.st_ino, status.st_dev)
        self._plans: dict[np.dtype, Plan | None] = {}
        self._rows: dict[np.dtype, tuple[int, tuple[int, ...]] | None] = {}
        self._map = weakref.ref(mapped) if mapped is not None else None

    def mapped(self) -> Any:
        """The map of the file's reader while it lives (and the SIGBUS guard covers it) and no page
        of it has failed to read, else None."""
        mapped = self._map() if self._map is not None else None
        return mapped if mapped is not None and not mapped.faults else None

    def plan(self, out_dtype: np.dtype) -> Plan | None:
        """How `read_runs` reads an image into `out_dtype`, or None when it cannot convert to that type
        (numpy must)."""
        plan = self._plans.get(out_dtype, False)
        if plan is False:
            plan = self._plan(np.dtype(out_dtype))
            self._plans[out_dtype] = plan
        return plan

    def row(self, out_dtype: np.dtype) -> tuple[int, tuple[int, ...]] | None:
        """Where `read_runs` reads this file's images into `out_dtype` from and how, for planning many
        files' runs at once: the destination's kind and (offset, image bytes, values per image, images,
        stored kind); None where it does not read them (`plan`), or a destination of `out_dtype`
        does not hold their values (`holds_values`: the reader raises). Worked out once a type."""
        found = self._rows.get(out_dtype, False)
        if found is False:
            plan = self.plan(out_dtype)
            found = None
            if plan is not None and holds_values(self.descriptor.data_type, out_dtype):
                row = (self.offset, self.image_bytes, plan.values, self.image_count, plan.stored)
                found = (plan.wanted, row)
            self._rows[out_dtype] = found
        return found

    def _plan(self, out_dtype: np.dtype) -> Plan | None:
        values = math.prod(self.core_extents)
        stored, wanted = value_kind(self.dtype), _kind(out_dtype) if out_dtype.isnative else None
        if stored is not None and wanted is not None:
            kind = stored & ~SWAP
            if kind == wanted or wanted in _FLOATS:
                return Plan(stored, wanted, values)
        if out_dtype == self.dtype and self.dtype.isnative and not self.dtype.hasobject:
            return Plan(KIND_BYTES, KIND_BYTES, self.image_bytes)
        return None


class KnownFiles:
    """Files of known layouts, as `read_runs` takes them: their layouts, paths, check rows and maps.

    A file whose reader is open is read out of the reader's map, without a system call but a `stat`.

    Args:
        layouts: The files.
        kinds: The stored kind of each file's values, as its `plan` gives it.
    """

    __slots__ = ("layouts", "paths", "checks", "maps", "_mapped")

    def __init__(self, layouts: Sequence[RawLayout], kinds: Sequence[int]):
        self.layouts = list(layouts)
        self.paths = tuple(layout.path for layout in layouts)
        self.maps = tuple(layout.mapped() for layout in layouts)
        self._mapped = [i for i, m in enumerate(self.maps) if m is not None]
        self.checks = np.empty((len(layouts), CHECK_FIELDS), dtype=np.int64)
        self.checks[:, :CHECK_KIND] = [layout.check for layout in layouts]
        self.checks[:, CHECK_KIND] = kinds


def read_runs(files: KnownFiles, runs: np.ndarray, out: np.ndarray, dst_kind: int) -> tuple[int, int] | None:
    """Read runs of values of files into `out` with one native call, without the GIL.

    Args:
        files: The files.
        runs: C-contiguous int64 rows (file, offset, values, destination byte), those of one file together.
        out: A C-contiguous array.
        dst_kind: The kind of `out`'s values.

    Returns:
        None when all were read; `(run, file)` for the first run whose file is not what its layout
        says any more (changed or gone): the runs before it were read.

    Raises:
        OSError: If a read fails, a file ends before a run does, or pages of a map could not be
            read (they read as zeros), naming the file.
    """
    failure = _read_runs(files.paths, files.checks, runs, out, dst_kind, files.maps)
    for i in files._mapped:
        faults = files.maps[i].faults
        if faults:
            raise OSError(
                errno.EIO,
                f"{files.layouts[i].key}: {faults} pages of the file could not be read while open "
                "(it was truncated, or an I/O error), and read as zeros",
            )
    if failure is None:
        return None
    run, file, status, code = failure
    if status in (READ_CHANGED, READ_OPEN):
        return run, file
    key = files.layouts[file].key
    if status == READ_SHORT:
        raise OSError(errno.EIO, f"{key}: the file ended before its images did: it was truncated while read")
    raise OSError(code, f"{key}: {os.strerror(code)}")
