"""The prepared images of an `ImageSource` kept on disk, for the epochs of later programs.

They lie in a mapped-file scratch (`vitrio.scratch.mapped`, its format
and its checks), laid out over the source's files as for their stored
images, but filled through `PreparedFiles`, whose reader of a file reads a
run of its images and prepares them with one call of the transform. So the
scratch holds each image prepared, and drops what a file held when its
stamp (size, modification time, inode, change time) changed since. Its
fingerprint is of what makes the images as well: the configuration of
the readers `PreparedFiles` passes on (their formats and settings, EER
rendering and gain), and `preparation` (the transform's class and
parameters; the types read and held; the shapes; the version of this code
and numpy's), so a file made otherwise is rebuilt, never served. bfloat16, which no file type
names, is held as its bits (uint16).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from .._loading import ImageLoader
from .._providers import NO_LAYOUT, ImageReaderProvider, WrappingImageReaderProvider
from .._types import ImageDescriptor, ImageLocation
from ..formats import ImageReader
from ..formats._raw_layout import RawLayout
from ..scratch import ImageScratch, ScratchImageReaderProvider
from ..scratch.mapped import mapped_scratch
from ..scratch.plan import group
from ._images import ImageSource
from ._source import Pendings
from ._transforms import Compose, Transform

__all__ = ["PreparedScratch", "PreparedFiles", "preparation"]

RUN_LENGTH = 16
"""How many images of a file are read and prepared together."""

VERSION = 1
"""The version of what prepares images here: raised when a change makes other images of the same files,
transform and types, so that scratch files made before are rebuilt."""


def _named(transform: Any) -> str:
    if isinstance(transform, Compose):
        return f"Compose({', '.join(map(_named, transform.steps))}, {transform.data_type!r})"
    if isinstance(transform, Transform):
        kind = type(transform)
        return f"{kind.__module__}.{kind.__qualname__}{transform.parameters!r}"
    raise TypeError(
        "a scratch of prepared images needs a transform its parameters name: a FourierCrop, "
        f"Normalize, Invert or their Compose, not {transform!r}"
    )


def preparation(transform: Any, read_as: np.dtype, image: tuple, prepared: np.ndarray) -> str:
    """What prepared images are of, besides their files and readers: the transform, the types, the
    shapes and the version of the code.

    Raises:
        TypeError: If the transform is not a `Transform` or `Compose`, whose parameters name it.
    """
    return (
        f"{_named(transform)} of {read_as.name} {image} to {prepared.dtype.name} {prepared.shape[1:]}, "
        f"prepared by version {VERSION} with numpy {np.__version__}"
    )


def _as_indexed(location: ImageLocation) -> ImageLocation:
    """The location as an image of its file: a whole file, one image, as its image 0."""
    return ImageLocation(location.key, max(location.index_in_stack, 0))


def _held_type(dtype: np.dtype) -> np.dtype:
    """The type the scratch holds images of `dtype` in: itself, or uint16 for bfloat16."""
    return np.dtype(np.uint16) if dtype.name == "bfloat16" else dtype


class _PreparedReader(ImageReader):
    """The images of one file, read through `files.backing` and prepared."""

    def __init__(self, key: str, descriptor: ImageDescriptor, files: PreparedFiles):
        super().__init__(key, descriptor)
        self._files = files

    def read_images(self, indices: np.ndarray, out: np.ndarray, slots: np.ndarray) -> None:
        self.check_indices(indices)
        files = self._files
        raw = np.empty((len(indices), *files.image), dtype=files.read_as)
        reader = files.backing.acquire(self.key)
        try:
            served = reader if files.whole else reader.indexed()
            served.read_images(indices, raw, np.arange(len(indices)))
        finally:
            files.backing.release(reader)
        out[slots] = files.prepare(raw).view(out.dtype)

    def read_run(self, start: int, outs: Sequence[np.ndarray]) -> None:
        block = np.empty((len(outs), *self.core_extents), dtype=self.descriptor.data_type.dtype)
        self.read_images(np.arange(start, start + len(outs)), block, np.arange(len(outs)))
        for out, image in zip(outs, block):
            out[...] = image


class PreparedFiles(WrappingImageReaderProvider):
    """Hands out readers of files whose images are prepared as they are read, through `backing`.

    A file has no layout here, which would have a loader read its stored images unprepared: one it
    opened is known to hold none (`NO_LAYOUT`).

    Args:
        backing: What opens the files.
        prepare: What prepares an array of images, one per row.
        image: The shape of one image as stored; every file's has to be it.
        read_as: The type the images are read as before they are prepared.
        prepared: The shape of one prepared image, and the type it is held in.
        whole: Whether a file is one image (the source's locations name whole files).
    """

    def __init__(
        self,
        backing: ImageReaderProvider,
        prepare: Callable[[np.ndarray], np.ndarray],
        image: tuple[int, ...],
        read_as: np.dtype,
        prepared: tuple[tuple[int, ...], np.dtype],
        whole: bool,
    ):
        super().__init__(backing)
        self.prepare, self.whole = prepare, whole
        self.image, self.read_as, self._prepared = image, read_as, prepared
        self._counts: dict[str, int] = {}

    def _count(self, key: str) -> int:
        """How many images the file at `key` holds, checked to be of the source's shape."""
        count = self._counts.get(key)
        if count is None:
            reader = self.backing.acquire(key)
            try:
                served = reader if self.whole else reader.indexed()
                found = served.descriptor
            finally:
                self.backing.release(reader)
            if self.whole and found.is_stack:
                raise ValueError(
                    f"{key}: a stack named whole; a scratch of prepared images holds one image a location"
                )
            if found.core_extents != self.image:
                raise ValueError(
                    f"{key}: holds images of {found.core_extents}, not {self.image} as the first"
                )
            count = self._counts[key] = found.image_count
        return count

    def acquire(self, key) -> ImageReader:
        shape, dtype = self._prepared
        count = self._count(key)
        return _PreparedReader(key, ImageDescriptor((count, *shape), len(shape), dtype), self)

    def release(self, reader: ImageReader) -> None:
        pass

    def layout(self, key: str) -> RawLayout | Any | None:
        """`NO_LAYOUT` for a file opened here (its images are read through its reader, prepared); None
        for one not opened yet."""
        return NO_LAYOUT if key in self._counts else None

    def query_descriptor(self, key) -> ImageDescriptor:
        """The descriptor of the prepared images of the file at `key`."""
        return ImageReaderProvider.query_descriptor(self, key)

    def query_descriptors(self, keys: Sequence) -> Iterator[ImageDescriptor]:
        """The descriptor of the prepared images of the file at each of `keys`, one at a time."""
        return ImageReaderProvider.query_descriptors(self, keys)

    def over(self, backing: ImageReaderProvider) -> PreparedFiles:
        """The same preparation of the same files, read through `backing`."""
        files = copy.copy(self)
        files._backing = backing
        return files


class PreparedScratch:
    """The rows of an `ImageSource`, prepared, served from a mapped-file scratch at `path`.

    Args:
        source: The images.
        transform: What prepares them: a `Transform` or a `Compose`.
        prepare: Calls the transform and puts the result in its type.
        path: The scratch file: made, or resumed where made for the same images and preparation.
        readers: What reads the images, whose configuration the file is made for.

    Raises:
        TypeError: If `source` is not an `ImageSource`, or `transform` not a `Transform` or `Compose`.
        OSError: If the file cannot be made, or the disk has no room for it.
    """

    def __init__(
        self,
        source: Any,
        transform: Any,
        prepare: Callable[[np.ndarray], np.ndarray],
        path: str,
        readers: ImageReaderProvider,
    ):
        if not isinstance(source, ImageSource):
            raise TypeError(f"a scratch of prepared images needs an ImageSource, not {type(source).__name__}")
        locations = source.locations
        image = source.shape[1:] if locations.ndim == 2 else source.shape
        probe = prepare(np.zeros((1, *image), dtype=source.dtype))
        whole = not locations.ravel()[0].has_index_in_stack
        held = _held_type(probe.dtype)
        files = PreparedFiles(readers, prepare, image, source.dtype, (probe.shape[1:], held), whole)
        indexed = np.vectorize(_as_indexed, otypes=[object])(locations)
        of = preparation(transform, source.dtype, image, probe)
        self._scratch = mapped_scratch(group(indexed.ravel()), path, RUN_LENGTH, None, files, of=of)
        self._files = files
        self._images = ImageSource(indexed.tolist(), readers=ScratchImageReaderProvider(files, self._scratch))
        self._held, self._through = held, None

    @property
    def scratch(self) -> ImageScratch:
        """The scratch the prepared images lie in."""
        return self._scratch

    def read_async(self, loader: ImageLoader, rows: np.ndarray, out: np.ndarray) -> Pendings:
        """Start reading prepared rows into `out`, preparing those the scratch has not held yet."""
        through = self._through
        if through is None or through[0] is not loader:
            provider = ScratchImageReaderProvider(self._files.over(loader.readers), self._scratch)
            through = self._through = (
                loader,
                ImageLoader(loader.executor, provider, counters=loader.counters),
            )
        return self._images.read_async(through[1], rows, out.view(self._held))

    def subset(self, rows: np.ndarray) -> PreparedScratch:
        """The same scratch, serving only these rows, in this order."""
        subset = copy.copy(self)
        subset._images = self._images.subset(rows)
        return subset
