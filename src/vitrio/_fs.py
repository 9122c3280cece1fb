"""Files as vitrio opens and creates them: read-only opens, and new files made private beside their path.

Every file vitrio writes is first created beside its destination under an
unguessable name, exclusively and without following symbolic links
(`O_CREAT | O_EXCL | O_NOFOLLOW`), readable by its owner alone. Only when it
is complete is it given the mode the umask allows and renamed onto its path,
so a failed write leaves nothing behind, and a user who plants a symbolic
link where vitrio will write cannot redirect the write. Code that hands the
file to another library (tifffile, h5py, starfile) hands it the open file,
never a path that could be swapped.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
from collections.abc import Iterator
from typing import IO, Any

__all__ = ["PartialFile", "new_file", "open_readonly", "created_mode", "remove_quietly"]

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_umask_lock = threading.Lock()


def open_readonly(path: str) -> int:
    """A file descriptor of `path` open for reading, closed across `exec`."""
    return os.open(path, os.O_RDONLY | _CLOEXEC)


def created_mode() -> int:
    """The mode a new file gets from the process's umask (0o666 less the umask)."""
    with _umask_lock:
        umask = os.umask(0o077)
        os.umask(umask)
    return 0o666 & ~umask


def remove_quietly(path: str) -> None:
    """Remove `path` if it is there."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


class PartialFile:
    """A new file being written beside `target`, private to its owner until `publish` moves it there.

    Attributes:
        target: The path the file is moved to when complete.
        path: Where the file lies until then: a hidden name in the target's folder.
        fd: The file's descriptor, open for reading and writing.

    Raises:
        FileNotFoundError: If the target's folder does not exist.
    """

    def __init__(self, target: str | os.PathLike[str]):
        self.target = os.fspath(target)
        folder, name = os.path.split(os.path.abspath(self.target))
        if not os.path.isdir(folder):
            raise FileNotFoundError(f"{self.target}: no directory {folder} to write the file in")
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
        while True:
            path = os.path.join(folder, f".{name}.{secrets.token_hex(8)}.partial")
            try:
                self.fd = os.open(path, flags, 0o600)
            except FileExistsError:
                continue
            break
        self.path = path

    def file(self, mode: str = "r+b") -> IO[Any]:
        """A file object over the file, at its start, named by its path; closing it leaves `fd` open."""
        file = os.fdopen(os.dup(self.fd), mode)
        file.raw.name = self.path
        return file

    def publish(self, mode: int | None = None) -> None:
        """Give the file `mode` (by default the umask's), close it and move it onto its target."""
        try:
            self.expose(mode)
            self._close()
        except BaseException:
            self.discard()
            raise

    def expose(self, mode: int | None = None) -> None:
        """Give the file `mode` (by default the umask's) and move it onto its target, keeping it open.

        The file is then read at its target while it is still written;
        `publish` closes it, `discard` removes it from there. Once exposed, a
        second call does nothing.
        """
        if self.path == self.target:
            return
        os.fchmod(self.fd, created_mode() if mode is None else mode)
        os.replace(self.path, self.target)
        self.path = self.target

    def discard(self) -> None:
        """Close and remove the unfinished file."""
        self._close()
        remove_quietly(self.path)

    def _close(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)


@contextlib.contextmanager
def new_file(target: str | os.PathLike[str]) -> Iterator[PartialFile]:
    """A `PartialFile` beside `target`, moved onto it when the block ends well, removed when it raises."""
    partial = PartialFile(target)
    try:
        yield partial
    except BaseException:
        partial.discard()
        raise
    partial.publish()
