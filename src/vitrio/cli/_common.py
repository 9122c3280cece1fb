"""What the subcommands share: the error of a user's mistake, the options of several commands, the check of
outputs, progress bars, charts."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

import vitrio as vio
from vitrio._partial import new_file, remove_made, still_at
from vitrio._storage import is_url
from vitrio._types import numpy_dtype

if TYPE_CHECKING:
    import tqdm

__all__ = [
    "CliError",
    "add_casting",
    "add_cluster",
    "add_force",
    "add_preparing",
    "add_storage_options",
    "add_threads",
    "check_output",
    "data_type",
    "describe_briefly",
    "file_or_url",
    "folders_for",
    "is_store",
    "non_negative_number",
    "positive",
    "positive_number",
    "progress",
    "pyplot",
    "replacing",
    "said",
    "save_figure",
]


class CliError(Exception):
    """A mistake of the user's, such as an output that exists: reported in one line, without a traceback."""


def said(error: BaseException) -> str:
    """What a user's mistake says, in one line: its message and notes (the store, the row), an `OSError`
    without its number (`[Errno 2]`), its file named once."""
    text = str(error)
    if isinstance(error, OSError) and error.strerror:
        text = error.strerror
        if error.filename is not None and os.fspath(error.filename) not in text:
            text = f"{os.fspath(error.filename)}: {text}"
    return " ".join([*text.splitlines(), *getattr(error, "__notes__", ())])


def data_type(text: str) -> np.dtype:
    """The numpy type a `--data-type` argument names, as `vitrio.NumericalType` reads it."""
    try:
        return numpy_dtype(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"not a data type numpy has: {text!r}") from None


def file_or_url(text: str) -> Path | str:
    """A path, or a URL (`s3://...`) kept as written: a Path would fold its `//`."""
    return text if is_url(text) else Path(text)


def positive(text: str) -> int:
    """A positive integer argument."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"not a positive integer: {text!r}")
    return value


def _number(text: str, what: str, least: float, strictly: bool) -> float:
    """A finite number argument above `least` (or equal to it, unless `strictly`), else argparse's error
    saying it is not `what`."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < least or (strictly and value == least):
        raise argparse.ArgumentTypeError(f"not {what}: {text!r}")
    return value


def positive_number(text: str) -> float:
    """A positive, finite number argument (a dose, a time)."""
    return _number(text, "a positive number", 0.0, strictly=True)


def non_negative_number(text: str) -> float:
    """A finite number argument of 0 or more (a radius)."""
    return _number(text, "a number of 0 or more", 0.0, strictly=False)


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


def add_storage_options(parser: argparse.ArgumentParser) -> None:
    """`--storage-options`: what fsspec takes to reach files at URLs."""
    parser.add_argument(
        "--storage-options",
        type=_storage_options,
        metavar="JSON",
        help='what fsspec takes to reach files at URLs, as a JSON object ({"anon": true} for public '
        "buckets), or @FILE, a file holding one: keep credentials off the command line, which all users see",
    )


def add_force(parser: argparse.ArgumentParser) -> None:
    """`--force`: replace outputs that exist."""
    parser.add_argument("--force", action="store_true", help="replace outputs that exist already")


def add_threads(parser: argparse.ArgumentParser, does: str) -> None:
    """`-j`/`--threads`: how many threads do what `does` says, by default one a core."""
    parser.add_argument("-j", "--threads", type=positive, default=os.cpu_count() or 1, help=does)


def add_cluster(parser: argparse.ArgumentParser) -> None:
    """`--scheduler` or `--local`, and `--dashboard`: where the command runs its tasks a file each."""
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
        type=positive,
        metavar="N",
        help="run on a local Dask cluster of N worker processes, speaking TLS with keys made for this run",
    )
    parser.add_argument(
        "--dashboard", action="store_true", help="with --local: serve the Dask dashboard on 127.0.0.1"
    )


def add_casting(parser: argparse.ArgumentParser | argparse._MutuallyExclusiveGroup) -> None:
    """`--casting unsafe`: convert to `--data-type` as numpy's unsafe casting does."""
    parser.add_argument(
        "--casting",
        choices=["unsafe"],
        help="unsafe: convert to --data-type as numpy's casting='unsafe' does, as the published vitrio "
        "did (fractions cut toward zero, no range check), where the type cannot hold every value",
    )


def add_preparing(parser: argparse.ArgumentParser) -> None:
    """`--fourier-crop`, `--normalize` and `--invert`: how each image is prepared before it is written."""
    parser.add_argument(
        "--fourier-crop",
        type=positive,
        metavar="SIZE",
        help="shrink each 2-D image to SIZE x SIZE by cropping its Fourier transform, as cryoDRGN's "
        "downsample does; the pixel size written grows by the ratio",
    )
    parser.add_argument(
        "--normalize",
        type=non_negative_number,
        metavar="RADIUS",
        help="give each image mean 0 and standard deviation 1 over the pixels farther than RADIUS (in "
        "pixels, after any crop) from its centre, as RELION normalises particles",
    )
    parser.add_argument("--invert", action="store_true", help="invert the contrast (after the above)")


