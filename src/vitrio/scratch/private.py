"""What a scratch trusts on a shared machine: its user's own files and folders, that no one else may write.

Another user of the machine may create files, folders and symbolic links
where this user can (a group's scratch folder, `/tmp`), and may compute the
name a scratch file will have, but cannot read or write this user's private
files. So a scratch opens its files without following a symbolic link, and
reads only regular files of this user's that neither group nor others may
write; a directory scratch lies in a folder of this user's, mode 0700, that
is opened once, without following a link, and checked each time; its files
are opened, made, renamed and removed in the folder so opened.
"""

from __future__ import annotations

import os
import stat

__all__ = ["is_own_file", "open_own_file", "user_folder"]

_OPEN_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def is_own_file(status: os.stat_result) -> bool:
    """Whether `status` is of a regular file of this user's that neither group nor others may write."""
    return stat.S_ISREG(status.st_mode) and status.st_uid == os.geteuid() and not status.st_mode & 0o022


def open_own_file(path: str, folder: int | None = None) -> int | None:
    """A descriptor of the file at `path`, for reading and writing, made with mode 0600 if missing.

    With `folder`, the descriptor of the folder of `path`, the file is opened in that folder.

    Returns:
        The descriptor, or None when what lies at `path` cannot be opened
        or is not `is_own_file`: a symbolic link, a file of another user or
        one others may write, a folder.
    """
    try:
        if folder is None:
            fd = os.open(path, _OPEN_FLAGS, 0o600)
        else:
            fd = os.open(os.path.basename(path), _OPEN_FLAGS, 0o600, dir_fd=folder)
    except OSError:
        return None
    if is_own_file(os.fstat(fd)):
        return fd
    os.close(fd)
    return None


def user_folder(directory: str) -> tuple[str, int]:
    """The folder `vitrio-<uid>` of `directory` private to this user (mode 0700), made if missing.

    `directory` is made if missing.

    Returns:
        The folder's path, and a descriptor of it, open, which the caller closes.

    Raises:
        PermissionError: If something else lies at that name: a symbolic
            link, a file, a folder of another user or one others may enter.
    """
    os.makedirs(directory, exist_ok=True)
    folder = os.path.join(directory, f"vitrio-{os.geteuid()}")
    try:
        os.mkdir(folder, 0o700)
        made = True
    except FileExistsError:
        made = False
    try:
        fd = os.open(folder, _FOLDER_FLAGS)
    except OSError as error:
        raise PermissionError(
            f"{folder}: not a folder (a symbolic link or a file is in its place), so the scratch "
            f"cannot be kept there: {error.strerror}"
        ) from error
    try:
        if made:
            os.fchmod(fd, 0o700)
        status = os.fstat(fd)
        mode = stat.S_IMODE(status.st_mode)
        if status.st_uid != os.geteuid() or mode != 0o700:
            raise PermissionError(
                f"{folder}: the scratch folder must be this user's (uid {os.geteuid()}) with mode 0o700, "
                f"but it is owned by uid {status.st_uid} with mode {mode:#o}"
            )
    except BaseException:
        os.close(fd)
        raise
    return folder, fd
