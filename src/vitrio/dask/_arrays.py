"""Lazy dask arrays read by vitrio's batched reads, a chunk a run of images grouped by file.

Keys may be URLs (`s3://`, `https://`): the `storage_options` that reach them
(credentials, `anon=True`, as dask, xarray and zarr take them) are made into
a `vitrio.Storage` once, which is an argument of each task, so that a worker
reads with them (and with this process's configuration) as this process
does; it travels with the graph to the workers and is never written to a file.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .._concurrency import SynchronousExecutor
from .._functions import loader, query_descriptor, reader_provider
from .._loading import plan_locations, read_indexed_async, read_patches_indexed_async
from .._storage import Storage
from .._types import ImageLocation, as_key
from ..data._images import plan_files

if TYPE_CHECKING:
    import dask.array


def _loader(storage: Storage) -> Any:
    """A loader for one task: reads on the calling thread (the task's own), each file opened once, up to
    `dask_open_files` of the storage's configuration open at once.

    A task's own, not the process's: a file replaced between two tasks is read anew.
    """
    open_files = storage.configuration.dask_open_files
    return loader(cache=open_files, executor=SynchronousExecutor(), storage_options=storage)


def _chunk_bounds(groups: np.ndarray, size: int) -> list[tuple[int, int]]:
    """Split positions into chunks of at most `size`, cutting where `groups` changes where it can.

    A run of one group longer than `size` is cut every `size` positions; shorter runs are packed whole.
    """
    count = len(groups)
    starts = np.flatnonzero(np.diff(groups)) + 1
    bounds: list[tuple[int, int]] = []
    first = last = 0
    for b in [*starts.tolist(), count]:
        if b - first > size and last > first:
            bounds.append((first, last))
            first = last
        while b - first > size:
            bounds.append((first, first + size))
            first += size
        last = b
    if last > first:
        bounds.append((first, last))
    return bounds


def _per_chunk(shape: Sequence[int], dtype: np.dtype, chunk: int | None, storage: Storage) -> int:
    if chunk is None:
        return max(1, storage.configuration.chunk_bytes // max(1, math.prod(shape) * dtype.itemsize))
    if not isinstance(chunk, (int, np.integer)) or chunk < 1:
        raise ValueError(f"chunk is a positive number of images, not {chunk!r}")
    return int(chunk)


def _array(
    name: str, tasks: list[tuple], sizes: list[int], shape: Sequence[int], dtype: np.dtype
) -> dask.array.Array:
    """A dask array of `len(tasks)` chunks stacked along the leading axis, chunk `i` made by `tasks[i]`."""
    import dask.array as da

    graph = {(name, i, *(0,) * len(shape)): task for i, task in enumerate(tasks)}
    chunks = (tuple(sizes), *((extent,) for extent in shape))
    return da.Array(graph, name, chunks, dtype=dtype, meta=np.empty((0,) * (len(shape) + 1), dtype))


def _read_chunk(
    keys: list[str], key_ids: np.ndarray, indices: np.ndarray, shape: tuple, dtype: str, storage: Storage
):
    """The images `indices[i]` of the files `keys[key_ids[i]]`, read in one batch."""
    out = np.empty((len(key_ids), *shape), dtype=dtype)
    read_indexed_async(_loader(storage), out, keys, key_ids, indices).get()
    return out


def _read_patch_chunk(
    images: list, image_ids, centres: np.ndarray, shape: tuple, dtype, fill, storage: Storage
):
    """The patches around `centres[i]` of the images `images[image_ids[i]]`, read in one batch."""
    out = np.empty((len(image_ids), *shape), dtype=dtype)
    read_patches_indexed_async(_loader(storage), out, images, image_ids, centres, fill=fill).get()
    return out


def _locations(locations: Sequence[Any]) -> list[Any]:
    """Locations as `read_batch_async` takes them: "n@key" texts parsed, paths as keys."""
    if isinstance(locations, (str, bytes, os.PathLike)):
        raise TypeError("locations are a sequence of locations, not one; give [location]")
    parsed = []
    for location in locations:
        if isinstance(location, ImageLocation):
            parsed.append(location)
        elif isinstance(location, (str, bytes)) and "@" in (text := os.fsdecode(location)):
            parsed.append(ImageLocation.from_string(text))
        else:
            parsed.append(as_key(location))
    return parsed


def from_locations(
    locations: Sequence[Any],
    data_type: Any = None,
    chunk: int | None = None,
    *,
    storage_options: Mapping[str, Any] | Storage | None = None,
) -> dask.array.Array:
    """A lazy `dask.array` of the images `locations` name, slot `i` the image of `locations[i]`.

    Each chunk is a run of consecutive locations, cut where the file changes
    when it can, read in one batch: a file's images in a chunk are read by
    one call. The files' headers are read now, to learn the shape.

    Args:
        locations: `ImageLocation` objects or "n@key" texts (n counting from
            one, as RELION writes them), or keys of whole files; not both kinds.
            Any formats and files, all of one image shape. An index into a
            file that holds one volume names one of its 2-D sections, as in `ImageSource`.
        data_type: The type of the array; defaults to one that holds every file's values.
        chunk: Images per chunk. Defaults to about `chunk_bytes` of the configuration of them.
        storage_options: What fsspec takes to reach keys that are URLs, here and on the workers (or a
            `vitrio.Storage`, whose configuration the workers read with).

    Returns:
        A dask array of shape `(len(locations), *image_shape)`.

    Raises:
        ValueError: If locations is empty, mixes whole files and images of
            stacks, names files of different image shapes or an index into a
            file that holds one 2-D image; or `chunk` is not positive.
        IndexError: If an index is past the end of its stack.
        ImageFileNotFoundError, FormatError: If a file is missing or unreadable.
    """
    import dask.base

    locations = _locations(locations)
    if not locations:
        raise ValueError("locations name no image")
    keys, key_ids, indices = plan_locations(locations)
    storage = Storage.of(storage_options)
    shape, served = plan_files(reader_provider(storage_options=storage), keys, key_ids, indices)
    types = [descriptor.data_type.dtype for descriptor in served]
    dtype = np.dtype(data_type) if data_type is not None else np.result_type(*types)
    token = dask.base.tokenize(keys, key_ids, indices, dtype.str, chunk, storage.digest())
    name = "vitrio-locations-" + token
    tasks, sizes = [], []
    for first, last in _chunk_bounds(key_ids, _per_chunk(shape, dtype, chunk, storage)):
        used, ids = np.unique(key_ids[first:last], return_inverse=True)
        chunk_keys = [keys[i] for i in used.tolist()]
        read = (_read_chunk, chunk_keys, ids.astype(np.int64), indices[first:last], shape, dtype.str)
        tasks.append((*read, storage))
        sizes.append(last - first)
    return _array(name, tasks, sizes, shape, dtype)


def from_patches(
    locations: Sequence[Any],
    centres: Any,
    shape: Sequence[int],
    data_type: Any = None,
    chunk: int | None = None,
    fill: Any = 0,
    *,
    storage_options: Mapping[str, Any] | Storage | None = None,
) -> dask.array.Array:
    """A lazy `dask.array` of patches: slot `i` the patch of `shape` around `centres[i]` of `locations[i]`.

    Patches of one image that follow each other fall in one chunk where they
    can, and are cropped through one reader, in one call. The centre lands at
    `extent // 2` of its patch (RELION's convention).

    Args:
        locations: For each patch, its image: an `ImageLocation` or "n@key"
            text, or the key of a file holding one image or volume.
        centres: For each patch, its centre, slowest axis first: non-negative integers.
        shape: The shape of a patch.
        data_type: The type of the array; defaults to one that holds every file's values.
        chunk: Patches per chunk. Defaults to about `chunk_bytes` of the configuration of them.
        fill: The value of what lies beyond the image.
        storage_options: What fsspec takes to reach keys that are URLs, here and on the workers, as
            `from_locations` takes it.

    Returns:
        A dask array of shape `(len(locations), *shape)`.

    Raises:
        ValueError: If locations is empty, the centres are not a row of
            `len(shape)` non-negative integers per location, or `chunk` is not positive.
        ImageFileNotFoundError, FormatError: If a file is missing or unreadable.
    """
    import dask.base

    locations = _locations(locations)
    if not locations:
        raise ValueError("locations name no image")
    shape = tuple(int(extent) for extent in shape)
    centres = np.asarray(centres)
    if centres.dtype.kind not in "iu" or centres.shape != (len(locations), len(shape)) or centres.min() < 0:
        raise ValueError(
            f"centres are a row of {len(shape)} non-negative integers for each of the {len(locations)} "
            f"locations, not an array of {centres.dtype} of shape {centres.shape}"
        )
    centres = centres.astype(np.int64)
    pairs = [
        (loc.key, loc.index_in_stack) if isinstance(loc, ImageLocation) else (loc, -1) for loc in locations
    ]
    images = list(dict.fromkeys(pairs))
    number = {image: i for i, image in enumerate(images)}
    image_ids = np.array([number[pair] for pair in pairs], dtype=np.int64)
    keys = list(dict.fromkeys(key for key, _ in images))
    storage = Storage.of(storage_options)
    readers = reader_provider(storage_options=storage)
    types = [query_descriptor(key, readers).data_type.dtype for key in keys]
    dtype = np.dtype(data_type) if data_type is not None else np.result_type(*types)
    token = dask.base.tokenize(pairs, centres, shape, dtype.str, chunk, fill, storage.digest())
    name = "vitrio-patches-" + token
    tasks, sizes = [], []
    for first, last in _chunk_bounds(image_ids, _per_chunk(shape, dtype, chunk, storage)):
        used, ids = np.unique(image_ids[first:last], return_inverse=True)
        chunk_images = [images[i] for i in used.tolist()]
        read = (_read_patch_chunk, chunk_images, ids.astype(np.int64), centres[first:last], shape, dtype.str)
        tasks.append((*read, fill, storage))
        sizes.append(last - first)
    return _array(name, tasks, sizes, shape, dtype)


def from_file(
    key: Any,
    data_type: Any = None,
    chunk: int | None = None,
    *,
    storage_options: Mapping[str, Any] | Storage | None = None,
) -> dask.array.Array:
    """A lazy `dask.array` of what one file holds: a stack chunked by runs of images, a volume by slabs.

    Any file vitrio reads: an MRC, TIFF or DM stack, a volume, a level of an
    OME-Zarr image where that format is installed.

    Args:
        key: The file.
        data_type: The type of the array; defaults to the file's.
        chunk: Images (of a stack) or sections (of a volume) per chunk. Defaults to about `chunk_bytes`
            of the configuration.
        storage_options: What fsspec takes to reach `key` where it is a URL, here and on the workers, as
            `from_locations` takes it.

    Returns:
        A dask array of the file's shape, stacking axes flattened into one.

    Raises:
        ImageFileNotFoundError, FormatError: If the file is missing or unreadable.
    """
    key = as_key(key)
    storage_options = Storage.of(storage_options)
    descriptor = query_descriptor(key, storage_options=storage_options)
    dtype = np.dtype(data_type) if data_type is not None else descriptor.data_type.dtype
    if descriptor.is_stack:
        locations = [ImageLocation(key, i) for i in range(descriptor.image_count)]
        return from_locations(locations, dtype, chunk, storage_options=storage_options)
    extents = descriptor.extents
    if len(extents) < 3:
        return from_locations([key], dtype, storage_options=storage_options)[0]
    # A volume's sections as patches of one section each, cropped by one reader a chunk at a time.
    sections = np.zeros((extents[0], len(extents)), dtype=np.int64)
    sections[:, 0] = np.arange(extents[0])
    sections[:, 1:] = np.asarray(extents[1:]) // 2
    chunk = _per_chunk(extents[1:], dtype, chunk, storage_options)
    patches = from_patches(
        [key] * extents[0], sections, (1, *extents[1:]), dtype, chunk, storage_options=storage_options
    )
    return patches.reshape(extents)
