"""`vitrio fractionate`: EER movies rendered into a few fractions each, written as MRC (or TIFF) movies.

Several movies are written into a folder, one after the other, or one task
per movie on a Dask cluster (`--scheduler`, `--local`).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

import vitrio as vio
from vitrio.formats.eer import EerReader

from ._common import CliError, check_output, describe_briefly
from ._convert import cluster, copy_images, outputs_of, run_per_file

__all__ = ["fractionate", "run"]


def fractionate(
    movie: Path,
    output: Path,
    fractions: int,
    binning: int = 1,
    superres: int = 1,
    gain: Path | None = None,
    data_type: np.dtype | None = None,
    force: bool = False,
) -> vio.ImageDescriptor:
    """Render the EER movie at `movie` into `fractions` images and write them to `output`.

    Returns:
        What the written file holds.

    Raises:
        CliError: If `movie` is not an EER file, or `output` exists and `force` is false.
    """
    readers = vio.detector_event_image_reader_provider(
        fractions, binning, cache=1, superres=superres, gain=gain
    )
    reader = readers.acquire(str(movie))
    try:
        if not isinstance(reader, EerReader):
            raise CliError(f"{movie}: is not an EER file, it holds {describe_briefly(reader.descriptor)}")
    finally:
        readers.release(reader)
    loader = vio.ImageLoader(vio.ThreadPoolExecutor(os.cpu_count() or 1), readers)
    return copy_images(loader, movie, output, data_type, force)


def _fractionate_movie(job: tuple) -> vio.ImageDescriptor:
    """Fractionate one movie on a worker, replacing what an earlier run of the task wrote."""
    return fractionate(*job, force=True)


def run(args: argparse.Namespace) -> None:
    """Render each of `args.input` into `args.fractions` images and write them to `args.output`."""
    outputs = outputs_of(args.input, args.output, ".mrc")
    if len(outputs) > 1:
        for output in outputs:
            check_output(output, args.force)
        args.output.mkdir(parents=True, exist_ok=True)
    options = (args.fractions, args.binning, args.superres, args.gain, args.data_type)
    with cluster(args) as client:
        if client is None:
            [
                fractionate(movie, output, *options, force=args.force)
                for movie, output in zip(args.input, outputs)
            ]
        else:
            for output in outputs:
                check_output(output, args.force)
            gain = None if args.gain is None else Path(os.path.abspath(args.gain))
            jobs = [
                (
                    Path(os.path.abspath(movie)),
                    Path(os.path.abspath(output)),
                    *options[:3],
                    gain,
                    args.data_type,
                )
                for movie, output in zip(args.input, outputs)
            ]
            run_per_file(client, _fractionate_movie, jobs, outputs, "fractionate")
    for output in outputs:
        print(f"wrote {output}: {describe_briefly(vio.query_descriptor(output))}")
