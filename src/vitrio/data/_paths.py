"""Where the files a metadata file names are: its paths resolved the way it means them.

The rules, in one place (docs/paths-and-types.md says them for users):

- A path is decoded if it is bytes, and the `>` cryoSPARC writes in front
  of a path relative to its project directory is left out.
- Given no root, an absolute path is taken as it is, and a relative one is
  looked for in the folder of the metadata file, then in the folder above
  it, then in the one above that: where RELION (Job/jobNNN/) and cryoSPARC
  (JNN/) keep their outputs under the project directory their paths are
  relative to.
- Given a root, as cryoDRGN's `--datadir`: the path as written under it,
  then its bare file name under it; an absolute path is tried as it is
  first.

The first candidate that exists is taken; if none does, the error names the
metadata file and every path tried. Resolving many paths at once
(`resolve_all`), a folder that many of them may be in is read once
(`os.scandir`) instead of asked for each file, and a file it names is
found in that reading.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from .._errors import redact
from .._fs import read_whole
from .._functions import query_descriptor
from .._loading import ImageLoader
from .._storage import Storage
from .._types import ImageLocation

__all__ = ["PathResolver", "read_stack_list", "stack_locations"]

# How many folders above a metadata file's own a relative path is looked for in.
_FOLDERS_UP = 2
_LISTED_FROM = 64
"""How many paths of one folder make `resolve_all` read the folder once, instead of asking for each file;
it reads at most `_LISTED_PER_PATH` entries for each such path, and asks file by file in a larger one."""
_LISTED_PER_PATH = 16


class PathResolver:
    """Resolves the paths written in one metadata file, remembering each it has resolved.

    Args:
        metadata: The metadata file the paths are written in, or its URL: relative paths are then
            URLs beside it (a written URL is never followed).
        root: The data directory, as cryoDRGN's `--datadir` or RELION's
            project directory; None for the folders of `metadata`.
        storage_options: What fsspec takes to reach `metadata` where it is a URL, or a `vitrio.Storage`.
    """

    def __init__(
        self,
        metadata: str | os.PathLike[str],
        root: str | os.PathLike[str] | None = None,
        storage_options: Mapping[str, Any] | Storage | None = None,
    ):
        self._metadata = os.fspath(metadata)
        self._root = None if root is None else os.fspath(root)
        storage = Storage.of(storage_options)
        self._remote = _Remote(self._metadata, storage) if storage.is_remote(self._metadata) else None
        path = self._remote.path if self._remote else self._metadata
        folder = os.path.dirname(path if self._remote else os.path.abspath(path))
        self._folders = [folder]
        for _ in range(_FOLDERS_UP):
            folder = os.path.dirname(folder)
            if folder not in self._folders:
                self._folders.append(folder)
        self._found: dict[Any, str] = {}
        self._beside: dict[str, list[str]] = {}
        self._listed: dict[str, frozenset[str]] = {}  # of a folder read, the names in it but of links

    def candidates(self, written: Any) -> list[str]:
        """The paths `written` may mean, in the order they are tried."""
        return list(self._candidates(written))

    def _plain(self, written: Any) -> tuple[str, str] | None:
        """Of a relative path looked for beside the metadata file (no root, not at a URL): its folder
        and its file's name; None for any other."""
        path = _spelled(written)
        folder, name = os.path.split(path)
        if (
            self._root is None
            and not self._remote
            and name not in ("", ".", "..")
            and not os.path.isabs(path)
        ):
            return folder, name
        return None

    def _candidates(self, written: Any) -> Iterator[str]:
        """The paths `written` may mean, in the order they are tried, each made when it is asked for."""
        plain = self._plain(written)
        if plain is not None:
            # a relative path among many in few folders (RELION's stacks): each folder worked out once
            folder, name = plain
            return (os.path.join(found, name) for found in self._folders_of(folder))
        path = _spelled(written)
        if self._root is None:
            tried = [path] if os.path.isabs(path) else [os.path.join(f, path) for f in self._folders]
        else:
            tried = [path if os.path.isabs(path) else os.path.join(self._root, path)]
            tried.append(os.path.join(self._root, os.path.basename(path)))
        if self._remote:
            return iter(dict.fromkeys(self._remote.url(p) for p in tried))
        return iter(dict.fromkeys(os.path.normpath(p) for p in tried))

    def _folders_of(self, folder: str) -> list[str]:
        """Where the relative `folder` may be: in each folder of the metadata file, normalised, once each."""
        found = self._beside.get(folder)
        if found is None:
            found = self._beside[folder] = list(
                dict.fromkeys(os.path.normpath(os.path.join(f, folder)) for f in self._folders)
            )
        return found

    def __call__(self, written: Any) -> str:
        """The file `written` means: the first of its candidates that exists.

        Raises:
            FileNotFoundError: If none exists, naming the metadata file and the paths tried.
        """
        found = self._found.get(written)
        if found is None:
            exists = self._remote.exists if self._remote else os.path.exists
            found = next((p for p in self._candidates(written) if exists(p)), None)
            if found is None:
                tried = self.candidates(written)
                hint = (
                    "; name the folder the paths are relative to (root= in Python, --root in a command)"
                    if self._root is None
                    else ""
                )
                where = f"{self._metadata}: {os.fsdecode(written)!r} is not at {' nor '.join(tried)}"
                raise FileNotFoundError(redact(where) + hint)
            self._found[written] = found
        return found

    def resolve_all(self, written: Sequence[Any]) -> list[str]:
        """The file each of `written` means, as the resolver says of each, the first error raised as it
        raises it: a folder that `_LISTED_FROM` or more of them may be in is read once, and what it names
        (but links) is there without being asked for, what is not in a folder that is not there is not."""
        plains = list(map(self._plain, written))
        folders = collections.Counter(plain[0] for plain in plains if plain is not None)
        for folder, count in folders.items():
            if count >= _LISTED_FROM:
                for found in self._folders_of(folder):
                    listed = None if found in self._listed else _listing(found, count * _LISTED_PER_PATH)
                    if listed is not None:
                        self._listed[found] = listed
        return [
            self._found.get(path) or (plain and self._listed_file(path, *plain)) or self(path)
            for path, plain in zip(written, plains)
        ]

    def _listed_file(self, written: Any, folder: str, name: str) -> str | None:
        """The file the plain path `written` (in `folder`, named `name`) means, where the readings of
        the folders it may be in tell it without asking; None where they do not."""
        for found in self._folders_of(folder):
            listed = self._listed.get(found)
            if listed is None or (listed is not _ABSENT and name not in listed):
                return None  # not read, or not named there but maybe a link: asked
            if listed is not _ABSENT:
                path = self._found[written] = os.path.join(found, name)
                return path
        return None


