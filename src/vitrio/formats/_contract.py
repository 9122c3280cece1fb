"""The contract of a file format: a registered class that opens readers and creates writers.

A format knows the bytes of one file: its header, where image `i` lies and
how to decode it. It knows nothing of threads, caches or batches.

A reader serves images by index: `read_run(start, outs)` fills `outs[0]`
with image `start`, `outs[1]` with image `start + 1`, and so on, each out an
array of the file's core shape and of any numeric type (the reader converts).
`read_images(indices, out, slots)` gathers images in any order into the
slots of one array; by default it reads runs of consecutive indices with
`read_run`. A file that is not a stack is a stack of one image.
`read_region` crops one box out of one image, for patches.

A header that breaks its format's rules in a way common writers do is read
with a `FormatWarning` (`warn_header`), once per file and problem in a process.

A reader also says what its file's header tells of the images, for tools
that describe files: `format_name`, `voxel_size` (and `voxel_size_source`,
where it was read from) and `header_statistics`, None where the file does
not say.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterator, Sequence
from typing import Any, ClassVar, NamedTuple

import numpy as np

from .._errors import FormatError, redact
from .._storage import ByteSource, Storage
from .._types import ImageDescriptor, past_the_end, section_view

__all__ = ["Format", "FormatError", "FormatWarning", "HeaderStatistics", "ImageReader", "ImageWriter"]


class FormatWarning(UserWarning):
    """A header that breaks its format's rules in a way common writers do, read anyway."""


_warned: set[str] = set()
_warned_lock = threading.Lock()
_noting = threading.local()


def warn_header(message: str, stacklevel: int = 2) -> None:
    """Warn with a `FormatWarning` of a header read anyway, once per process for each message.

    A message names its file, so a file opened many times (by each worker,
    or each epoch) warns once. A warning turned into an error raises each time.
    """
    noted = getattr(_noting, "messages", None)
    if noted is not None:
        noted.append(message)
    with _warned_lock:
        if message in _warned:
            return
    warnings.warn(message, FormatWarning, stacklevel=stacklevel + 1)
    with _warned_lock:
        _warned.add(message)


@contextlib.contextmanager
def header_warnings_noted() -> Iterator[list[str]]:
    """The messages `warn_header` is called with on this thread within, whether or not it warns of
    them again."""
    outer = getattr(_noting, "messages", None)
    _noting.messages = noted = []
    try:
        yield noted
    finally:
        _noting.messages = outer
        if outer is not None:
            outer.extend(noted)


class HeaderStatistics(NamedTuple):
    """The statistics of a file's values as its header states them (not computed from the values)."""

    min: float
    max: float
    mean: float
    rms: float


class Format(ABC):
    """A file format. Subclass it and register the class with `vitrio.register_format`.

    Class attributes:
        name: A short name, such as "mrc".
        read_extensions: The extensions (lower case, with the dot) read files have.
        write_extensions: The extensions written files may have; empty if the
            format is read only.
        events: Whether the format's files hold detector events, which
            `open_events` reads; such a format is left out of
            `ImageFileReadFormatSelector.get_shared()`.
        stores_voxel_size: Whether `create` takes `voxel_size=` and stores
            it; a format that does not is never handed one.
        reads_urls: Whether `open` reads a source with no descriptor (a
            file at a URL: `source.fileno()` is None); a format that does
            not is not tried on URLs.
    """

    name: ClassVar[str]
    read_extensions: ClassVar[tuple[str, ...]] = ()
    write_extensions: ClassVar[tuple[str, ...]] = ()
    events: ClassVar[bool] = False
    stores_voxel_size: ClassVar[bool] = False
    reads_urls: ClassVar[bool] = False

    @classmethod
    def recognizes(cls, head: bytes, extension: str) -> bool:
        """Whether a file that starts with `head` is of this format.

        `head` holds the first bytes of the file (up to 4096). A format that
        cannot tell by contents decides by `extension` alone.
        """
        return extension in cls.read_extensions

    @classmethod
    def claims_key(cls, key: str) -> bool:
        """Whether the format takes `key` by its spelling alone, before anything is opened.

        For stores that are directories or URLs (OME-Zarr); such a key is opened with `open_key`.
        """
        return False

    @classmethod
    def open_key(cls, key: str, storage: Storage) -> ImageReader:
        """Open a reader of what `key` names, for a key `claims_key` claims; a URL through `storage`
        (its `options`, what fsspec takes to reach it), where the format has no options of its own."""
        raise NotImplementedError(f"{key}: the {cls.name} format opens files, not keys")

    @classmethod
    @abstractmethod
    def open(cls, key: str, source: ByteSource, head: bytes) -> ImageReader:
        """Open a reader of the file at `key`, whose bytes `source` reads (it starts with `head`);
        the reader then owns `source`. Where the format needs a descriptor (a map, a parser of local
        files) it asks `source.fileno()`, which is None at a URL."""

    @classmethod
    def describe(cls, key: str, source: ByteSource, head: bytes) -> ImageDescriptor:
        """What the file at `key` holds, as the reader `open` gives says, checked as `open` checks it.

        `source` stays the caller's. By default a reader is opened and closed; a format whose header
        alone tells (MRC) answers without one, which is what checking many files at once costs.
        """
        with cls.open(key, source, head) as reader:
            return reader.descriptor

    @classmethod
    def describes_alike(cls, key: str, head: bytes, size: int) -> Hashable | None:
        """What `describe` of the file at `key` of `size` bytes that starts with `head` depends on, but
        for the key in its messages: files that give the same are described alike, so that checking
        many files describes each kind once. None (the default) where the format cannot tell."""
        return None

    @classmethod
    def open_events(cls, key: str, source: ByteSource, head: bytes) -> Any:
        """Open a `DetectorEventTimelineReader` of the file at `key`, read from `source`, which it then owns.

        Raises:
            FormatError: If the format holds no detector events.
        """
        raise FormatError(f"{key}: the {cls.name} format holds no detector events")

    @classmethod
    def create(cls, key: str, descriptor: ImageDescriptor) -> ImageWriter:
        """Start a writer of a new file at `key` holding what `descriptor` says.

        A format whose `stores_voxel_size` is true also takes `voxel_size`:
        the size of a pixel along each axis of an image in Å, slowest first
        (as `vitrio._types.as_voxel_size` gives it), or None.

        Raises:
            ValueError: If the format is read only or cannot hold `descriptor`.
        """
        raise ValueError(f"{key}: the {cls.name} format is read only")


