"""`ImageWriterProvider`: the contract of what turns a key into an open writer of images."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np

from .formats import ImageWriter

__all__ = ["ImageWriterProvider", "TrackedWriter"]


class ImageWriterProvider(ABC):
    """Turns a key into an open writer of images; safe to use from many threads at once.

    `FileImageWriterProvider`, whose keys are paths, is the bundled one.
    `write_batch_async` asks it for the writer of each key it writes.

    Raises:
        TypeError: When called: it is abstract.
    """

    @abstractmethod
    def writer(self, key: Any) -> ImageWriter:
        """The open writer of `key`.

        Raises:
            IndexError: If the provider does not serve `key`.
        """


class TrackedWriter(ImageWriter):
    """A format's writer that notes which images were written, so that a file closed short of them is told.

    Args:
        writer: The format's writer, which does the writing.
    """

    def __init__(self, writer: ImageWriter):
        super().__init__(writer.key, writer.descriptor)
        self.inner = writer
        self._written = np.zeros(self.image_count, dtype=bool)
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._writing = 0
        self._ended = False

    def write_run(self, start: int, sources: Sequence[np.ndarray]) -> None:
        """Write as the format's writer does; `IndexError` once the file is being finished or discarded."""
        with self._lock:
            if self._ended:
                raise IndexError(f"{self.key}: is not declared (closed or discarded)")
            self._writing += 1
        try:
            self.inner.write_run(start, sources)
        finally:
            with self._lock:
                self._writing -= 1
                self._idle.notify_all()
        with self._lock:
            self._written[start : start + len(sources)] = True

    def _end(self) -> None:
        """Refuse new writes and wait for those under way, so that none writes a file closed under it."""
        with self._lock:
            self._ended = True
            self._idle.wait_for(lambda: self._writing == 0)

    @property
    def unwritten(self) -> np.ndarray:
        """The indices of the images not written yet."""
        with self._lock:
            return np.flatnonzero(~self._written)

    def flush(self) -> None:
        self.inner.flush()

    def finish(self) -> None:
        self._end()
        self.inner.finish()

    def discard(self) -> None:
        self._end()
        self.inner.discard()
