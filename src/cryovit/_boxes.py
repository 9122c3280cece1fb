"""The volumes of a dataset's files, and boxes of them read in batches into padded buffers.

A batch's boxes of one shape share buffers (``Buffers``): each box's tomogram, label and input are
read into a slot, padded to the deepest box, by one ``vio.read_patches_indexed_async`` call for the
volumes of each loader and one for its stacks of sections.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

import vitrio as vio

from .collate import LABEL_PADDING
from .types import TomogramData

Box = tuple[int, int, int]

_NOWHERE = 1 << 40
"""A centre coordinate past the end of any image: the patch around it reads nothing."""


@dataclasses.dataclass(frozen=True)
class Volume:
    """A volume in a file: its key, shape ``(D, H, W)``, stored type, whether it is a stack of 2-D
    sections, its channels (0 for one volume, ``C`` for a 4-D ``[C, D, H, W]`` HDF5 dataset), and the
    size of its voxels in Å ``(z, y, x)`` where its header says one (a stack of sections says none
    between them: None)."""

    key: str
    shape: Box
    dtype: np.dtype
    sections: bool
    channels: int = 0
    voxel_size: tuple[float, ...] | None = None

    @classmethod
    def query(cls, loader: vio.ImageLoader, path: str | os.PathLike[str], channels: bool = False) -> Volume:
        descriptor, voxel_size = vio.query_metadata(path, loader.readers)[:2]
        extents = descriptor.extents
        sections = descriptor.core_rank == 2 and len(extents) == 3
        stacked = channels and descriptor.core_rank == 3 and len(extents) == 4
        if not (stacked or (len(extents) == 3 and (sections or descriptor.core_rank == 3))):
            wanted = "a volume or a [C, D, H, W] stack of volumes" if channels else "a volume"
            raise ValueError(f"{os.fspath(path)}: holds {descriptor}, not {wanted}")
        shape = (extents[-3], extents[-2], extents[-1])
        dtype = descriptor.data_type.dtype
        voxel_size = voxel_size if voxel_size is not None and len(voxel_size) == 3 else None
        return cls(os.fspath(path), shape, dtype, sections, extents[0] if stacked else 0, voxel_size)


@dataclasses.dataclass(frozen=True)
class Entry:
    """What the dataset learnt of one of its files the first time it read it."""

    sample: str
    tomo_name: str
    split_id: int | None
    tomogram: Volume
    label: Volume | None
    label_value: int | None
    input: Volume | None
    voxel_size: tuple[float, ...] | None = None
    """The size in Å ``(z, y, x)`` of a voxel of the label (and of predictions of it), None if unknown."""


Crop = tuple[Volume, Box, int, int]
"""A crop to read: the volume, where its box starts, its depth (the box's height and width are the
destination's), and the index of the image in the file (-1 for a file of one volume)."""


def _read_volumes(loader: vio.ImageLoader, out: np.ndarray, crops: Sequence[Crop | None]) -> vio.Completion:
    """Starts reading ``crops[i]`` of volumes into ``out[i]`` (``[n, D, h, w]``), in one call.

    A slot whose crop is None (a stack of sections, read by ``_read_sections``) is left as it is.
    """
    images = list(dict.fromkeys((crop[0].key, crop[3]) for crop in crops if crop is not None))
    number = {image: i for i, image in enumerate(images)}
    half = np.asarray(out.shape[1:]) // 2
    image_ids = np.zeros(len(crops), np.int64)
    centres = np.full((len(crops), 3), _NOWHERE, np.int64)
    for i, crop in enumerate(crops):
        if crop is not None:
            image_ids[i] = number[(crop[0].key, crop[3])]
            centres[i] = np.asarray(crop[1]) + half
    return vio.read_patches_indexed_async(loader, out, images, image_ids, centres)


def _read_sections(loader: vio.ImageLoader, out: np.ndarray, crops: Sequence[Crop | None]) -> vio.Completion:
    """Starts reading ``crops[i]`` of stacks of sections into ``out[i]`` (``[n, D, h, w]``), in one call.

    Each section is a 2-D patch of its image; a slot past a crop's depth, or of a crop that is None
    (a volume, read by ``_read_volumes``), names a patch past the image, which leaves it as it is.
    """
    count, depth, height, width = out.shape
    flat = np.reshape(out, (count * depth, height, width), copy=False)
    images: dict[tuple[str, int], int] = {}
    image_ids = np.zeros(count * depth, np.int64)
    centres = np.full((count * depth, 2), _NOWHERE, np.int64)
    for i, crop in enumerate(crops):
        if crop is None:
            continue
        volume, (z, y, x), size, _ = crop
        for k in range(size):
            image_ids[i * depth + k] = images.setdefault((volume.key, z + k), len(images))
            centres[i * depth + k] = (y + height // 2, x + width // 2)
    return vio.read_patches_indexed_async(loader, flat, list(images), image_ids, centres)


def start_reads(loader: vio.ImageLoader, out: np.ndarray, crops: Sequence[Crop]) -> list[vio.Completion]:
    """Starts reading ``crops[i]`` into ``out[i]``: a call for the volumes, one for the stacks of sections."""
    reads = []
    for sections, read in ((False, _read_volumes), (True, _read_sections)):
        kind = [crop if crop[0].sections == sections else None for crop in crops]
        if any(crop is not None for crop in kind):
            reads.append(read(loader, out, kind))
    return reads


def check_factor(tomogram: Volume, other: Volume, what: str, path: Any, tomo_path: Any) -> None:
    """Checks that ``other`` (a label or input volume) covers the tomogram at an integer scale.

    Raises:
        ValueError: If it is of another depth, or its height and width are not the tomogram's times
            the same integer (rounded down, as features computed on patches are).
    """
    (depth, height, width), (d, h, w) = tomogram.shape, other.shape
    scale = h // height
    if (
        other.channels
        or d != depth
        or scale < 1
        or w // width != scale
        or h >= (height + 1) * scale
        or w >= (width + 1) * scale
    ):
        raise ValueError(
            f"the tomogram {tomo_path} has shape {tomogram.shape}, its {what} {path} has shape "
            f"{other.channels or ''}{other.shape}: not the same depth at the same or an integer multiple "
            "of its height and width"
        )


def scaled(tomogram: Box, other: Box, origin: Box, shape: Box) -> tuple[Box, Box]:
    """The box of ``other`` (a volume covering ``tomogram`` at an integer scale) over a box of the tomogram.

    An axis the box covers whole covers the whole of ``other``; otherwise origin and extent are scaled.
    """
    scale = other[1] // tomogram[1]
    box_origin, box_shape = [origin[0]], [shape[0]]
    for axis in (1, 2):
        whole = origin[axis] == 0 and shape[axis] == tomogram[axis]
        box_origin.append(0 if whole else origin[axis] * scale)
        box_shape.append(other[axis] if whole else shape[axis] * scale)
    return (box_origin[0], box_origin[1], box_origin[2]), (box_shape[0], box_shape[1], box_shape[2])


def as_float(dtypes: Sequence[np.dtype]) -> np.dtype:
    """The float type values of ``dtypes`` are read as: their own if all float, else float32."""
    if all(np.issubdtype(dtype, np.floating) for dtype in dtypes):
        return np.result_type(*dtypes)
    return np.dtype(np.float32)


@dataclasses.dataclass(frozen=True)
class Placed:
    """A box of a tomogram, and the boxes ``(origin, shape)`` over it of its label and input volumes."""

    entry: Entry
    origin: Box
    shape: Box
    aux_data: dict[str, Any]
    label: tuple[Box, Box] | None
    input: tuple[Box, Box] | None

    @classmethod
    def of(cls, entry: Entry, origin: Box, shape: Box, aux_data: dict[str, Any]) -> Placed:
        def over(volume: Volume | None) -> tuple[Box, Box] | None:
            return None if volume is None else scaled(entry.tomogram.shape, volume.shape, origin, shape)

        return cls(entry, origin, shape, aux_data, over(entry.label), over(entry.input))

    @property
    def buffer_shape(self) -> tuple[Any, ...]:
        """What the boxes read into one buffer share: the channels, height and width of the data, and
        the height and width of the label and of the input (None without one)."""
        label_hw = self.shape[1:] if self.label is None else self.label[1][1:]
        input_hw = None if self.input is None else self.input[1][1:]
        return (max(self.entry.tomogram.channels, 1), self.shape[1:], label_hw, input_hw)


def volume_crops(
    volumes: Sequence[Volume], boxes: Sequence[tuple[Box, Box]], depths: Sequence[int]
) -> list[Crop]:
    """The crops of boxes ``(origin, shape)`` of volumes, ``depths`` deep."""
    return [(volume, box[0], depth, -1) for volume, box, depth in zip(volumes, boxes, depths)]


@dataclasses.dataclass
class Buffers:
    """The buffers boxes of one shape are read into (a slot a box, padded to the deepest), and their reads."""

    members: list[int]
    """Where the boxes stand among those read."""
    boxes: list[Placed]
    data: np.ndarray
    """``[n, C, D, H, W]``: the tomograms, read as float."""
    labels: np.ndarray
    """``[n, D, H', W']`` float32: the labels, made of ``stored`` by ``finish``."""
    stored: np.ndarray | None
    """The labels as stored, or None without labels."""
    inputs: np.ndarray | None
    """``[n, D, H', W']``: the input volumes, or None without them."""
    reads: list[vio.Completion]

    def finish(self, scale_uint8: bool) -> None:
        """Once the reads are done: scales uint8 values to [0, 1] (if ``scale_uint8``), makes the labels
        of the stored values, and pads each slot past its box's depth."""
        for j, box in enumerate(self.boxes):
            depth = box.shape[0]
            if scale_uint8:
                self._scale(j, depth, box)
            if self.stored is not None:
                self._label(j, box.entry.label_value)
            self.data[j, :, depth:] = 0
            self.labels[j, depth:] = LABEL_PADDING

    def _scale(self, j: int, depth: int, box: Placed) -> None:
        """Divides by 255 the values of slot ``j`` read from uint8 tomograms and inputs."""
        if box.entry.tomogram.dtype == np.uint8:
            self.data[j, :, :depth] /= 255
        if self.inputs is not None and box.entry.input.dtype == np.uint8:
            self.inputs[j, :depth] /= 255

    def _label(self, j: int, value: int | None) -> None:
        """The label of slot ``j``: 1 where the stored value is ``value`` (or, for None, not 0), else 0,
        and ``LABEL_PADDING`` where it is negative (not annotated)."""
        stored, labels = self.stored[j], self.labels[j]
        if value is None:
            np.not_equal(stored, 0, out=labels)
        else:
            np.equal(stored, value, out=labels)
        labels[stored < 0] = LABEL_PADDING

    def items(self) -> list[TomogramData]:
        """The tomograms of the boxes, views of the buffers."""
        data, labels = torch.from_numpy(self.data), torch.from_numpy(self.labels)
        items = []
        for j, box in enumerate(self.boxes):
            depth = box.shape[0]
            if self.inputs is not None:
                source = self.inputs[j, :depth]
            else:
                source = self.data[j, 0, :depth] if self.data.shape[1] == 1 else self.data[j, :, :depth]
            items.append(
                TomogramData(
                    sample=box.entry.sample,
                    tomo_name=box.entry.tomo_name,
                    split_id=box.entry.split_id,
                    data=data[j, :, :depth],
                    label=labels[j, :depth],
                    aux_data={**box.aux_data, "data": source, **_voxel_size(box.entry)},
                    batch_size=[],
                )
            )
        return items


def _voxel_size(entry: Entry) -> dict[str, Any]:
    """``{"voxel_size": (z, y, x)}`` of the entry's label grid where it is known, else nothing."""
    return {} if entry.voxel_size is None else {"voxel_size": entry.voxel_size}


def label_voxel_size(tomogram: Volume, label: Volume | None) -> tuple[float, ...] | None:
    """The size in Å ``(z, y, x)`` of a voxel of the label of ``tomogram`` (its own grid without a label):
    the tomogram's, its height and width over the label's scale, else the label file's (features of a
    tomogram say no size; their full-resolution label may)."""
    if label is None or tomogram.voxel_size is None:
        return tomogram.voxel_size if label is None else label.voxel_size
    scale = label.shape[1] // tomogram.shape[1]
    z, y, x = tomogram.voxel_size
    return (z, y / scale, x / scale)
