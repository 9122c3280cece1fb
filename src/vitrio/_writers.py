"""`ImageWriterProvider`: the contract of what turns a key into an open writer of images, and
`FileImageWriterProvider`, the one whose keys are paths."""

from __future__ import annotations

import threading
import warnings
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ._partial import guard_sigterm
from ._types import DeclaredTwiceError, ImageDescriptor, IncompleteFileError, as_key, as_voxel_size
from .formats import Format, ImageWriter, create_writer, resolve_formats

__all__ = ["ImageWriterProvider", "TrackedWriter", "FileImageWriterProvider"]


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


class FileImageWriterProvider(ImageWriterProvider):
    """Files being written a batch at a time: declared first, created on the first write, finished on close.

    A file is written beside its path; the first `flush` after a write
    moves it onto its path (header complete as of then), so that what was
    written can be read there, and `close` completes it. A file discarded
    or never flushed leaves nothing at its path. Used as a context manager, it
    closes every file at the end of the block, or discards them all if the
    block raised. A file some of whose images were never written is not
    closed unless asked with `allow_partial=True`.

    Args:
        formats: The formats to write with, chosen by extension. Defaults to
            every registered one.
    """

    def __init__(self, formats: Iterable[type[Format]] | None = None):
        guard_sigterm()  # the files are made on the threads that write them
        self._formats = None if formats is None else resolve_formats(formats)
        self._declared: dict[str, ImageDescriptor] = {}
        self._voxel_sizes: dict[str, tuple[float, ...] | None] = {}
        self._writers: dict[str, TrackedWriter] = {}
        self._creating: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()

    def declare(self, key, descriptor: ImageDescriptor, voxel_size: Any = None) -> None:
        """Say what the file at `key` will hold, and the size of its pixels.

        Args:
            voxel_size: The size of a pixel in Å, one number or one per axis of
                an image (slowest first), as `vitrio.write` takes it; None for none.

        Raises:
            DeclaredTwiceError: If `key` is declared already (a `ValueError` and a `RuntimeError`).
            TypeError: If `descriptor` is not an `ImageDescriptor`.
            ValueError: If `voxel_size` is not positive numbers, one or one per axis.
        """
        key = as_key(key)
        if not isinstance(descriptor, ImageDescriptor):
            raise TypeError(f"{key}: a descriptor is an ImageDescriptor, not {type(descriptor).__name__}")
        sizes = as_voxel_size(voxel_size, descriptor.core_rank, key)
        with self._lock:
            if key in self._declared:
                raise DeclaredTwiceError(f"{key}: is declared already")
            self._declared[key] = descriptor
            self._voxel_sizes[key] = sizes
            self._creating[key] = threading.Lock()

    def writer(self, key) -> ImageWriter:
        """The writer of a declared file, creating the file on first use.

        Raises:
            IndexError: If `key` is not declared.
        """
        key = as_key(key)
        writer = self._writers.get(key)
        if writer is not None:
            return writer
        with self._lock:
            if key not in self._declared:
                raise IndexError(f"{key}: is not declared")
            creating = self._creating[key]
        with creating:
            writer = self._writers.get(key)
            if writer is None:
                with self._lock:
                    descriptor = self._declared.get(key)
                    voxel_size = self._voxel_sizes.get(key)
                if descriptor is None:  # closed or discarded meanwhile
                    raise IndexError(f"{key}: is not declared")
                made = create_writer(key, descriptor, self._formats, voxel_size)
                writer = self._writers[key] = TrackedWriter(made)
        return writer

    def close(self, key, allow_partial: bool = False) -> None:
        """Finish the file at `key` (header statistics included) and forget it.

        Args:
            allow_partial: Whether a file some of whose images were never
                written is made anyway, holding zeros there.

        Raises:
            IndexError: If `key` is not declared.
            IncompleteFileError: If images of the file were never written and
                `allow_partial` is false (a `ValueError`). The file stays
                declared: write the rest, close it with `allow_partial=True`,
                or discard it.
        """
        key = as_key(key)
        if not allow_partial:
            self._check_complete(key)
        writer = self.writer(key)
        with self._lock:
            del self._declared[key], self._creating[key], self._voxel_sizes[key]
            self._writers.pop(key, None)
        writer.finish()

    def _check_complete(self, key: str) -> None:
        """Raise `IncompleteFileError` if images of the declared file at `key` were never written."""
        with self._lock:
            if key not in self._declared:
                raise IndexError(f"{key}: is not declared")
            writer = self._writers.get(key)
            descriptor = self._declared[key]
        count = descriptor.image_count
        missing = np.arange(count) if writer is None else writer.unwritten
        if len(missing):
            shown = ", ".join(str(i) for i in missing[:5].tolist()) + (", ..." if len(missing) > 5 else "")
            raise IncompleteFileError(
                f"{key}: {len(missing)} of its {count} images were never written ({shown}); write them, "
                "close it with allow_partial=True to keep zeros there, or discard it"
            )

    def discard(self, key) -> None:
        """Forget the file at `key` and remove what was written of it.

        Raises:
            IndexError: If `key` is not declared.
        """
        key = as_key(key)
        with self._lock:
            if key not in self._declared:
                raise IndexError(f"{key}: is not declared")
            creating = self._creating[key]
        with creating, self._lock:  # a writer being created meanwhile is made first, then discarded
            if key not in self._declared:
                raise IndexError(f"{key}: is not declared")
            del self._declared[key], self._creating[key], self._voxel_sizes[key]
            writer = self._writers.pop(key, None)
        if writer is not None:
            writer.discard()

    def flush(self) -> None:
        """Hand what was written to every open file so far to the system, and make it readable at its path."""
        for writer in list(self._writers.values()):
            writer.flush()

    @property
    def file_count(self) -> int:
        """How many files are declared and not closed."""
        with self._lock:
            return len(self._declared)

    def __enter__(self) -> FileImageWriterProvider:
        return self

    def __exit__(self, kind, error, trace) -> None:
        """Close every declared file; if the block raised, or a file was not wholly written, discard it.

        Raises:
            IncompleteFileError: Naming the files discarded for images never written.
        """
        incomplete = []
        for key in list(self._declared):
            if kind is not None:
                self.discard(key)
                continue
            try:
                self._check_complete(key)
            except IncompleteFileError as short:
                incomplete.append(str(short))
                self.discard(key)
            else:
                self.close(key)
        if incomplete:
            raise IncompleteFileError("discarded, not wholly written: " + "; ".join(incomplete))

    def __del__(self) -> None:
        writers = getattr(self, "_writers", {})
        if writers:
            warnings.warn(
                f"{len(writers)} files were never closed; what was written of them is removed: "
                + ", ".join(list(writers)[:3]),
                ResourceWarning,
                stacklevel=2,
            )
        for writer in writers.values():
            writer.discard()

    def __repr__(self) -> str:
        return f"<FileImageWriterProvider of {self.file_count} files>"
