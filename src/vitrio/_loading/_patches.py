"""Cropping patches around centres out of images, the patches of one image by one call of its reader."""

from __future__ import annotations

from collections.abc import Sequence
from time import perf_counter
from typing import Any

import numpy as np

from .._arrays import as_casting, as_destination, check_destination_type
from .._concurrency import Completion, run_tasks
from .._counters import note_read
from .._errors import concerning
from .._types import ImageLocation, IndexTable, as_key, group_ids, integer_array
from ..formats import ImageReader
from ._loader import (
    ImageLoader,
    as_out,
    as_sequence,
    check_ids,
    check_leading_extent,
    slot_integers,
    task_positions,
)

__all__ = ["read_patches_async", "read_patches_indexed_async"]


def _centre_array(centres: Any) -> np.ndarray:
    if isinstance(centres, IndexTable):
        return np.asarray(centres).astype(np.int64)
    if not isinstance(centres, (np.ndarray, Sequence)) and not hasattr(centres, "__array__"):
        raise TypeError(f"centres are an IndexTable, an array or a sequence, not {type(centres).__name__}")
    values = integer_array(centres, "centres must be integers")
    if values.size == 0:
        values = values.reshape(0, values.shape[-1] if values.ndim == 2 else 0)
    if values.ndim != 2:
        raise ValueError(f"centres must have a row of coordinates per centre, not shape {values.shape}")
    if values.size and values.min() < 0:
        raise ValueError("centres must not be negative")
    return values


def read_patches_indexed_async(
    loader: ImageLoader,
    out: np.ndarray,
    images: Sequence[tuple[str, int]],
    image_ids: Any,
    centres: Any,
    fill: Any = None,
    keep: Any = None,
    casting: str | None = None,
) -> Completion:
    """Crop the patch centred on `centres[i]` out of image `images[image_ids[i]]` into `out[i]`.

    The planned form of `read_patches_async`, for patches of many images at
    once: the patches of one image are read through one reader, in one call.
    The centre lands at `extent // 2` of its patch (RELION's convention).

    Args:
        loader: What reads.
        out: A writable numpy array of shape `(len(image_ids), *patch_shape)`.
        images: The images, each once: `(key, index)` pairs, the index -1 for
            a file that holds one image or volume.
        image_ids: For each patch, the number of its image in `images`: integers.
        centres: For each patch, its centre, slowest axis first: a 2-D array of
            non-negative integers, a row of the patches' rank per patch.
        fill: The value of what lies beyond the image; None leaves it as `out` held it.
        keep: An object the completion holds on to until the reads end.
        casting: As `vitrio.read` takes it.

    Returns:
        A `Completion` of the reads. Failures (a missing file, an index past
        the end of its stack (`IndexError`), an image whose rank is not the
        patches', a whole stack named by -1) surface from its `get()`.

    Raises:
        TypeError: If `out` is not a numpy array, `images` not a sequence, or
            `image_ids` or `centres` not integers.
        ValueError: If `image_ids` is not a 1-D array of one element per patch,
            an id is not the number of one of `images`, or `centres` is not a
            row of the patches' rank per patch, or holds a negative coordinate.
    """
    out = as_out(out)
    casting = as_casting(casting)
    images = as_sequence(images, "images")
    count = out.shape[0]
    image_ids = slot_integers(image_ids, "image_ids", count)
    check_ids(image_ids, "image_ids", len(images), "images")
    centres = _centre_array(centres)
    if len(centres) != count or (count and centres.shape[1] != out.ndim - 1):
        raise ValueError(
            f"centres are a row of {out.ndim - 1} coordinates for each of the {count} patches of shape "
            f"{out.shape[1:]}: their shape is {centres.shape}"
        )
    if count == 0:
        return Completion()
    shape = np.asarray(out.shape[1:], dtype=np.int64)
    origins = centres - shape // 2
    readers = loader.readers
    readers.begin_batch()
    patch_bytes = out.nbytes // count

    def crop(reader: ImageReader, index: int, slots: np.ndarray) -> None:
        extents = np.asarray(reader.core_extents, dtype=np.int64)
        origin = origins[slots]
        if out.flags.c_contiguous and reader.read_patches(index, origin, out.shape[1:], out, slots, fill):
            return
        low = np.clip(origin, 0, extents)
        high = np.clip(origin + shape, 0, extents)
        clipped = ((low != origin) | (high != origin + shape)).any(axis=1)
        inside = (high > low).all(axis=1)
        if fill is not None:
            for slot in slots[clipped].tolist():
                out[slot].fill(fill)
        regions, targets = [], []
        for slot, a, b, o, cut in zip(
            slots[inside].tolist(),
            low[inside].tolist(),
            high[inside].tolist(),
            origin[inside].tolist(),
            clipped[inside].tolist(),
        ):
            patch = out[slot]
            if cut:
                patch = patch[tuple(slice(x - y, z - y) for x, z, y in zip(a, b, o))]
            targets.append(patch)
            regions.append(tuple(slice(x, z) for x, z in zip(a, b)))
        reader.read_regions(index, regions, targets)

    def task(positions: np.ndarray) -> None:
        for image_id, group in group_ids(image_ids[positions]):
            key, index = images[image_id]
            started = perf_counter()
            with concerning(key):
                reader = readers.acquire(key)
                try:
                    served = reader if index < 0 else reader.indexed()  # a single volume's sections
                    check_destination_type(reader.key, reader.descriptor.data_type, out.dtype, casting)
                    crop(served, _patch_index(served, index, len(shape)), positions[group])
                finally:
                    readers.release(reader)
            note_read(reader.format_name, key, len(group), patch_bytes, perf_counter() - started)

    def key_of(image_id: int) -> str:
        return images[image_id][0]

    parts = task_positions(loader, image_ids, np.arange(count), key_of)
    tasks = [lambda p=p: task(p) for p in parts]
    loader.counters.batch(count, out.nbytes, patches=count)
    return run_tasks(loader.executor, loader.counters.counted(tasks), keep=(out, keep))


