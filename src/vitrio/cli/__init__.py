"""The `vitrio` command: look at image files, convert them, extract particles, and see what vitrio does.

    vitrio info FILE... [--json]
    vitrio convert IN... OUT [--data-type T [--scale | --clip]] [--fourier-crop N] [--normalize R] [--invert]
                   [--scheduler ADDRESS | --local N]
    vitrio extract --micrographs M.star --coordinates C.star --box-size N -o particles.star [--local N]
                   [--storage-options JSON]
    vitrio fractionate movie.eer... (--fractions N | --dose-per-fraction E --total-dose D) [--binning B]
                       [--gain gain.mrc] -o movie.mrc [--local N]
    vitrio montage FILE... [--star particles.star [--label COLUMN]] -o picture.png [--storage-options JSON]
    vitrio bench [--quick]
    vitrio doctor PATH... [--json] [--seconds S] [--memory BYTES] [--scratch-dir DIR]
    vitrio demo [--out DIR]

Each subcommand lives in a module of its own (`_info`, `_convert`, ...) with
a `run(args)` function (which may return the exit status), imported only when it runs, so that `vitrio info`
does not pay for importing PyTorch. A mistake of the user's (a missing
file, a file of no known format, a STAR file without the columns needed, an
output that exists) ends the command with a one-line message that names
the file and exit status 1; an interruption with status 130. Anything else
is a bug and shows its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

import vitrio as vio
from vitrio._fs import guard_sigterm
from vitrio._types import numpy_dtype

from ._common import CliError

__all__ = ["main", "build_parser"]

# What a user's mistake raises: vitrio's errors name the file (FormatError is a ValueError); a command
# whose optional dependency is not installed names the module and the extra that installs it.
_USER_ERRORS = (CliError, OSError, ValueError, IndexError, ModuleNotFoundError)
# The extra that installs what each command needs beyond the core, for those that need more.
_EXTRAS = {"extract": "cli", "montage": "cli", "demo": "cli,torch", "bench": "bench"}
# The optional dependencies the commands import; a missing module of another name is a bug.
_OPTIONAL = (
    "tqdm",
    "pandas",
    "starfile",
    "matplotlib",
    "PIL",
    "torch",
    "mrcfile",
    "h5py",
    "dask",
    "distributed",
)


def _data_type(text: str) -> np.dtype:
    """The numpy type a `--data-type` argument names, as `vitrio.NumericalType` reads it."""
    try:
        return numpy_dtype(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"not a data type numpy has: {text!r}") from None


def _file_or_url(text: str) -> Path | str:
    """A path, or a URL (`s3://...`) kept as written: a Path would fold its `//`."""
    return text if "://" in text else Path(text)


_OPTIONS_BYTES = 1 << 20
"""The most bytes a file of `--storage-options @FILE` may hold."""


def _storage_options(text: str) -> dict:
    """The `--storage-options` argument: a JSON object, as fsspec takes it (`{"anon": true}`), or `@FILE`,
    a file that holds one: credentials on a command line are shown to every user of the machine."""
    if text.startswith("@"):
        path = text[1:]
        try:
            with open(path, "rb") as file:
                held = file.read(_OPTIONS_BYTES + 1)
            text = held.decode("utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise argparse.ArgumentTypeError(f"{path}: {error}") from None
        if len(held) > _OPTIONS_BYTES:
            raise argparse.ArgumentTypeError(f"{path}: more than {_OPTIONS_BYTES} bytes of options")
    try:
        options = json.loads(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"not JSON: {error}") from None
    if not isinstance(options, dict):
        raise argparse.ArgumentTypeError(f"a JSON object, not {text!r}")
    return options


def _add_storage_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--storage-options",
        type=_storage_options,
        metavar="JSON",
        help='what fsspec takes to reach files at URLs, as a JSON object ({"anon": true} for public '
        "buckets), or @FILE, a file holding one: keep credentials off the command line, which all users see",
    )


def _positive(text: str) -> int:
    """A positive integer argument."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"not a positive integer: {text!r}")
    return value


