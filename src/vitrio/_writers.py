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

    def write_run(self, start: int, sources: Sequence[np.ndarray]) -> None:
        self.inner.write_run(start, sources)
        with self._lock:
            self._written[start : start + len(sources)] = True

    @property
    def unwritten(self) -> np.ndarray:
        """The indices of the images not written yet."""
        with self._lock:
            return np.flatnonzero(~self._written)

    def flush(self) -> None:
        self.inner.flush()

    def finish(self) -> None:
        self.inner.finish()

    def discard(self) -> None:
        self.inner.discard()
