"""Loaders and savers assembled by hand from an executor and a provider, as the published API builds them."""

from __future__ import annotations

from ._concurrency import Executor
from ._config import Configuration
from ._loading import ImageLoader
from ._providers import ImageReaderProvider
from ._saving import ImageSaver
from ._writers import ImageWriterProvider

__all__ = ["ExecutorImageLoader", "ExecutorImageSaver"]


def _check(value: object, kind: type, name: str) -> None:
    if not isinstance(value, kind):
        raise TypeError(f"{name} is a {kind.__name__}, not {type(value).__name__}")


class ExecutorImageLoader(ImageLoader):
    """The loader: reads of a batch split by file, the regions of one file a task on `executor`.

    `vitrio.loader(...)` returns one. Different files are read concurrently,
    as far as the executor allows.

    Args:
        readers: An `ImageReaderProvider` that turns keys into readers.
        executor: An `Executor` the reads run on.
        configuration: How its batches are planned, as `ImageLoader` takes it.

    Raises:
        TypeError: If an argument is missing, None, or of the wrong type.
    """

    def __init__(
        self, readers: ImageReaderProvider, executor: Executor, *, configuration: Configuration | None = None
    ):
        _check(readers, ImageReaderProvider, "readers")
        _check(executor, Executor, "executor")
        super().__init__(executor, readers, configuration=configuration)

    def __repr__(self) -> str:
        return f"ExecutorImageLoader({self.readers!r}, {self.executor!r})"


class ExecutorImageSaver(ImageSaver):
    """The saver: the writes of a batch split by file, on `executor`. `vitrio.saver(...)` returns one.

    Args:
        writers: An `ImageWriterProvider`, usually a `FileImageWriterProvider`
            the caller keeps, to declare and close files.
        executor: An `Executor` the writes run on.

    Raises:
        TypeError: If an argument is missing, None, or of the wrong type.
    """

    def __init__(self, writers: ImageWriterProvider, executor: Executor):
        _check(writers, ImageWriterProvider, "writers")
        _check(executor, Executor, "executor")
        super().__init__(executor, writers)

    def __repr__(self) -> str:
        return f"ExecutorImageSaver({self.writers!r}, {self.executor!r})"