def is_store(path: Path) -> bool:
    """Whether `path` is a folder that is a Zarr store (an OME-Zarr file, for vitrio)."""
    return path.is_dir() and any((path / name).is_file() for name in (".zgroup", ".zattrs", "zarr.json"))


def check_output(path: Path, force: bool) -> None:
    """Refuse to replace a file (or an OME-Zarr store) at `path` unless `force`.

    Raises:
        CliError: If `path` is a directory but no store, or exists and `force` is false.
    """
    if path.is_dir() and not is_store(path):
        raise CliError(f"{path}: is a directory; name the file to write")
    if path.exists() and not force:
        raise CliError(f"{path}: exists already; give --force to replace it")


@contextlib.contextmanager
def folders_for(path: Path) -> Iterator[None]:
    """While the block writes `path`, the folders above it exist: those missing are made first, and if the
    block fails, the highest of them made is removed with all it holds, through its descriptor
    (`vitrio._partial.remove_made`): only while its name still is the folder made here."""
    missing = [folder for folder in path.absolute().parents if not folder.exists()]
    if not missing:
        yield
        return
    top = missing[-1]
    with contextlib.ExitStack() as opened:
        above = os.open(top.parent, os.O_RDONLY | os.O_DIRECTORY)
        opened.callback(os.close, above)
        os.mkdir(top.name, 0o777, dir_fd=above)
        made = os.open(top.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=above)
        opened.callback(os.close, made)
        if os.fstat(made).st_uid != os.geteuid() or os.listdir(made):
            raise OSError(f"{top}: the folder made was exchanged for another")
        try:
            for folder in reversed(missing[:-1]):
                folder.mkdir()
            yield
        except BaseException:
            remove_made(above, top.name, made)
            raise


@contextlib.contextmanager
def replacing(path: Path) -> Iterator[None]:
    """While the block writes a new file at `path`, keep a store there aside: removed if the block
    succeeds, put back if it fails (a file needs nothing: the new one is renamed over it, as is a link).

    The store is opened, without following a link, before it is moved aside in its folder, and removed
    through that descriptor (`vitrio._partial.remove_made`): another user who may write the folder and
    exchanges the name it was moved to with another folder of the user's has nothing else removed.
    """
    if path.is_symlink() or not is_store(path):
        yield
        return
    with contextlib.ExitStack() as opened:
        folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        opened.callback(os.close, folder)
        store = os.open(path.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=folder)
        opened.callback(os.close, store)
        aside = f".{path.name}.{secrets.token_hex(8)}.replaced"
        os.rename(path.name, aside, src_dir_fd=folder, dst_dir_fd=folder)
        try:
            yield
        except BaseException:
            if not os.path.lexists(path) and still_at(folder, aside, store):
                os.rename(aside, path.name, src_dir_fd=folder, dst_dir_fd=folder)
            raise
        remove_made(folder, aside, store)


class _NoBar:
    """What stands for a progress bar where tqdm is not installed: it shows nothing."""

    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *_: object) -> None:
        pass

    def update(self, count: int = 1) -> None:
        pass


def progress(total: int | None, description: str, unit: str) -> tqdm.tqdm | _NoBar:
    """A progress bar on standard error, shown only on a terminal; of no known end if `total` is None.

    Without tqdm (the `cli` extra), nothing is shown.
    """
    try:
        import tqdm
    except ModuleNotFoundError as error:
        if error.name != "tqdm":
            raise
        return _NoBar()
    return tqdm.tqdm(total=total, desc=description, unit=unit, unit_scale=True, disable=None, leave=False)


def describe_briefly(descriptor: vio.ImageDescriptor) -> str:
    """What a descriptor says, in words: "a stack of 100 images of 64 x 64, float32"."""
    noun = "image" if descriptor.core_rank == 2 else "volume"
    core = " x ".join(str(e) for e in descriptor.core_extents)
    count = f"a stack of {descriptor.image_count} {noun}s" if descriptor.is_stack else f"one {noun}"
    return f"{count} of {core}, {descriptor.data_type.name}"


def pyplot() -> ModuleType:
    """matplotlib's pyplot, drawing into files (the Agg backend), imported only by the commands that draw."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(figure: Any, path: Path, dpi: int) -> None:
    """Save a matplotlib figure as a PNG at `path`, created as vitrio creates files
    (`vitrio._partial.new_file`), in its folder made if missing."""
    with folders_for(path), new_file(path) as partial, partial.file() as file:
        figure.savefig(file, format="png", dpi=dpi)
