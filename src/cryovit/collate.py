"""Batching tomograms for a model: ``collate_tomograms`` pads them to one depth.

Items are laid out as ``TomogramData`` takes them: ``data`` channel-first ``[C, D, H, W]`` (or
``[D, H, W]``), as the CryoViT pipeline's datasets make them, or depth-first ``[D, C, H, W]``, as its
DINO feature extraction does, and ``label`` ``[D, H', W']`` or ``[1, D, H', W']``. In a batch,
``tomo_batch`` is ``[B, D, C, H, W]`` either way and ``labels`` float32 ``[B, D, H', W']``, as the
pipeline's losses take them: 1 and 0 where annotated, -1 (``LABEL_PADDING``) where not annotated and on
the slices padded after a tomogram, which a loss leaves out with ``labels > -1``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import torch

from .types import BatchedTomogramData, BatchedTomogramMetadata, TomogramData

__all__ = ["LABEL_PADDING", "PaddedTomograms", "collate_tomograms", "input_volume"]

LABEL_PADDING = -1
"""The label of voxels that are not annotated and of the padded slices of a batch."""


class PaddedTomograms(list):
    """Tomograms read into the padded buffers of a batch: a list that also holds the buffers.

    ``collate_tomograms`` takes the buffers as its batch, without copying, while the list still holds
    those tomograms, in order, with their data and labels where they were read.

    Args:
        items: The tomograms, each ``data`` a view of ``data[i, :, :depth]`` and ``label`` of
            ``labels[i, :depth]``.
        data: The ``[B, C, D, H, W]`` buffer, zeros past each tomogram's depth.
        labels: The float32 ``[B, D, H', W']`` buffer, ``LABEL_PADDING`` past each tomogram's depth.
    """

    def __init__(self, items: list[TomogramData], data: torch.Tensor, labels: torch.Tensor):
        super().__init__(items)
        self._items = tuple(items)
        self._data = data
        self._labels = labels

    def padded_buffers(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The buffers, data as ``[B, D, C, H, W]``, if the tomograms are still as read; otherwise None."""
        if len(self) != len(self._items) or any(a is not b for a, b in zip(self, self._items)):
            return None
        for i, tomogram in enumerate(self):
            depth = tomogram.label.shape[0]
            data, labels = self._data[i, :, :depth], self._labels[i, :depth]
            for item, buffer in ((tomogram.data, data), (tomogram.label, labels)):
                if (
                    item.data_ptr() != buffer.data_ptr()
                    or item.shape != buffer.shape
                    or item.stride() != buffer.stride()
                    or item.dtype != buffer.dtype
                ):
                    return None
        return self._data.transpose(1, 2), self._labels


def _name(tomogram: TomogramData) -> str:
    return f"{tomogram.sample}/{tomogram.tomo_name}"


def input_volume(tomogram: TomogramData) -> Any:
    """The input of a tomogram, as ``aux_data["data"]`` of a batch holds it.

    Args:
        tomogram: The tomogram.

    Returns:
        ``tomogram.aux_data["data"]`` if it has one, as it is (``TomogramDataset`` gives a numpy
        array); else its data as a numpy array (of its memory, for data on the CPU): ``[D, H, W]`` when
        it has one channel (the volume as read) and ``[C, D, H, W]`` otherwise, whatever its layout.
    """
    aux = tomogram.aux_data or {}
    if "data" in aux:
        return aux["data"]
    data = tomogram.data.detach()
    if data.ndim == 4:
        data = data.movedim(1, 0) if tomogram.depth_first else data
        data = data[0] if data.shape[0] == 1 else data
    return data.cpu().numpy()


def _slices(tomogram: TomogramData) -> tuple[torch.Tensor, torch.Tensor]:
    """Views of a tomogram's data as ``[D, C, H, W]`` (or ``[D, H, W]``) and its label as ``[D, H', W']``."""
    data, label = tomogram.data, tomogram.label
    if data.ndim == 4 and not tomogram.depth_first:
        data = data.movedim(1, 0)  # [C, D, H, W] -> [D, C, H, W]
    return data, label[0] if label.ndim == 4 else label


