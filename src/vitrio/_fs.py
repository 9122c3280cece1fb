"""Files as vitrio opens and creates them: read-only opens, and new files made private beside their path.

Every file vitrio writes is first created beside its destination under an
unguessable name, exclusively and without following symbolic links
(`O_CREAT | O_EXCL | O_NOFOLLOW`), readable by its owner alone. Only when it
is complete is it given the mode the umask allows and renamed onto its path,
so a failed write leaves nothing behind, and a user who plants a symbolic
link where vitrio will write cannot redirect the write. Code that hands the
file to another library (tifffile, h5py, starfile) hands it the open file,
never a path that could be swapped.

The folder a file is written in is opened once, and the file is created,
renamed and removed relative to that open folder (`dir_fd`), so a folder
swapped for a link meanwhile cannot send the file elsewhere. A folder vitrio
makes under an output for names that come with the data (`open_subfolder`)
is made and opened without following links, and the files written in it
are made in the folder so opened (`writing_in`).

A file vitrio reads is opened without blocking and must be a regular file
(`open_readonly`): a FIFO would block the reader forever, and a device such
as `/dev/zero` would never end; `read_whole` also bounds the bytes of a
file read whole.

A file being written is named `.{name}.{pid}-{host}-{random}.partial`: the
process's id and a hash of its host's name. A process killed before it
removes its files cannot leave them forever: SIGTERM (what batch
schedulers send, and `kill`) removes the hidden files of the process, then
kills it as the signal would have (a handler installed by the first
`PartialFile` the main thread makes, where SIGTERM had none); and the first
`PartialFile` a process makes in a folder removes the hidden files there of
its own naming, user and host whose process is gone (after SIGKILL, or a
power cut).
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import os
import re
import secrets
import signal
import socket
import stat
import threading
import types
import zlib
from collections.abc import Iterator, Mapping
from typing import IO, Any

__all__ = [
    "PartialFile",
    "new_file",
    "open_readonly",
    "read_whole",
    "regular_size",
    "open_subfolder",
    "writing_in",
    "created_mode",
]

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_FOLDER = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _CLOEXEC
_umask_lock = threading.Lock()


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def open_readonly(path: str) -> int:
    """A file descriptor of the regular file at `path`, open for reading, closed across `exec`.

    It is opened without blocking, so that a FIFO does not wait for a writer.

    Raises:
        IsADirectoryError: If `path` is a directory.
        OSError: If it is anything else but a regular file (a FIFO, a device, a socket).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | _CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, f"{path}: is a directory, not a file")
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, f"{path}: {_kind(mode)}, not a regular file; it is not read")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def regular_size(path: str, limit: int, what: str) -> int:
    """The size of the regular file at `path`, checked to be at most `limit` bytes.

    Raises:
        IsADirectoryError, OSError: As `open_readonly` raises them.
        ValueError: If the file is larger than `limit` bytes.
    """
    fd = open_readonly(path)
    try:
        return _within(path, os.fstat(fd).st_size, limit, what)
    finally:
        os.close(fd)


def read_whole(path: str, limit: int, what: str) -> bytes:
    """The content of the regular file at `path`, of at most `limit` bytes.

    Raises:
        IsADirectoryError, OSError: As `open_readonly` raises them.
        ValueError: If the file is larger than `limit` bytes.
    """
    fd = open_readonly(path)
    try:
        _within(path, os.fstat(fd).st_size, limit, what)
        with open(fd, "rb", closefd=False) as file:
            content = file.read(limit + 1)
    finally:
        os.close(fd)
    _within(path, len(content), limit, what)  # the file grew since
    return content


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
        return os.open(name, _FOLDER | _NOFOLLOW, dir_fd=folder)
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


_pinned: contextvars.ContextVar[Mapping[str, int]] = contextvars.ContextVar(
    "vitrio_pinned_folders", default=types.MappingProxyType({})
)


@contextlib.contextmanager
def writing_in(path: str | os.PathLike[str], folder: int) -> Iterator[None]:
    """Within the block, a file this context creates in the folder at `path` is made in the folder open
    at `folder`, whatever `path` names by then."""
    token = _pinned.set({**_pinned.get(), os.path.abspath(os.fspath(path)): folder})
    try:
        yield
    finally:
        _pinned.reset(token)


def created_mode() -> int:
    """The mode a new file gets from the process's umask (0o666 less the umask)."""
    with _umask_lock:
        umask = os.umask(0o077)
        os.umask(umask)
    return 0o666 & ~umask


