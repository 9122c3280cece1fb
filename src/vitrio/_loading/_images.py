"""Reading images and whole files into the slots of a destination: grouped by file, or as native runs."""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Sequence
from time import perf_counter
from typing import Any

import numpy as np

from .._arrays import as_casting, as_destination, check_destination_type
from .._concurrency import Completion, run_tasks, shared_pool
from .._counters import add_count, note_read, note_runs
from .._errors import concerning, redact
from .._native import RUN_FILE
from .._providers import NO_LAYOUT, ImageReaderProvider
from .._storage import is_url
from .._types import group_ids
from ..formats import ImageReader
from ..formats._raw_layout import KnownFiles, read_runs
from ._loader import (
    ImageLoader,
    as_out,
    as_sequence,
    check_ids,
    check_leading_extent,
    plan_locations,
    slot_integers,
    task_bounds,
    task_positions,
)
from ._runs import plan_known, will_read_runs

__all__ = ["read_indexed_async", "read_batch_async"]


def _image_views(slot: np.ndarray, reader: ImageReader) -> list[np.ndarray]:
    stack = reader.descriptor.stack_extents
    return [slot[index] for index in np.ndindex(*stack)] if stack else [slot]


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
    out = as_out(out)
    casting = as_casting(casting)
    keys = as_sequence(keys, "keys")
    count = out.shape[0]
    key_ids = slot_integers(key_ids, "key_ids", count)
    indices = slot_integers(indices, "indices", count)
    check_ids(key_ids, "key_ids", len(keys), "keys")
    if count == 0:
        return Completion()
    low = int(indices.min())
    if low < -1:
        raise ValueError(f"indices[{int(np.argmin(indices))}] is {low}: an index is -1 or more")
    if low < 0 and indices.max() >= 0:
        raise ValueError("indices mix -1 (whole files) and indices in stacks")
    whole = low < 0
    readers, chosen = loader.readers, loader.configuration
    readers.begin_batch()
    left = np.arange(count)
    tasks = []
    if not whole and out.flags.c_contiguous:
        plan = plan_known(readers, out, keys, key_ids, indices)
        if plan is not None:
            left, files, runs, slots, dst_kind = plan
            if loader.read_ahead:  # now, so that the kernel reads while the batches before it are copied
                loader.counters.add("files_opened", will_read_runs(files, runs))
            for a, b in task_bounds(len(runs), loader.worker_count, chosen.native_tasks_per_worker):
                tasks.append(
                    lambda a=a, b=b: _read_known(
                        readers, out, indices, files, runs[a:b], slots[a:b], dst_kind
                    )
                )

    def task(positions: np.ndarray) -> None:
        groups = list(group_ids(key_ids[positions]))
        if not whole and is_url(keys[key_ids[positions[0]]]):  # a task of files at URLs (`task_positions`)
            files = [(keys[k], positions[g]) for k, g in groups]
            _read_fetched(readers, files, out, indices, casting, chosen.opening_threads)
            return
        if not loader.read_ahead or whole:
            for key_id, group in groups:
                _read_group(readers, keys[key_id], positions[group], None, out, indices, whole, casting)
            return
        for key_id, _ in groups:  # the disk reads every file's header while the first are parsed
            _hint_header(readers, keys[key_id], chosen.header_hint_bytes)
        hinted: deque[tuple[str, np.ndarray, ImageReader | None]] = deque()
        ahead = max(2, chosen.open_ahead // loader.worker_count)
        try:
            for key_id, group in groups:  # and the next files' images while one is copied
                key, slots = keys[key_id], positions[group]
                hinted.append((key, slots, _hinted(readers, key, indices[slots])))
                if len(hinted) > ahead:
                    _read_group(readers, *hinted.popleft(), out, indices, whole, casting)
            while hinted:
                _read_group(readers, *hinted.popleft(), out, indices, whole, casting)
        finally:
            for _, _, reader in hinted:
                if reader is not None:
                    readers.release(reader)

    parts = task_positions(loader, key_ids, left, keys.__getitem__)
    tasks += [lambda p=p: task(p) for p in parts]
    loader.counters.batch(count, out.nbytes)
    return run_tasks(loader.executor, loader.counters.counted(tasks), keep=(out, keep))


def _read_group(
    readers: ImageReaderProvider,
    key: str,
    slots: np.ndarray,
    acquired: ImageReader | None,
    out: np.ndarray,
    indices: np.ndarray,
    whole: bool,
    casting: str | None = None,
) -> None:
    """Read the images of one file bound for `slots` of `out` through its reader (`acquired` already,
    or acquired here), and release it."""
    started = perf_counter()
    with concerning(key):
        reader = readers.acquire(key) if acquired is None else acquired
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


def _read_fetched(
    readers: ImageReaderProvider,
    files: list[tuple[str, np.ndarray]],
    out: np.ndarray,
    indices: np.ndarray,
    casting: str | None,
    opening_threads: int,
) -> None:
    """Read the images of files at URLs bound for their slots (`(key, slots)` each): the ranges of all
    those whose readers fetch ranges fetched at once (the provider's `read_many`), their time shared by
    their images; the rest through `_read_group`. The files not open are opened at once, on
    `opening_threads`."""
    started = perf_counter()
    acquired = _acquire_all(readers, [key for key, _ in files], opening_threads)
    held = [reader for reader in acquired if not isinstance(reader, BaseException)]
    fetched: list[tuple[str, np.ndarray, ImageReader, Any]] = []
    try:
        for (key, slots), reader in zip(files, acquired):
            with concerning(key):
                if isinstance(reader, BaseException):
                    raise reader
                served = reader.indexed()  # a single volume's sections
                if not served.fetches_ranges:
                    held.remove(reader)
                    _read_group(readers, key, slots, reader, out, indices, False, casting)
                    continue
                _check_slot(served, out.shape[1:], False)
                check_destination_type(reader.key, reader.descriptor.data_type, out.dtype, casting)
                fetched.append((key, slots, reader, served))
        bodies = readers.read_many(
            [(served.source, served.image_ranges(indices[slots])) for _, slots, _, served in fetched]
        )
        for (_, slots, reader, served), views in zip(fetched, bodies):
            served.put_images(views, out, slots)
            if reader.descriptor.data_type.dtype != out.dtype:
                add_count("conversions", len(slots))
        each = (perf_counter() - started) / max(1, sum(len(slots) for _, slots, _, _ in fetched))
        for key, slots, reader, _ in fetched:
            note_read(reader.format_name, key, len(slots), out.nbytes // len(out), each * len(slots))
    finally:
        for reader in held:
            readers.release(reader)


def _acquire_all(readers: ImageReaderProvider, keys: list[str], threads: int) -> list[Any]:
    """The reader of each file at a URL of `keys`, or what acquiring it raised: those open already
    acquired here, the others opened at once on the process's opening pool of `threads`, each open
    waiting on two requests."""
    acquired: list[Any] = [None] * len(keys)

    def acquire(i: int) -> None:
        try:
            acquired[i] = readers.acquire(keys[i])
        except Exception as error:  # noqa: BLE001 - raised by the caller, naming the file
            acquired[i] = error

    closed = {i for i, key in enumerate(keys) if not readers.opened(key)}
    if len(closed) < 2:  # one file is opened here as well
        closed = set()
    opening = run_tasks(shared_pool("opening", threads), [lambda i=i: acquire(i) for i in closed])
    for i in range(len(keys)):
        if i not in closed:
            acquire(i)
    opening.wait()
    return acquired


def _hint_header(readers: ImageReaderProvider, key: str, header_bytes: int) -> None:
    """Tell the kernel, through the provider, the first `header_bytes` of the file at `key` are read
    soon, if opening it reads them (its layout not known, its reader not open): the headers of a
    batch's files are read at once, not one after another as each is opened."""
    if readers.layout(key) in (None, NO_LAYOUT) and not readers.opened(key):
        readers.will_read(key, 0, header_bytes)


def _hinted(readers: ImageReaderProvider, key: str, indices: np.ndarray) -> ImageReader | None:
    """The reader of `key`, acquired, once the kernel is told the images `indices` of its raw stack are
    read soon; None where it cannot be opened (the read that follows raises it, naming the file)."""
    try:
        reader = readers.acquire(key)
    except Exception:  # noqa: BLE001 - the read raises it, naming the file
        return None
    if reader.descriptor.is_stack:
        with contextlib.suppress(IndexError):
            reader.check_indices(indices)
            reader.will_read(indices)
    return reader


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
        _read_group(readers, key, moved, None, out, indices, False)
        runs, slots = np.ascontiguousarray(runs[~changed]), slots[~changed]


def _check_slot(reader: ImageReader, slot_shape: tuple[int, ...], whole: bool) -> None:
    expected = reader.descriptor.extents if whole else reader.core_extents
    if tuple(slot_shape) != tuple(expected):
        what = "the file" if whole else "an image of the file"
        raise ValueError(
            f"{redact(reader.key)}: {what} has shape {expected}, the destination's slots {slot_shape}"
        )


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
