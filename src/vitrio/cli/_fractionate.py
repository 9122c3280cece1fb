"""`vitrio fractionate`: an EER movie rendered into a few fractions, written as an MRC (or TIFF) movie."""

from __future__ import annotations

import argparse
import os

import vitrio as vio
from vitrio.formats.eer import EerReader

from ._common import CliError, describe_briefly
from ._convert import copy_images

__all__ = ["run"]


def run(args: argparse.Namespace) -> None:
    """Render `args.input` into `args.fractions` images and write them to `args.output`."""
    readers = vio.detector_event_image_reader_provider(
        args.fractions, args.binning, cache=1, superres=args.superres, gain=args.gain
    )
    reader = readers.acquire(str(args.input))
    try:
        if not isinstance(reader, EerReader):
            raise CliError(
                f"{args.input}: is not an EER file, it holds {describe_briefly(reader.descriptor)}"
            )
    finally:
        readers.release(reader)
    loader = vio.ImageLoader(vio.ThreadPoolExecutor(os.cpu_count() or 1), readers)
    copy_images(loader, args.input, args.output, args.data_type, args.force)
    print(f"wrote {args.output}: {describe_briefly(vio.query_descriptor(args.output))}")
