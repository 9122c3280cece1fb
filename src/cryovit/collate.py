"""Batching tomograms for a model: ``collate_tomograms`` pads them to one depth.

In a batch, ``labels`` is int8: 0 and 1 for the slices of a tomogram and ``LABEL_PADDING`` (-1) for
the slices padded after it, which a loss leaves out with ``labels >= 0``; int8 keeps the labels of a
batch a quarter of the size float32 would.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch

from .types import BatchedTomogramData, BatchedTomogramMetadata, TomogramData

__all__ = ["LABEL_PADDING", "PaddedTomograms", "collate_tomograms"]

LABEL_PADDING = -1
"""The label of the padded slices of a batch: neither background (0) nor foreground (1)."""


class PaddedTomograms(list):
    """Tomograms read into the padded buffers of a batch: a list that also holds the buffers.

    ``collate_tomograms`` takes the buffers as its batch, without copying, while the list still holds
    those tomograms, in order, with their data and labels where they were read.

    Args:
        items: The tomograms, each ``data`` a view of ``data[i, :depth]`` and ``label`` of
            ``labels[i, :depth]``.
        data: The float32 ``[B, D, 1, H, W]`` buffer, zeros past each tomogram's depth.
        labels: The int8 ``[B, D, H, W]`` buffer, ``LABEL_PADDING`` past each tomogram's depth.
    """

    def __init__(self, items: list[TomogramData], data: torch.Tensor, labels: torch.Tensor):
        super().__init__(items)
        self._items = tuple(items)
        self._data = data
        self._labels = labels

    def padded_buffers(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The buffers, if the tomograms are still as read; otherwise None."""
        if len(self) != len(self._items) or any(a is not b for a, b in zip(self, self._items)):
            return None
        for i, tomogram in enumerate(self):
            if (
                tomogram.data.data_ptr() != self._data[i].data_ptr()
                or tomogram.label.data_ptr() != self._labels[i].data_ptr()
                or tomogram.data.stride() != self._data[i].stride()
                or tomogram.label.stride() != self._labels[i].stride()
                or tomogram.data.shape[1:] != self._data.shape[2:]
                or tomogram.label.shape[1:] != self._labels.shape[2:]
            ):
                return None
        return self._data, self._labels


def _name(tomogram: TomogramData) -> str:
    return f"{tomogram.sample}/{tomogram.tomo_name}"


def collate_tomograms(tomograms: Sequence[TomogramData]) -> BatchedTomogramData:
    """Pads tomograms to the depth of the deepest and batches them, as a ``collate_fn`` for a DataLoader.

    Data is padded with zeros, labels with ``LABEL_PADDING`` (the batch's labels are int8). The
    metadata names each tomogram, ``split_id`` is set when every tomogram has one, and ``aux_data``
    holds, for each key of any tomogram's ``aux_data``, a list of the tomograms' values (None where a
    tomogram lacks it); it is None when no tomogram has any.

    The list ``TomogramDataset.__getitems__`` returns has read its tomograms into the padded buffers
    of a batch already: while it holds them as read, the batch is those buffers, and shares its
    memory with the tomograms, without a copy. Other tomograms are copied into new tensors.

    Args:
        tomograms: The tomograms, of the same channels, height and width.

    Returns:
        The batch, with ``tomo_sizes`` the depth of each tomogram and ``min_slices`` the least of them.

    Raises:
        ValueError: If ``tomograms`` is empty, or two of them differ in channels, height or width.
    """
    if not tomograms:
        raise ValueError("collate_tomograms: no tomograms to batch")
    first = tomograms[0]
    for tomogram in tomograms[1:]:
        if tomogram.data.shape[1:] != first.data.shape[1:]:
            raise ValueError(
                "the tomograms of a batch must have the same channels, height and width: "
                f"{_name(first)} has (C, H, W) = {tuple(first.data.shape[1:])}, "
                f"{_name(tomogram)} has {tuple(tomogram.data.shape[1:])}"
            )
    sizes = [tomogram.data.shape[0] for tomogram in tomograms]
    device = first.data.device
    buffers = tomograms.padded_buffers() if isinstance(tomograms, PaddedTomograms) else None
    if buffers is not None:
        batch, labels = buffers
    else:
        batch, labels = _pad(tomograms, sizes)
    split_ids = [tomogram.split_id for tomogram in tomograms]
    metadata = BatchedTomogramMetadata.from_names(
        [tomogram.sample for tomogram in tomograms],
        [tomogram.tomo_name for tomogram in tomograms],
        split_id=None if None in split_ids else split_ids,
        device=device,
    )
    keys = list(dict.fromkeys(key for tomogram in tomograms for key in tomogram.aux_data or {}))
    aux_data = {key: [(tomogram.aux_data or {}).get(key) for tomogram in tomograms] for key in keys}
    return BatchedTomogramData(
        tomo_batch=batch,
        tomo_sizes=torch.tensor(sizes, dtype=torch.long, device=device),
        labels=labels,
        metadata=metadata,
        min_slices=min(sizes),
        aux_data=aux_data or None,
        batch_size=[len(tomograms)],
        device=device,
    )


def _pad(tomograms: Sequence[TomogramData], sizes: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Copies the data and labels of tomograms into new padded tensors."""
    first = tomograms[0]
    dtype = functools.reduce(torch.promote_types, (tomogram.data.dtype for tomogram in tomograms))
    shape = (len(tomograms), max(sizes))
    batch = torch.empty((*shape, *first.data.shape[1:]), dtype=dtype, device=first.data.device)
    labels = torch.empty((*shape, *first.label.shape[1:]), dtype=torch.int8, device=first.data.device)
    for i, (tomogram, size) in enumerate(zip(tomograms, sizes)):
        batch[i, :size] = tomogram.data
        batch[i, size:] = 0
        labels[i, :size] = tomogram.label
        labels[i, size:] = LABEL_PADDING
    return batch, labels
