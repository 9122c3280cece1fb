"""The directory scratch: mapped-file scratches named after their images, in a folder kept within a budget.

In the directory given, each user has a folder of their own, `vitrio-<uid>`
(mode 0700, `vitrio.scratch.private.user_folder`), in which each scratch
file is named by a hash of its images, layout and readers' configuration,
so a program of the user asking for the same images read alike finds it. Before a new scratch file is
made, the least recently used scratch files of the folder (regular files
of the user's, ending `.vitrio-scratch`) are removed until the rest and
the new one fit in the budget; what may not be removed is left.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from typing import Any

from .._providers import FileImageReaderProvider, ImageReaderProvider
from .._types import as_key
from .mapped import HEADER_BYTES, mapped_scratch
from .plan import check_arguments, descriptors, digest, layout
from .private import user_folder
from .store import ImageScratch

__all__ = ["SCRATCH_SUFFIX", "create_directory_image_scratch"]

SCRATCH_SUFFIX = ".vitrio-scratch"


def create_directory_image_scratch(
    locations: Sequence[Any],
    directory: Any,
    run_length: int,
    budget: int,
    files: ImageReaderProvider | None = None,
) -> ImageScratch:
    """A mapped-file scratch in a directory shared by the programs of a machine, in a folder per user.

    The file is named after its images, layout and the configuration of
    `files`, so a program of the same user asking for the same images,
    read alike, finds it. It lies in the folder
    `vitrio-<uid>` of `directory`, which only its user may enter. To stay
    within `budget` bytes, the least recently used scratch files of that
    folder (only the user's files ending `.vitrio-scratch`) are removed
    first; a scratch that alone exceeds the budget holds what fits in it.

    Args:
        locations: The images to hold.
        directory: The shared directory, made if missing.
        run_length: How many images of a file are taken in together.
        budget: How many bytes the user's scratch files of the directory may take together.
        files: Where the files are asked for their shape: readers of the configuration of those
            that take the images in (as `create_host_image_scratch` says).

    Raises:
        ValueError: If `run_length` or `budget` is not positive, or there is nothing to hold.
        PermissionError: If something other than a folder of this user's,
            mode 0700, lies at the name of the user's folder.
    """
    if int(budget) < 1:
        raise ValueError(f"budget must be positive: {budget}")
    grouped = check_arguments(locations, run_length)
    directory = as_key(directory)
    files = files or FileImageReaderProvider()
    name = digest(grouped, int(run_length), int(budget), files.configuration()).decode() + SCRATCH_SUFFIX
    held = None
    if not os.path.lexists(os.path.join(directory, f"vitrio-{os.geteuid()}", name)):  # only a hint
        found = descriptors(grouped, files)
        held = layout(grouped, found, int(run_length), int(budget))
    folder_path, folder = user_folder(directory)
    try:
        if held is not None:
            _evict(folder, int(budget) - sum(file.nbytes for file in held) - HEADER_BYTES, keep=name)
        path = os.path.join(folder_path, name)
        scratch = mapped_scratch(grouped, path, int(run_length), int(budget), files, folder)
        os.utime(name, dir_fd=folder, follow_symlinks=False)
    finally:
        os.close(folder)
    return scratch


def _evict(folder: int, room: int, keep: str) -> None:
    """Remove the least recently used scratch files of the folder open at `folder` until the rest take
    `room` bytes.

    Only regular files of this user's count, and only they are removed;
    one that cannot be removed is left, and still counts.
    """
    uid = os.geteuid()
    entries = []
    with os.scandir(folder) as found:
        for entry in found:
            if not entry.name.endswith(SCRATCH_SUFFIX) or entry.name == keep:
                continue
            try:
                status = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(status.st_mode) and status.st_uid == uid:
                entries.append((status.st_mtime_ns, status.st_size, entry.name))
    entries.sort()
    total = sum(size for _, size, _ in entries)
    for _, size, name in entries:
        if total <= max(room, 0):
            break
        try:
            os.unlink(name, dir_fd=folder)
        except FileNotFoundError:
            pass
        except OSError:
            continue
        total -= size
