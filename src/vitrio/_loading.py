"""Planning batch reads: group by file, coalesce runs of consecutive images, split into tasks.

A batch becomes a few tasks per worker thread. Each task takes a stretch of
the destination's slots. The images of raw files whose layout the provider
knows (`ImageReaderProvider.layout`) are planned with numpy into runs of
consecutive images, (file, offset, length, destination) each, and read by
one native call that opens each file, reads, converts and closes it without
the GIL (`vitrio.formats.read_runs`): no Python per image or per file
beyond a lookup. The rest is grouped by file; the provider's reader of each
file is asked once and handed all its indices and slots in one call. The
patches of one image are cropped by one call of its reader, a native one
for raw files.
"""

from __future__ import annotations

from collections.abc import Sequence
from time import perf_counter
from typing import Any

import numpy as np

from ._arrays import (
    as_casting,
    as_destination,
    check_destination_type,
    check_numeric_destination,
    holds_values,
)
from ._concurrency import Completion, SynchronousExecutor, ThreadPoolExecutor, run_tasks
from ._counters import ReadCounters, ReadStats, add_count, note_read, note_runs
from ._native import RUN_COUNT, RUN_DESTINATION, RUN_FIELDS, RUN_FILE, RUN_OFFSET, advise
from ._providers import ImageReaderProvider
from ._types import ImageLocation, IndexTable, as_key, group_ids, index_locations, integer_array
from .formats import ImageReader, RawArrayReader
from .formats._raw import KnownFiles, read_runs

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
_NATIVE_TASKS_PER_WORKER = 2


class ImageLoader:
    """What reads batches: an executor to run reads on, and a provider of readers.

    Args:
        executor: Where the reads run.
        readers: What hands out the reader of each file.
        read_ahead: Whether a batch tells the kernel what it will read of raw files
            (`posix_fadvise` WILLNEED) as it is submitted, so that files not in the page cache
            are read from disk many requests at a time while earlier batches are copied: worth
            it where batches are submitted ahead of their use, as a `vitrio.data.DataLoader`
            does. It costs the submitting thread a system call per run (and an open per file).
        counters: What counts what its reads do (`stats()`). Defaults to counters of its own.
    """

    def __init__(
        self,
        executor: ThreadPoolExecutor | SynchronousExecutor,
        readers: ImageReaderProvider,
        read_ahead: bool = False,
        counters: ReadCounters | None = None,
    ):
        self.executor = executor
        self.readers = readers
        self.read_ahead = read_ahead
        self.counters = ReadCounters() if counters is None else counters

    def stats(self, reset: bool = False) -> ReadStats:
        """What its reads did since it was made or reset (`ReadStats`); `reset` counts from zero after."""
        return self.counters.stats(reset)

    @property
    def worker_count(self) -> int:
        """How many reads run at once."""
        return self.executor.worker_count

    def __repr__(self) -> str:
        return f"ImageLoader({self.executor!r}, {self.readers!r})"