def _indices(text: str) -> list[int]:
    """A `--indices` argument: indices counting from zero, separated by commas."""
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        values = [-1]
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"not indices from zero separated by commas: {text!r}")
    return values


def _percentiles(text: str) -> tuple[float, float]:
    """A `--clip` argument: two percentiles `low,high`, 0 <= low < high <= 100."""
    try:
        low, high = (float(part) for part in text.split(","))
    except ValueError:
        low = high = -1.0
    if not 0 <= low < high <= 100:
        raise argparse.ArgumentTypeError(f"not two percentiles low,high from 0 to 100: {text!r}")
    return low, high


def _add_force(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--force", action="store_true", help="replace outputs that exist already")


def _add_montage(commands: argparse._SubParsersAction) -> None:
    montage = commands.add_parser(
        "montage",
        help="a picture of image files: a grid of labelled tiles",
        description="Draw a grid of images from stacks, micrographs or movies (labelled n@file), the "
        "particles a STAR file names, the central sections of volumes (XY, XZ, YZ, with a scale bar where "
        "the voxel size is known), or the sum of an EER movie's first fraction and of all its frames, each "
        "tile's contrast set by percentiles of its own values. Writes a PNG.",
    )
    montage.add_argument(
        "files", nargs="*", type=_file_or_url, metavar="FILE", help="image files of any format (or URLs)"
    )
    montage.add_argument("-o", "--output", type=Path, required=True, help="the PNG to write")
    montage.add_argument(
        "--star", type=_file_or_url, help="a STAR file of particles (or its URL): their images are shown"
    )
    montage.add_argument(
        "--label",
        metavar="COLUMN[,COLUMN...]",
        type=lambda text: text.split(","),
        help="with --star: the columns whose values label tiles, one a line",
    )
    montage.add_argument("--root", type=Path, help="with --star: the project or data directory")
    montage.add_argument(
        "-n", "--count", type=_positive, default=64, help="the most tiles in all (default: 64)"
    )
    chosen = montage.add_mutually_exclusive_group()
    chosen.add_argument("--every", type=_positive, default=1, metavar="K", help="every K-th image of a stack")
    chosen.add_argument(
        "--indices", type=_indices, metavar="I,J,...", help="these images of each stack (or rows of --star)"
    )
    montage.add_argument(
        "--clip",
        type=_percentiles,
        default=(1.0, 99.0),
        metavar="LOW,HIGH",
        help="the percentiles of each tile shown black and white (default: 1,99)",
    )
    montage.add_argument(
        "--sections", type=_positive, metavar="N", help="N evenly spaced XY sections of a volume"
    )
    montage.add_argument(
        "--fractions", type=_positive, default=10, help="an EER movie's fractions; the first is shown"
    )
    montage.add_argument("--tile", type=_positive, default=128, help="the side of a tile in pixels")
    montage.add_argument("--columns", type=_positive, help="tiles in a row (default: a square grid)")
    montage.add_argument(
        "-j", "--threads", type=_positive, default=os.cpu_count() or 1, help="threads that read"
    )
    _add_storage_options(montage)
    _add_force(montage)


def _bytes(text: str) -> int:
    """A `--memory` argument: bytes, or a number with a unit of k, M, G or T (powers of 1,000)."""
    units = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
    scale = units.get(text[-1:].lower(), 1)
    try:
        value = float(text[:-1] if scale > 1 else text) * scale
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"not a size in bytes (such as 64G): {text!r}")
    return int(value)


