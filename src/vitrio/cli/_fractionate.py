"""`vitrio fractionate`: EER movies rendered into a few fractions each, written as MRC (or TIFF) movies.

Several movies are written into a folder, one after the other, or one task
per movie on a Dask cluster (`--scheduler`, `--local`).

Cut by dose (`--dose-per-fraction`, with `--total-dose` or `--dose-per-frame`),
a movie's fractions group whole frames as `DetectorEventFractionation` does,
and the grouping is written beside it, in NAME.fractions.txt.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

import numpy as np

import vitrio as vio
from vitrio._partial import new_file
from vitrio.formats.eer import EerReader

from ._common import (
    CliError,
    add_cluster,
    add_force,
    add_threads,
    check_output,
    data_type,
    describe_briefly,
    file_or_url,
    folders_for,
    positive,
    positive_number,
)
from ._convert import cluster, copy_images, outputs_of, run_per_file

__all__ = ["DESCRIPTION", "HELP", "add_arguments", "fractionate", "grouping_path", "run", "write_grouping"]


def grouping_path(output: Path) -> Path:
    """Where the grouping of frames of the movie written at `output` goes: NAME.fractions.txt beside it."""
    return output.with_suffix(".fractions.txt")


def write_grouping(movie: Path | str, output: Path, fractionation: vio.DetectorEventFractionation) -> None:
    """Write the frames and dose of each fraction of `movie` (a path or URL), cut by dose, at
    `grouping_path(output)`."""
    frames = vio.query_descriptor(movie).extents[0]
    dose = fractionation.frame_dose(frames)
    name = PurePosixPath(urlsplit(str(movie)).path).name
    lines = [f"# {name}: {frames} frames of {dose:.6g} e/Å²", "fraction\tfirst_frame\tframes\tdose"]
    for fraction in range(fractionation.count_for(frames)):
        first = fractionation.get_fraction_begin(fraction, frames)
        count = fractionation.get_fraction_begin(fraction + 1, frames) - first
        lines.append(f"{fraction + 1}\t{first}\t{count}\t{count * dose:.6g}")
    path = grouping_path(output)
    with folders_for(path), new_file(path) as partial, partial.file() as file:
        file.write(("\n".join(lines) + "\n").encode())


def fractionate(
    movie: Path | str,
    output: Path,
    fractions: int | vio.DetectorEventFractionation,
    binning: int = 1,
    superres: int = 1,
    gain: Path | None = None,
    data_type: np.dtype | None = None,
    threads: int | None = None,
    force: bool = False,
) -> vio.ImageDescriptor:
    """Render the EER movie at `movie` (a path or URL) into `fractions` images and write them to `output`,
    on `threads` threads (None: the machine's cores).

    Cut by dose, the grouping of frames is written beside it (`write_grouping`).

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
    loader = vio.ImageLoader(vio.ThreadPoolExecutor(threads or os.cpu_count() or 1), readers)
    written = copy_images(loader, movie, output, data_type, force)
    if isinstance(fractions, vio.DetectorEventFractionation) and fractions.fraction_count is None:
        write_grouping(movie, output, fractions)
    return written


def _fractionate_movie(job: tuple) -> vio.ImageDescriptor:
    """Fractionate one movie on a worker, replacing what an earlier run of the task wrote."""
    return fractionate(*job, force=True)


HELP = "render EER movies into MRC movies of a few fractions"
DESCRIPTION = (
    "Render the frames of an EER movie into FRACTIONS images, each the per-pixel count of the events of "
    "its stretch of frames, and write them as an MRC (or TIFF) movie. Several movies are written into the "
    "folder OUTPUT, each as NAME.mrc."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `vitrio fractionate`."""
    parser.add_argument("input", type=file_or_url, nargs="+", metavar="MOVIE", help="the EER files (or URLs)")
    count = parser.add_mutually_exclusive_group(required=True)
    count.add_argument("--fractions", type=positive, help="how many images to make")
    count.add_argument(
        "--dose-per-fraction",
        type=positive_number,
        metavar="E",
        help="instead, group whole frames into fractions of about E e/Å² each, the last taking the frames "
        "left (as RELION groups EER frames); the grouping is written beside each movie, NAME.fractions.txt",
    )
    parser.add_argument(
        "--total-dose", type=positive_number, metavar="D", help="the dose of each movie, e/Å²"
    )
    parser.add_argument(
        "--dose-per-frame", type=positive_number, metavar="R", help="or its dose rate, e/Å² per frame"
    )
    parser.add_argument("--binning", type=positive, default=1, help="1, 2, 4, ...: detector pixels per pixel")
    parser.add_argument(
        "--superres",
        type=positive,
        default=1,
        help="1, 2, 4: pixels per detector pixel, from sub-pixel bits",
    )
    parser.add_argument("--gain", type=Path, help="a gain reference image to weigh events by")
    parser.add_argument(
        "-o", "--output", type=Path, required=True, help="the movie to write, or the folder of several"
    )
    parser.add_argument("--data-type", type=data_type, help="the type to write (default: counts)")
    add_threads(parser, "threads that render and write each movie (on a cluster, in each task)")
    add_force(parser)
    add_cluster(parser)


def run(args: argparse.Namespace) -> None:
    """Render each of `args.input` into `args.fractions` images and write them to `args.output`."""
    outputs = outputs_of(args.input, args.output, ".mrc")
    if len(outputs) > 1:
        for output in outputs:
            check_output(output, args.force)
        args.output.mkdir(parents=True, exist_ok=True)
    options = (_fractions(args), args.binning, args.superres, args.gain, args.data_type, args.threads)
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
                    movie if isinstance(movie, str) else Path(os.path.abspath(movie)),
                    Path(os.path.abspath(output)),
                    *options[:3],
                    gain,
                    *options[4:],
                )
                for movie, output in zip(args.input, outputs)
            ]
            run_per_file(client, _fractionate_movie, jobs, outputs, "fractionate")
    for output in outputs:
        print(f"wrote {output}: {describe_briefly(vio.query_descriptor(output))}")
        if args.fractions is None:
            print(f"wrote {grouping_path(output)}: the frames and dose of each fraction")


def _fractions(args: argparse.Namespace) -> int | vio.DetectorEventFractionation:
    """`--fractions`, or the fractionation by dose the options ask for.

    Raises:
        CliError: If a dose is given with `--fractions`, or the doses do not make a fractionation.
    """
    doses = {"total_dose": args.total_dose, "dose_per_frame": args.dose_per_frame}
    if args.fractions is not None:
        if any(dose is not None for dose in doses.values()):
            raise CliError("--total-dose and --dose-per-frame go with --dose-per-fraction, not --fractions")
        return args.fractions
    if (args.total_dose is None) == (args.dose_per_frame is None):
        raise CliError(
            "--dose-per-fraction needs the movie's --total-dose or its --dose-per-frame, one of them"
        )
    try:
        return vio.DetectorEventFractionation(dose_per_fraction=args.dose_per_fraction, **doses)
    except ValueError as error:
        raise CliError(str(error)) from None