class ImageReader(ABC):
    """An open file of one format, serving its images by index; safe to use from many threads.

    Attributes:
        stale: Whether the reader found its file changed under it so that it
            cannot read it any more (truncated, or unreadable): a cache closes
            a stale reader when it is handed back, rather than keep it.
        format_name: The `name` of the format that opened the file; set by
            `open_reader`, None for a reader made otherwise.
        voxel_size: The size of a pixel (or voxel) of an image along each of
            its axes, in ångströms, slowest axis first as `core_extents`
            lists them; None where the file does not give it as a length.
        voxel_size_source: The metadata the voxel size was read from, in
            words (`"MRC cell"`, `"ImageJ"`, `"OME-XML"`, `"FEI"`, ...);
            None where there is no voxel size.
        header_statistics: The minimum, maximum, mean and RMS deviation of
            the values, as the file's header states them; None where the
            format stores none.
    """

    stale: bool = False
    format_name: str | None = None
    voxel_size: tuple[float, ...] | None = None
    voxel_size_source: str | None = None
    header_statistics: HeaderStatistics | None = None

    def __init__(self, key: str, descriptor: ImageDescriptor):
        self.key = key
        self.descriptor = descriptor
        self.image_count = descriptor.image_count
        self.core_extents = descriptor.core_extents

    def check_run(self, start: int, count: int) -> None:
        """Raise `IndexError` naming the file if images `start..start+count` are not all in it."""
        if start < 0 or start + count > self.image_count:
            bad = start if start < 0 or start >= self.image_count else self.image_count
            raise past_the_end(self.key, bad, self.image_count)

    def check_indices(self, indices: np.ndarray) -> None:
        """Raise `IndexError` naming the file and the index if one of `indices` is not in it."""
        if not len(indices):
            return
        low, high = (int(indices[0]),) * 2 if len(indices) == 1 else (indices.min(), indices.max())
        if low < 0 or high >= self.image_count:
            raise past_the_end(self.key, int(low) if low < 0 else int(high), self.image_count)

    @abstractmethod
    def read_run(self, start: int, outs: Sequence[np.ndarray]) -> None:
        """Read images `start, start + 1, ...` into `outs`, converting to each out's type."""

    def read_images(self, indices: np.ndarray, out: np.ndarray, slots: np.ndarray) -> None:
        """Read image `indices[j]` into `out[slots[j]]` for every `j`, converting to `out`'s type.

        Runs of consecutive indices are read with one `read_run` each.
        """
        self.check_indices(indices)
        order = np.argsort(indices, kind="stable")
        ordered = indices[order]
        starts = np.flatnonzero(np.diff(ordered, prepend=-2) != 1)
        bounds = [*starts.tolist(), len(ordered)]
        for a, b in zip(bounds[:-1], bounds[1:]):
            self.read_run(int(ordered[a]), [out[slot] for slot in slots[order[a:b]].tolist()])

    def read_region(self, index: int, region: tuple[slice, ...], out: np.ndarray) -> None:
        """Copy `region` of image `index` into `out`, converting to its type.

        The default decodes the whole image first; formats with random access override it.
        """
        image = np.empty(self.core_extents, dtype=self.descriptor.data_type.dtype)
        self.read_run(index, [image])
        np.copyto(out, image[region], casting="unsafe")

    def read_regions(
        self, index: int, regions: Sequence[tuple[slice, ...]], outs: Sequence[np.ndarray]
    ) -> None:
        """Copy each of `regions` of image `index` into the out at its place, as `read_region` does."""
        for region, out in zip(regions, outs):
            self.read_region(index, region, out)

    def check_unchanged(self) -> None:
        """Raise `OSError` if the file has changed under the reader so that reading it is unsafe.

        A reader that raises it marks itself `stale`.
        """

    # What a reader can do beyond reading, which the loading code asks rather than test its class.

    fetches_ranges: ClassVar[bool] = False
    """Whether its images are best fetched as byte ranges together with other files' (a file at a URL):
    then `image_ranges(indices)` gives their (start, end) ranges of its byte source `source`, and
    `put_images` converts what was fetched of them."""

    def layout(self) -> Any:
        """Where the images lie, as a `RawLayout`, for the native batch path, which then reads them
        without the reader; None where the reader must read them (compressed, decoded, permuted)."""
        return None

    def will_read(self, indices: np.ndarray) -> None:
        """Tell the kernel the images `indices` (checked) are read next; nothing by default."""

    def read_patches(
        self,
        index: int,
        origins: np.ndarray,
        patch: tuple[int, ...],
        out: np.ndarray,
        slots: np.ndarray,
        fill: Any,
    ) -> bool:
        """Crop the patches of shape `patch` at `origins` of image `index` into `out[slots]` natively,
        what lies beyond the image `fill` (None: left); False where it does not (`read_regions` does)."""
        return False

    def indexed(self) -> ImageReader:
        """The reader that serves the images an index names: for a single volume, its 2-D sections.

        RELION, cryoSPARC and cryoDRGN name section `i` of a particle stack
        whose header says volume as its image `i`. Any other file is served
        by the reader itself. The sections' reader reads through this one,
        which keeps owning the file.
        """
        sections = getattr(self, "_sections", None)
        if sections is None:
            view = section_view(self.descriptor)
            sections = self if view is None else _SectionReader(self, view)
            self._sections = sections
        return sections

    def close(self) -> None:
        """Release what the reader holds. Reading afterwards is an error."""

    def __enter__(self) -> ImageReader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {redact(self.key)!r} {self.descriptor!r}>"


