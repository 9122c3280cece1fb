"""`vitrio info`: what image files hold, from their headers alone."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import vitrio as vio

from ._common import add_storage_options, describe_briefly, said

__all__ = ["DESCRIPTION", "HELP", "add_arguments", "describe", "run"]


def describe(path: str | os.PathLike[str], storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the file at `path` (or the store at a URL) holds, as `vitrio info --json` prints it.

    Keys: `file`, `format`, `holds` (in words), `kind` ("image", "volume",
    "image stack" or "volume stack"), `count` (images or volumes), `shape`
    (of the whole file, slowest first), `data_type`, `voxel_size` (slowest
    first, or None), `voxel_unit` ("Å", or None), `voxel_size_source` (the
    metadata it was read from, or None), and `statistics` (the header's
    min, max, mean and rms, or None), as the reader of the file gives them:
    the format is the one `vitrio.formats.open_reader` chooses, the voxel
    size the reader's `voxel_size` and `voxel_size_source` (an MRC file's
    cell divided by its sampling, a DM file's calibration where its units
    are lengths, a TIFF file's ImageJ, OME-XML or instrument metadata, never
    its resolution tags alone, an EER file's acquisition metadata), the
    statistics its `header_statistics`. `storage_options` is what fsspec takes to reach a URL.

    Raises:
        FileNotFoundError: If there is no file at `path`.
        FormatError: If the file is of no known format, or malformed.
    """
    key = str(path)
    with vio.formats.open_reader(key, vio.Storage.of(storage_options)) as reader:
        descriptor = reader.descriptor
        format_name, voxel_size, statistics = reader.format_name, reader.voxel_size, reader.header_statistics
        source = reader.voxel_size_source
    noun = "image" if descriptor.core_rank == 2 else "volume"
    return {
        "file": key,
        "format": format_name,
        "holds": describe_briefly(descriptor),
        "kind": f"{noun} stack" if descriptor.is_stack else noun,
        "count": descriptor.image_count,
        "shape": list(descriptor.extents),
        "data_type": descriptor.data_type.name,
        "voxel_size": None if voxel_size is None else list(voxel_size),
        "voxel_unit": None if voxel_size is None else "Å",
        "voxel_size_source": None if voxel_size is None else source,
        "statistics": None if statistics is None else statistics._asdict(),
    }


def _text(info: dict[str, Any]) -> str:
    lines = [
        info["file"],
        f"  format      {info['format']}",
        f"  holds       {info['holds']}",
        f"  shape       {tuple(info['shape'])}",
    ]
    if info["voxel_size"] is not None:
        sizes = info["voxel_size"]
        size = f"{sizes[0]:.4g}" if len(set(sizes)) == 1 else " x ".join(f"{s:.4g}" for s in sizes)
        source = f" ({info['voxel_size_source']})" if info["voxel_size_source"] else ""
        lines.append(f"  voxel size  {size} {info['voxel_unit']}{source}")
    if info["statistics"] is not None:
        lines.append("  statistics  " + "  ".join(f"{k} {v:.6g}" for k, v in info["statistics"].items()))
    return "\n".join(lines)


HELP = "what image files hold"
DESCRIPTION = "Show the format, shape, data type, voxel size and header statistics of image files."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `vitrio info`."""
    parser.add_argument(
        "files", nargs="+", metavar="FILE", help="MRC, TIFF, EER or DM files, or OME-Zarr stores (or URLs)"
    )
    parser.add_argument("--json", action="store_true", help="print a JSON list, one object per file")
    add_storage_options(parser)


def run(args: argparse.Namespace) -> int:
    """Print what each of `args.files` holds, as text or, with `args.json`, as a JSON list.

    A file that cannot be read is reported in a line on standard error (in the JSON list, as an
    object of `file` and `error`), and the others are still described.

    Returns:
        The exit status: 1 if any file could not be read, else 0.
    """
    infos, failed = [], 0
    for path in args.files:
        try:
            infos.append(describe(path, args.storage_options))
        except (OSError, ValueError) as error:
            failed += 1
            message = said(error)
            print(f"vitrio info: error: {message}", file=sys.stderr)
            infos.append({"file": path, "error": message})
    if args.json:
        print(json.dumps(infos, indent=2, ensure_ascii=False))
    else:
        described = [_text(info) for info in infos if "error" not in info]
        if described:
            print("\n".join(described))
    return 1 if failed else 0
