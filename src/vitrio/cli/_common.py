"""What the subcommands share: the error of a user's mistake, the check of outputs, progress bars, charts."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import vitrio as vio
from vitrio._fs import new_file, remove_made, still_at

if TYPE_CHECKING:
    import tqdm

__all__ = [
    "CliError",
    "check_output",
    "describe_briefly",
    "folders_for",
    "is_store",
    "progress",
    "pyplot",
    "replacing",
    "save_figure",
]


class CliError(Exception):
    """A mistake of the user's, such as an output that exists: reported in one line, without a traceback."""


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
    """While the block writes `path`, the folders above it exist: those missing are made first, and
    removed again if the block fails."""
    missing = [folder for folder in path.absolute().parents if not folder.exists()]
    for folder in reversed(missing):
        folder.mkdir()
    try:
        yield
    except BaseException:
        for folder in missing:
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise


@contextlib.contextmanager
def replacing(path: Path) -> Iterator[None]:
    """While the block writes a new file at `path`, keep a store there aside: removed if the block
    succeeds, put back if it fails (a file needs nothing: the new one is renamed over it, as is a link).

    The store is opened, without following a link, before it is moved aside in its folder, and removed
    through that descriptor (`vitrio._fs.remove_made`): another user who may write the folder and
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
    """Save a matplotlib figure as a PNG at `path`, created as vitrio creates files (`vitrio._fs.new_file`),
    in its folder made if missing."""
    with folders_for(path), new_file(path) as partial, partial.file() as file:
        figure.savefig(file, format="png", dpi=dpi)
