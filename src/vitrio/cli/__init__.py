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
    vitrio examples DIR

Each subcommand lives in a module of its own (`_info`, `_convert`, ...) with a
`run(args)` function (which may return the exit status), beside its options
(`add_arguments`, `HELP`, `DESCRIPTION`). The heavy optional libraries
(matplotlib, Pillow, pandas, PyTorch, mrcfile) are imported in the functions
that use them, so that building the parser, and `vitrio info`, does not pay
for importing PyTorch. A mistake of the user's (a missing file, a file of no
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

import vitrio as vio
from vitrio._partial import guard_sigterm

from ._common import CliError, said

__all__ = ["main", "build_parser"]

# What a user's mistake raises: vitrio's errors name the file (FormatError is a ValueError); a command
# whose optional dependency is not installed names the module and the extra that installs it.
_USER_ERRORS = (CliError, OSError, ValueError, IndexError, ModuleNotFoundError)
# What vitrio's ImportError of a missing extra says (a key at a URL without [remote], say).
_INSTALL = "pip install 'vitrio["
# The extra that installs what each command needs beyond the core, for those that need more.
_EXTRAS = {"extract": "cli", "montage": "cli", "demo": "cli,torch", "bench": "bench", "examples": "cli"}
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


_COMMANDS = ("info", "convert", "extract", "fractionate", "montage", "bench", "doctor", "demo", "examples")
"""The subcommands, in the order `vitrio --help` lists them; each runs in the module `_{command}`."""


def _add_command(commands: argparse._SubParsersAction, command: str) -> None:
    """The subcommand `command`, with the help, description and options its module `_{command}` gives."""
    module = importlib.import_module(f"{__name__}._{command}")
    module.add_arguments(commands.add_parser(command, help=module.HELP, description=module.DESCRIPTION))


def build_parser() -> argparse.ArgumentParser:
    """The parser of the `vitrio` command and its subcommands."""
    parser = argparse.ArgumentParser(
        prog="vitrio",
        description="Fast batched reading of cryo-EM images (MRC, TIFF, EER, DM, OME-Zarr), local or at URLs",
        epilog="Run `vitrio COMMAND --help` for the options of a command.",
    )
    parser.add_argument("--version", action="version", version=f"vitrio {vio.__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in _COMMANDS:
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
    except ImportError as error:
        if _INSTALL not in str(error):  # a key whose scheme needs an extra: vitrio names it
            raise
        print(f"{name}: error: {said(error)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        return 130
    except _USER_ERRORS as error:
        print(f"{name}: error: {said(error)}", file=sys.stderr)
        return 1
    return status or 0