def collate_tomograms(tomograms: Sequence[TomogramData]) -> BatchedTomogramData:
    """Pads tomograms to the depth of the deepest and batches them, as a ``collate_fn`` for a DataLoader.

    Data is padded with zeros, labels with ``LABEL_PADDING``; labels keep their -1 (not annotated) and
    are float32. The metadata is made as the pipeline makes it (``BatchedTomogramMetadata.from_names``),
    ``split_id`` set when every tomogram has one. ``aux_data`` holds, for each key of any tomogram's
    ``aux_data``, a list of the tomograms' values as they are (None where a tomogram lacks it), and
    always ``"data"``: the unpadded input of each tomogram (``input_volume``: a numpy array, as the
    pipeline's writers take it, of the tomogram's memory, not a copy).

    The list ``TomogramDataset.__getitems__`` returns has read its tomograms into the padded buffers
    of a batch already: while it holds them as read, the batch is those buffers, and shares its
    memory with the tomograms, without a copy. Other tomograms are copied into new tensors.

    Args:
        tomograms: The tomograms, of either layout ``TomogramData`` takes: ``data`` ``[C, D, H, W]``,
            ``[D, C, H, W]`` or ``[D, H, W]``, ``label`` ``[D, H', W']`` or ``[1, D, H', W']``, all of the
            same channels, heights and widths.

    Returns:
        The batch: ``tomo_batch`` ``[B, D, C, H, W]`` (or ``[B, D, H, W]``), ``labels`` ``[B, D, H', W']``,
        ``tomo_sizes`` the int32 depth of each tomogram and ``min_slices`` the least of them.

    Raises:
        ValueError: If ``tomograms`` is empty, or two of them differ in channels, heights or widths.
    """
    if not tomograms:
        raise ValueError("collate_tomograms: no tomograms to batch")
    slices = [_slices(tomogram) for tomogram in tomograms]
    first = tomograms[0]
    for tomogram, (data, label) in zip(tomograms[1:], slices[1:]):
        for what, a, b in (("data", slices[0][0], data), ("label", slices[0][1], label)):
            if a.shape[1:] != b.shape[1:]:
                raise ValueError(
                    f"the tomograms of a batch must have {what} of the same channels, height and width: "
                    f"{_name(first)} has {what} of shape {tuple(getattr(first, what).shape)}, "
                    f"{_name(tomogram)} has {tuple(getattr(tomogram, what).shape)}"
                )
    sizes = [data.shape[0] for data, _ in slices]
    device = first.data.device
    buffers = tomograms.padded_buffers() if isinstance(tomograms, PaddedTomograms) else None
    if buffers is not None:
        batch, labels = buffers
    else:
        batch, labels = _pad(slices)
    split_ids = [tomogram.split_id for tomogram in tomograms]
    metadata = BatchedTomogramMetadata.from_names(
        [tomogram.sample for tomogram in tomograms],
        [tomogram.tomo_name for tomogram in tomograms],
        split_id=None if None in split_ids else split_ids,
        device=device,
    )
    keys = list(dict.fromkeys(key for tomogram in tomograms for key in tomogram.aux_data or {}))
    aux_data: dict[str, list[Any]] = {
        key: [(tomogram.aux_data or {}).get(key) for tomogram in tomograms] for key in keys
    }
    aux_data["data"] = [input_volume(tomogram) for tomogram in tomograms]
    return BatchedTomogramData(
        tomo_batch=batch,
        tomo_sizes=torch.tensor(sizes, dtype=torch.int32, device=device),
        labels=labels,
        metadata=metadata,
        min_slices=min(sizes),
        aux_data=aux_data,
        batch_size=[len(tomograms)],
        device=device,
    )


def _pad(slices: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Copies data ``[D, (C,) H, W]`` and labels ``[D, H', W']`` into new padded tensors, data as
    ``[B, D, (C,) H, W]``."""
    first, first_label = slices[0]
    sizes = [data.shape[0] for data, _ in slices]
    dtype = functools.reduce(torch.promote_types, (data.dtype for data, _ in slices))
    shape = (len(slices), max(sizes))
    batch = torch.empty((*shape, *first.shape[1:]), dtype=dtype, device=first.device)
    labels = torch.empty((*shape, *first_label.shape[1:]), dtype=torch.float32, device=first.device)
    for i, ((data, label), size) in enumerate(zip(slices, sizes)):
        batch[i, :size] = data
        batch[i, size:] = 0
        labels[i, :size] = label
        labels[i, size:] = LABEL_PADDING
    return batch, labels
