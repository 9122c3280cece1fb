"""`vitrio extract`: the particles picked on micrographs, cropped into MRC stacks, and their STAR file.

The work is `vitrio.extract.extract_particles`, here or on a Dask cluster
(`--scheduler`, `--local`), a task per micrograph; the command shows its
progress (and the cluster's dashboard) and says how it went.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import vitrio as vio
from vitrio.extract import extract_particles

from ._common import (
    CliError,
    add_casting,
    add_cluster,
    add_force,
    add_preparing,
    add_storage_options,
    add_threads,
    data_type,
    file_or_url,
    folders_for,
    positive,
    progress,
)
from ._convert import cluster, preparing

__all__ = ["DESCRIPTION", "HELP", "add_arguments", "run"]


HELP = "crop picked particles out of micrographs into MRC stacks"
DESCRIPTION = (
    "Crop the particles picked on micrographs into one MRC stack per micrograph, and write a RELION STAR "
    "file of them (data_optics and data_particles). The coordinates STAR file lists rlnMicrographName, "
    "rlnCoordinateX (the column) and rlnCoordinateY (the row) of each particle; a particle's centre lands "
    "at box // 2 of its box, and what lies outside the micrograph is zero. Relative paths in the STAR "
    "files are found as docs/paths-and-types.md says: beside the STAR file or in the project folders above "
    "it, or under --root."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `vitrio extract`."""
    parser.add_argument(
        "--micrographs", type=file_or_url, required=True, help="the micrographs STAR file (or its URL)"
    )
    parser.add_argument(
        "--coordinates", type=file_or_url, required=True, help="the coordinates STAR file (or its URL)"
    )
    parser.add_argument("--box-size", type=positive, required=True, metavar="N", help="the box, in pixels")
    parser.add_argument("-o", "--output", type=Path, required=True, help="the particles STAR file to write")
    parser.add_argument(
        "--stack-dir", type=Path, help="where the stacks go (default: the directory of the output)"
    )
    parser.add_argument(
        "--root",
        type=Path,
        help="the project or data directory: micrographs are looked for under it as written, then by "
        "their bare names, and the particles are named relative to it (default: micrographs beside the "
        "micrographs STAR file or in the two folders above it; names relative to the working directory)",
    )
    parser.add_argument(
        "--pixel-size",
        type=float,
        help="the pixel size in Å when the micrographs STAR file has no optics block "
        "(default: from the first micrograph's header)",
    )
    parser.add_argument(
        "--data-type", type=data_type, default=np.dtype("float32"), help="of the stacks (default: float32)"
    )
    add_casting(parser)
    add_preparing(parser)
    add_threads(parser, "threads that read and write")
    add_storage_options(parser)
    add_force(parser)
    add_cluster(parser)


def run(args: argparse.Namespace) -> None:
    """Extract the particles `args` name, and say how many, how fast, and where."""
    import starfile  # noqa: F401  (writes the STAR file at the end: a missing one is said before the work)

    stacks = args.output.parent if args.stack_dir is None else args.stack_dir
    # the folders of the outputs, made here if missing, are removed again if the extraction fails
    with folders_for(args.output), folders_for(stacks / "stack"):
        _extract(args)


def _extract(args: argparse.Namespace) -> None:
    """Extract, and say how it went."""
    with cluster(args) as client, progress(None, "extracting", "particle") as bar:
        try:
            result = extract_particles(
                args.micrographs,
                args.coordinates,
                args.box_size,
                args.output,
                stack_dir=args.stack_dir,
                root=args.root,
                pixel_size=args.pixel_size,
                data_type=args.data_type,
                casting=args.casting,
                prepare=preparing(args),
                threads=args.threads,
                force=args.force,
                progress=bar.update,
                client=client,
                storage_options=args.storage_options,
            )
        except FileExistsError as error:
            raise CliError(f"{error}; give --force to replace it") from error
        except vio.DestinationTypeError as error:  # what it says of Python's casting=, in options
            held = str(error).partition(";")[0]
            raise CliError(
                f"{held}; give --casting unsafe to convert as numpy does (fractions cut toward zero, no "
                "range check)"
            ) from None
    count, side = len(result.particles), int(result.optics["rlnImageSize"].iloc[0])
    print(
        f"extracted {count} particles of {side} x {side} into {len(result.stacks)} stacks "
        f"in {result.stacks[0].parent} ({count / result.seconds:,.0f} particles/s); wrote {args.output}"
    )
