"""Counting the opens of the files of a folder as the kernel reports them (inotify), whoever opens them:
this process, a child, or native code."""

from __future__ import annotations

import ctypes
import os
import struct
from collections import Counter
from pathlib import Path

_IN_CLOSE_NOWRITE, _IN_OPEN = 0x10, 0x20
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (then the name)


class Opens:
    """The opens of the files of one folder, as the kernel reports them (inotify), whoever opens them.

    Closes are watched too, so that two opens of a file one after another are two events, not one; two
    at once (by two threads) may be one. A context manager: the watch ends with the block.
    """

    def __init__(self, folder: Path):
        libc = ctypes.CDLL(None, use_errno=True)
        self._fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if (
            self._fd < 0
            or libc.inotify_add_watch(self._fd, os.fsencode(folder), _IN_OPEN | _IN_CLOSE_NOWRITE) < 0
        ):
            raise OSError(ctypes.get_errno(), f"{folder}: inotify cannot watch it")

    def take(self) -> Counter:
        """The opens of each file since the last call, by name."""
        opens: Counter = Counter()
        while True:
            try:
                events = os.read(self._fd, 1 << 16)
            except BlockingIOError:
                return opens
            at = 0
            while at < len(events):
                _, mask, _, length = _EVENT.unpack_from(events, at)
                if mask & _IN_OPEN:
                    opens[events[at + _EVENT.size : at + _EVENT.size + length].rstrip(b"\0").decode()] += 1
                at += _EVENT.size + length

    def __enter__(self) -> Opens:
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self._fd)
