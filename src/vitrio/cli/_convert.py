"""`vitrio convert`: an image, stack or volume from one format to another, streamed a chunk at a time."""

from __future__ import annotations

import argparse
import math
from collections import deque
from pathlib import Path

import numpy as np

import vitrio as vio

from ._common import CliError, check_output, describe_briefly, progress

__all__ = ["copy_images", "run"]

# How many bytes of images one chunk holds: two chunks are in memory at once, one read and one written.
CHUNK_BYTES = 64 << 20


def copy_images(
    loader: vio.ImageLoader, source: Path, output: Path, data_type: np.dtype | None, force: bool
) -> vio.ImageDescriptor:
    """Copy what the file at `source` holds, as `loader` reads it, into a new file at `output`.

    A stack is read and written a chunk of images at a time, the next chunk
    read while the last one is written, so that memory stays bounded
    whatever the size of the stack; its stacking axes are flattened into
    one. A single image or volume is copied whole. The output is written
    beside its path and moved onto it at the end: a failure or an
    interruption leaves nothing at `output`.

    Args:
        loader: What reads `source`; its executor also writes.
        source: The file to read.
        output: The file to write, in the format its extension names.
        data_type: The type to write; None for the source's.
        force: Whether to replace a file at `output`.

    Returns:
        What the written file holds.

    Raises:
        CliError: If `output` exists and `force` is false, or is `source`.
    """
    descriptor = loader.readers.query_descriptor(str(source))
    check_output(output, force)
    if output.exists() and output.resolve() == source.resolve():
        raise CliError(f"{output}: is the input file; write to another path")
    dtype = data_type or np.dtype(descriptor.data_type.value)
    core = descriptor.core_extents
    if descriptor.is_stack:
        count = descriptor.image_count
        written = vio.ImageDescriptor((count, *core), descriptor.core_rank, dtype)
        sources = [vio.ImageLocation(source, i) for i in range(count)]
        targets = [vio.ImageLocation(output, i) for i in range(count)]
        chunk = max(1, CHUNK_BYTES // max(1, math.prod(core) * dtype.itemsize))
        shape = core
    else:
        count, chunk, shape = 1, 1, descriptor.extents
        written = vio.ImageDescriptor(shape, descriptor.core_rank, dtype)
        sources, targets = [str(source)], [str(output)]
    pending: deque[tuple[int, vio.Completion]] = deque()
    with vio.writer_provider() as writers, progress(count, output.name, "image") as bar:
        saver = vio.saver(writers, executor=loader.executor)
        writers.declare(output, written)

        def finish_oldest() -> None:  # it leaves the queue once done: the `finally` waits for all that runs
            done, completion = pending[0]
            completion.get()
            pending.popleft()
            bar.update(done)

        try:
            for first in range(0, count, chunk):
                last = min(first + chunk, count)
                values = np.empty((last - first, *shape), dtype=dtype)
                vio.read_batch_async(loader, values, sources[first:last]).get()
                pending.append((last - first, vio.write_batch_async(saver, values, targets[first:last])))
                if len(pending) > 1:
                    finish_oldest()
            while pending:
                finish_oldest()
        finally:
            for _, completion in pending:
                completion.wait()
    return written


def run(args: argparse.Namespace) -> None:
    """Convert `args.input` into `args.output`, as `args.data_type` if given."""
    copy_images(vio.loader(cache=1), args.input, args.output, args.data_type, args.force)
    print(f"wrote {args.output}: {describe_briefly(vio.query_descriptor(args.output))}")
