"""Tomograms and their labels read through vitrio, whole or as random crops: ``TomogramDataset``.

Crops read only their box from the files: a memory map for MRC, plain TIFF and contiguous HDF5
datasets, a hyperslab for chunked or compressed HDF5 ones. All the crops of ``__getitems__`` (which
torch's ``DataLoader`` calls for a batch) are read by one ``vio.read_patches_indexed_async`` call for
the tomograms and one for the labels (one more of each where volumes and stacks of sections are
mixed), straight into the padded tensors of their batch, which ``collate_tomograms`` then takes
without a copy.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

import vitrio as vio
from vitrio.data import shared_loader
from vitrio.formats.zarr import OmeZarrFormat

from . import hdf5
from .collate import LABEL_PADDING, PaddedTomograms
from .types import FileData, TomogramData

__all__ = ["TomogramDataset"]

Box = tuple[int, int, int]

_NOWHERE = 1 << 40
"""A centre coordinate past the end of any image: the patch around it reads nothing."""


@dataclasses.dataclass(frozen=True)
class _Volume:
    """A volume in a file: its key, shape, stored type, and whether it is a stack of 2-D sections."""

    key: str
    shape: Box
    dtype: np.dtype
    sections: bool

    @classmethod
    def query(cls, loader: vio.ImageLoader, path: str | os.PathLike[str]) -> _Volume:
        descriptor = vio.query_descriptor(path, loader.readers)
        extents = descriptor.extents
        sections = descriptor.core_rank == 2 and len(extents) == 3
        if len(extents) != 3 or not (sections or descriptor.core_rank == 3):
            raise ValueError(f"{os.fspath(path)}: holds {descriptor}, not a volume")
        shape = (extents[0], extents[1], extents[2])
        return cls(os.fspath(path), shape, np.dtype(descriptor.data_type.value), sections)


@dataclasses.dataclass(frozen=True)
class _Entry:
    """What the dataset learnt of one of its files the first time it read it."""

    sample: str
    tomo_name: str
    split_id: int | None
    tomogram: _Volume
    label: _Volume | None
    label_value: int | None


_Crop = tuple[_Volume, Box, int]
"""A crop to read: the volume, where its box starts, and its depth (the box's height and width are the
destination's)."""


def _read_volumes(loader: vio.ImageLoader, out: np.ndarray, crops: Sequence[_Crop | None]) -> vio.Completion:
    """Starts reading ``crops[i]`` of volumes into ``out[i]`` (``[n, D, h, w]``), in one call.

    A slot whose crop is None (a stack of sections, read by ``_read_sections``) is left as it is.
    """
    images = list(dict.fromkeys((crop[0].key, -1) for crop in crops if crop is not None))
    number = {image: i for i, image in enumerate(images)}
    half = np.asarray(out.shape[1:]) // 2
    image_ids = np.zeros(len(crops), np.int64)
    centres = np.full((len(crops), 3), _NOWHERE, np.int64)
    for i, crop in enumerate(crops):
        if crop is not None:
            image_ids[i] = number[(crop[0].key, -1)]
            centres[i] = np.asarray(crop[1]) + half
    return vio.read_patches_indexed_async(loader, out, images, image_ids, centres)


def _read_sections(loader: vio.ImageLoader, out: np.ndarray, crops: Sequence[_Crop | None]) -> vio.Completion:
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
        volume, (z, y, x), size = crop
        for k in range(size):
            image_ids[i * depth + k] = images.setdefault((volume.key, z + k), len(images))
            centres[i * depth + k] = (y + height // 2, x + width // 2)
    return vio.read_patches_indexed_async(loader, flat, list(images), image_ids, centres)


def _start_reads(loader: vio.ImageLoader, out: np.ndarray, crops: Sequence[_Crop]) -> list[vio.Completion]:
    """Starts reading ``crops[i]`` into ``out[i]``: a call for the volumes, one for the stacks of sections."""
    reads = []
    for sections, read in ((False, _read_volumes), (True, _read_sections)):
        kind = [crop if crop[0].sections == sections else None for crop in crops]
        if any(crop is not None for crop in kind):
            reads.append(read(loader, out, kind))
    return reads


class TomogramDataset(torch.utils.data.Dataset):
    """The tomograms of a list of files and one of their labels, whole or as random crops.

    Item ``i`` is a ``TomogramData`` of ``files[i]``: ``data`` float32 ``[D, 1, H, W]``, ``label`` bool
    ``[D, H, W]`` (all False when no ``label`` is asked for), ``sample`` from ``FileData.sample`` or else
    the name of the tomogram's folder, ``tomo_name`` the tomogram's file name. A random crop also has
    ``aux_data={"crop_origin": (z, y, x)}``, where its box starts in the tomogram. Files are opened
    when first read and kept open (up to ``cache`` of each kind).

    Args:
        files: The tomograms and their label files.
        label: The label to read, or None for tomograms without labels.
        crop: ``(depth, side)``: items are random crops of ``depth`` slices of ``side`` x ``side``
            (of the whole extent along an axis shorter than that); None reads whole tomograms.
        split_ids: The split of each file, or None.
        data_key: The dataset of the tomogram in HDF5 files.
        workers: How many threads of its own read; by default the reads share the threads of
            `vitrio.data.shared_loader()`.
        cache: How many tomogram files, and how many label files, to keep open.
        seed: The seed of the random crops. In a worker process of a ``DataLoader`` (which reading on
            the dataset's threads makes unnecessary), crops come from the worker's own seed instead,
            so that workers do not all draw the same ones.

    Raises:
        ValueError: If ``crop`` is not two positive extents, or ``split_ids`` not one per file.
    """

    def __init__(
        self,
        files: Sequence[FileData],
        label: str | None = None,
        crop: tuple[int, int] | None = None,
        split_ids: Sequence[int | None] | None = None,
        data_key: str = "data",
        workers: int | None = None,
        cache: int = 16,
        seed: int | None = None,
    ):
        if crop is not None and (len(crop) != 2 or min(crop) < 1):
            raise ValueError(f"crop is (depth, side), both positive, not {crop}")
        if split_ids is not None and len(split_ids) != len(files):
            raise ValueError(f"split_ids has {len(split_ids)} entries for {len(files)} files")
        self.files = list(files)
        self.label = label
        self.crop = crop
        self.split_ids = None if split_ids is None else list(split_ids)
        registered = vio.formats.registered_formats()
        self._own_executor = workers is not None
        executor = vio.ThreadPoolExecutor(workers) if workers is not None else shared_loader().executor
        self._tomograms = vio.ImageLoader(
            executor, vio.reader_provider(cache, formats=(hdf5.hdf5_format(data_key), *registered))
        )
        self._labels = (
            None
            if label is None
            else vio.ImageLoader(
                executor,
                vio.reader_provider(cache, formats=(hdf5.hdf5_format(f"labels/{label}"), *registered)),
            )
        )
        self._rng = np.random.default_rng(seed)
        self._worker_seed: int | None = None
        self._entries: dict[int, _Entry] = {}

    def __len__(self) -> int:
        """The number of tomograms."""
        return len(self.files)

    def __getitem__(self, index: int) -> TomogramData:
        """Tomogram ``index``, whole or a random crop of it.

        Args:
            index: Which tomogram.

        Returns:
            The tomogram and its label.

        Raises:
            IndexError: If there is no tomogram ``index``.
            FileNotFoundError: If a file is missing.
            KeyError: If the label file does not have the label.
            ValueError: If the tomogram and the label volume differ in shape, or a file holds no volume
                (``vio.FormatError``, a ``ValueError``, if a file is malformed or refused).
        """
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: Sequence[int]) -> list[TomogramData]:
        """The tomograms ``indices``, as ``__getitem__`` reads them, all read at once.

        Args:
            indices: Which tomograms.

        Returns:
            A ``TomogramData`` per index. When they all have the same height and width, they are read
            into the padded buffers of a batch, which ``collate_tomograms`` then takes as they are.

        Raises:
            As ``__getitem__``.
        """
        boxes = []
        for index in indices:
            shape = self.tomogram_shape(index)
            if self.crop is None:
                boxes.append((index, (0, 0, 0), shape, None))
                continue
            depth, side = self.crop
            box = (min(depth, shape[0]), min(side, shape[1]), min(side, shape[2]))
            origin = tuple(int(self._generator().integers(0, n - b + 1)) for n, b in zip(shape, box))
            boxes.append((index, origin, box, {"crop_origin": origin}))
        return self._read(boxes)

    def read(self, index: int, origin: Box = (0, 0, 0), shape: Box | None = None) -> TomogramData:
        """A box of tomogram ``index`` and its label, read from the files.

        Args:
            index: Which tomogram.
            origin: Where the box starts, ``(z, y, x)``.
            shape: The extents of the box, ``(depth, height, width)``; None for the rest of the tomogram.

        Returns:
            The box of the tomogram and its label, with ``aux_data`` None.

        Raises:
            ValueError: If the box is not inside the tomogram.
            Otherwise as ``__getitem__``.
        """
        full = self.tomogram_shape(index)
        origin = (int(origin[0]), int(origin[1]), int(origin[2]))
        shape = tuple(n - o for n, o in zip(full, origin)) if shape is None else shape
        shape = (int(shape[0]), int(shape[1]), int(shape[2]))
        if any(o < 0 or b < 1 or o + b > n for o, b, n in zip(origin, shape, full)):
            raise ValueError(
                f"{self.files[index].tomo_path}: the box of {shape} at {origin} is not inside "
                f"its {full} voxels"
            )
        return self._read([(index, origin, shape, None)])[0]

    def tomogram_shape(self, index: int) -> Box:
        """The shape ``(D, H, W)`` of tomogram ``index``, from its file's header.

        Args:
            index: Which tomogram.

        Returns:
            The shape.

        Raises:
            As ``__getitem__``.
        """
        return self._entry(index).tomogram.shape

    def close(self) -> None:
        """Closes the files kept open and stops threads of its own; a later read starts again."""
        for loader in (self._tomograms, self._labels):
            if loader is not None:
                loader.readers.clear()
        if self._own_executor:
            self._tomograms.executor.shutdown()

    def _generator(self) -> np.random.Generator:
        """The generator of crops; in a DataLoader worker process, one seeded with the worker's seed."""
        worker = torch.utils.data.get_worker_info()
        if worker is not None and worker.seed != self._worker_seed:
            self._rng, self._worker_seed = np.random.default_rng(worker.seed), worker.seed
        return self._rng

    def _entry(self, index: int) -> _Entry:
        if not -len(self.files) <= index < len(self.files):
            raise IndexError(f"tomogram {index} of a dataset of {len(self.files)}")
        index %= len(self.files)
        entry = self._entries.get(index)
        if entry is None:
            entry = self._entries[index] = self._resolve(index)
        return entry

    def _resolve(self, index: int) -> _Entry:
        file = self.files[index]
        tomo_key = os.fspath(file.tomo_path)  # a key as given: a path, or an OME-Zarr store's URL
        tomo_path = Path(tomo_key)
        tomogram = _Volume.query(self._tomograms, tomo_key)
        label, value = None, None
        if self._labels is not None:
            if file.label_path is None:
                raise KeyError(f"{tomo_key}: no label {self.label!r}: the tomogram has no label file")
            if not OmeZarrFormat.claims_key(os.fspath(file.label_path)) and hdf5.is_hdf5(file.label_path):
                names = hdf5.label_names(file.label_path)
            else:
                names = list(file.labels or [])
                value = names.index(self.label) + 1 if self.label in names else None
            if self.label not in names:
                raise KeyError(f"{file.label_path}: no label {self.label!r}; its labels are {names}")
            label = _Volume.query(self._labels, os.fspath(file.label_path))
            if label.shape != tomogram.shape:
                raise ValueError(
                    f"the tomogram {tomo_key} has shape {tomogram.shape}, "
                    f"its label volume {file.label_path} has shape {label.shape}"
                )
        return _Entry(
            sample=file.sample if file.sample is not None else tomo_path.absolute().parent.name,
            tomo_name=tomo_path.name,
            split_id=None if self.split_ids is None else self.split_ids[index],
            tomogram=tomogram,
            label=label,
            label_value=value,
        )

    def _read(self, boxes: list[tuple[int, Box, Box, dict[str, Any] | None]]) -> list[TomogramData]:
        """Reads boxes ``(index, origin, shape, aux_data)``, those of one height and width into one buffer.

        Returns the tomograms in the order of ``boxes``: a ``PaddedTomograms`` when they all share a
        buffer, otherwise a list of views of the buffers of their height and width.
        """
        groups: dict[tuple[int, int], list[int]] = {}
        for i, (_, _, shape, _) in enumerate(boxes):
            groups.setdefault(shape[1:], []).append(i)
        entries = [self._entry(index) for index, _, _, _ in boxes]
        buffers, reads, compare = [], [], []
        for (height, width), members in groups.items():
            depths = [boxes[i][2][0] for i in members]
            shape = (len(members), max(depths), height, width)
            data = np.empty((shape[0], shape[1], 1, height, width), np.float32)
            labels = np.zeros(shape, np.int8)
            crops = [(entries[i].tomogram, boxes[i][1], d) for i, d in zip(members, depths)]
            reads += _start_reads(self._tomograms, data[:, :, 0], crops)
            if self._labels is not None:
                volumes = [entries[i].label for i in members]
                stored = np.empty(shape, np.result_type(*(volume.dtype for volume in volumes)))
                label_crops = [(volume, boxes[i][1], d) for i, volume, d in zip(members, volumes, depths)]
                reads += _start_reads(self._labels, stored, label_crops)
                values = [entries[i].label_value for i in members]
                compare.append((stored, values, labels))
            buffers.append((members, depths, data, labels))
        vio.Completion.gather(reads).get()
        for stored, values, labels in compare:
            for j, value in enumerate(values):
                out = labels[j].view(np.bool_)
                if value is None:
                    np.not_equal(stored[j], 0, out=out)
                else:
                    np.equal(stored[j], value, out=out)
        items: list[TomogramData | None] = [None] * len(boxes)
        for members, depths, data, labels in buffers:
            data_tensor, labels_tensor = torch.from_numpy(data), torch.from_numpy(labels)
            for j, (i, depth) in enumerate(zip(members, depths)):
                data[j, depth:] = 0
                labels[j, depth:] = LABEL_PADDING
                entry = entries[i]
                items[i] = TomogramData(
                    sample=entry.sample,
                    tomo_name=entry.tomo_name,
                    split_id=entry.split_id,
                    data=data_tensor[j, :depth],
                    label=labels_tensor[j, :depth].view(torch.bool),
                    aux_data=boxes[i][3],
                    batch_size=[],
                )
        if len(buffers) == 1:
            _, _, data, labels = buffers[0]
            return PaddedTomograms(items, torch.from_numpy(data), torch.from_numpy(labels))
        return items
