"""Planning batch reads: group by file, coalesce runs of consecutive images, split into tasks.

A batch becomes a few tasks per worker thread. Each task takes a stretch of
the destination's slots, groups it by file, asks the provider for each
file's reader once, and hands the reader all its indices and slots in one
call; the reader reads runs of consecutive images together, or gathers a
stretch of one file with one numpy call. Planning does no per-image work
beyond numpy calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ._arrays import as_destination
from ._concurrency import Completion, SynchronousExecutor, ThreadPoolExecutor, run_tasks
from ._providers import ImageReaderProvider
from ._types import ImageLocation, IndexTable, as_key
from .formats import ImageReader

__all__ = [
    "ImageLoader",
    "read_batch_async",
    "read_patches_async",
    "read_indexed_async",
    "read_patches_indexed_async",
    "plan_locations",
    "task_bounds",
    "check_leading_extent",
]

_TASKS_PER_WORKER = 4


class ImageLoader:
    """What reads batches: an executor to run reads on, and a provider of readers.

    Args:
        executor: Where the reads run.
        readers: What hands out the reader of each file.
    """

    def __init__(self, executor: ThreadPoolExecutor | SynchronousExecutor, readers: ImageReaderProvider):
        self.executor = executor
        self.readers = readers

    @property
    def worker_count(self) -> int:
        """How many reads run at once."""
        return self.executor.worker_count

    def __repr__(self) -> str:
        return f"ImageLoader({self.executor!r}, {self.readers!r})"


def plan_locations(locations: Sequence[Any]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The distinct keys of `locations`, and for each location its key's number and its index.

    Raises:
        ValueError: If whole files and images of stacks are mixed.
    """
    keys: dict[str, int] = {}
    key_ids = np.empty(len(locations), dtype=np.int64)
    indices = np.empty(len(locations), dtype=np.int64)
    for i, location in enumerate(locations):
        if isinstance(location, ImageLocation):
            key_ids[i] = keys.setdefault(location.key, len(keys))
            indices[i] = location.index_in_stack
        else:
            key_ids[i] = keys.setdefault(as_key(location), len(keys))
            indices[i] = -1
    whole = indices < 0
    if whole.any() and not whole.all():
        raise ValueError("locations mix whole files and images of stacks")
    return list(keys), key_ids, indices


def check_leading_extent(array: np.ndarray, count: int, what: str, of: str) -> None:
    """Raise `ValueError` unless `array` has a leading extent of `count`, one slot per element of `of`."""
    if array.ndim == 0 or array.shape[0] != count:
        raise ValueError(
            f"{what}'s leading extent must be the number of {of}, {count}: its shape is {array.shape}"
        )