def _add_doctor(commands: argparse._SubParsersAction) -> None:
    doctor = commands.add_parser(
        "doctor",
        help="where reading a dataset's time would go, and the settings to use",
        description="Measure, on a sample of a few seconds, what reading a dataset costs: each format's "
        "open, cold and warm read of an image on one thread, one thread's memcpy; count its files and "
        "bytes, compare them with the memory and the scratch directory's free space, and print where the "
        "time would go, the images per second to expect on 1, 2 and N threads, and the settings to read "
        "with (workers, cache, scratch and its budget, read-ahead, converting compressed files), each "
        "with its reason. Reads only the sample; writes nothing.",
    )
    doctor.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="a STAR or .cs file of particles, a .txt list of stacks, image files, folders, OME-Zarr "
        "stores or their URLs",
    )
    doctor.add_argument("--json", action="store_true", help="print the figures as JSON")
    doctor.add_argument(
        "--seconds", type=float, default=3.0, help="how long to spend sampling files (default: 3)"
    )
    doctor.add_argument(
        "--memory", type=_bytes, help="the memory to plan for, such as 64G (default: what is available now)"
    )
    doctor.add_argument(
        "--scratch-dir", help="where a directory scratch would go (default: the temporary directory)"
    )
    doctor.add_argument("--threads", type=_positive, help="the most threads to plan for (default: the cores)")


def _add_cluster(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="run on the dask.distributed scheduler at ADDRESS, a task per file: tls://host:8786 with your "
        "certificates in the Dask configuration (distributed.comm.tls); a plain tcp:// address of another "
        "machine is warned of; the files must be at the same paths on every worker (needs vitrio[dask])",
    )
    where.add_argument(
        "--local",
        type=_positive,
        metavar="N",
        help="run on a local Dask cluster of N worker processes, speaking TLS with keys made for this run",
    )
    parser.add_argument(
        "--dashboard", action="store_true", help="with --local: serve the Dask dashboard on 127.0.0.1"
    )


def _add_casting(parser: argparse.ArgumentParser | argparse._MutuallyExclusiveGroup) -> None:
    parser.add_argument(
        "--casting",
        choices=["unsafe"],
        help="unsafe: convert to --data-type as numpy's casting='unsafe' does, as the published vitrio "
        "did (fractions cut toward zero, no range check), where the type cannot hold every value",
    )


def _add_preparing(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--fourier-crop",
        type=_positive,
        metavar="SIZE",
        help="shrink each 2-D image to SIZE x SIZE by cropping its Fourier transform, as cryoDRGN's "
        "downsample does; the pixel size written grows by the ratio",
    )
    parser.add_argument(
        "--normalize",
        type=float,
        metavar="RADIUS",
        help="give each image mean 0 and standard deviation 1 over the pixels farther than RADIUS (in "
        "pixels, after any crop) from its centre, as RELION normalises particles",
    )
    parser.add_argument("--invert", action="store_true", help="invert the contrast (after the above)")


