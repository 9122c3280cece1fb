"""`store`: a dask array written into one new file by the calling process, block by block."""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .._concurrency import SynchronousExecutor
from .._config import configuration
from .._functions import saver, write, writer_provider
from .._saving import write_batch_async
from .._types import ImageDescriptor, ImageLocation, as_key

if TYPE_CHECKING:
    import distributed


def _current_client() -> distributed.Client | None:
    """The `distributed.Client` dask computes on now, if any."""
    try:
        from distributed import default_client
    except ModuleNotFoundError as error:
        if error.name != "distributed":
            raise
        return None
    try:
        return default_client()
    except ValueError:
        return None


def _blocks(array: Any) -> Iterator[tuple[int, int, Any]]:
    """The blocks of `array` along its leading axis, whole along the others: (first, last, block)."""
    array = array.rechunk({axis: -1 for axis in range(1, array.ndim)})
    first = 0
    for i, size in enumerate(array.chunks[0]):
        yield first, first + size, array.blocks[i]
        first += size


def _aligned(values: Any) -> np.ndarray:
    """`values` as a numpy array aligned for its type: what arrives from a worker may not be."""
    return np.require(values, requirements="A")


def _computed(blocks: Iterator[tuple[int, int, Any]], client: Any) -> Iterator[tuple[int, int, np.ndarray]]:
    """Each block's values, in order, `dask_blocks_per_worker` of the configuration per worker thread
    computed or under way at once: on `client` if given, else by `dask.compute`."""
    import dask

    workers = sum(client.nthreads().values()) if client is not None else os.cpu_count()
    ahead = max(2, configuration().dask_blocks_per_worker * (workers or 1))
    pending: deque = deque()
    blocks = iter(blocks)
    exhausted = False
    while True:
        while not exhausted and len(pending) < ahead:
            item = next(blocks, None)
            if item is None:
                exhausted = True
                break
            first, last, block = item
            pending.append((first, last, client.compute(block) if client is not None else block))
        if not pending:
            return
        if client is None:  # a batch computed together, by the scheduler dask is set to
            values = dask.compute(*(block for *_, block in pending))
            for (first, last, _), value in zip(pending, values):
                yield first, last, _aligned(value)
            pending.clear()
        else:
            first, last, future = pending.popleft()
            try:
                yield first, last, _aligned(future.result())
            except BaseException:
                client.cancel([f for *_, f in pending])
                raise


def store(
    array: Any,
    key: Any,
    descriptor: ImageDescriptor | None = None,
    voxel_size: Sequence[float] | None = None,
) -> ImageDescriptor:
    """Write a dask array into a new file at `key`, in the format its extension names.

    The blocks are computed where dask computes (on the workers of the
    `distributed.Client` in use, if any), a few at a time, and written here as
    they arrive into the file, declared once; the file is moved onto `key`
    when all are written, and nothing is left there if one fails.

    Args:
        array: A dask array (or anything `dask.array.asarray` takes).
        key: The file to write.
        descriptor: What the file holds. Defaults to a stack of images for a
            3-D array and of volumes for a 4-D one, one image for a 2-D one;
            give one for a single volume.
        voxel_size: The size of a pixel in Å, one number or one per axis of an
            image (slowest first), as `vitrio.write` takes it; None for none.

    Returns:
        What the file holds.

    Raises:
        ValueError: If the array is not 2-D to 4-D, does not fit `descriptor`,
            or no format writes files of that extension.
    """
    import dask.array as da

    key = as_key(key)
    array = da.asarray(array)
    if descriptor is None:
        if array.ndim not in (2, 3, 4):
            raise ValueError(f"{key}: an image is 2-D, a stack 3-D or 4-D, not of shape {array.shape}")
        rank = 2 if array.ndim == 2 else array.ndim - 1
        descriptor = ImageDescriptor(array.shape, rank, array.dtype)
    if tuple(descriptor.extents) != tuple(array.shape):
        raise ValueError(f"{key}: an array of shape {array.shape} does not fit {descriptor}")
    client = _current_client()
    if not descriptor.is_stack:
        values = client.compute(array).result() if client is not None else array.compute()
        write(_aligned(values), key, descriptor, voxel_size=voxel_size)
    else:
        flat = array.reshape((descriptor.image_count, *descriptor.core_extents))
        with writer_provider() as writers:
            flat_descriptor = ImageDescriptor(flat.shape, descriptor.core_rank, descriptor.data_type)
            writers.declare(key, flat_descriptor, voxel_size=voxel_size)
            writing = saver(writers, executor=SynchronousExecutor())
            for first, last, values in _computed(_blocks(flat), client):
                targets = [ImageLocation(key, i) for i in range(first, last)]
                write_batch_async(writing, values, targets).get()
    return descriptor
