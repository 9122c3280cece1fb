"""Cropping the particles of `extract_particles` into their stacks: here, a few batches under way, or on
a Dask cluster, a task per micrograph."""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from .._concurrency import Completion, ThreadPoolExecutor
from .._executor_io import ExecutorImageLoader
from .._functions import loader, saver, writer_provider
from .._loading import read_patches_indexed_async
from .._providers import ImageReaderProvider
from .._saving import write_batch_async
from .._storage import Storage
from .._types import ImageDescriptor, ImageLocation
from ..dask import remove_leftovers, run_jobs
from ..data import Compose
from ..data._transforms import prepare_batch
from ._picks import Picks

if TYPE_CHECKING:
    import distributed

__all__ = ["Boxes", "Cropping", "crop", "crop_on"]


@dataclass(frozen=True)
class Boxes:
    """How the particles are cropped and written.

    Attributes:
        box: The side of a particle's box.
        dtype: The type of the stacks.
        threads: How many threads read and write.
        casting: As `vitrio.read` takes it.
        prepare: What transforms each batch of boxes, read as float32, into the images written; or None.
        storage: Where the micrographs' bytes come from, and the configuration of the batches
            (`extract_batch_bytes`, `extract_in_flight`); a task on a cluster carries it.
    """

    box: int
    dtype: np.dtype
    threads: int
    casting: str | None = None
    prepare: Compose | None = None
    storage: Storage = field(default_factory=Storage)


class Cropping(NamedTuple):
    """What an extraction crops: the picks matched with their micrographs, a stack each, how boxes are cut,
    the stacks finished so far (for the caller to remove on a failure), what is told the particles done,
    and the pixel size each stack's header says, in Å (None for none)."""

    found: Picks
    stacks: list[Path]
    boxes: Boxes
    finished: list[Path]
    progress: Callable[[int], object]
    pixel_sizes: Sequence[float | None]


def crop(cropping: Cropping, readers: ImageReaderProvider | None = None) -> None:
    """Crop the particles into their stacks, a few batches under way; each stack done joins `finished`.

    The micrographs are read through `readers` (those `match_picks` opened), else a provider of the
    loader's own. A failure or an interruption discards the stacks not finished; those finished are
    for the caller to remove.
    """
    found, stacks, boxes, finished, progress, pixel_sizes = cropping
    box, dtype, threads, casting, prepare = (
        boxes.box,
        boxes.dtype,
        boxes.threads,
        boxes.casting,
        boxes.prepare,
    )
    order = found.order
    images, centres = found.images[order], found.centres[order]
    targets = [ImageLocation(stacks[i], k) for i, k in zip(images.tolist(), found.in_stack[order].tolist())]
    counts = np.bincount(images, minlength=len(stacks))
    ends = np.cumsum(counts)
    chosen = boxes.storage.configuration
    per_batch = max(1, chosen.extract_batch_bytes // (box * box * max(dtype.itemsize, 4 if prepare else 0)))
    read_type = dtype if prepare is None else np.dtype(np.float32)
    shape = (box, box) if prepare is None else prepare.apply(np.zeros((1, box, box), read_type)).shape[1:]
    executor = ThreadPoolExecutor(threads)
    reading = (
        loader(executor=executor, cache=max(4, 2 * threads), storage_options=boxes.storage)
        if readers is None
        else ExecutorImageLoader(readers, executor)
    )
    sources = [(path, -1) for path in found.paths]
    reads: deque[tuple[int, int, np.ndarray, Completion]] = deque()
    writes: deque[tuple[int, int, Completion]] = deque()
    with writer_provider() as writers:
        for stack, count, size in zip(stacks, counts.tolist(), pixel_sizes):
            writers.declare(stack, ImageDescriptor((count, *shape), 2, dtype), voxel_size=size)
        writing = saver(writers, executor=executor)

        # A batch leaves its queue once its work is done, so that the `finally` below waits for all that runs.
        def write_oldest_read() -> None:
            first, last, values, completion = reads[0]
            completion.get()
            reads.popleft()
            if prepare is not None:
                values = np.asarray(prepare_batch(prepare.apply, values, executor), dtype=dtype)
            writes.append((first, last, write_batch_async(writing, values, targets[first:last])))

        def finish_oldest_write() -> None:
            first, last, completion = writes[0]
            completion.get()
            writes.popleft()
            while len(finished) < len(stacks) and ends[len(finished)] <= last:
                writers.close(stacks[len(finished)])
                finished.append(stacks[len(finished)])
            progress(last - first)

        try:
            for first in range(0, len(order), per_batch):
                last = min(first + per_batch, len(order))
                values = np.empty((last - first, box, box), dtype=read_type)
                ids, where = images[first:last], centres[first:last]
                completion = read_patches_indexed_async(
                    reading, values, sources, ids, where, fill=0, casting=casting
                )
                reads.append((first, last, values, completion))
                if len(reads) > chosen.extract_in_flight:
                    write_oldest_read()
                if len(writes) > chosen.extract_in_flight:
                    finish_oldest_write()
            while reads:
                write_oldest_read()
            while writes:
                finish_oldest_write()
        except BaseException:
            for stack in stacks[len(finished) :]:
                writers.discard(stack)  # the writes under way stop at their next image
            raise
        finally:
            for *_, completion in (*reads, *writes):
                completion.wait()


@dataclass(frozen=True)
class _StackJob:
    """What a task on a cluster crops: the particles of one micrograph into its stack, by path.

    Attributes:
        micrograph: The micrograph's path or URL.
        centres: The centre of each particle, (y, x), in the order of the stack.
        stack: The stack to write.
        boxes: How the particles are cropped and written.
        pixel_size: The pixel size its header says, in Å.
    """

    micrograph: str
    centres: np.ndarray
    stack: str
    boxes: Boxes
    pixel_size: float | None


def _crop_stack(job: _StackJob) -> int:
    """Crop the particles of `job` into its stack, and how many; what runs twice leaves the same stack."""
    count = len(job.centres)
    zeros, order = np.zeros(count, np.int64), np.arange(count)
    found = Picks(np.array([job.micrograph]), [job.micrograph], zeros, zeros, job.centres, order, order)
    crop(Cropping(found, [Path(job.stack)], job.boxes, [], lambda _: None, [job.pixel_size]))
    return count


def crop_on(client: distributed.Client, cropping: Cropping) -> None:
    """Crop the particles into their stacks on the cluster of `client`, one task per micrograph.

    A failure cancels the tasks left and counts every stack as finished, for the caller to remove.
    """
    found, stacks, boxes, finished, progress, pixel_sizes = cropping
    centres = found.centres[found.order]
    ends = np.cumsum(np.bincount(found.images, minlength=len(stacks))).tolist()
    jobs = [
        _StackJob(
            path if boxes.storage.is_remote(path) else os.path.abspath(path),
            centres[end - count : end],
            os.path.abspath(stack),
            boxes,
            size,
        )
        for path, stack, end, count, size in zip(
            found.paths, stacks, ends, np.diff([0, *ends]).tolist(), pixel_sizes
        )
    ]

    def done(n: int, count: Any) -> None:
        finished.append(stacks[n])
        progress(count)

    try:
        run_jobs(client, _crop_stack, jobs, "vitrio-extract", done)
    except BaseException:
        finished[:] = stacks
        raise
    finally:
        remove_leftovers(stacks)
