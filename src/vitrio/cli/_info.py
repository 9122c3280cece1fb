"""`vitrio info`: what image files hold, from their headers alone."""

from __future__ import annotations

import argparse
import json
import struct
import warnings
from pathlib import Path
from typing import Any

import vitrio as vio
from vitrio.formats.dm import DigitalMicrographReader
from vitrio.formats.mrc import HEADER_BYTES, _Header

from ._common import describe_briefly

__all__ = ["describe", "run"]

# Units DM files give sizes in, as multiples of an ångström.
_ANGSTROMS = {"Å": 1.0, "A": 1.0, "pm": 0.01, "nm": 10.0, "µm": 1e4, "um": 1e4}


def describe(path: Path) -> dict[str, Any]:
    """What the file at `path` holds, as `vitrio info --json` prints it.

    Keys: `file`, `format`, `holds` (in words), `kind` ("image", "volume",
    "image stack" or "volume stack"), `count` (images or volumes), `shape`
    (of the whole file, slowest first), `data_type`, `voxel_size` (slowest
    first, or None), `voxel_unit`, and `statistics` (MRC only: the header's
    min, max, mean and rms, or None). The voxel size of an MRC file is its
    cell divided by its sampling, in Å, as the MRC format's own header parser
    reads them; that of a DM file its calibration, in Å where its unit is one
    of length. The format is the first registered one that claims the file,
    as `vitrio.formats.open_reader` chooses it.

    Raises:
        FileNotFoundError: If there is no file at `path`.
        FormatError: If the file is of no known format, or malformed.
    """
    key = str(path)
    with vio.formats.open_reader(key) as reader, open(key, "rb") as file:
        head = file.read(4096)
        descriptor = reader.descriptor
        calibration = (
            (reader.pixel_size, reader.pixel_units) if isinstance(reader, DigitalMicrographReader) else None
        )
    extension = path.suffix.lower()
    format_name = next(f.name for f in vio.formats.registered_formats() if f.recognizes(head, extension))
    rank = descriptor.core_rank
    noun = "image" if rank == 2 else "volume"
    result: dict[str, Any] = {
        "file": key,
        "format": format_name,
        "holds": describe_briefly(descriptor),
        "kind": f"{noun} stack" if descriptor.is_stack else noun,
        "count": descriptor.image_count if descriptor.is_stack else 1,
        "shape": list(descriptor.extents),
        "data_type": descriptor.data_type.name,
        "voxel_size": None,
        "voxel_unit": None,
        "statistics": None,
    }
    if calibration is not None:
        sizes, units = calibration[0][-rank:], calibration[1][-rank:]
        if all(unit in _ANGSTROMS for unit in units):
            result["voxel_size"] = [size * _ANGSTROMS[unit] for size, unit in zip(sizes, units)]
            result["voxel_unit"] = "Å"
        else:
            result["voxel_size"], result["voxel_unit"] = list(sizes), units[-1]
    elif format_name == "mrc":
        with warnings.catch_warnings():  # opening the reader warned already
            warnings.simplefilter("ignore", vio.FormatWarning)
            header = _Header(key, head[:HEADER_BYTES])
        samples = (header.mz, header.my, header.mx)[3 - rank :]
        cell = tuple(reversed(header.cell))[3 - rank :]
        if min(samples) > 0 and min(cell) > 0:
            result["voxel_size"] = [c / m for c, m in zip(cell, samples)]
            result["voxel_unit"] = "Å"
        low, high, mean = struct.unpack_from(header.order + "3f", head, 76)
        (rms,) = struct.unpack_from(header.order + "f", head, 216)
        result["statistics"] = {"min": low, "max": high, "mean": mean, "rms": rms}
    return result


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
        lines.append(f"  voxel size  {size} {info['voxel_unit']}")
    if info["statistics"] is not None:
        lines.append("  statistics  " + "  ".join(f"{k} {v:.6g}" for k, v in info["statistics"].items()))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> None:
    """Print what each of `args.files` holds, as text or, with `args.json`, as a JSON list."""
    infos = [describe(path) for path in args.files]
    if args.json:
        print(json.dumps(infos, indent=2, ensure_ascii=False))
    else:
        print("\n".join(_text(info) for info in infos))