def build_parser() -> argparse.ArgumentParser:
    """The parser of the `vitrio` command and its subcommands."""
    parser = argparse.ArgumentParser(
        prog="vitrio",
        description="Fast batched reading of cryo-EM images: MRC, TIFF, EER, DM.",
        epilog="Run `vitrio COMMAND --help` for the options of a command.",
    )
    parser.add_argument("--version", action="version", version=f"vitrio {vio.__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    info = commands.add_parser(
        "info",
        help="what image files hold",
        description="Show the format, shape, data type, voxel size and header statistics of image files.",
    )
    info.add_argument(
        "files", nargs="+", metavar="FILE", help="MRC, TIFF, EER or DM files, or OME-Zarr stores (or URLs)"
    )
    info.add_argument("--json", action="store_true", help="print a JSON list, one object per file")
    _add_storage_options(info)

    convert = commands.add_parser(
        "convert",
        help="convert between MRC and TIFF",
        description="Convert an image, stack or volume between MRC and TIFF (or any vitrio reads, to MRC "
        "or TIFF), a chunk of images at a time, so that a stack of any size streams in bounded memory. "
        "The format of OUT is chosen by its extension (.mrc .mrcs .map .tif .tiff). Several files are "
        "written into the folder OUT, each under its name with --suffix.",
    )
    convert.add_argument(
        "input", type=_file_or_url, nargs="+", metavar="IN", help="the files (or store URLs) to read"
    )
    convert.add_argument("output", type=Path, metavar="OUT", help="the file to write, or the folder")
    convert.add_argument(
        "--suffix", default=".mrc", help="with several inputs, the extension of the files written (.mrc)"
    )
    convert.add_argument("--data-type", type=_data_type, help="the type to write (default: the input's)")
    _add_storage_options(convert)
    values = convert.add_mutually_exclusive_group()
    values.add_argument(
        "--scale",
        action="store_true",
        help="map the input's range of values onto the whole range of the integer --data-type",
    )
    values.add_argument(
        "--clip",
        action="store_true",
        help="round and clip values into the range of --data-type (without it, values it cannot hold "
        "stop the conversion)",
    )
    _add_casting(values)
    _add_preparing(convert)
    _add_force(convert)
    _add_cluster(convert)

    extract = commands.add_parser(
        "extract",
        help="crop picked particles out of micrographs into MRC stacks",
        description="Crop the particles picked on micrographs into one MRC stack per micrograph, and write "
        "a RELION STAR file of them (data_optics and data_particles). The coordinates STAR file lists "
        "rlnMicrographName, rlnCoordinateX (the column) and rlnCoordinateY (the row) of each particle; a "
        "particle's centre lands at box // 2 of its box, and what lies outside the micrograph is zero. "
        "Relative paths in the STAR files are found as docs/paths-and-types.md says: beside the STAR file "
        "or in the project folders above it, or under --root.",
    )
    extract.add_argument(
        "--micrographs", type=_file_or_url, required=True, help="the micrographs STAR file (or its URL)"
    )
    extract.add_argument(
        "--coordinates", type=_file_or_url, required=True, help="the coordinates STAR file (or its URL)"
    )
    extract.add_argument("--box-size", type=_positive, required=True, metavar="N", help="the box, in pixels")
    extract.add_argument("-o", "--output", type=Path, required=True, help="the particles STAR file to write")
    extract.add_argument(
        "--stack-dir", type=Path, help="where the stacks go (default: the directory of the output)"
    )
    extract.add_argument(
        "--root",
        type=Path,
        help="the project or data directory: micrographs are looked for under it as written, then by "
        "their bare names, and the particles are named relative to it (default: micrographs beside the "
        "micrographs STAR file or in the two folders above it; names relative to the working directory)",
    )
    extract.add_argument(
        "--pixel-size",
        type=float,
        help="the pixel size in Å when the micrographs STAR file has no optics block "
        "(default: from the first micrograph's header)",
    )
    extract.add_argument(
        "--data-type", type=_data_type, default=np.dtype("float32"), help="of the stacks (default: float32)"
    )
    _add_casting(extract)
    _add_preparing(extract)
    extract.add_argument(
        "-j", "--threads", type=_positive, default=os.cpu_count() or 1, help="threads that read and write"
    )
    _add_storage_options(extract)
    _add_force(extract)
    _add_cluster(extract)

    fractionate = commands.add_parser(
        "fractionate",
        help="render EER movies into MRC movies of a few fractions",
        description="Render the frames of an EER movie into FRACTIONS images, each the per-pixel count of "
        "the events of its stretch of frames, and write them as an MRC (or TIFF) movie. Several movies "
        "are written into the folder OUTPUT, each as NAME.mrc.",
    )
    fractionate.add_argument("input", type=Path, nargs="+", metavar="MOVIE", help="the EER files")
    count = fractionate.add_mutually_exclusive_group(required=True)
    count.add_argument("--fractions", type=_positive, help="how many images to make")
    count.add_argument(
        "--dose-per-fraction",
        type=float,
        metavar="E",
        help="instead, group whole frames into fractions of about E e/A^2 each, the last taking the frames "
        "left (as RELION groups EER frames); the grouping is written beside each movie, NAME.fractions.txt",
    )
    fractionate.add_argument("--total-dose", type=float, metavar="D", help="the dose of each movie, e/A^2")
    fractionate.add_argument(
        "--dose-per-frame", type=float, metavar="R", help="or its dose rate, e/A^2 per frame"
    )
    fractionate.add_argument(
        "--binning", type=_positive, default=1, help="1, 2, 4, ...: detector pixels per pixel"
    )
    fractionate.add_argument(
        "--superres",
        type=_positive,
        default=1,
        help="1, 2, 4: pixels per detector pixel, from sub-pixel bits",
    )
    fractionate.add_argument("--gain", type=Path, help="a gain reference image to weigh events by")
    fractionate.add_argument(
        "-o", "--output", type=Path, required=True, help="the movie to write, or the folder of several"
    )
    fractionate.add_argument("--data-type", type=_data_type, help="the type to write (default: counts)")
    _add_force(fractionate)
    _add_cluster(fractionate)

    _add_montage(commands)

    bench = commands.add_parser(
        "bench",
        help="the benchmark workloads against their baselines",
        description="Run the workloads of benchmarks/ (W1: one stack, W2: many small stacks, W3: patches "
        "of micrographs) through vitrio's batch reads and vitrio.data's DataLoader, against PyTorch's "
        "DataLoader with worker processes reading through mrcfile and against mrcfile's memory map, in "
        "one run. Needs a clone of the repository (benchmarks/ beside src/), torch and mrcfile.",
    )
    size = bench.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="small files and few batches")
    size.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)
    bench.add_argument(
        "--data",
        type=Path,
        help="a folder of yours where the synthetic files are kept between runs "
        "(default: a fresh private one, removed at the end)",
    )
    bench.add_argument(
        "--plot", type=Path, default=Path("vitrio-bench.png"), help="the bar chart to save (a PNG)"
    )

    _add_doctor(commands)

    demo = commands.add_parser(
        "demo",
        help="extract and train on a small synthetic dataset",
        description="Make synthetic micrographs with particles of three kinds, extract the particles "
        "with `vitrio extract`, train a small PyTorch classifier on them through vitrio.data, and save "
        "pictures of the particles and of the training under --out. Files of earlier runs there are "
        "replaced.",
    )
    demo.add_argument("--out", type=Path, default=Path("demo-output"), help="where to write everything")
    demo.add_argument("--micrographs", type=_positive, default=6, help=argparse.SUPPRESS)
    demo.add_argument("--size", type=_positive, default=1024, help=argparse.SUPPRESS)
    demo.add_argument("--epochs", type=_positive, default=3, help=argparse.SUPPRESS)
    return parser


