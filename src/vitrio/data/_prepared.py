"""`PreparedSource`: the images of a source passed through a transform once, and held for later epochs.

A row is read and transformed the first time a batch asks for it, with the
other new rows of that batch in one call of the transform; afterwards it is
copied out of memory, so later epochs neither read files nor compute. What
is held is that of one transform and one type, read by one configuration
of readers: a source prepared otherwise is another `PreparedSource`, with
rows of its own, so a changed parameter never serves images prepared with
the old one, and a loader whose readers read the files otherwise (other
formats, EER fractions or gain) is refused. Given a scratch file, the rows
are held there instead, for later programs too (`_prepared_scratch`).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from .._functions import reader_provider
from .._loading import ImageLoader
from .._providers import ImageReaderProvider
from .._types import as_key
from ._prepared_scratch import PreparedScratch
from ._source import Pendings, Source, as_completion
from ._transforms import as_data_type, draws, prepare_batch

__all__ = ["PreparedSource"]


class PreparedSource(Source):
    """The images of a source, prepared once by a transform and held for the epochs after.

    The first read of a row reads it through `source` and prepares it, with
    the rows read with it as one batch; every later read copies it from
    memory, reading no file and calling no transform. Preparing runs as the
    batch is waited for, a few rows at a time on the loader's threads. The
    rows held are of this source's transform and type alone (`key`): a
    source made with other parameters prepares its rows anew.

    With `scratch`, a file, the prepared images are held there, in a
    mapped-file scratch (as `vitrio.create_mapped_file_image_scratch` keeps
    stored ones), and a later program that prepares the same images the
    same way serves them from it, reading no image of a file and calling
    no transform. The file is made for the source's images, the configuration
    of `readers` (their formats and settings: EER fractions, binning, gain by
    its contents), the transform's class and parameters, the types, the
    shapes and the version of the preparing code: made for others, it is
    rebuilt; the images of a source file whose size, modification time,
    inode or change time changed since are prepared again. The images of a
    file are read and prepared 16 at a time, on the loader's threads.

    The images held are those the readers of one configuration read: a
    loader whose readers read otherwise (other formats or settings) is
    refused, with a `ValueError`, rather than served them.

    Args:
        source: Where the images come from, such as an ImageSource.
        transform: What prepares an array of images of shape (rows, *source.shape): a
            `FourierCrop`, `Normalize`, `Invert`, their `Compose`, or any callable
            that returns an array of as many prepared images.
        data_type: The type the images are held and handed out in: 'float32',
            'float16' or 'bfloat16' (needs ml_dtypes, which the torch extra installs).
        scratch: A file to hold the prepared images in, for this program and later ones,
            readable by this user alone; one that is a symbolic link, another user's or
            writable by others is never read, but rebuilt. Needs an `ImageSource`, and a
            `Transform` or `Compose` (whose parameters name it).
        readers: What reads the files, such as `vitrio.detector_event_image_reader_provider(4)`:
            the loaders' readers, or readers of the same configuration. Defaults to the first
            loader's readers, and with `scratch` to `vitrio.reader_provider()`'s.

    Raises:
        ValueError: If `data_type` is none of the three, the transform draws
            random numbers (it takes rng: prepared once, every epoch would get
            the same draws; a DataLoader's transform draws anew each batch), or
            returns other than one image per row; when read, if the loader's
            readers read the files otherwise than `readers`.
        TypeError: If `scratch` is given with another source or transform than it needs.
        OSError: If the scratch file cannot be made, or the disk has no room for it.
    """

    def __init__(
        self,
        source: Source,
        transform: Callable[[Any], Any],
        data_type: str = "float32",
        scratch: Any = None,
        readers: ImageReaderProvider | None = None,
    ):
        if draws(transform):
            raise ValueError(
                f"{transform!r} draws random numbers: prepared once, every epoch would get the same draws; "
                "give it to the DataLoader as its transform"
            )
        self._source, self._transform, self._data_type = source, transform, data_type
        probe = self._prepare(np.zeros((1, *source.shape), dtype=source.dtype))
        self._disk = None
        if scratch is not None:
            readers = readers or reader_provider()
            self._disk = PreparedScratch(source, transform, self._prepare, as_key(scratch), readers)
        self._readers = readers
        self._configuration = None if readers is None else readers.configuration()
        self._checked: ImageLoader | None = None
        self._held = np.empty((0 if self._disk else len(source), *probe.shape[1:]), dtype=probe.dtype)
        self._done = np.zeros(len(source), dtype=bool)
        self._lock = threading.Lock()

    def _prepare(self, images: np.ndarray) -> np.ndarray:
        prepared = as_data_type(self._transform(images), self._data_type)
        if prepared.shape[:1] != images.shape[:1]:
            raise ValueError(
                f"the transform {self._transform!r} made {prepared.shape[:1]} images of {len(images)}"
            )
        return prepared

    @property
    def source(self) -> Source:
        """Where the images come from."""
        return self._source

    @property
    def key(self) -> tuple[Any, str]:
        """What the held images are of: the transform (equal to another of the same parameters) and type."""
        return (self._transform, self._data_type)

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape of one prepared image."""
        return self._held.shape[1:]

    @property
    def dtype(self) -> np.dtype:
        """The type the images are held in."""
        return self._held.dtype

    @property
    def prepared_count(self) -> int:
        """How many rows are held, prepared; with a scratch file, how many images it holds."""
        return int(self._done.sum()) if self._disk is None else self._disk.scratch.held_count

    def __len__(self) -> int:
        return len(self._done)

    def read_async(self, loader: ImageLoader, rows: np.ndarray, out: np.ndarray) -> Pendings:
        """Start reading the values of some rows, as Source.read_async: those not held yet are read."""
        rows = np.asarray(rows, dtype=np.int64)
        self._check_readers(loader)
        if self._disk is not None:
            return self._disk.read_async(loader, rows, out)
        new = np.unique(rows[~self._done[rows]])
        if not len(new):
            np.take(self._held, rows, axis=0, out=out)
            return Pendings()
        raw = np.empty((len(new), *self._source.shape), dtype=self._source.dtype)
        executor = getattr(loader, "executor", None)

        def take_in() -> None:
            prepared = prepare_batch(self._prepare, raw, executor)
            with self._lock:
                self._held[new] = prepared
                self._done[new] = True
            np.take(self._held, rows, axis=0, out=out)

        return Pendings([as_completion(self._source.read_async(loader, new, raw)).then(take_in)])

    def _check_readers(self, loader: ImageLoader) -> None:
        """Take the readers of the first loader as those of the images held, and refuse a later
        loader whose readers read the files otherwise.

        Raises:
            ValueError: If the loader's readers are of another configuration than those of the images.
        """
        if loader is self._checked:
            return
        readers = loader.readers
        found = readers.configuration()
        with self._lock:
            if self._readers is None:
                self._readers, self._configuration = readers, found
            elif readers is not self._readers and (found is None or found != self._configuration):
                held = "" if self._disk is None else f"{self._disk.scratch.path}: "
                raise ValueError(
                    f"{held}the prepared images are of the files as {self._readers!r} reads them, and "
                    f"this loader's readers ({readers!r}) read them otherwise (other formats or settings): "
                    "give PreparedSource the loader's readers (readers=), or prepare them in another"
                )
            self._checked = loader

    def subset(self, rows: np.ndarray) -> PreparedSource:
        """Get the source of only these rows, in this order, prepared anew by the same transform
        (or served from the same scratch file)."""
        if self._disk is None:
            return PreparedSource(
                self._source.subset(rows), self._transform, self._data_type, None, self._readers
            )
        subset = copy.copy(self)
        subset._source, subset._disk = self._source.subset(rows), self._disk.subset(rows)
        subset._done = np.zeros(len(subset._source), dtype=bool)
        return subset

    def __repr__(self) -> str:
        scratch = "" if self._disk is None else f", scratch={self._disk.scratch.path!r}"
        return (
            f"PreparedSource({self._source!r}, {self._transform!r}, data_type={self._data_type!r}{scratch})"
        )
