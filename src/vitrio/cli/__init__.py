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

Each subcommand lives in a module of its own (`_info`, `_convert`, ...) with a
`run(args)` function (which may return the exit status). The light ones also
give their options (`add_arguments`, `HELP`, `DESCRIPTION`); those of
montage, bench and demo, whose modules import matplotlib or PyTorch, are
imported only when they run, so that `vitrio info` does not pay for
importing PyTorch. A mistake of the user's (a missing file, a file of no
known format, a STAR file without the columns needed, an output that exists)
ends the command with a one-line message that names the file and exit status
1; an interruption with status 130. Anything else
is a bug and shows its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

import vitrio as vio
from vitrio._fs import guard_sigterm

from ._common import CliError, add_force, add_storage_options, add_threads, file_or_url, positive

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


_COMMANDS = ("info", "convert", "extract", "fractionate", "montage", "bench", "doctor", "demo")
"""The subcommands, in the order `vitrio --help` lists them; each runs in the module `_{command}`."""


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


# The options of montage, bench and demo stay here: their modules import matplotlib, Pillow, mrcfile or
# torch at the top, which importing them to build the parser would make every command pay for (or fail on).
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
        "files", nargs="*", type=file_or_url, metavar="FILE", help="image files of any format (or URLs)"
    )
    montage.add_argument("-o", "--output", type=Path, required=True, help="the PNG to write")
    montage.add_argument(
        "--star", type=file_or_url, help="a STAR file of particles (or its URL): their images are shown"
    )
    montage.add_argument(
        "--label",
        metavar="COLUMN[,COLUMN...]",
        type=lambda text: text.split(","),
        help="with --star: the columns whose values label tiles, one a line",
    )
    montage.add_argument("--root", type=Path, help="with --star: the project or data directory")
    montage.add_argument(
        "-n", "--count", type=positive, default=64, help="the most tiles in all (default: 64)"
    )
    chosen = montage.add_mutually_exclusive_group()
    chosen.add_argument("--every", type=positive, default=1, metavar="K", help="every K-th image of a stack")
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
        "--sections", type=positive, metavar="N", help="N evenly spaced XY sections of a volume"
    )
    montage.add_argument(
        "--fractions", type=positive, default=10, help="an EER movie's fractions; the first is shown"
    )
    montage.add_argument("--tile", type=positive, default=128, help="the side of a tile in pixels")
    montage.add_argument("--columns", type=positive, help="tiles in a row (default: a square grid)")
    add_threads(montage, "threads that read")
    add_storage_options(montage)
    add_force(montage)


def _add_bench(commands: argparse._SubParsersAction) -> None:
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


def _add_demo(commands: argparse._SubParsersAction) -> None:
    demo = commands.add_parser(
        "demo",
        help="extract and train on a small synthetic dataset",
        description="Make synthetic micrographs with particles of three kinds, extract the particles "
        "with `vitrio extract`, train a small PyTorch classifier on them through vitrio.data, and save "
        "pictures of the particles and of the training under --out. Files of earlier runs there are "
        "replaced.",
    )
    demo.add_argument("--out", type=Path, default=Path("demo-output"), help="where to write everything")
    demo.add_argument("--micrographs", type=positive, default=6, help=argparse.SUPPRESS)
    demo.add_argument("--size", type=positive, default=1024, help=argparse.SUPPRESS)
    demo.add_argument("--epochs", type=positive, default=3, help=argparse.SUPPRESS)


_ADDED_HERE = {"montage": _add_montage, "bench": _add_bench, "demo": _add_demo}


def _add_command(commands: argparse._SubParsersAction, command: str) -> None:
    """The subcommand `command`, with the help, description and options its module `_{command}` gives."""
    module = importlib.import_module(f"{__name__}._{command}")
    module.add_arguments(commands.add_parser(command, help=module.HELP, description=module.DESCRIPTION))


def build_parser() -> argparse.ArgumentParser:
    """The parser of the `vitrio` command and its subcommands."""
    parser = argparse.ArgumentParser(
        prog="vitrio",
        description="Fast batched reading of cryo-EM images: MRC, TIFF, EER, DM.",
        epilog="Run `vitrio COMMAND --help` for the options of a command.",
    )
    parser.add_argument("--version", action="version", version=f"vitrio {vio.__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in _COMMANDS:
        if command in _ADDED_HERE:
            _ADDED_HERE[command](commands)
        else:
            _add_command(commands, command)
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
