"""Files as vitrio opens them: read-only, never blocking, never through a link where a folder is opened.

A file vitrio reads is opened without blocking and must be a regular file
(`open_readonly`): a FIFO would block the reader forever, and a device such
as `/dev/zero` would never end; `read_whole` also bounds the bytes of a
file read whole. A file under a store's root is reached through no link
(`open_beneath`).

The folder a file is written in is opened once, and the file is created,
renamed and removed relative to that open folder (`dir_fd`), so a folder
swapped for a link meanwhile cannot send the file elsewhere. A folder vitrio
makes under an output for names that come with the data (`open_subfolder`)
is made and opened without following links, and the files written in it
are made in the folder so opened (`vitrio._partial.writing_in`). What
vitrio creates, and how, is `vitrio._partial`'s.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from typing import BinaryIO

__all__ = [
    "open_readonly",
    "read_head",
    "open_named",
    "open_beneath",
    "read_whole",
    "regular_size",
    "open_subfolder",
    "CLOEXEC",
    "NOFOLLOW",
    "FOLDER",
]

CLOEXEC = getattr(os, "O_CLOEXEC", 0)
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
FOLDER = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | CLOEXEC


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _opened(path: str) -> tuple[int, os.stat_result]:
    """A file descriptor of whatever is at `path`, open for reading without blocking (a FIFO does not
    wait for a writer) and closed across `exec`, and its status."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | CLOEXEC)
    try:
        return fd, os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise


def open_readonly(path: str) -> int:
    """A file descriptor of the regular file at `path`, open for reading, closed across `exec`.

    It is opened without blocking, so that a FIFO does not wait for a writer.

    Raises:
        IsADirectoryError: If `path` is a directory.
        OSError: If it is anything else but a regular file (a FIFO, a device, a socket).
    """
    fd, status = _opened(path)
    mode = status.st_mode
    try:
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, f"{path}: is a directory, not a file")
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, f"{path}: {_kind(mode)}, not a regular file; it is not read")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_head(path: str, size: int) -> tuple[bytes, int] | None:
    """The first `size` bytes of the regular file at `path` and its size, read as `open_readonly` opens
    it; None where there is none to read (nothing there, a directory, a FIFO, no permission)."""
    try:
        fd, status = _opened(path)
    except OSError:
        return None
    try:
        return (os.pread(fd, size, 0), status.st_size) if stat.S_ISREG(status.st_mode) else None
    except OSError:
        return None
    finally:
        os.close(fd)


def open_named(path: str | os.PathLike[str], what: str) -> BinaryIO:
    """The regular file at `path` open to read, as `open_readonly` opens it; errors name `path`
    and what it should have been (`what`, such as "a STAR file").

    Raises:
        FileNotFoundError: If there is no file at `path`.
        IsADirectoryError: If `path` is a directory.
        OSError: As `open_readonly` raises it.
    """
    try:
        fd = open_readonly(os.fspath(path))
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise IsADirectoryError(f"{path}: is a directory, not {what}") from None
    return open(fd, "rb")


def regular_size(path: str, limit: int, what: str) -> int:
    """The size of the regular file at `path`, checked to be at most `limit` bytes.

    Raises:
        IsADirectoryError, OSError: As `open_readonly` raises them.
        ValueError: If the file is larger than `limit` bytes.
    """
    with _open_within(path, limit, what) as (_, size):
        return size


def read_whole(path: str, limit: int, what: str) -> bytes:
    """The content of the regular file at `path`, of at most `limit` bytes.

    Raises:
        IsADirectoryError, OSError: As `open_readonly` raises them.
        ValueError: If the file is larger than `limit` bytes.
    """
    with _open_within(path, limit, what) as (fd, _), open(fd, "rb", closefd=False) as file:
        content = file.read(limit + 1)
    _within(path, len(content), limit, what)  # the file grew since
    return content


@contextlib.contextmanager
def _open_within(path: str, limit: int, what: str) -> Iterator[tuple[int, int]]:
    """The regular file at `path` open read-only, and its size, checked to be at most `limit` bytes."""
    fd = open_readonly(path)
    try:
        yield fd, _within(path, os.fstat(fd).st_size, limit, what)
    finally:
        os.close(fd)


def _within(path: str, size: int, limit: int, what: str) -> int:
    if size > limit:
        raise ValueError(f"{path}: {size} bytes or more, more than the {limit} a {what} may have; not read")
    return size


def open_subfolder(folder: int, name: str, path: str) -> int:
    """A descriptor of the folder `name` of the folder open at `folder`, made if missing; no link followed.

    Args:
        folder: The descriptor of the folder it lies in.
        name: Its name there, one component.
        path: Its path, for messages.

    Raises:
        ValueError: If a symbolic link lies at `name`.
        NotADirectoryError: If something else than a folder lies there.
    """
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o777, dir_fd=folder)
    try:
        return os.open(name, FOLDER | NOFOLLOW, dir_fd=folder)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):  # what O_NOFOLLOW makes of a link
            try:
                mode = os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode
            except OSError:
                mode = 0
            if not (stat.S_ISLNK(mode) or stat.S_ISDIR(mode)):  # a folder now was a link then
                raise NotADirectoryError(errno.ENOTDIR, f"{path}: not a folder") from None
            raise ValueError(f"{path}: a symbolic link, not a folder; it is not followed") from None
        raise type(error)(error.errno, f"{path}: {error.strerror}") from None


def open_beneath(root: str, path: str) -> int:
    """A descriptor of the regular file at `path` under the folder `root`, reached through no link.

    `root` is opened as named; each component of `path` (separated by `/`)
    is then opened from the folder before it without following a link, and
    the file without blocking (a FIFO), so that nothing outside `root`, and
    nothing but a regular file, is ever read.

    Raises:
        FileNotFoundError: If there is no such file.
        ValueError: If `path` leaves `root` (`..`), or a component is a link, or the file is not a
            regular file or a component not a folder.
        OSError: If a folder or the file cannot be opened.
    """
    parts = [part for part in path.split("/") if part not in ("", ".")]
    if not parts or ".." in parts:
        raise ValueError(f"{path!r} is not a path of a file under its folder")
    folder = os.open(root, os.O_RDONLY | os.O_DIRECTORY | CLOEXEC)
    try:
        for depth, part in enumerate(parts):
            last = depth == len(parts) - 1
            flags = (os.O_NONBLOCK if last else os.O_DIRECTORY) | os.O_RDONLY | NOFOLLOW | CLOEXEC
            try:
                fd = os.open(part, flags, dir_fd=folder)
            except OSError as error:
                if error.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                linked = stat.S_ISLNK(os.stat(part, dir_fd=folder, follow_symlinks=False).st_mode)
                kind = "a link" if linked else "not a folder"
                raise ValueError(
                    f"{'/'.join(parts[: depth + 1])} is {kind}; nothing is read through it"
                ) from None
            os.close(folder)
            folder = fd
        if not stat.S_ISREG(os.fstat(folder).st_mode):
            raise ValueError(f"{path} is not a regular file (a FIFO, a device or a folder)")
    except BaseException:
        os.close(folder)
        raise
    return folder
