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

from ._arrays import from_file, from_locations, from_patches
from ._cluster import WORKER_CONFIG, client_for, local_cluster
from ._jobs import remove_leftovers, run_jobs
from ._store import store

__all__ = [
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