def _patch_index(reader: ImageReader, index: int, rank: int) -> int:
    if len(reader.core_extents) != rank:
        raise ValueError(
            f"{reader.key}: patches of rank {rank} cannot be cropped out of images of shape "
            f"{reader.core_extents}"
        )
    if index < 0:
        if reader.descriptor.is_stack:
            raise ValueError(f"{reader.key}: is a stack; name one of its images to crop patches out of")
        return 0
    reader.check_run(index, 1)
    return index


def read_patches_async(
    loader: ImageLoader, destination: Any, location: Any, centres: Any, casting: str | None = None
) -> Completion:
    """Crop a patch around each centre out of one image or volume, on the loader's threads.

    The centre lands at index `extent // 2` of its patch (RELION's
    convention). What lies beyond the image is left as `destination` held it.

    Args:
        loader: What reads.
        destination: An array of shape `(len(centres), *patch_shape)`.
        location: An `ImageLocation`, or the key of a file holding one image or volume.
        centres: An `IndexTable`, an integer array with a row per centre
            (slowest axis first), or a sequence of sequences.
        casting: As `vitrio.read` takes it: "unsafe" lets `destination` be of a type that cannot
            hold every value of the image's.

    Returns:
        A `Completion` of the reads.

    Raises:
        ValueError: If the leading extent is not the number of centres, the
            patch rank is not the centres' rank, or a centre is negative.
        TypeError: If the centres are not integers.
    """
    out = as_destination(destination)
    values = _centre_array(centres)
    check_leading_extent(out, len(values), "the destination", "centres")
    if len(values) and out.ndim - 1 != values.shape[1]:
        raise ValueError(f"patches of shape {out.shape[1:]} do not fit centres of rank {values.shape[1]}")
    if isinstance(location, ImageLocation):
        image = (location.key, location.index_in_stack)
    else:
        image = (as_key(location), -1)
    image_ids = np.zeros(len(values), dtype=np.int64)
    return read_patches_indexed_async(
        loader, out, [image], image_ids, values, keep=destination, casting=casting
    )
