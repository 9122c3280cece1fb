"""Files and folders as vitrio creates them: private beside their path until renamed onto it.

Every file vitrio writes is first created beside its destination under an
unguessable name, exclusively and without following symbolic links
(`O_CREAT | O_EXCL | O_NOFOLLOW`), readable by its owner alone. Only when it
is complete is it given the mode the umask allows and renamed onto its path,
so a failed write leaves nothing behind, and a user who plants a symbolic
link where vitrio will write cannot redirect the write. Code that hands the
file to another library (tifffile, h5py, starfile) hands it the open file,
never a path that could be swapped. A folder written whole (an OME-Zarr
store, `PartialFolder`) is made hidden and private beside its path as a
file is, opened without following links, filled, renamed and removed
through descriptors, and only while its name is still the folder made
(`still_at`, `remove_made`).

A file being written is named `.{name}.{pid}-{host}-{random}.partial`: the
process's id and a hash of its host's name. A process killed before it
removes its files cannot leave them forever: SIGTERM (what batch
schedulers send, and `kill`) removes the hidden files (and folders, such as
an OME-Zarr store's, noted with `track_partial`) of the process, whichever
thread made them, then kills it as the signal would have (a handler that
`guard_sigterm` installs where SIGTERM had none: the first `PartialFile`
the main thread makes, a writer provider, and the `vitrio` command call
it); and the first `PartialFile` a process makes in a folder removes the
hidden files there of its own naming, user and host whose process is gone
(after SIGKILL, or a power cut).
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import os
import re
import secrets
import shutil
import signal
import socket
import stat
import threading
import types
import zlib
from collections.abc import Callable, Iterator, Mapping
from typing import IO, Any

from ._fs import CLOEXEC, FOLDER, NOFOLLOW

__all__ = [
    "created_mode",
    "writing_in",
    "PartialFile",
    "PartialFolder",
    "new_file",
    "guard_sigterm",
    "track_partial",
    "untrack_partial",
    "partial_of",
    "partial_path",
    "remove_made",
    "still_at",
]

_umask_lock = threading.Lock()
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
_PARTIAL = re.compile(r"\.(.+)\.(\d+)-([0-9a-f]{8})-[0-9a-f]{16}\.partial")
# id of what writes a hidden file or folder -> (pid that made it, the folder it lies in open, its name,
# the hidden folder open, or None for a file)
_live: dict[int, tuple[int, int, str, int | None]] = {}
_swept: set[str] = set()
_state_lock = threading.Lock()
_REMOVALS = 1000  # tries at a hidden folder that writing threads refill (see _on_sigterm)
_guarded = False


def partial_of(name: str) -> tuple[str, int, str] | None:
    """If `name` is a `PartialFile`'s: the name of its target, and the id and host hash of its process."""
    found = _PARTIAL.fullmatch(name)
    return None if found is None else (found[1], int(found[2]), found[3])


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
    me = os.getpid()
    with contextlib.suppress(OSError):
        remove_partials(folder, lambda found: found[2] == _HOST and found[1] != me and not _alive(found[1]))


def remove_partials(folder: int, chosen: Callable[[tuple[str, int, str]], bool]) -> list[tuple[str, OSError]]:
    """Remove the hidden files of writes in the folder open at `folder` whose (target name, process id,
    host hash) `chosen` takes: regular files of this user only, each by its name there. Returns those
    that could not be removed (a file gone meanwhile is not one), by name, with the error."""
    user, kept = os.getuid(), []
    with os.scandir(folder) as entries:
        for entry in entries:
            found = partial_of(entry.name)
            if found is None or not chosen(found):
                continue
            try:
                status = entry.stat(follow_symlinks=False)
                if stat.S_ISREG(status.st_mode) and status.st_uid == user:
                    os.unlink(entry.name, dir_fd=folder)
            except FileNotFoundError:
                pass
            except OSError as error:
                kept.append((entry.name, error))
    return kept