def plan_locations(locations: Sequence[Any]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The distinct keys of `locations`, and for each location its key's number and its index.

    As `vitrio._types.index_locations`, for locations that are all whole files or all images of stacks.

    Raises:
        ValueError: If whole files and images of stacks are mixed.
    """
    keys, key_ids, indices = index_locations(locations)
    whole = indices < 0
    if whole.any() and not whole.all():
        raise ValueError("locations mix whole files and images of stacks")
    return keys, key_ids, indices


def check_leading_extent(array: np.ndarray, count: int, what: str, of: str) -> None:
    """Raise `ValueError` unless `array` has a leading extent of `count`, one slot per element of `of`."""
    if array.ndim == 0 or array.shape[0] != count:
        raise ValueError(
            f"{what}'s leading extent must be the number of {of}, {count}: its shape is {array.shape}"
        )


def task_bounds(count: int, workers: int, per_worker: int = _TASKS_PER_WORKER) -> list[tuple[int, int]]:
    tasks = max(1, min(count, workers * per_worker))
    bounds = np.linspace(0, count, tasks + 1).astype(np.int64).tolist()
    return [(a, b) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def _image_views(slot: np.ndarray, reader: ImageReader) -> list[np.ndarray]:
    stack = reader.descriptor.stack_extents
    return [slot[index] for index in np.ndindex(*stack)] if stack else [slot]


def _integers(values: Any, name: str, count: int) -> np.ndarray:
    """`values` as a 1-D int64 array of `count` elements, or a clear error naming `name`."""
    array = integer_array(values, f"{name} are integers")
    if array.ndim != 1 or len(array) != count:
        raise ValueError(
            f"{name} are one per slot of the destination, {count} in a 1-D array, not of shape {array.shape}"
        )
    return array


def _check_ids(ids: np.ndarray, name: str, count: int, of: str) -> None:
    """Raise `ValueError` unless every one of `ids` numbers one of the `count` elements of `of`."""
    if len(ids) and (ids.min() < 0 or ids.max() >= count):
        bad = int(np.flatnonzero((ids < 0) | (ids >= count))[0])
        raise ValueError(f"{name}[{bad}] is {int(ids[bad])}, not the number of one of the {count} {of}")


def _destination(out: Any) -> np.ndarray:
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out is a numpy array, not {type(out).__name__}")
    if out.ndim == 0:
        raise ValueError("out has a leading extent, a slot per read: it is a 0-d array")
    if not out.flags.writeable:
        raise ValueError("out is read-only")
    check_numeric_destination(out.dtype)
    return out


def _sequence(values: Any, name: str) -> Sequence[Any]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise TypeError(f"{name} is a sequence, not {type(values).__name__}")
    return values


def read_indexed_async(
    loader: ImageLoader,
    out: np.ndarray,
    keys: Sequence[str],
    key_ids: Any,
    indices: Any,
    keep: Any = None,
    casting: str | None = None,
) -> Completion:
    """Read image `indices[i]` of file `keys[key_ids[i]]` into `out[i]`, on the loader's threads.

    The planned form of `read_batch_async`, for callers that hold their
    locations as arrays already (as `vitrio.data` does): no Python object per
    image on the way. Each task takes a stretch of the slots, groups it by
    file, and hands each file's reader its indices and slots in one call.

    Args:
        loader: What reads.
        out: A writable numpy array with a slot per read: of the shape of one
            image (or, where the indices are -1, of the whole file) after its
            leading extent. Values are converted to its type.
        keys: The files, each once.
        key_ids: For each slot, the number of its file in `keys`: integers.
        indices: For each slot, the index of its image in the file's stack:
            integers, all -1 (whole files) or all non-negative.
        keep: An object the completion holds on to until the reads end.
        casting: As `vitrio.read` takes it: "unsafe" lets `out` be of a type that cannot hold
            every value of a file's.

    Returns:
        A `Completion` of the reads. Failures (a missing file, an index past
        the end of its stack (`IndexError`), a slot shape that does not fit)
        surface from its `get()`.

    Raises:
        TypeError: If `out` is not a numpy array, `keys` not a sequence, or
            `key_ids` or `indices` not integers.
        ValueError: If `key_ids` or `indices` are not 1-D arrays of one
            element per slot, a key id is not the number of one of `keys`,
            an index is below -1, or whole files and images of stacks are mixed.
    """
    out = _destination(out)
    casting = as_casting(casting)
    keys = _sequence(keys, "keys")
    count = out.shape[0]
    key_ids = _integers(key_ids, "key_ids", count)
    indices = _integers(indices, "indices", count)
    _check_ids(key_ids, "key_ids", len(keys), "keys")
    if count == 0:
        return Completion()
    low = int(indices.min())
    if low < -1:
        raise ValueError(f"indices[{int(np.argmin(indices))}] is {low}: an index is -1 or more")
    if low < 0 and indices.max() >= 0:
        raise ValueError("indices mix -1 (whole files) and indices in stacks")
    whole = low < 0
    readers = loader.readers
    left = np.arange(count)
    tasks = []
    if not whole and out.flags.c_contiguous:
        plan = _plan_known(readers, out, keys, key_ids, indices)
        if plan is not None:
            left, files, runs, slots, dst_kind = plan
            if loader.read_ahead:  # now, so that the kernel reads while the batches before it are copied
                advise(files.paths, files.checks, runs)
            for a, b in task_bounds(len(runs), loader.worker_count, _NATIVE_TASKS_PER_WORKER):
                tasks.append(
                    lambda a=a, b=b: _read_known(
                        readers, out, indices, files, runs[a:b], slots[a:b], dst_kind
                    )
                )

    def task(positions: np.ndarray) -> None:
        for key_id, group in group_ids(key_ids[positions]):
            _read_group(readers, keys[key_id], out, positions[group], indices, whole, casting)

    tasks += [lambda a=a, b=b: task(left[a:b]) for a, b in task_bounds(len(left), loader.worker_count)]
    loader.counters.batch(count, out.nbytes)
    return run_tasks(loader.executor, loader.counters.counted(tasks), keep=(out, keep))


def _read_group(
    readers: ImageReaderProvider,
    key: str,
    out: np.ndarray,
    slots: np.ndarray,
    indices: np.ndarray,
    whole: bool,
    casting: str | None = None,
) -> None:
    """Read the images of one file bound for `slots` of `out` through its reader."""
    started = perf_counter()
    reader = readers.acquire(key)
    try:
        served = reader if whole else reader.indexed()  # a single volume's sections
        _check_slot(served, out.shape[1:], whole)
        check_destination_type(reader.key, reader.descriptor.data_type, out.dtype, casting)
        if whole:
            for slot in slots.tolist():
                reader.read_run(0, _image_views(out[slot], reader))
        else:
            served.read_images(indices[slots], out, slots)
    finally:
        readers.release(reader)
    if reader.descriptor.data_type.dtype != out.dtype:
        add_count("conversions", len(slots))
    note_read(reader.format_name, key, len(slots), out.nbytes // len(out), perf_counter() - started)


# The columns of `_plan_known`'s table of the known files: where image 0 lies, bytes and values per
# image, images, and the stored kind.
_OFFSET, _IMAGE_BYTES, _VALUES, _COUNT, _KIND = range(5)


def _plan_known(
    readers: ImageReaderProvider,
    out: np.ndarray,
    keys: Sequence[str],
    key_ids: np.ndarray,
    indices: np.ndarray,
) -> tuple[np.ndarray, KnownFiles, np.ndarray, np.ndarray, int] | None:
    """Plan the reads of the images whose files' layouts the provider knows as native runs.

    Returns:
        None if there is none; else the slots left to the readers, the files, the runs
        (file, offset, values, destination byte) in the order of file and index, for each run
        its first slot and its number of images, and the kind of `out`'s values.
    """
    ids, inverse = np.unique(key_ids, return_inverse=True)
    shape, dtype = out.shape[1:], out.dtype
    numbers = np.full(len(ids), -1, dtype=np.int64)
    layouts, rows, dst_kind = [], [], None
    for j, key_id in enumerate(ids.tolist()):
        layout = readers.layout(keys[key_id])
        plan = layout.plan(dtype) if layout is not None and layout.core_extents == shape else None
        if plan is not None and not holds_values(layout.descriptor.data_type, dtype):
            plan = None  # the reader raises DestinationTypeError
        if plan is not None and dst_kind in (None, plan.wanted):
            dst_kind = plan.wanted
            numbers[j] = len(layouts)
            layouts.append(layout)
            rows.append((layout.offset, layout.image_bytes, plan.values, layout.image_count, plan.stored))
    if not layouts:
        return None
    table = np.array(rows, dtype=np.int64)
    files = numbers[inverse]
    known = files >= 0
    beyond = known & (indices >= table[files, _COUNT])
    if beyond.any():  # the readers raise the IndexError
        known &= ~np.isin(files, files[beyond])
    positions = np.flatnonzero(known)
    if not len(positions):
        return None
    file, index = files[positions], indices[positions]
    order = np.lexsort((index, file))
    file, index, slot = file[order], index[order], positions[order]
    go_on = (np.diff(file) == 0) & (np.diff(index) == 1) & (np.diff(slot) == 1)
    starts = np.flatnonzero(np.concatenate(([True], ~go_on)))
    lengths = np.diff(np.append(starts, len(file)))
    file, index, slot = file[starts], index[starts], slot[starts]
    runs = np.empty((len(starts), RUN_FIELDS), dtype=np.int64)
    runs[:, RUN_FILE] = file
    runs[:, RUN_OFFSET] = table[file, _OFFSET] + index * table[file, _IMAGE_BYTES]
    runs[:, RUN_COUNT] = lengths * table[file, _VALUES]
    runs[:, RUN_DESTINATION] = slot * out.strides[0]
    return (
        np.flatnonzero(~known),
        KnownFiles(layouts, table[:, _KIND]),
        runs,
        np.column_stack((slot, lengths)),
        dst_kind,
    )


def _read_known(
    readers: ImageReaderProvider,
    out: np.ndarray,
    indices: np.ndarray,
    files: KnownFiles,
    runs: np.ndarray,
    slots: np.ndarray,
    dst_kind: int,
) -> None:
    """Read `runs` with one native call; the images of a file found changed go through its reader."""
    while len(runs):
        started = perf_counter()
        failure = read_runs(files, runs, out, dst_kind)
        if failure is None:
            note_runs(files, runs, slots, out.nbytes // len(out), perf_counter() - started, dst_kind)
            return
        run, bad = failure
        key = files.layouts[bad].key
        readers.forget_layout(key)
        runs, slots = runs[run:], slots[run:]
        changed = runs[:, RUN_FILE] == bad
        moved = np.concatenate([np.arange(a, a + n) for a, n in slots[changed].tolist()])
        _read_group(readers, key, out, moved, indices, False)
        runs, slots = np.ascontiguousarray(runs[~changed]), slots[~changed]


def _check_slot(reader: ImageReader, slot_shape: tuple[int, ...], whole: bool) -> None:
    expected = reader.descriptor.extents if whole else reader.core_extents
    if tuple(slot_shape) != tuple(expected):
        what = "the file" if whole else "an image of the file"
        raise ValueError(f"{reader.key}: {what} has shape {expected}, the destination's slots {slot_shape}")


def read_batch_async(
    loader: ImageLoader, destination: Any, locations: Sequence[Any], casting: str | None = None
) -> Completion:
    """Read `locations[i]` into slot `i` of `destination`, on the loader's threads.

    The locations may span any number of files and formats; consecutive
    images of a stack are read in one call; values are converted to the
    destination's type. Reads land in `destination` where it is.

    Args:
        loader: What reads.
        destination: An array whose leading extent is `len(locations)`, each
            slot of the shape of the image (or whole file) its location names.
        locations: `ImageLocation` objects, or keys of whole files; not both kinds.
        casting: As `vitrio.read` takes it: "unsafe" lets `destination` be of a type that cannot
            hold every value of a file's.

    Returns:
        A `Completion` of the reads. Failures (a missing file, an index past
        the end of its stack, a slot shape that does not fit, a destination
        type that cannot hold a file's values) surface from its `get()`.

    Raises:
        ValueError: If the leading extent is not `len(locations)`, whole
            files and images of stacks are mixed, or `casting` is neither None nor "unsafe".
    """
    out = as_destination(destination)
    locations = list(locations)
    check_leading_extent(out, len(locations), "the destination", "locations")
    keys, key_ids, indices = plan_locations(locations)
    return read_indexed_async(loader, out, keys, key_ids, indices, keep=destination, casting=casting)


def _centre_array(centres: Any) -> np.ndarray:
    if isinstance(centres, IndexTable):
        return np.asarray(centres).astype(np.int64)
    if not isinstance(centres, (np.ndarray, Sequence)) and not hasattr(centres, "__array__"):
        raise TypeError(f"centres are an IndexTable, an array or a sequence, not {type(centres).__name__}")
    values = integer_array(centres, "centres must be integers")
    if values.size == 0:
        values = values.reshape(0, values.shape[-1] if values.ndim == 2 else 0)
    if values.ndim != 2:
        raise ValueError(f"centres must have a row of coordinates per centre, not shape {values.shape}")
    if values.size and values.min() < 0:
        raise ValueError("centres must not be negative")
    return values


def read_patches_indexed_async(
    loader: ImageLoader,
    out: np.ndarray,
    images: Sequence[tuple[str, int]],
    image_ids: Any,
    centres: Any,
    fill: Any = None,
    keep: Any = None,
    casting: str | None = None,
) -> Completion:
    """Crop the patch centred on `centres[i]` out of image `images[image_ids[i]]` into `out[i]`.

    The planned form of `read_patches_async`, for patches of many images at
    once: the patches of one image are read through one reader, in one call.
    The centre lands at `extent // 2` of its patch (RELION's convention).

    Args:
        loader: What reads.
        out: A writable numpy array of shape `(len(image_ids), *patch_shape)`.
        images: The images, each once: `(key, index)` pairs, the index -1 for
            a file that holds one image or volume.
        image_ids: For each patch, the number of its image in `images`: integers.
        centres: For each patch, its centre, slowest axis first: a 2-D array of
            non-negative integers, a row of the patches' rank per patch.
        fill: The value of what lies beyond the image; None leaves it as `out` held it.
        keep: An object the completion holds on to until the reads end.
        casting: As `vitrio.read` takes it.

    Returns:
        A `Completion` of the reads. Failures (a missing file, an index past
        the end of its stack (`IndexError`), an image whose rank is not the
        patches', a whole stack named by -1) surface from its `get()`.

    Raises:
        TypeError: If `out` is not a numpy array, `images` not a sequence, or
            `image_ids` or `centres` not integers.
        ValueError: If `image_ids` is not a 1-D array of one element per patch,
            an id is not the number of one of `images`, or `centres` is not a
            row of the patches' rank per patch, or holds a negative coordinate.
    """
    out = _destination(out)
    casting = as_casting(casting)
    images = _sequence(images, "images")
    count = out.shape[0]
    image_ids = _integers(image_ids, "image_ids", count)
    _check_ids(image_ids, "image_ids", len(images), "images")
    centres = _centre_array(centres)
    if len(centres) != count or (count and centres.shape[1] != out.ndim - 1):
        raise ValueError(
            f"centres are a row of {out.ndim - 1} coordinates for each of the {count} patches of shape "
            f"{out.shape[1:]}: their shape is {centres.shape}"
        )
    if count == 0:
        return Completion()
    shape = np.asarray(out.shape[1:], dtype=np.int64)
    origins = centres - shape // 2
    readers = loader.readers
    patch_bytes = out.nbytes // count

    def crop(reader: ImageReader, index: int, slots: np.ndarray) -> None:
        extents = np.asarray(reader.core_extents, dtype=np.int64)
        origin = origins[slots]
        native = isinstance(reader, RawArrayReader) and out.flags.c_contiguous
        if native and reader.read_patches(index, origin, out.shape[1:], out, slots, fill):
            return
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
        for image_id, positions in group_ids(image_ids[first:last]):
            key, index = images[image_id]
            started = perf_counter()
            reader = readers.acquire(key)
            try:
                served = reader if index < 0 else reader.indexed()  # a single volume's sections
                check_destination_type(reader.key, reader.descriptor.data_type, out.dtype, casting)
                crop(served, _patch_index(served, index, len(shape)), positions + first)
            finally:
                readers.release(reader)
            note_read(reader.format_name, key, len(positions), patch_bytes, perf_counter() - started)

    tasks = [lambda a=a, b=b: task(a, b) for a, b in task_bounds(count, loader.worker_count)]
    loader.counters.batch(count, out.nbytes, patches=count)
    return run_tasks(loader.executor, loader.counters.counted(tasks), keep=(out, keep))


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


def read_patches_async(
    loader: ImageLoader, destination: Any, location: Any, centres: Any, casting: str | None = None
) -> Completion:
    """Crop a patch around each centre out of one image or volume, on the loader's threads.

    The centre lands at index `extent // 2` of its patch (RELION's
    convention). What lies beyond the image is left as `destination` held it.

    Args:
        loader: What reads.
        destination: An array of shape `(len(centres), *patch_shape)`.
        location: An `ImageLocation`, or the key of a file holding one image or volume.
        centres: An `IndexTable`, an integer array with a row per centre
            (slowest axis first), or a sequence of sequences.
        casting: As `vitrio.read` takes it: "unsafe" lets `destination` be of a type that cannot
            hold every value of the image's.

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
    return read_patches_indexed_async(
        loader, out, [image], image_ids, values, keep=destination, casting=casting
    )