def task_bounds(count: int, workers: int) -> list[tuple[int, int]]:
    tasks = max(1, min(count, workers * _TASKS_PER_WORKER))
    bounds = np.linspace(0, count, tasks + 1).astype(np.int64).tolist()
    return [(a, b) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def _image_views(slot: np.ndarray, reader: ImageReader) -> list[np.ndarray]:
    stack = reader.descriptor.stack_extents
    return [slot[index] for index in np.ndindex(*stack)] if stack else [slot]


def read_indexed_async(
    loader: ImageLoader,
    out: np.ndarray,
    keys: Sequence[str],
    key_ids: np.ndarray,
    indices: np.ndarray,
    keep: Any = None,
) -> Completion:
    """Read image `indices[i]` of file `keys[key_ids[i]]` into `out[i]` (a whole file where the index is -1).

    The planned form of `read_batch_async`, for callers that hold their
    locations as arrays already. Each task takes a stretch of the slots,
    groups it by file, and hands each file's reader its indices and slots
    in one call.
    """
    count = len(key_ids)
    if count == 0:
        return Completion()
    readers = loader.readers
    whole = bool(indices[0] < 0)

    def task(first: int, last: int) -> None:
        ids = key_ids[first:last]
        if ids.min() == ids.max():
            groups = [(int(ids[0]), np.arange(first, last))]
        else:
            order = np.argsort(ids, kind="stable")
            sorted_ids = ids[order]
            bounds = [0, *(np.flatnonzero(np.diff(sorted_ids)) + 1).tolist(), len(order)]
            groups = [(int(sorted_ids[a]), order[a:b] + first) for a, b in zip(bounds[:-1], bounds[1:])]
        for key_id, slots in groups:
            reader = readers.acquire(keys[key_id])
            try:
                _check_slot(reader, out.shape[1:], whole)
                if whole:
                    for slot in slots.tolist():
                        reader.read_run(0, _image_views(out[slot], reader))
                else:
                    reader.read_images(indices[slots], out, slots)
            finally:
                readers.release(reader)

    tasks = [lambda a=a, b=b: task(a, b) for a, b in task_bounds(count, loader.worker_count)]
    return run_tasks(loader.executor, tasks, keep=(out, keep))


def _check_slot(reader: ImageReader, slot_shape: tuple[int, ...], whole: bool) -> None:
    expected = reader.descriptor.extents if whole else reader.core_extents
    if tuple(slot_shape) != tuple(expected):
        what = "the file" if whole else "an image of the file"
        raise ValueError(f"{reader.key}: {what} has shape {expected}, the destination's slots {slot_shape}")


def read_batch_async(loader: ImageLoader, destination: Any, locations: Sequence[Any]) -> Completion:
    """Read `locations[i]` into slot `i` of `destination`, on the loader's threads.

    The locations may span any number of files and formats; consecutive
    images of a stack are read in one call; values are converted to the
    destination's type. Reads land in `destination` where it is.

    Args:
        loader: What reads.
        destination: An array whose leading extent is `len(locations)`, each
            slot of the shape of the image (or whole file) its location names.
        locations: `ImageLocation` objects, or keys of whole files; not both kinds.

    Returns:
        A `Completion` of the reads. Failures (a missing file, an index past
        the end of its stack, a slot shape that does not fit) surface from its `get()`.

    Raises:
        ValueError: If the leading extent is not `len(locations)`, or whole
            files and images of stacks are mixed.
    """
    out = as_destination(destination)
    locations = list(locations)
    check_leading_extent(out, len(locations), "the destination", "locations")
    keys, key_ids, indices = plan_locations(locations)
    return read_indexed_async(loader, out, keys, key_ids, indices, keep=destination)


def _centre_array(centres: Any) -> np.ndarray:
    if isinstance(centres, IndexTable):
        return np.asarray(centres)
    values = np.asarray(centres)
    if values.size == 0:
        values = values.reshape(0, values.shape[-1] if values.ndim == 2 else 0).astype(np.int64)
    if values.dtype.kind not in "iu":
        raise TypeError(f"centres must be integers, not {values.dtype}")
    if values.ndim != 2:
        raise ValueError(f"centres must have a row of coordinates per centre, not shape {values.shape}")
    if values.size and values.min() < 0:
        raise ValueError("centres must not be negative")
    return values.astype(np.int64, copy=False)


def read_patches_indexed_async(
    loader: ImageLoader,
    out: np.ndarray,
    images: Sequence[tuple[str, int]],
    image_ids: np.ndarray,
    centres: np.ndarray,
    fill: Any = None,
    keep: Any = None,
) -> Completion:
    """Crop the patch centred on `centres[i]` out of image `images[image_ids[i]]` into `out[i]`.

    An image is `(key, index)`, the index -1 for a single image or volume.
    The centre lands at `extent // 2` of its patch. What lies beyond the
    image is set to `fill`, or left as `out` held it when `fill` is None.
    """
    count = len(image_ids)
    if count == 0:
        return Completion()
    shape = np.asarray(out.shape[1:], dtype=np.int64)
    origins = centres - shape // 2
    readers = loader.readers

    def crop(reader: ImageReader, index: int, slots: np.ndarray) -> None:
        extents = np.asarray(reader.core_extents, dtype=np.int64)
        origin = origins[slots]
        low = np.clip(origin, 0, extents)
        high = np.clip(origin + shape, 0, extents)
        clipped = ((low != origin) | (high != origin + shape)).any(axis=1)
        inside = (high > low).all(axis=1)
        if fill is not None:
            for slot in slots[clipped].tolist():
                out[slot].fill(fill)
        regions, targets = [], []
        for slot, a, b, o, cut in zip(
            slots[inside].tolist(),
            low[inside].tolist(),
            high[inside].tolist(),
            origin[inside].tolist(),
            clipped[inside].tolist(),
        ):
            patch = out[slot]
            if cut:
                patch = patch[tuple(slice(x - y, z - y) for x, z, y in zip(a, b, o))]
            targets.append(patch)
            regions.append(tuple(slice(x, z) for x, z in zip(a, b)))
        reader.read_regions(index, regions, targets)

    def task(first: int, last: int) -> None:
        ids = image_ids[first:last]
        order = np.argsort(ids, kind="stable")
        sorted_ids = ids[order]
        bounds = [0, *(np.flatnonzero(np.diff(sorted_ids)) + 1).tolist(), len(order)]
        for a, b in zip(bounds[:-1], bounds[1:]):
            key, index = images[int(sorted_ids[a])]
            reader = readers.acquire(key)
            try:
                crop(reader, _patch_index(reader, index, len(shape)), order[a:b] + first)
            finally:
                readers.release(reader)

    tasks = [lambda a=a, b=b: task(a, b) for a, b in task_bounds(count, loader.worker_count)]
    return run_tasks(loader.executor, tasks, keep=(out, keep))


def _patch_index(reader: ImageReader, index: int, rank: int) -> int:
    if len(reader.core_extents) != rank:
        raise ValueError(
            f"{reader.key}: patches of rank {rank} cannot be cropped out of images of shape "
            f"{reader.core_extents}"
        )
    if index < 0:
        if reader.descriptor.is_stack:
            raise ValueError(f"{reader.key}: is a stack; name one of its images to crop patches out of")
        return 0
    reader.check_run(index, 1)
    return index


def read_patches_async(loader: ImageLoader, destination: Any, location: Any, centres: Any) -> Completion:
    """Crop a patch around each centre out of one image or volume, on the loader's threads.

    The centre lands at index `extent // 2` of its patch (RELION's
    convention). What lies beyond the image is left as `destination` held it.

    Args:
        loader: What reads.
        destination: An array of shape `(len(centres), *patch_shape)`.
        location: An `ImageLocation`, or the key of a file holding one image or volume.
        centres: An `IndexTable`, an integer array with a row per centre
            (slowest axis first), or a sequence of sequences.

    Returns:
        A `Completion` of the reads.

    Raises:
        ValueError: If the leading extent is not the number of centres, the
            patch rank is not the centres' rank, or a centre is negative.
        TypeError: If the centres are not integers.
    """
    out = as_destination(destination)
    values = _centre_array(centres)
    check_leading_extent(out, len(values), "the destination", "centres")
    if len(values) and out.ndim - 1 != values.shape[1]:
        raise ValueError(f"patches of shape {out.shape[1:]} do not fit centres of rank {values.shape[1]}")
    if isinstance(location, ImageLocation):
        image = (location.key, location.index_in_stack)
    else:
        image = (as_key(location), -1)
    image_ids = np.zeros(len(values), dtype=np.int64)
    return read_patches_indexed_async(loader, out, [image], image_ids, values, keep=destination)