def _on_sigterm(number: int, frame: Any) -> None:
    """Remove this process's hidden files and folders, then die of SIGTERM as if no handler were installed."""
    me = os.getpid()
    for pid, folder, name, made in list(_live.values()):
        if pid == me:
            with contextlib.suppress(OSError):
                if made is None:
                    os.unlink(name, dir_fd=folder)
                else:  # threads still writing may add to a folder while it is removed
                    remove_made(folder, name, made, tries=_REMOVALS)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(me, signal.SIGTERM)


def guard_sigterm() -> None:
    """Make SIGTERM remove the hidden files of this process before it dies, where SIGTERM has its default
    action; only the main thread can, so what writes on other threads calls this first on the main one."""
    global _guarded
    if _guarded or threading.current_thread() is not threading.main_thread():
        return
    _guarded = True
    with contextlib.suppress(ValueError, OSError):
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _on_sigterm)


def track_partial(owner: object, name: str, folder: int, made: int | None = None) -> None:
    """Note `name`, a hidden file `owner` writes in the folder open at `folder` (or the hidden folder open
    at `made`), for SIGTERM to remove (see `guard_sigterm`)."""
    guard_sigterm()
    with _state_lock:
        _live[id(owner)] = (os.getpid(), folder, name, made)


def untrack_partial(owner: object) -> None:
    """Forget what `track_partial` noted for `owner`: it was moved onto its path, or removed."""
    with _state_lock:
        _live.pop(id(owner), None)


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
            self._folder = os.open(where, FOLDER) if pinned is None else os.dup(pinned)
        except (FileNotFoundError, NotADirectoryError):
            raise FileNotFoundError(f"{self.target}: no directory {where} to write the file in") from None
        try:
            guard_sigterm()
            _sweep(where, self._folder)
            flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | NOFOLLOW | CLOEXEC
            while True:
                path = partial_path(self.target, secrets.token_hex(8))
                try:
                    self.fd = os.open(os.path.basename(path), flags, 0o600, dir_fd=self._folder)
                except FileExistsError:
                    continue
                except OSError as error:  # named by the target: the hidden name means nothing to the user
                    raise type(error)(error.errno, error.strerror, self.target) from None
                break
        except BaseException:
            os.close(self._folder)
            raise
        self.path = path
        track_partial(self, os.path.basename(path), self._folder)

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
        untrack_partial(self)

    def discard(self) -> None:
        """Close and remove the unfinished file."""
        self._close()
        if self._folder >= 0:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.basename(self.path), dir_fd=self._folder)
        untrack_partial(self)
        self._release()

    def _close(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)

    def _release(self) -> None:
        if self._folder >= 0:
            folder, self._folder = self._folder, -1
            os.close(folder)


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


def write_new(target: str | os.PathLike[str], data: bytes) -> None:
    """Write `data` as the file at `target`, made as `PartialFile` makes files: whole or not at all."""
    with new_file(target) as partial:
        view = memoryview(data)
        while view:
            view = view[os.write(partial.fd, view) :]


def still_at(folder: int, name: str, made: int) -> bool:
    """Whether `name` in the folder open at `folder` is the folder open at `made` (not a link to it)."""
    try:
        status = os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return os.path.samestat(status, os.fstat(made))


def remove_made(folder: int, name: str, made: int, tries: int = 1) -> None:
    """Remove the folder open at `made`, named `name` in the folder open at `folder`, and all it holds.

    What it holds is removed through `made`, never through a link; `name`
    is removed only while it still is that folder, so a folder another
    user exchanged for it is left, as is the emptied folder where they put
    it. It is emptied up to `tries` times while threads still writing refill it.
    """
    for attempt in range(tries):
        try:
            with os.scandir(made) as entries:
                for entry in entries:
                    with contextlib.suppress(FileNotFoundError):
                        if entry.is_dir(follow_symlinks=False):
                            shutil.rmtree(entry.name, dir_fd=made)
                        else:
                            os.unlink(entry.name, dir_fd=made)
            if still_at(folder, name, made):
                os.rmdir(name, dir_fd=folder)
            return
        except OSError as error:
            if error.errno != errno.ENOTEMPTY or attempt == tries - 1:
                raise


