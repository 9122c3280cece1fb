"""The loader shared by the process: what reads when a read is given no loader of its own.

It is made on first use, once even when many threads ask at the same time,
and made again in a child process after `os.fork`, whose copy of the
parent's threads and open files is not to be trusted.
"""

from __future__ import annotations

import os
import threading

from .._functions import loader as make_loader
from .._loading import ImageLoader

__all__ = ["shared_loader"]

_lock = threading.Lock()
_loader: ImageLoader | None = None


def shared_loader() -> ImageLoader:
    """The loader shared by the process: a thread per core, keeping files open as any loader does by default
    (`open_files` of the configuration in force when it is made)."""
    global _loader
    current = _loader
    if current is None:
        with _lock:
            if _loader is None:
                _loader = make_loader()
            current = _loader
    return current


def _forget_in_child() -> None:
    global _lock, _loader
    _lock = threading.Lock()
    _loader = None


os.register_at_fork(after_in_child=_forget_in_child)
