"""vitrio on a Dask cluster: lazy arrays read by vitrio's batched reads, arrays stored into files, bulk jobs.

`from_locations`, `from_patches` and `from_file` make a `dask.array` whose
chunks are read by `read_indexed_async` and `read_patches_indexed_async`:
a chunk is a run of images grouped by file, so that a task reads a file's
images together, and a task carries the names of its files and the numbers
of its images, never an open file; it opens each of them once.

`store` writes a dask array into a new file through `writer_provider` and
`saver`: the workers compute the blocks, a few at a time, and the process
that calls it writes them as they arrive into the file it declared once,
which is moved onto its path only when every block is written (and removed
if one fails). One writer per file keeps what a format computes over the
whole file (an MRC header's minimum, maximum, mean and deviation, a TIFF's
directories) right, asks no shared filesystem of the workers for the
output, and keeps the write atomic; the bulk jobs below, where each task
writes files of its own, are how writing spreads across machines.

`run_jobs` runs one task per file (a micrograph, a movie, a stack) on a
`distributed.Client`, retried where a worker is lost, with progress as
they finish; `client_for` connects to a running scheduler or starts a
`LocalCluster`. A job is written so that running it twice leaves the same
files (each written beside its path and moved onto it), and
`remove_leftovers` clears what a worker killed mid-write left beside them.

Dask is imported when these are called: `pip install 'vitrio[dask]'`.

For instance::

    import vitrio.dask

    images = vitrio.dask.from_locations(locations, chunk=256)
    print(images.mean().compute())
    vitrio.dask.store(images[:100] * 2, "doubled.mrcs")
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import math
import os
import queue
import secrets
import warnings
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import numpy as np

from ._concurrency import SynchronousExecutor
from ._fs import partial_of
from ._functions import loader, query_descriptor, reader_provider, saver, write, writer_provider
from ._loading import plan_locations, read_indexed_async, read_patches_indexed_async
from ._saving import write_batch_async
from ._types import ImageDescriptor, ImageLocation, as_key
from .data._images import plan_files

if TYPE_CHECKING:
    import dask.array
    import distributed

__all__ = [
    "CHUNK_BYTES",
    "WORKER_CONFIG",
    "client_for",
    "from_file",
    "from_locations",
    "from_patches",
    "local_cluster",
    "remove_leftovers",
    "run_jobs",
    "store",
]

CHUNK_BYTES = 64 << 20
"""How many bytes of images a chunk holds by default."""
# How many files a task keeps open at once.
_OPEN_FILES = 16
# How many blocks per worker thread `store` has computed or under way at once.
_BLOCKS_PER_WORKER = 2

WORKER_CONFIG = {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}
"""Dask settings for the workers that run vitrio's tasks: glibc's own allocation of large buffers.