_ALL = slice(None)


class _SectionReader(ImageReader):
    """The 2-D sections of a single volume, served as a stack of images by the volume's reader."""

    def __init__(self, volume: ImageReader, descriptor: ImageDescriptor):
        super().__init__(volume.key, descriptor)
        self._volume = volume
        self.format_name = volume.format_name
        self.voxel_size = None if volume.voxel_size is None else volume.voxel_size[1:]
        self.voxel_size_source = volume.voxel_size_source
        self.header_statistics = volume.header_statistics

    @property
    def stale(self) -> bool:  # type: ignore[override]
        return self._volume.stale

    def check_run(self, start: int, count: int) -> None:
        if start < 0 or start + count > self.image_count:
            bad = start if start < 0 or start >= self.image_count else self.image_count
            raise past_the_end(self.key, bad, self.image_count, sections=True)

    def check_indices(self, indices: np.ndarray) -> None:
        if len(indices) and (indices.min() < 0 or indices.max() >= self.image_count):
            bad = int(indices.min()) if indices.min() < 0 else int(indices.max())
            raise past_the_end(self.key, bad, self.image_count, sections=True)

    def read_run(self, start: int, outs: Sequence[np.ndarray]) -> None:
        self.check_run(start, len(outs))
        for i, out in enumerate(outs):
            self._volume.read_region(0, (slice(start + i, start + i + 1), _ALL, _ALL), out[np.newaxis])

    def read_region(self, index: int, region: tuple[slice, ...], out: np.ndarray) -> None:
        self.check_run(index, 1)
        self._volume.read_region(0, (slice(index, index + 1), *region), out[np.newaxis])

    def read_regions(
        self, index: int, regions: Sequence[tuple[slice, ...]], outs: Sequence[np.ndarray]
    ) -> None:
        self.check_run(index, 1)
        self._volume.read_regions(
            0, [(slice(index, index + 1), *region) for region in regions], [out[np.newaxis] for out in outs]
        )

    def check_unchanged(self) -> None:
        self._volume.check_unchanged()


class ImageWriter(ABC):
    """A new file of one format being written, images at any index, from many threads at once.

    Nothing appears at the file's path until `flush` or `finish`; `discard`
    removes everything written so far.
    """

    def __init__(self, key: str, descriptor: ImageDescriptor):
        self.key = key
        self.descriptor = descriptor
        self.image_count = descriptor.image_count
        self.core_extents = descriptor.core_extents

    @abstractmethod
    def write_run(self, start: int, sources: Sequence[np.ndarray]) -> None:
        """Write `sources[0]` as image `start`, `sources[1]` as image `start + 1`, and so on."""

    @abstractmethod
    def flush(self) -> None:
        """Hand what was written so far to the operating system, and make it readable at the file's path.

        A writer that cannot do the second (a format whose file is complete
        only at the end) does the first alone.
        """

    @abstractmethod
    def finish(self) -> None:
        """Complete the file (header, statistics) and move it to its path."""

    @abstractmethod
    def discard(self) -> None:
        """Remove the unfinished file."""