def _show_warning(message: Warning | str, *where: object, **_: object) -> None:
    """Show a warning (a header that breaks its format's rules, say) in one line, without source code."""
    print(f"vitrio: warning: {message}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `vitrio` command.

    Args:
        argv: The arguments, without the program's name. Defaults to `sys.argv[1:]`.

    Returns:
        The exit status: 0, 1 after a user's mistake, 130 after an interruption.

    Raises:
        SystemExit: For `--help`, `--version` and arguments the parser refuses (status 2).
    """
    args = build_parser().parse_args(argv)
    name = f"vitrio {args.command}"
    guard_sigterm()  # SIGTERM removes the hidden files of a write, whichever thread makes them
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            status = importlib.import_module(f"{__name__}._{args.command}").run(args)
    except ModuleNotFoundError as error:
        module = (error.name or "").partition(".")[0]
        if module not in _OPTIONAL:
            raise
        extra = "dask" if module in ("dask", "distributed") else _EXTRAS.get(args.command, "cli")
        print(
            f"{name}: error: needs {module}, which is not installed: pip install 'vitrio[{extra}]'",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        return 130
    except _USER_ERRORS as error:
        said = [*str(error).splitlines(), *getattr(error, "__notes__", ())]  # notes: the store, the row
        print(f"{name}: error: {' '.join(said)}", file=sys.stderr)
        return 1
    return status or 0
