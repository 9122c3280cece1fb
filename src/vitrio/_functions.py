"""The functions most programs call: whole-file reads and writes, loaders and savers with defaults."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ._array import HalfComplexArray, finish_half_complex, new_array
from ._arrays import as_casting, as_destination, as_source, check_destination_type
from ._concurrency import Executor, ThreadPoolExecutor
from ._config import Configuration, open_files
from ._errors import concerning
from ._executor_io import ExecutorImageLoader, ExecutorImageSaver
from ._providers import (
    CachingImageReaderProvider,
    FileImageReaderProvider,
    ImageReaderProvider,
)
from ._storage import Storage
from ._types import (
    ImageDescriptor,
    ImageLocation,
    ImageMetadata,
    NumericalType,
    as_key,
    as_numerical_type,
    numpy_dtype,
)
from ._writers import FileImageWriterProvider, ImageWriterProvider
from .formats import Format, create_writer
from .scratch import ScratchImageReaderProvider

__all__ = [
    "read",
    "query_descriptor",
    "query_metadata",
    "write_single",
    "write_stack",
    "write",
    "loader",
    "saver",
    "reader_provider",
    "writer_provider",
]


def reader_provider(
    cache: int | None = None,
    formats: Iterable[type[Format]] | None = None,
    scratch: Any = None,
    *,
    storage_options: Mapping[str, Any] | Storage | None = None,
    configuration: Configuration | None = None,
) -> ImageReaderProvider:
    """A provider that opens the file at the path a key is.

    Args:
        cache: How many files to keep open, the least recently used closed
            first. None opens a file for each use.
        formats: The formats to try, in order. Defaults to every registered one.
        scratch: A scratch to serve images from before the files (see the
            scratch functions).
        storage_options: What fsspec takes to reach keys that are URLs (`s3://`, `https://`,
            `gs://`): credentials, `{"anon": True}` for public buckets, `endpoint_url`; or a
            `vitrio.Storage` that holds them.
        configuration: The limits its reads keep to (`vitrio.Configuration`); the configuration in
            force (`vitrio.configuration()`) by default.

    Raises:
        ValueError: If `cache` is not positive.
    """
    provider: ImageReaderProvider = FileImageReaderProvider(formats, _storage(storage_options, configuration))
    if cache is not None:
        provider = CachingImageReaderProvider(provider, cache)
    if scratch is not None:
        provider = ScratchImageReaderProvider(provider, scratch)
    return provider


def _storage(
    storage_options: Mapping[str, Any] | Storage | None, configuration: Configuration | None
) -> Storage:
    """The storage of `storage_options` (made once, here), with `configuration` where one is given."""
    storage = Storage.of(storage_options)
    if configuration is not None and configuration != storage.configuration:
        storage = Storage(storage.options, configuration)
    return storage


def writer_provider(formats: Iterable[type[Format]] | None = None) -> FileImageWriterProvider:
    """A provider of files written a batch at a time, each declared first.

    Args:
        formats: The formats to write with, chosen by extension. Defaults to every registered one.
    """
    return FileImageWriterProvider(formats)


def _executor(workers: int | None, executor: Executor | None) -> Executor:
    if executor is not None:
        if workers is not None:
            raise ValueError("give workers or executor, not both")
        return executor
    return ThreadPoolExecutor(workers if workers is not None else os.cpu_count() or 1)


def loader(
    workers: int | None = None,
    cache: int | None = None,
    formats: Iterable[type[Format]] | None = None,
    executor: Executor | None = None,
    scratch: Any = None,
    *,
    storage_options: Mapping[str, Any] | Storage | None = None,
    configuration: Configuration | None = None,
) -> ExecutorImageLoader:
    """An `ExecutorImageLoader`: a thread pool and a reader provider, for `read_batch_async` and friends.

    Args:
        workers: How many threads read. Defaults to the machine's cores.
        cache: How many files to keep open, their maps kept across batches and epochs; 0 opens a file
            for each use. Defaults to `open_files` of the configuration, at most a quarter of the
            process's limit on open files.
        formats: The formats to try, in order. Defaults to every registered one.
        executor: An executor to share with other loaders and savers, instead of a pool of its own.
        scratch: A scratch that serves images it holds instead of the files.
        storage_options: What fsspec takes to reach keys that are URLs, as `reader_provider` takes it.
        configuration: The pools, sizes and time limits of its planning and its reads
            (`vitrio.Configuration`); the configuration in force (`vitrio.configuration()`) by default.

    Raises:
        ValueError: If `workers` is not positive, `cache` is negative, or both `workers` and `executor`
            are given.
    """
    storage = _storage(storage_options, configuration)
    if cache is None:
        cache = open_files(storage.configuration)
    elif int(cache) == 0:
        cache = None
    provider = reader_provider(cache, formats, scratch, storage_options=storage)
    return ExecutorImageLoader(provider, _executor(workers, executor), configuration=storage.configuration)


def saver(
    writers: ImageWriterProvider, workers: int | None = None, executor: Executor | None = None
) -> ExecutorImageSaver:
    """An `ExecutorImageSaver`: a thread pool and the declared files, for `write_batch_async`.

    Args:
        writers: The files written into, from `writer_provider`: an `ImageWriterProvider`.
        workers: How many threads write. Defaults to the machine's cores.
        executor: An executor to share with loaders and other savers.

    Raises:
        TypeError: If `writers` is not an `ImageWriterProvider`.
        ValueError: If `workers` is not positive, or both `workers` and `executor` are given.
    """
    if not isinstance(writers, ImageWriterProvider):
        raise TypeError(f"writers is an ImageWriterProvider, not {type(writers).__name__}")
    return ExecutorImageSaver(writers, _executor(workers, executor))


def query_descriptor(
    key: Any,
    readers: ImageReaderProvider | None = None,
    *,
    storage_options: Mapping[str, Any] | Storage | None = None,
) -> ImageDescriptor:
    """What the file at `key` holds, from its header alone.

    `storage_options` is what fsspec takes to reach a key that is a URL, as `reader_provider` takes it.

    Raises:
        ImageFileNotFoundError: If there is no file at `key` (a `FileNotFoundError` and a `RuntimeError`).
        FormatError: If the file is of no known format, or malformed (a `ValueError` and a `RuntimeError`).
    """
    key = as_key(key)
    with concerning(key):
        return _readers(readers, storage_options).query_descriptor(key)


def query_metadata(
    location: Any,
    readers: ImageReaderProvider | None = None,
    *,
    storage_options: Mapping[str, Any] | Storage | None = None,
) -> ImageMetadata:
    """What the header of the file at `location` says: what it holds, its voxel size, and its format.

    Args:
        location: An `ImageLocation` (its file is asked) or a key.
        readers: Where the file is opened. Defaults to opening it at its path.
        storage_options: What fsspec takes to reach a key that is a URL, as `reader_provider` takes it.

    Returns:
        An `ImageMetadata`: the descriptor (as `query_descriptor` has it),
        the size of a pixel along each axis of an image in Å, slowest first
        (None where the file does not say), the format's name, and the
        metadata the size was read from.

    Raises:
        ImageFileNotFoundError, FormatError: As `query_descriptor` raises them.
    """
    key = location.key if isinstance(location, ImageLocation) else as_key(location)
    readers = _readers(readers, storage_options)
    with concerning(key):
        reader = readers.acquire(key)
        try:
            return ImageMetadata(
                reader.descriptor, reader.voxel_size, reader.format_name, reader.voxel_size_source
            )
        finally:
            readers.release(reader)


def read(
    location: Any,
    readers: ImageReaderProvider | None = None,
    data_type: Any = None,
    out: Any = None,
    casting: str | None = None,
    *,
    storage_options: Mapping[str, Any] | Storage | None = None,
) -> Any:
    """Read a whole file, or one image or volume of a stack.

    An index into a file that holds one volume names one of its 2-D sections,
    as RELION and cryoSPARC name the images of particle stacks whose header
    says volume.

    Args:
        location: An `ImageLocation`, or the key of a whole file (a plain
            string is always a key, never parsed as `"n@key"`).
        readers: Where the file is opened. Defaults to opening it at its path.
        data_type: The type to read as; defaults to the file's. Not with `out`.
        out: An array to read into, of the shape read.
        casting: None to refuse a type that cannot hold every value of the file's; "unsafe" to
            convert to any numeric type as numpy's `casting="unsafe"` does (the published vitrio's
            conversion: fractions cut toward zero, no range check).
        storage_options: What fsspec takes to reach a key that is a URL, as `reader_provider` takes it.

    Returns:
        A new `vitrio.Array` (a numpy array), or `out`, filled. Read as
        `complex_float16`, which numpy has no type for, a `HalfComplexArray`
        that holds the values and hands them to no one.

    Raises:
        ValueError: If `data_type` and `out` are both given, `out` does not have the shape read, or
            `casting` is neither None nor "unsafe".
        ReadOnlyDestinationError: If `out` is read only (a `TypeError` and a `ValueError`).
        DestinationTypeError: If `out` or `data_type` cannot hold the file's values (see
            `docs/paths-and-types.md`; a `TypeError` and a `ValueError`).
        IndexError: If the index is past the end of its stack, or of a volume's sections.
        ImageFileNotFoundError: If there is no file at the key (a `FileNotFoundError` and a `RuntimeError`).
        FormatError: If the file is of no known format, or malformed (a `ValueError` and a `RuntimeError`).
    """
    if out is not None and data_type is not None:
        raise ValueError("give data_type or out, not both")
    casting = as_casting(casting)
    if isinstance(location, ImageLocation):
        key, index = location.key, location.index_in_stack
    else:
        key, index = as_key(location), -1
    readers = _readers(readers, storage_options)
    with concerning(key):
        reader = readers.acquire(key)
        try:
            served = reader if index < 0 else reader.indexed()
            descriptor = served.descriptor
            if index >= 0:
                served.check_run(index, 1)  # before allocating: an empty stack may claim any image shape
            shape = descriptor.extents if index < 0 else descriptor.core_extents
            if out is None:
                wanted = descriptor.data_type if data_type is None else as_numerical_type(data_type)
                if wanted is not NumericalType.complex_float16:
                    check_destination_type(key, descriptor.data_type, numpy_dtype(wanted), casting)
                result, target = new_array(shape, wanted)
            else:
                result, target = out, as_destination(out)
                check_destination_type(key, descriptor.data_type, target.dtype, casting)
                if target.shape != tuple(shape):
                    raise ValueError(f"{key}: reads as shape {shape}, out has shape {target.shape}")
            if index < 0:
                stack = descriptor.stack_extents
                served.read_run(0, [target[i] for i in np.ndindex(*stack)] if stack else [target])
            else:
                served.read_run(index, [target])
            if isinstance(result, HalfComplexArray):
                finish_half_complex(result, target)
            return result
        finally:
            readers.release(reader)


def _readers(readers: ImageReaderProvider | None, storage_options: Mapping[str, Any] | Storage | None) -> Any:
    """The provider given, a read its batch (`begin_batch`), or one that opens each file at its path (or
    URL, with the storage of `storage_options`)."""
    if readers is not None:
        if storage_options is not None:
            raise ValueError("give readers or storage_options, not both: the provider reaches the files")
        readers.begin_batch()
        return readers
    return FileImageReaderProvider(storage=Storage.of(storage_options))


def _written(array: Any, key: str) -> np.ndarray:
    """A numpy view of an array to write, refused as the published package refuses it.

    Raises:
        TypeError: If `array` is not an array or is not in native byte order.
        ValueError: If its memory is not aligned for its type.
    """
    if isinstance(array, (list, tuple)):
        raise TypeError(
            f"{key}: the values to write are an array, not a {type(array).__name__}; pass numpy.asarray(...)"
        )
    if isinstance(array, HalfComplexArray):
        raise TypeError(f"{key}: complex_float16 values cannot be handed to a writer")
    values = as_source(array)
    if not values.dtype.isnative:
        raise TypeError(
            f"{key}: the values are not in the machine's byte order ({values.dtype.str}); convert them first"
        )
    if not values.flags.aligned:
        raise ValueError(f"{key}: the values' memory is not aligned for {values.dtype}")
    return values


def write(
    array: Any,
    path: Any,
    descriptor: ImageDescriptor,
    formats: Iterable[type[Format]] | None = None,
    voxel_size: Any = None,
) -> None:
    """Write `array` to a new file at `path`, holding what `descriptor` says.

    The format is chosen by the extension of `path`; values are converted to
    the descriptor's type. The file is written beside `path` and moved onto
    it once complete, so a failed write leaves nothing at `path`.

    Args:
        voxel_size: The size of a pixel in Å: one number, or one per axis of
            an image, slowest first. MRC stores it in the cell, TIFF in its
            resolution tags (see `vitrio.formats.tiff`). None stores none.

    Raises:
        TypeError: If `array` is not an array (a list is not converted: pass
            `numpy.asarray` of it), is not in the machine's byte order, or
            holds values that are not numbers (objects, records).
        ValueError: If `array`'s shape is not the descriptor's extents, its
            memory is not aligned for its type, or `voxel_size` is not
            positive numbers, one or one per axis.
        FormatError: If no format writes files with that extension (a `ValueError` and a `RuntimeError`).
    """
    key = as_key(path)
    values = _written(array, key)
    if values.shape != descriptor.extents:
        raise ValueError(f"{key}: an array of shape {values.shape} does not fit {descriptor}")
    with concerning(key):
        writer = create_writer(key, descriptor, formats, voxel_size)
        try:
            stack = descriptor.stack_extents
            writer.write_run(0, [values[i] for i in np.ndindex(*stack)] if stack else [values])
        except BaseException:
            writer.discard()
            raise
        writer.finish()


def write_single(
    array: Any,
    path: Any,
    formats: Iterable[type[Format]] | None = None,
    data_type: Any = None,
    voxel_size: Any = None,
) -> None:
    """Write one image (2-D) or volume (3-D) to a new file at `path`; `voxel_size` as `write` takes it.

    Raises:
        ValueError: If `array` is not 2-D or 3-D; and as `write` raises.
        TypeError: As `write` raises.
    """
    _write_ranked(array, path, formats, data_type, voxel_size, stacked=False)


def write_stack(
    array: Any,
    path: Any,
    formats: Iterable[type[Format]] | None = None,
    data_type: Any = None,
    voxel_size: Any = None,
) -> None:
    """Write a stack of images (3-D) or volumes (4-D), stacked along the leading axis, to a new file.

    `voxel_size` is the size of a pixel of an image in Å, as `write` takes it.

    Raises:
        ValueError: If `array` is not 3-D or 4-D; and as `write` raises.
        TypeError: As `write` raises.
    """
    _write_ranked(array, path, formats, data_type, voxel_size, stacked=True)


def _write_ranked(
    array: Any,
    path: Any,
    formats: Iterable[type[Format]] | None,
    data_type: Any,
    voxel_size: Any,
    stacked: bool,
) -> None:
    """Write `array` as one image (2-D) or volume (3-D), or a stack of them along its leading axis."""
    key = as_key(path)
    values = _written(array, key)
    if values.ndim not in ((3, 4) if stacked else (2, 3)):
        what = "a stack is 3-D or 4-D" if stacked else "a single image or volume is 2-D or 3-D"
        raise ValueError(f"{key}: {what}, not of shape {values.shape}")
    descriptor = ImageDescriptor(values.shape, values.ndim - stacked, data_type or values.dtype)
    write(values, path, descriptor, formats, voxel_size)
