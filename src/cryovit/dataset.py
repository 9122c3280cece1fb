"""Tomograms and their labels read through vitrio, whole or as random crops: ``TomogramDataset``.

Crops read only their box from the files: a memory map for MRC, plain TIFF and contiguous HDF5
datasets, a hyperslab for chunked or compressed HDF5 ones. All the crops of ``__getitems__`` (which
torch's ``DataLoader`` calls for a batch) are read by one ``vio.read_patches_indexed_async`` call for
the tomograms, one for the labels and one for the inputs of ``input_key`` (one more of each where
volumes and stacks of sections are mixed; a channel of a ``[C, D, H, W]`` dataset is one volume),
straight into the padded tensors of their batch, which ``collate_tomograms`` then takes without a
copy.
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
    """A volume in a file: its key, shape ``(D, H, W)``, stored type, whether it is a stack of 2-D
    sections, and its channels (0 for one volume, ``C`` for a 4-D ``[C, D, H, W]`` HDF5 dataset)."""

    key: str
    shape: Box
    dtype: np.dtype
    sections: bool
    channels: int = 0

    @classmethod
    def query(cls, loader: vio.ImageLoader, path: str | os.PathLike[str], channels: bool = False) -> _Volume:
        descriptor = vio.query_descriptor(path, loader.readers)
        extents = descriptor.extents
        sections = descriptor.core_rank == 2 and len(extents) == 3
        stacked = channels and descriptor.core_rank == 3 and len(extents) == 4
        if not (stacked or (len(extents) == 3 and (sections or descriptor.core_rank == 3))):
            wanted = "a volume or a [C, D, H, W] stack of volumes" if channels else "a volume"
            raise ValueError(f"{os.fspath(path)}: holds {descriptor}, not {wanted}")
        shape = (extents[-3], extents[-2], extents[-1])
        dtype = descriptor.data_type.dtype
        return cls(os.fspath(path), shape, dtype, sections, extents[0] if stacked else 0)


@dataclasses.dataclass(frozen=True)
class _Entry:
    """What the dataset learnt of one of its files the first time it read it."""

    sample: str
    tomo_name: str
    split_id: int | None
    tomogram: _Volume
    label: _Volume | None
    label_value: int | None
    input: _Volume | None


_Crop = tuple[_Volume, Box, int, int]
"""A crop to read: the volume, where its box starts, its depth (the box's height and width are the
destination's), and the index of the image in the file (-1 for a file of one volume)."""


def _read_volumes(loader: vio.ImageLoader, out: np.ndarray, crops: Sequence[_Crop | None]) -> vio.Completion:
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
        volume, (z, y, x), size, _ = crop
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


def _factor(tomogram: _Volume, other: _Volume, what: str, path: Any, tomo_path: Any) -> None:
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


def _scaled(tomogram: Box, other: Box, origin: Box, shape: Box) -> tuple[Box, Box]:
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


def _as_float(dtypes: Sequence[np.dtype]) -> np.dtype:
    """The float type values of ``dtypes`` are read as: their own if all float, else float32."""
    if all(np.issubdtype(dtype, np.floating) for dtype in dtypes):
        return np.result_type(*dtypes)
    return np.dtype(np.float32)


class TomogramDataset(torch.utils.data.Dataset):
    """The tomograms of a list of files and one of their labels, whole or as random crops.

    Item ``i`` is a ``TomogramData`` of ``files[i]``, laid out channel-first as the CryoViT pipeline's
    datasets make them:

    - ``data``: ``[C, D, H, W]``, ``C = 1`` for a volume; a 4-D HDF5 dataset ``[C, D, H, W]`` (such as
      ``dino_features``, ``[1536, D, H/16, W/16]`` float16, read with ``data_key="dino_features"``)
      gives its ``C`` channels. Float data keeps its type; a tomogram stored as uint8 is scaled to
      [0, 1] (divided by 255) unless ``scale_uint8=False``, as the pipeline's readers do; other
      integer types are read as float32, unscaled.
    - ``label``: float32 ``[D, H', W']``: 1 in the label, 0 out of it, -1 where the file says the
      voxel is not annotated (a negative value), which the pipeline's losses leave out with
      ``y_true > -1``; all 0 when no ``label`` is asked for. It may be at a finer resolution than
      ``data`` (``H' = k H``, ``W' = k W``, as for DINO features and a full-resolution label).
    - ``aux_data``: a dict, never None: ``"data"``, the input of the tomogram as a numpy array, as
      the pipeline's datasets give it (the volume ``[D, H', W']`` of dataset ``input_key`` where
      given, else of the memory of ``data``: ``[D, H, W]`` for one channel, ``[C, D, H, W]`` for
      more), which the pipeline's test and predict steps and writers write beside the predictions;
      and, for a random crop, ``"crop_origin"``, where its box starts in ``data``.
    - ``sample`` from ``FileData.sample`` or else the name of the tomogram's folder, ``tomo_name`` the
      tomogram's file name.

    Files are opened when first read and kept open (up to ``cache`` of each kind).

    Args:
        files: The tomograms and their label files.
        label: The label to read, or None for tomograms without labels.
        crop: ``(depth, side)``: items are random crops of ``depth`` slices of ``side`` x ``side`` voxels
            of ``data`` (of the whole extent along an axis shorter than that; the label's crop is the
            same box at its resolution); None reads whole tomograms.
        split_ids: The split of each file, or None.
        data_key: The dataset of the tomogram in HDF5 files.
        input_key: The HDF5 dataset read into ``aux_data["data"]`` (e.g. ``"data"`` when ``data_key``
            names features), or None for a view of ``data``.
        scale_uint8: Whether uint8 tomograms (and inputs) are divided by 255.
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
        input_key: str | None = None,
        scale_uint8: bool = True,
    ):
        if crop is not None and (len(crop) != 2 or min(crop) < 1):
            raise ValueError(f"crop is (depth, side), both positive, not {crop}")
        if split_ids is not None and len(split_ids) != len(files):
            raise ValueError(f"split_ids has {len(split_ids)} entries for {len(files)} files")
        self.files = list(files)
        self.label = label
        self.crop = crop
        self.split_ids = None if split_ids is None else list(split_ids)
        self.scale_uint8 = scale_uint8
        registered = vio.formats.registered_formats()
        self._own_executor = workers is not None
        executor = vio.ThreadPoolExecutor(workers) if workers is not None else shared_loader().executor

        def loader(key: str) -> vio.ImageLoader:
            return vio.ImageLoader(
                executor, vio.reader_provider(cache, formats=(hdf5.hdf5_format(key), *registered))
            )

        self._tomograms = loader(data_key)
        self._labels = None if label is None else loader(f"labels/{label}")
        self._inputs = None if input_key is None else loader(input_key)
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
            ValueError: If the label or input volume is not of the tomogram's depth at the same or an
                integer multiple of its height and width, or a file holds no volume
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
            IndexError, FileNotFoundError, KeyError, ValueError: As ``__getitem__``.
        """
        boxes = []
        for index in indices:
            shape = self.tomogram_shape(index)
            if self.crop is None:
                boxes.append((index, (0, 0, 0), shape, {}))
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
            The box of the tomogram and its label, with ``aux_data`` holding ``"data"`` only.

        Raises:
            ValueError: If the box is not inside the tomogram.
            IndexError, FileNotFoundError, KeyError: As ``__getitem__``.
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
        return self._read([(index, origin, shape, {})])[0]

    def tomogram_shape(self, index: int) -> Box:
        """The shape ``(D, H, W)`` of tomogram ``index``, from its file's header.

        Args:
            index: Which tomogram.

        Returns:
            The shape.

        Raises:
            IndexError, FileNotFoundError, KeyError, ValueError: As ``__getitem__``.
        """
        return self._entry(index).tomogram.shape

    def close(self) -> None:
        """Closes the files kept open and stops threads of its own; a later read starts again."""
        for loader in (self._tomograms, self._labels, self._inputs):
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
        tomogram = _Volume.query(self._tomograms, tomo_key, channels=True)
        label, value, source = None, None, None
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
            _factor(tomogram, label, "label volume", file.label_path, tomo_key)
        if self._inputs is not None:
            source = _Volume.query(self._inputs, tomo_key)
            _factor(tomogram, source, "input volume", tomo_key, tomo_key)
        return _Entry(
            sample=file.sample if file.sample is not None else tomo_path.absolute().parent.name,
            tomo_name=tomo_path.name,
            split_id=None if self.split_ids is None else self.split_ids[index],
            tomogram=tomogram,
            label=label,
            label_value=value,
            input=source,
        )

    def _read(self, boxes: list[tuple[int, Box, Box, dict[str, Any]]]) -> list[TomogramData]:
        """Reads boxes ``(index, origin, shape, aux_data)`` of the tomograms, those of one shape
        (channels, height and width of data, label and input) into one buffer.

        Returns the tomograms in the order of ``boxes``: a ``PaddedTomograms`` when they all share a
        buffer, otherwise a list of views of the buffers of their shape.
        """
        entries = [self._entry(index) for index, _, _, _ in boxes]
        label_boxes = [
            None if entry.label is None else _scaled(entry.tomogram.shape, entry.label.shape, origin, shape)
            for entry, (_, origin, shape, _) in zip(entries, boxes)
        ]
        input_boxes = [
            None if entry.input is None else _scaled(entry.tomogram.shape, entry.input.shape, origin, shape)
            for entry, (_, origin, shape, _) in zip(entries, boxes)
        ]
        groups: dict[tuple[Any, ...], list[int]] = {}
        for i, ((_, _, shape, _), entry) in enumerate(zip(boxes, entries)):
            label_hw = shape[1:] if label_boxes[i] is None else label_boxes[i][1][1:]
            input_hw = None if input_boxes[i] is None else input_boxes[i][1][1:]
            groups.setdefault((max(entry.tomogram.channels, 1), shape[1:], label_hw, input_hw), []).append(i)
        buffers, reads, compare, scale = [], [], [], []
        for (channels, (height, width), label_hw, input_hw), members in groups.items():
            depths = [boxes[i][2][0] for i in members]
            count, deepest = len(members), max(depths)
            tomograms = [entries[i].tomogram for i in members]
            dtype = _as_float([volume.dtype for volume in tomograms])
            data = np.empty((count, channels, deepest, height, width), dtype)
            crops = [
                (volume, boxes[i][1], d, c if volume.channels else -1)
                for i, volume, d in zip(members, tomograms, depths)
                for c in range(channels)
            ]
            flat = np.reshape(data, (count * channels, deepest, height, width), copy=False)
            reads += _start_reads(self._tomograms, flat, crops)
            scale += [(data[j], d) for j, (v, d) in enumerate(zip(tomograms, depths)) if v.dtype == np.uint8]
            labels = np.zeros((count, deepest, *label_hw), np.float32)
            if self._labels is not None:
                volumes = [entries[i].label for i in members]
                stored = np.empty(labels.shape, np.result_type(*(volume.dtype for volume in volumes)))
                label_crops = [(v, label_boxes[i][0], d, -1) for i, v, d in zip(members, volumes, depths)]
                reads += _start_reads(self._labels, stored, label_crops)
                compare.append((stored, [entries[i].label_value for i in members], labels))
            inputs = None
            if input_hw is not None:
                sources = [entries[i].input for i in members]
                inputs = np.zeros((count, deepest, *input_hw), _as_float([v.dtype for v in sources]))
                input_crops = [(v, input_boxes[i][0], d, -1) for i, v, d in zip(members, sources, depths)]
                reads += _start_reads(self._inputs, inputs, input_crops)
                scale += [(inputs[j], d) for j, (v, d) in enumerate(zip(sources, depths)) if v.dtype == "u1"]
            buffers.append((members, depths, data, labels, inputs))
        vio.Completion.all(reads).get()
        if self.scale_uint8:
            for values, depth in scale:
                values[..., :depth, :, :] /= 255
        for stored, values, labels in compare:
            for j, value in enumerate(values):
                if value is None:
                    np.not_equal(stored[j], 0, out=labels[j])
                else:
                    np.equal(stored[j], value, out=labels[j])
                labels[j][stored[j] < 0] = LABEL_PADDING
        items: list[TomogramData | None] = [None] * len(boxes)
        for members, depths, data, labels, inputs in buffers:
            data_tensor, labels_tensor = torch.from_numpy(data), torch.from_numpy(labels)
            for j, (i, depth) in enumerate(zip(members, depths)):
                data[j, :, depth:] = 0
                labels[j, depth:] = LABEL_PADDING
                entry, view = entries[i], data_tensor[j, :, :depth]
                if inputs is not None:
                    source = inputs[j, :depth]
                else:
                    source = data[j, 0, :depth] if data.shape[1] == 1 else data[j, :, :depth]
                items[i] = TomogramData(
                    sample=entry.sample,
                    tomo_name=entry.tomo_name,
                    split_id=entry.split_id,
                    data=view,
                    label=labels_tensor[j, :depth],
                    aux_data={**boxes[i][3], "data": source},
                    batch_size=[],
                )
        if len(buffers) == 1:
            _, _, data, labels, _ = buffers[0]
            return PaddedTomograms(items, torch.from_numpy(data), torch.from_numpy(labels))
        return items
