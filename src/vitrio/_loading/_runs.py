"""Planning reads of the images of raw files whose layout the provider knows into native runs.

The images are sorted by file and index and coalesced into runs of
consecutive images, (file, offset, length, destination) each, that one
native call reads (`vitrio.formats.read_runs`). `will_read_runs` tells the
kernel of them ahead.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .._native import RUN_COUNT, RUN_DESTINATION, RUN_FIELDS, RUN_FILE, RUN_OFFSET, advise, advise_maps
from .._providers import NO_LAYOUT, ImageReaderProvider
from ..formats._raw_layout import KnownFiles

__all__ = ["plan_known", "will_read_runs"]

# The columns of `plan_known`'s table of the known files: where image 0 lies, bytes and values per
# image, images, and the stored kind.
_OFFSET, _IMAGE_BYTES, _VALUES, _COUNT, _KIND = range(5)


def plan_known(
    readers: ImageReaderProvider,
    out: np.ndarray,
    keys: Sequence[str],
    key_ids: np.ndarray,
    indices: np.ndarray,
) -> tuple[np.ndarray, KnownFiles, np.ndarray, np.ndarray, int] | None:
    """Plan the reads of the images whose files' layouts the provider knows as native runs.

    Returns:
        None if there is none; else the slots left to the readers, the files, the runs
        (file, offset, values, destination byte) in the order of file and index, for each run
        its first slot and its number of images, and the kind of `out`'s values.
    """
    ids, inverse = np.unique(key_ids, return_inverse=True)
    shape, dtype, layout_of = out.shape[1:], out.dtype, readers.layout
    numbers, layouts, rows, dst_kind = [], [], [], None
    for key_id in ids.tolist():
        layout = layout_of(keys[key_id])
        known = layout is not None and layout is not NO_LAYOUT and layout.core_extents == shape
        found = layout.row(dtype) if known else None
        if found is not None and dst_kind in (None, found[0]):
            dst_kind = found[0]
            numbers.append(len(layouts))
            layouts.append(layout)
            rows.append(found[1])
        else:
            numbers.append(-1)
    if not layouts:
        return None
    table = np.array(rows, dtype=np.int64)
    files = np.array(numbers, dtype=np.int64)[inverse]
    known = files >= 0
    beyond = known & (indices >= table[files, _COUNT])
    if beyond.any():  # the readers raise the IndexError
        known &= ~np.isin(files, files[beyond])
    positions = np.flatnonzero(known)
    if not len(positions):
        return None
    file, index = files[positions], indices[positions]
    order = np.lexsort((index, file))
    file, index, slot = file[order], index[order], positions[order]
    go_on = (np.diff(file) == 0) & (np.diff(index) == 1) & (np.diff(slot) == 1)
    starts = np.flatnonzero(np.concatenate(([True], ~go_on)))
    lengths = np.diff(np.append(starts, len(file)))
    file, index, slot = file[starts], index[starts], slot[starts]
    runs = np.empty((len(starts), RUN_FIELDS), dtype=np.int64)
    runs[:, RUN_FILE] = file
    runs[:, RUN_OFFSET] = table[file, _OFFSET] + index * table[file, _IMAGE_BYTES]
    runs[:, RUN_COUNT] = lengths * table[file, _VALUES]
    runs[:, RUN_DESTINATION] = slot * out.strides[0]
    return (
        np.flatnonzero(~known),
        KnownFiles(layouts, table[:, _KIND]),
        runs,
        np.column_stack((slot, lengths)),
        dst_kind,
    )


def will_read_runs(files: KnownFiles, runs: np.ndarray) -> int:
    """Tell the kernel `runs` (as `plan_known` makes them, those of a file together) are read soon:
    through the maps of the files whose readers are open (`advise_maps`, in one call), opening the
    others (`advise`).

    Returns:
        How many files it opened.
    """
    numbers = runs[:, RUN_FILE]
    starts = np.flatnonzero(np.diff(numbers, prepend=-1))
    mapped = np.array([held is not None for held in files.maps])
    closed = ~mapped[numbers]
    if closed.any():
        advise(files.paths, files.checks, np.ascontiguousarray(runs[closed]))
    if mapped.any():
        value_bytes = np.array([layout.dtype.itemsize for layout in files.layouts])
        file, offset, count = runs[~closed, RUN_FILE], runs[~closed, RUN_OFFSET], runs[~closed, RUN_COUNT]
        advise_maps(files.maps, np.column_stack((file, offset, count * value_bytes[file])))
    return int(closed[starts].sum())
