"""`vitrio extract`: the particles picked on micrographs, cropped into MRC stacks, and their STAR file.

The work is `vitrio.extract.extract_particles`, here or on a Dask cluster
(`--scheduler`, `--local`), a task per micrograph; the command shows its
progress (and the cluster's dashboard) and says how it went.
"""

from __future__ import annotations

import argparse

from vitrio.extract import extract_particles

from ._common import CliError, progress
from ._convert import cluster, preparing

__all__ = ["run"]


def run(args: argparse.Namespace) -> None:
    """Extract the particles `args` name, and say how many, how fast, and where."""
    import starfile  # noqa: F401  (writes the STAR file at the end: a missing one is said before the work)

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
    count, side = len(result.particles), int(result.optics["rlnImageSize"].iloc[0])
    print(
        f"extracted {count} particles of {side} x {side} into {len(result.stacks)} stacks "
        f"in {result.stacks[0].parent} ({count / result.seconds:,.0f} particles/s); wrote {args.output}"
    )
