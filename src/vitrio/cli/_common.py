"""What the subcommands share: the error of a user's mistake, the check of outputs, progress bars."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import vitrio as vio

if TYPE_CHECKING:
    import tqdm

__all__ = ["CliError", "check_output", "describe_briefly", "progress", "pyplot"]


class CliError(Exception):
    """A mistake of the user's, such as an output that exists: reported in one line, without a traceback."""


def check_output(path: Path, force: bool) -> None:
    """Refuse to replace a file at `path` unless `force`.

    Raises:
        CliError: If `path` is a directory, or exists and `force` is false.
    """
    if path.is_dir():
        raise CliError(f"{path}: is a directory; name the file to write")
    if path.exists() and not force:
        raise CliError(f"{path}: exists already; give --force to replace it")


def progress(total: int, description: str, unit: str) -> tqdm.tqdm:
    """A progress bar on standard error, shown only on a terminal."""
    import tqdm

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