distributed starts its workers with MALLOC_TRIM_THRESHOLD_=65536, which
keeps glibc from reusing the memory of a batch freed for the next one: each
batch of a task is then mapped afresh and faulted in page by page, which
made a task of extraction three to five times slower. Give these to
`dask.config.set` where the workers are started (`local_cluster` does), or write them into
the Dask configuration files the workers of other machines read.
"""


def _loader() -> Any:
    """A loader for one task: reads on the calling thread (the task's own), each file opened once.

    A task's own, not the process's: a file replaced between two tasks is read anew.
    """
    return loader(cache=_OPEN_FILES, executor=SynchronousExecutor())


# ---------------------------------------------------------------- chunks: runs of images, grouped by file


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


def _per_chunk(shape: Sequence[int], dtype: np.dtype, chunk: int | None) -> int:
    if chunk is None:
        return max(1, CHUNK_BYTES // max(1, math.prod(shape) * dtype.itemsize))
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


def _read_chunk(keys: list[str], key_ids: np.ndarray, indices: np.ndarray, shape: tuple, dtype: str):
    """The images `indices[i]` of the files `keys[key_ids[i]]`, read in one batch."""
    out = np.empty((len(key_ids), *shape), dtype=dtype)
    read_indexed_async(_loader(), out, keys, key_ids, indices).get()
    return out


def _read_patch_chunk(images: list, image_ids: np.ndarray, centres: np.ndarray, shape: tuple, dtype, fill):
    """The patches around `centres[i]` of the images `images[image_ids[i]]`, read in one batch."""
    out = np.empty((len(image_ids), *shape), dtype=dtype)
    read_patches_indexed_async(_loader(), out, images, image_ids, centres, fill=fill).get()
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
    locations: Sequence[Any], data_type: Any = None, chunk: int | None = None
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
        chunk: Images per chunk. Defaults to about `CHUNK_BYTES` of them.

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
    shape, served = plan_files(reader_provider(), keys, key_ids, indices)
    types = [descriptor.data_type.dtype for descriptor in served]
    dtype = np.dtype(data_type) if data_type is not None else np.result_type(*types)
    name = "vitrio-locations-" + dask.base.tokenize(keys, key_ids, indices, dtype.str, chunk)
    tasks, sizes = [], []
    for first, last in _chunk_bounds(key_ids, _per_chunk(shape, dtype, chunk)):
        used, ids = np.unique(key_ids[first:last], return_inverse=True)
        chunk_keys = [keys[i] for i in used.tolist()]
        tasks.append((_read_chunk, chunk_keys, ids.astype(np.int64), indices[first:last], shape, dtype.str))
        sizes.append(last - first)
    return _array(name, tasks, sizes, shape, dtype)


def from_patches(
    locations: Sequence[Any],
    centres: Any,
    shape: Sequence[int],
    data_type: Any = None,
    chunk: int | None = None,
    fill: Any = 0,
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
        chunk: Patches per chunk. Defaults to about `CHUNK_BYTES` of them.
        fill: The value of what lies beyond the image.

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
    types = [query_descriptor(key).data_type.dtype for key in keys]
    dtype = np.dtype(data_type) if data_type is not None else np.result_type(*types)
    name = "vitrio-patches-" + dask.base.tokenize(pairs, centres, shape, dtype.str, chunk, fill)
    tasks, sizes = [], []
    for first, last in _chunk_bounds(image_ids, _per_chunk(shape, dtype, chunk)):
        used, ids = np.unique(image_ids[first:last], return_inverse=True)
        chunk_images = [images[i] for i in used.tolist()]
        read = (_read_patch_chunk, chunk_images, ids.astype(np.int64), centres[first:last], shape, dtype.str)
        tasks.append((*read, fill))
        sizes.append(last - first)
    return _array(name, tasks, sizes, shape, dtype)


def from_file(key: Any, data_type: Any = None, chunk: int | None = None) -> dask.array.Array:
    """A lazy `dask.array` of what one file holds: a stack chunked by runs of images, a volume by slabs.

    Any file vitrio reads: an MRC, TIFF or DM stack, a volume, a level of an
    OME-Zarr image where that format is installed.

    Args:
        key: The file.
        data_type: The type of the array; defaults to the file's.
        chunk: Images (of a stack) or sections (of a volume) per chunk. Defaults to about `CHUNK_BYTES`.

    Returns:
        A dask array of the file's shape, stacking axes flattened into one.

    Raises:
        ImageFileNotFoundError, FormatError: If the file is missing or unreadable.
    """
    key = as_key(key)
    descriptor = query_descriptor(key)
    dtype = np.dtype(data_type) if data_type is not None else descriptor.data_type.dtype
    if descriptor.is_stack:
        locations = [ImageLocation(key, i) for i in range(descriptor.image_count)]
        return from_locations(locations, dtype, chunk)
    extents = descriptor.extents
    if len(extents) < 3:
        return from_locations([key], dtype)[0]
    # A volume's sections as patches of one section each, cropped by one reader a chunk at a time.
    sections = np.zeros((extents[0], len(extents)), dtype=np.int64)
    sections[:, 0] = np.arange(extents[0])
    sections[:, 1:] = np.asarray(extents[1:]) // 2
    chunk = _per_chunk(extents[1:], dtype, chunk)
    patches = from_patches([key] * extents[0], sections, (1, *extents[1:]), dtype, chunk)
    return patches.reshape(extents)


# ---------------------------------------------------------------- writing a dask array into one file


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
    """Each block's values, in order, a few computed at once: on `client` if given, else by `dask.compute`."""
    import dask

    workers = sum(client.nthreads().values()) if client is not None else os.cpu_count()
    ahead = max(2, _BLOCKS_PER_WORKER * (workers or 1))
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


# ---------------------------------------------------------------- bulk jobs on a cluster


def local_cluster(workers: int, dashboard: bool = False, **options: Any) -> distributed.LocalCluster:
    """A `LocalCluster` of `workers` processes of one thread each, on 127.0.0.1, set up by `WORKER_CONFIG`.

    Its scheduler, workers and nannies speak TLS and accept only peers that
    hold the key made for this cluster alone, kept in this process's memory
    (distributed's `Security.temporary()`): another user of the machine who
    finds their ports can neither connect nor run anything as you. Its
    processes serve no web pages (dashboard, metrics, logs) unless
    `dashboard` asks for them, and then on 127.0.0.1 only, where every user
    of the machine may read them.

    Args:
        workers: How many worker processes.
        dashboard: Whether to serve the dashboard, on a free port of 127.0.0.1.
        options: More arguments of `LocalCluster` (`silence_logs=logging.ERROR`, say).

    Raises:
        ValueError: If `workers` is not positive.
    """
    import dask
    from distributed import LocalCluster

    if workers < 1:
        raise ValueError(f"a local cluster has one worker or more, not {workers}")
    settings = {"n_workers": workers, "threads_per_worker": 1, "processes": True, "host": "127.0.0.1"}
    settings |= {
        "security": True,
        "dashboard_address": "127.0.0.1:0",
        "scheduler_kwargs": {"dashboard": dashboard},
    }
    unserved = {"distributed.scheduler.http.routes": [], "distributed.worker.http.routes": []}
    with dask.config.set(WORKER_CONFIG | ({} if dashboard else unserved)):
        return LocalCluster(**(settings | options))


def _unencrypted_and_remote(address: str) -> bool:
    """Whether the scheduler `address` is reached without encryption from another machine (`tcp://head:8786`).

    Anyone who reaches such a scheduler runs code on its workers, and sees
    the tasks and their results.
    """
    scheme, _, rest = address.rpartition("://")
    if (scheme or "tcp").lower() not in ("tcp", "ws"):
        return False
    host = urlsplit(f"//{rest}").hostname or ""
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name: only localhost is taken as this machine
        return host.lower() != "localhost"


@contextlib.contextmanager
def client_for(
    scheduler: str | None = None, local: int | None = None, dashboard: bool = False
) -> Iterator[distributed.Client]:
    """A `distributed.Client` of the scheduler at `scheduler`, or of a new `local_cluster` of `local` workers.

    The local cluster is shut down at the end of the block. A scheduler is
    reached as the Dask configuration says: for `tls://` with the keys and
    certificates of `distributed.comm.tls`. One reached without encryption
    from another machine is warned of first.

    Args:
        scheduler: The address of a running scheduler.
        local: How many worker processes the local cluster has.
        dashboard: Whether the local cluster serves its dashboard (`local_cluster`).

    Raises:
        ValueError: If neither or both are given, or `local` is not positive.
        OSError: If the scheduler cannot be reached.
    """
    from distributed import Client

    if (scheduler is None) == (local is None):
        raise ValueError("give the address of a scheduler or a number of local workers, one of them")
    if scheduler is not None:
        if _unencrypted_and_remote(scheduler):
            warnings.warn(
                f"{scheduler}: the scheduler is reached without encryption or authentication: whoever can "
                "reach it runs code on its workers and sees the tasks; use tls:// with your certificates",
                stacklevel=3,
            )
        with Client(scheduler) as client:
            yield client
        return
    with local_cluster(local, dashboard) as cluster, Client(cluster) as client:
        yield client


def run_jobs(
    client: distributed.Client,
    function: Callable[[Any], Any],
    jobs: Sequence[Any],
    name: str,
    done: Callable[[int, Any], object] | None = None,
    retries: int = 3,
) -> list[Any]:
    """Run `function(job)` for every job on the cluster of `client`, and the results in the order of `jobs`.

    Each job is one task, named `name` on the dashboard, retried up to
    `retries` times where it fails or its worker is lost: a job must leave the
    same files when run twice. `done(n, result)` is called here as job `n` ends.
    Jobs are handed out as they end, no more at once than twice the
    cluster's threads (a thread that ends one has the next at hand). At the
    first job that fails for good no more are handed out, and those handed
    out are waited for: once this raises, no job runs any more (a task cannot
    be stopped midway; one left running would write after its caller has
    cleaned up). An interruption here (Ctrl-C) cancels them without waiting.

    Raises:
        What the failed job raised.
    """
    if not jobs:
        return []
    finished: queue.SimpleQueue = queue.SimpleQueue()
    run = secrets.token_hex(8)  # the keys of two runs on one scheduler must differ, or they share results
    at_once = 2 * max(1, sum(client.nthreads().values()))
    waiting = iter(enumerate(jobs))
    running: dict[str, tuple[int, distributed.Future]] = {}
    results: list[Any] = [None] * len(jobs)
    failure: BaseException | None = None

    def hand_out() -> None:
        for n, job in itertools.islice(waiting, at_once - len(running)):
            future = client.submit(function, job, key=f"{name}-{run}-{n}", retries=retries, pure=False)
            running[future.key] = n, future
            future.add_done_callback(finished.put)

    try:
        hand_out()
        while running:
            future = finished.get()
            n, _ = running.pop(future.key)
            try:
                results[n] = future.result()
            except Exception as error:  # the others running finish first
                failure = failure or error
                continue
            if done is not None:
                done(n, results[n])
            if failure is None:
                hand_out()
    except BaseException:
        client.cancel([future for _, future in running.values()])
        raise
    if failure is not None:
        raise failure
    return results


def remove_leftovers(paths: Sequence[str | os.PathLike[str]]) -> None:
    """Remove what writes of the files at `paths` left beside them when their process was killed.

    vitrio writes a file beside its path under a hidden name (`vitrio._fs.PartialFile`); a process
    killed before moving it into place leaves it there.
    """
    by_folder: dict[Path, set[str]] = {}
    for path in map(Path, paths):
        by_folder.setdefault(path.parent, set()).add(path.name)
    for folder, names in by_folder.items():
        with contextlib.suppress(FileNotFoundError), os.scandir(folder) as entries:
            for entry in entries:
                partial = partial_of(entry.name)
                if partial and partial[0] in names and entry.is_file(follow_symlinks=False):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(entry.path)
