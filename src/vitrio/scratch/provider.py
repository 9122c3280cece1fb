"""A scratch in front of the files: the provider and readers that serve from it, and prefetching into it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from .._concurrency import Completion, SynchronousExecutor, ThreadPoolExecutor, run_tasks
from .._config import configuration
from .._counters import add_count
from .._native import RUN_COUNT, RUN_FIELDS, RUN_OFFSET, advise
from .._providers import (
    NO_LAYOUT,
    FileImageReaderProvider,
    ImageReaderProvider,
    WrappingImageReaderProvider,
)
from .._types import ImageDescriptor, as_key
from ..formats import ImageReader
from ..formats._raw_layout import KnownFiles, RawLayout
from .plan import group
from .store import ImageScratch

__all__ = ["ScratchImageReaderProvider", "prefetch_scratch_async"]


class _ScratchReader(ImageReader):
    """Serves the images of one file from a scratch, reading from the files what it has no room for."""

    def __init__(self, scratch: ImageScratch, key: str, files: ImageReaderProvider):
        super().__init__(key, scratch.descriptor(key))
        self._scratch = scratch
        self._files = files

    def read_images(self, indices: np.ndarray, out: np.ndarray, slots: np.ndarray) -> None:
        self.check_indices(indices)
        add_count("scratch_images", self._scratch.serve(self.key, indices, out, slots, self._files))

    def read_run(self, start: int, outs: Sequence[np.ndarray]) -> None:
        self.check_run(start, len(outs))
        indices = np.arange(start, start + len(outs), dtype=np.int64)
        for index, out in zip(indices.tolist(), outs):
            self._scratch.serve(self.key, np.asarray([index]), out[None], np.zeros(1, np.int64), self._files)

    def read_region(self, index: int, region: tuple[slice, ...], out: np.ndarray) -> None:
        self.check_run(index, 1)
        try:
            image = self._scratch.image(self.key, index, self._files)
        except KeyError:
            reader = self._files.acquire(self.key)
            try:
                reader.read_region(index, region, out)
            finally:
                self._files.release(reader)
            return
        np.copyto(out, image[region], casting="unsafe")


class ScratchImageReaderProvider(WrappingImageReaderProvider):
    """Serves the files a scratch holds from it, and the others from `backing`.

    A file the scratch holds is opened only to take images in, so once they
    are all in, reading them opens no file at all; nor has it a layout here,
    which would have a loader read the file rather than the scratch.

    Args:
        backing: What opens the files.
        scratch: The scratch in front of them.
    """

    def __init__(self, backing: ImageReaderProvider, scratch: ImageScratch):
        if not isinstance(scratch, ImageScratch):
            raise TypeError(f"scratch is an ImageScratch, not {type(scratch).__name__}")
        super().__init__(backing)
        self._scratch = scratch
        self._readers: dict[str, _ScratchReader] = {}

    @property
    def scratch(self) -> ImageScratch:
        """The scratch in front of the files."""
        return self._scratch

    def acquire(self, key) -> ImageReader:
        key = as_key(key)
        if not self._scratch.holds(key):
            return self._backing.acquire(key)
        reader = self._readers.get(key)
        if reader is None:
            reader = self._readers.setdefault(key, _ScratchReader(self._scratch, key, self._backing))
        return reader

    def release(self, reader: ImageReader) -> None:
        if not isinstance(reader, _ScratchReader):
            self._backing.release(reader)

    def layout(self, key: str) -> RawLayout | Any | None:
        """The layout `backing` knows of a file the scratch does not hold; `NO_LAYOUT` for one it holds,
        which it serves."""
        return NO_LAYOUT if self._scratch.holds(key) else self._backing.layout(key)

    def will_read(self, key: str, start: int = 0, length: int = 0) -> None:
        """Tell `backing` of a file the scratch does not hold; one it holds is served, not read."""
        if not self._scratch.holds(key):
            self._backing.will_read(key, start, length)

    def query_descriptor(self, key) -> ImageDescriptor:
        """The scratch's descriptor of a file it holds, opening none; `backing`'s of another."""
        key = as_key(key)
        if self._scratch.holds(key):
            return self._scratch.descriptor(key)
        return self._backing.query_descriptor(key)

    def query_descriptors(self, keys: Sequence) -> Iterator[ImageDescriptor]:
        """The scratch's descriptors of the files it holds; those of the others asked of `backing`
        together."""
        named = list(map(as_key, keys))
        held = list(map(self._scratch.holds, named))
        if not any(held):
            return self._backing.query_descriptors(keys)
        others = self._backing.query_descriptors([key for key, kept in zip(named, held) if not kept])
        return (self._scratch.descriptor(k) if kept else next(others) for k, kept in zip(named, held))

    def __repr__(self) -> str:
        return f"ScratchImageReaderProvider({self._backing!r}, {self._scratch!r})"


def prefetch_scratch_async(
    scratch: ImageScratch,
    locations: Sequence[Any],
    executor: ThreadPoolExecutor | SynchronousExecutor,
    files: ImageReaderProvider | None = None,
) -> Completion:
    """Take the images `locations` name into `scratch` ahead of need, one task per file.

    Locations the scratch has no room for are left out. The kernel is told what a file's task reads
    `scratch_hinted_ahead` (of the configuration) files before that task runs.

    Args:
        scratch: Where to take them in.
        locations: The images, or an `ImageLocationGrouping` of them.
        executor: Where the tasks run, such as a loader's `executor`.
        files: What opens the files. Defaults to opening the file at the path a key is.

    Returns:
        A `Completion` of the tasks.
    """
    files = files or FileImageReaderProvider()
    wanted = [(key, indices) for key, indices in group(locations).items() if scratch.holds(key)]
    ahead = configuration().scratch_hinted_ahead
    for key, indices in wanted[:ahead]:
        hint(files, key, indices)

    def task(number: int) -> None:
        if number + ahead < len(wanted):  # the kernel reads it while this one is copied
            hint(files, *wanted[number + ahead])
        key, indices = wanted[number]
        if indices[0] < 0:
            indices = scratch.indices(key)
        scratch.take_in(key, indices, files)

    return run_tasks(executor, [lambda number=number: task(number) for number in range(len(wanted))])


def hint(files: ImageReaderProvider, key: str, indices: np.ndarray) -> None:
    """Tell the kernel the images `indices` of the file at `key` will be read soon (`posix_fadvise`
    WILLNEED): the whole file for -1, else the bytes of the images of a raw file (MRC, uncompressed
    TIFF, DM); nothing for others."""
    if indices[0] < 0:
        files.will_read(key)
        return
    layout = files.layout(key)
    if layout is None:  # opening it learns the layout (and a caching provider keeps it open)
        with contextlib.suppress(OSError, ValueError):  # the take-in raises them, naming the file
            files.release(files.acquire(key))
        layout = files.layout(key)
    if layout is None or layout is NO_LAYOUT:
        return
    indices = indices[indices < layout.image_count]
    runs = np.zeros((len(indices), RUN_FIELDS), np.int64)
    runs[:, RUN_OFFSET] = layout.offset + indices * layout.image_bytes
    runs[:, RUN_COUNT] = layout.image_bytes
    known = KnownFiles([layout], [0])  # counted in bytes
    advise(known.paths, known.checks, runs)