_HOST = f"{zlib.crc32(socket.gethostname().encode()):08x}"
_PARTIAL = re.compile(r"\..+\.(\d+)-([0-9a-f]{8})-[0-9a-f]{16}\.partial")
_live: dict[int, tuple[int, int, str]] = {}  # id of a PartialFile -> (pid that made it, folder, hidden name)
_swept: set[str] = set()
_state_lock = threading.Lock()
_guarded = False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _sweep(path: str, folder: int) -> None:
    """Remove the hidden files in the folder at `path`, open at `folder`, of this naming, user and host
    whose process is gone, once."""
    with _state_lock:
        if path in _swept:
            return
        _swept.add(path)
    user, me = os.getuid(), os.getpid()
    with contextlib.suppress(OSError), os.scandir(folder) as entries:
        for entry in entries:
            found = _PARTIAL.fullmatch(entry.name)
            if found is None or found[2] != _HOST or int(found[1]) == me or _alive(int(found[1])):
                continue
            with contextlib.suppress(OSError):
                if entry.is_file(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_uid == user:
                    os.unlink(entry.name, dir_fd=folder)


def _on_sigterm(number: int, frame: Any) -> None:
    """Remove this process's hidden files, then die of SIGTERM as if no handler were installed."""
    me = os.getpid()
    for pid, folder, name in list(_live.values()):
        if pid == me:
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=folder)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(me, signal.SIGTERM)


def _guard_sigterm() -> None:
    """Install `_on_sigterm` where SIGTERM has its default action; only the main thread can."""
    global _guarded
    if _guarded or threading.current_thread() is not threading.main_thread():
        return
    _guarded = True
    with contextlib.suppress(ValueError, OSError):
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _on_sigterm)


def partial_path(target: str | os.PathLike[str], token: str) -> str:
    """The hidden path beside `target` that this process writes it at, for the random `token`."""
    folder, name = os.path.split(os.path.abspath(os.fspath(target)))
    return os.path.join(folder, f".{name}.{os.getpid()}-{_HOST}-{token}.partial")


class PartialFile:
    """A new file being written beside `target`, private to its owner until `publish` moves it there.

    The target's folder is opened once, when the file is made (in the folder
    `writing_in` gave for it, if any), and the file is made, renamed and
    removed in that open folder.

    Attributes:
        target: The path the file is moved to when complete.
        path: Where the file lies until then: a hidden name in the target's folder.
        fd: The file's descriptor, open for reading and writing.

    Raises:
        FileNotFoundError: If the target's folder does not exist.
    """

    def __init__(self, target: str | os.PathLike[str]):
        self.target = os.fspath(target)
        where, self._name = os.path.split(os.path.abspath(self.target))
        pinned = _pinned.get().get(where)
        try:
            self._folder = os.open(where, _FOLDER) if pinned is None else os.dup(pinned)
        except (FileNotFoundError, NotADirectoryError):
            raise FileNotFoundError(f"{self.target}: no directory {where} to write the file in") from None
        try:
            _guard_sigterm()
            _sweep(where, self._folder)
            flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
            while True:
                path = partial_path(self.target, secrets.token_hex(8))
                try:
                    self.fd = os.open(os.path.basename(path), flags, 0o600, dir_fd=self._folder)
                except FileExistsError:
                    continue
                break
        except BaseException:
            os.close(self._folder)
            raise
        self.path = path
        with _state_lock:
            _live[id(self)] = (os.getpid(), self._folder, os.path.basename(path))

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
        self._release()

    def expose(self, mode: int | None = None) -> None:
        """Give the file `mode` (by default the umask's) and move it onto its target, keeping it open.

        The file is then read at its target while it is still written;
        `publish` closes it, `discard` removes it from there. Once exposed, a
        second call does nothing.
        """
        if self.path == self.target:
            return
        os.fchmod(self.fd, created_mode() if mode is None else mode)
        os.replace(os.path.basename(self.path), self._name, src_dir_fd=self._folder, dst_dir_fd=self._folder)
        self.path = self.target
        _forget(self)

    def discard(self) -> None:
        """Close and remove the unfinished file."""
        self._close()
        if self._folder >= 0:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.basename(self.path), dir_fd=self._folder)
        _forget(self)
        self._release()

    def _close(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)

    def _release(self) -> None:
        if self._folder >= 0:
            folder, self._folder = self._folder, -1
            os.close(folder)


def _forget(partial: PartialFile) -> None:
    with _state_lock:
        _live.pop(id(partial), None)


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
