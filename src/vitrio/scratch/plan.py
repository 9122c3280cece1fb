"""The plan of a scratch: which files it holds, which of their images, and where each lies.

A scratch is laid out when it is made: for each file, in ascending key
order, the distinct indices asked of it, cut into runs of `run_length`
images, each file's images after the previous file's, aligned to 64 bytes.
Files that do not fit in `max_size` bytes, after those before them in key
order, are not held. A plan's `digest` tells it from others, the readers
the images are read by included.
"""

from __future__ import annotations

import hashlib
import math
import secrets
from collections.abc import Iterable
from typing import Any

import numpy as np

from .._providers import ImageReaderProvider
from .._types import ImageDescriptor, ImageLocationGrouping, past_the_end

__all__ = ["HeldFile", "align", "check_arguments", "descriptors", "digest", "group", "layout", "place"]

_ALIGN = 4096


def align(offset: int, alignment: int = _ALIGN) -> int:
    """`offset` rounded up to a multiple of `alignment`."""
    return -(-offset // alignment) * alignment


class HeldFile:
    """One file of a scratch: its images held, and where they lie.

    Attributes:
        first_run: The number, in the whole scratch, of the file's first run.
        offset: Where the file's images start among the scratch's bytes.
    """

    def __init__(self, key: str, descriptor: ImageDescriptor, indices: np.ndarray, run_length: int):
        self.key = key
        self.descriptor = descriptor
        self.dtype = descriptor.data_type.dtype
        self.indices = indices
        self.core = descriptor.core_extents
        self.image_bytes = math.prod(self.core) * self.dtype.itemsize
        self.run_count = -(-len(indices) // run_length)
        self.dense = bool(len(indices)) and int(indices[0]) == 0 and int(indices[-1]) == len(indices) - 1
        self.nbytes = len(indices) * self.image_bytes
        self.first_run = 0
        self.offset = 0


def group(locations: Iterable[Any] | ImageLocationGrouping) -> dict[str, np.ndarray]:
    """The distinct indices asked of each file, by key in ascending order; -1 for a whole file."""
    if not isinstance(locations, ImageLocationGrouping):
        locations = ImageLocationGrouping(locations)
    return {found.key: np.unique(found.location_indices) for found in locations}


def digest(
    grouped: dict[str, np.ndarray], run_length: int, max_size: int | None, read_by: str | None, of: str = ""
) -> bytes:
    """32 hex digits that tell one plan from another: the same for the same images, layout and size,
    readers and `of`, what the images held are of besides their files (none for their stored values).

    `read_by` is the configuration of the readers the images are read by
    (`ImageReaderProvider.configuration`); None, readers that cannot tell, makes the digest this
    call's own, so that no later program takes a scratch made with them for its own.
    """
    hashed = hashlib.sha256(f"{run_length}:{max_size}".encode())
    hashed.update((secrets.token_hex(16) if read_by is None else read_by).encode() + b"\0")
    if of:
        hashed.update(of.encode() + b"\0")
    for key, indices in grouped.items():
        hashed.update(key.encode() + b"\0")
        hashed.update(indices.tobytes() + b"\0")
    return hashed.hexdigest()[:32].encode()


def place(files: Iterable[HeldFile]) -> tuple[int, int]:
    """Give each file its first run and offset, one after another; the runs and bytes of them all."""
    runs = total = 0
    for file in files:
        file.first_run, file.offset = runs, total
        runs += file.run_count
        total = align(total + file.nbytes, 64)
    return runs, total


def layout(
    grouped: dict[str, np.ndarray],
    descriptors: dict[str, ImageDescriptor],
    run_length: int,
    max_size: int | None,
) -> list[HeldFile]:
    """The files held, in key order, until the next one does not fit in `max_size`, placed.

    Raises:
        ValueError: If a file is named both whole and by index.
        IndexError: If an index is past the end of its stack.
    """
    held: list[HeldFile] = []
    total = 0
    for key, indices in grouped.items():
        descriptor = descriptors[key]
        count = descriptor.image_count
        if indices[0] < 0:
            if len(indices) > 1:
                raise ValueError(f"{key}: is named both whole and by index")
            indices = np.arange(count, dtype=np.int64)
        elif indices[-1] >= count:
            raise past_the_end(key, int(indices[-1]), count)
        file = HeldFile(key, descriptor, indices, run_length)
        if max_size is not None and total + file.nbytes > max_size:
            break
        total = align(total + file.nbytes, 64)
        held.append(file)
    place(held)
    return held


def check_arguments(locations: Any, run_length: int) -> dict[str, np.ndarray]:
    """The locations grouped by file.

    Raises:
        ValueError: If `run_length` is not positive or there is nothing to hold.
    """
    if int(run_length) < 1:
        raise ValueError(f"run_length must be positive: {run_length}")
    grouped = group(locations)
    if not grouped:
        raise ValueError("nothing to hold: no locations were given")
    return grouped


def descriptors(keys: Iterable[str], files: ImageReaderProvider) -> dict[str, ImageDescriptor]:
    """What each file at `keys` holds, asked of `files`."""
    return {key: files.query_descriptor(key) for key in keys}