def _spelled(written: Any) -> str:
    """The path `written`, decoded if bytes, without the `>` cryoSPARC writes before a relative one."""
    return (os.fsdecode(written) if isinstance(written, bytes) else os.fspath(written)).removeprefix(">")


_ABSENT = frozenset({"/"})
"""The reading of a folder that is not there (nor a folder): nothing in it is there."""


def _listing(folder: str, most: int) -> frozenset[str] | None:
    """The names in `folder` but of links, `_ABSENT` where there is no such folder; None where it holds
    more than `most`, or cannot be read or searched, for its files to be asked for one by one."""
    try:
        with os.scandir(folder) as entries:
            names = set()
            for entry in entries:
                if not entry.is_symlink():
                    names.add(entry.name)
                if len(names) > most:
                    return None
    except (FileNotFoundError, NotADirectoryError):
        return _ABSENT
    except OSError:
        return None
    return frozenset(names) if os.access(folder, os.X_OK) else None  # else named but not reached through


class _Remote:
    """The URL of a metadata file as a path within its bucket or host, and what exists beside it."""

    def __init__(self, metadata: str, storage: Storage):
        scheme, _, rest = metadata.partition("://")
        host, _, path = rest.partition("/")
        self.prefix, self.path = f"{scheme}://{host}", "/" + path
        self._storage = storage

    def url(self, path: str) -> str:
        """The URL of `path`, a path within the bucket or host (`..` cannot leave it)."""
        return self.prefix + os.path.normpath("/" + path.lstrip("/"))

    def exists(self, url: str) -> bool:
        """Whether there is a file at `url`, asked as the storage opens it (bounded in time and tries).

        Raises:
            OSError: If the server fails, naming the URL.
        """
        try:
            self._storage.open(url).close()
        except FileNotFoundError:
            return False
        return True


MAX_LIST_BYTES = 256 << 20
"""The largest list of stacks read."""


def read_stack_list(path: str | os.PathLike[str], root: str | os.PathLike[str] | None = None) -> list[str]:
    """Read a list of stacks, a `.txt` file of one stack path a line, as cryoDRGN takes them.

    Blank lines and lines starting with `#` are left out. Each path is
    resolved as those of STAR and `.cs` files are (docs/paths-and-types.md).

    Args:
        path: The list.
        root: The folder the paths are relative to. Defaults to the folder of
            the list, then the folders above it.

    Returns:
        The stacks, in the order of the list.

    Raises:
        FileNotFoundError: If there is no list at `path`, or a stack is
            nowhere to be found (naming the paths tried).
        OSError: If the list is not a regular file (a FIFO, a device: never waited on).
        ValueError: If the list names no stack, is not text, or is larger than `MAX_LIST_BYTES`.
    """
    try:
        lines = [
            line.strip() for line in read_whole(os.fspath(path), MAX_LIST_BYTES, "list").decode().splitlines()
        ]
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such file") from None
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not a list of stacks, one path a line: {error}") from None
    written = [line for line in lines if line and not line.startswith("#")]
    if not written:
        raise ValueError(f"{path}: names no stack")
    resolve = PathResolver(path, root)
    return [resolve(line) for line in written]


def stack_locations(
    paths: Iterable[str | os.PathLike[str]], loader: ImageLoader | None = None
) -> list[ImageLocation]:
    """The location of every image of some stacks, stack by stack, as their headers say.

    A file that is not a stack (one image or volume) is one location, of the whole file.

    Args:
        paths: The stacks, as `read_stack_list` gives them.
        loader: What opens the files. Defaults to opening each at its path.

    Returns:
        The locations, in the order of `paths`, each stack's in its order.

    Raises:
        FileNotFoundError: If a stack does not exist.
        ValueError: If a file is of no known format, or malformed.
    """
    readers = None if loader is None else loader.readers
    locations: list[ImageLocation] = []
    for path in paths:
        key = os.fspath(path)
        descriptor = query_descriptor(key, readers)
        if descriptor.is_stack:
            locations.extend(ImageLocation(key, index) for index in range(descriptor.image_count))
        else:
            locations.append(ImageLocation(key))
    return locations
