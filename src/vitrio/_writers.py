"""`ImageWriterProvider`: the contract of what turns a key into an open writer of images."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from .formats import ImageWriter

__all__ = ["ImageWriterProvider"]


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