def _give_modes(folder: int, files: int, folders: int) -> None:
    """Give the files under the folder open at `folder` mode `files` and its folders `folders`, each
    through a descriptor opened without following a link."""
    with os.scandir(folder) as entries:
        found = [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in entries]
    for name, is_folder in found:
        flags = FOLDER if is_folder else os.O_RDONLY | os.O_NONBLOCK | CLOEXEC
        fd = os.open(name, flags | NOFOLLOW, dir_fd=folder)
        try:
            if is_folder:
                _give_modes(fd, files, folders)
            os.fchmod(fd, folders if is_folder else files)
        finally:
            os.close(fd)


class PartialFolder:
    """A new folder being filled beside `target`, private to its owner (mode 0700) until `publish` moves it
    there: what `PartialFile` is for a file.

    The target's folder is opened once, the hidden folder made in it and
    opened without following a link (`fd`); what it holds is written
    through `fd` by its writer, private too (files 0600, folders 0700). It
    is renamed, and removed, in the target's folder only while its hidden
    name there still is the folder made, so a link or folder another user
    exchanged for it takes no write, mode change, rename or removal.

    Attributes:
        target: The path the folder is moved to when complete.
        path: Where it lies until then: a hidden name in the target's folder.
        fd: The folder's descriptor.

    Raises:
        FileNotFoundError: If the target's folder does not exist.
        OSError: If the folder made was exchanged before it was opened.
    """

    def __init__(self, target: str | os.PathLike[str]):
        self.target = os.fspath(target)
        where, self._name = os.path.split(os.path.abspath(self.target))
        try:
            self._folder = os.open(where, FOLDER)
        except (FileNotFoundError, NotADirectoryError):
            raise FileNotFoundError(f"{self.target}: no directory {where} to write in") from None
        self.fd = -1
        try:
            guard_sigterm()
            while True:
                self.path = partial_path(self.target, secrets.token_hex(8))
                try:
                    os.mkdir(self._hidden, 0o700, dir_fd=self._folder)
                except FileExistsError:
                    continue
                except OSError as error:
                    raise type(error)(error.errno, error.strerror, self.target) from None
                break
            with contextlib.suppress(OSError):  # a link (ELOOP), or nothing: refused below
                self.fd = os.open(self._hidden, FOLDER | NOFOLLOW, dir_fd=self._folder)
            if self.fd < 0 or os.fstat(self.fd).st_uid != os.geteuid() or os.listdir(self.fd):
                raise OSError(f"{self.target}: the folder made to write it in was exchanged")
            track_partial(self, self._hidden, self._folder, self.fd)
        except BaseException:
            self._release()
            raise

    @property
    def _hidden(self) -> str:
        return os.path.basename(self.path)

    def publish(self, mode: int | None = None) -> None:
        """Give what the folder holds `mode` (by default the umask's; folders searchable where readable),
        and move it onto its target.

        Raises:
            FileExistsError: If something lies at the target.
            OSError: If the hidden name no longer is the folder made, or the target not the folder moved.
        """
        try:
            files = created_mode() if mode is None else mode
            folders = files | (files & 0o444) >> 2
            _give_modes(self.fd, files, folders)
            try:
                os.stat(self._name, dir_fd=self._folder, follow_symlinks=False)
            except FileNotFoundError:
                pass
            else:
                raise FileExistsError(f"{self.target}: exists already; it is not replaced")
            if not still_at(self._folder, self._hidden, self.fd):
                raise OSError(f"{self.target}: {self._hidden} is no longer the folder written")
            os.fchmod(self.fd, folders)
            os.rename(self._hidden, self._name, src_dir_fd=self._folder, dst_dir_fd=self._folder)
            if not still_at(self._folder, self._name, self.fd):
                raise OSError(f"{self.target}: {self._hidden} was exchanged as it was moved")
        except BaseException:
            self.discard()
            raise
        untrack_partial(self)
        self._release()

    def discard(self) -> None:
        """Remove the unfinished folder and all in it (see `remove_made`)."""
        try:
            if self.fd >= 0:
                remove_made(self._folder, self._hidden, self.fd)
        finally:
            untrack_partial(self)
            self._release()

    def _release(self) -> None:
        for name in ("fd", "_folder"):
            fd = getattr(self, name)
            if fd >= 0:
                setattr(self, name, -1)
                os.close(fd)
