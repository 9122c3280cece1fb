"""The errors of vitrio: one base, `VitrioError`, that carries the key of the file an error concerns.

Each error is also a class of the standard exception its callers catch.
Several have two parents: the exception this package raises, and the one the
published package raises (or earlier versions of this one did), so callers
of either catch them. This layer knows nothing of files or threads.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = [
    "VitrioError",
    "concerning",
    "FormatError",
    "PastTheEndError",
    "ImageFileNotFoundError",
    "LocationAsKeyError",
    "ReadOnlyDestinationError",
    "DestinationTypeError",
    "IncompleteFileError",
    "DeclaredTwiceError",
    "no_such_file",
    "past_the_end",
    "redact",
    "redact_error",
]


_USERINFO = re.compile(r"(://)[^/?#@\s]*@")
_SECRET_QUERY = re.compile(
    r"([?&;](?:[\w.-]*(?:signature|credential|token|password|secret)|sig|key|policy)=)[^&#\s'\":]*", re.I
)


def redact(text: str) -> str:
    """`text`, a URL or a message naming one, with the secrets a URL may hold put as `***`: the user and
    password before its host, and the values of its query's signatures, credentials, keys and tokens (up
    to a colon, which a message puts after the URL and a signed query's values encode)."""
    return _SECRET_QUERY.sub(r"\1***", _USERINFO.sub(r"\1***@", text))


def redact_error(error: BaseException) -> BaseException:
    """`error`, its message and those of the errors it was raised from or while handling, redacted as
    `redact` redacts a URL: for messages formats write of a file at a URL, naming it as given."""
    seen: set[int] = set()
    at: BaseException | None = error
    while at is not None and id(at) not in seen:
        seen.add(id(at))
        if isinstance(at, OSError):  # its message is its `strerror` and `filename` where it has them
            if isinstance(at.strerror, str):
                at.strerror = redact(at.strerror)
            if isinstance(at.filename, str):
                at.filename = redact(at.filename)
        at.args = tuple(redact(a) if isinstance(a, str) else a for a in at.args)
        if hasattr(at, "__notes__"):
            at.__notes__ = [redact(note) if isinstance(note, str) else note for note in at.__notes__]
        at = at.__cause__ or at.__context__
    return error


class VitrioError(Exception):
    """The base of vitrio's errors.

    Attributes:
        key: The key of the file the error concerns, or None where it concerns no one file.
    """

    key: str | None = None


class concerning:  # noqa: N801 - used as a function, `with concerning(key):`
    """Give whatever is raised inside, while working on the file at `key`, that key as its `key`.

    A failure that already names a file keeps it. Failures of other classes
    than `VitrioError` (an `OSError`, a slot of the wrong shape) carry it too,
    so that whoever catches one learns which file it concerns without reading its message.
    (A class, not a generator: it wraps the read of every file.)
    """

    __slots__ = ("key",)

    def __init__(self, key: str):
        self.key = key

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, error: BaseException | None, trace: Any) -> bool:
        if isinstance(error, Exception):
            if getattr(error, "key", None) is None:
                error.key = self.key
            if isinstance(self.key, str):  # a URL's secrets; a path's message holds none to change
                redact_error(error)
        return False


def _keyed(error: VitrioError, key: str) -> VitrioError:
    error.key = key
    return error


class FormatError(VitrioError, ValueError, RuntimeError):
    """A file not of its format, truncated, or whose header does not fit it; or no format for a file.

    A `ValueError`, and the `RuntimeError` the published package raises for
    every file-level failure.
    """


class PastTheEndError(VitrioError, IndexError, ValueError):
    """An index past the end of a stack.

    An `IndexError`, as the core raises it, and a `ValueError`, as the
    sources of `vitrio.data` are specified to raise it: callers of either
    catch it.
    """


class ImageFileNotFoundError(VitrioError, FileNotFoundError, RuntimeError):
    """No file at a key: a `FileNotFoundError` (errno kept), and the published package's `RuntimeError`."""


class LocationAsKeyError(ImageFileNotFoundError, ValueError):
    """No file at a key written as a location ("7@stack.mrcs"), as RELION writes an image of a stack: an
    `ImageFileNotFoundError` whose message points to the parsers, and a `ValueError`."""


def no_such_file(key: str, errno: int | None) -> ImageFileNotFoundError:
    """The error for a file missing at `key`, pointing to the parsers where `key` is written "index@path"."""
    if re.match(r"\s*\d+@", key):
        hint = "for an image of a stack, pass ImageLocation.from_string(text), or parse_locations(texts)"
        return _keyed(LocationAsKeyError(errno, f"{key}: no such file; a key is a file's path: {hint}"), key)
    return _keyed(ImageFileNotFoundError(errno, f"{key}: no such file"), key)


class ReadOnlyDestinationError(VitrioError, TypeError, ValueError):
    """A destination that reads cannot land in (read-only memory): a `TypeError`, as the published
    package raises it, and a `ValueError`, as earlier versions of this one did."""


class DestinationTypeError(VitrioError, TypeError, ValueError):
    """A destination whose type cannot hold the values of a file read into it (`docs/paths-and-types.md`)."""


class IncompleteFileError(VitrioError, ValueError):
    """A declared file closed with images never written, without `allow_partial=True`."""


class DeclaredTwiceError(VitrioError, ValueError, RuntimeError):
    """A file declared twice to a writer provider: the `ValueError` the published package raises, and
    the `RuntimeError` its docstring names."""


def past_the_end(key: str, index: int, count: int, sections: bool = False) -> PastTheEndError:
    """The error for image `index` of the file at `key`, which holds a stack of `count`.

    With `sections`, the file holds one volume of `count` sections, which the indices name.
    """
    if sections:
        message = f"{key}: index {index} is past the last section of a volume of {count} sections"
    else:
        message = f"{key}: index {index} is past the end of a stack of {count}"
    return _keyed(PastTheEndError(message), key)
