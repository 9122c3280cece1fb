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
from ._boxes import (
    Box,
    Buffers,
    Entry,
    Placed,
    Volume,
    as_float,
    check_factor,
    label_voxel_size,
    start_reads,
    volume_crops,
)
from .collate import PaddedTomograms
from .types import FileData, TomogramData

__all__ = ["TomogramDataset"]

_Request = tuple[int, Box, Box, dict[str, Any]]
"""A box to read: the tomogram's index, where the box starts, its shape, and the item's first ``aux_data``."""


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
      for a random crop, ``"crop_origin"``, where its box starts in ``data``; and, where the files
      say it, ``"voxel_size"``, the size in Å ``(z, y, x)`` of a voxel of ``label`` (the tomogram's
      over the label's scale, else the label file's), which ``write_predictions`` writes.
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
        self._entries: dict[int, Entry] = {}

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
            The box of the tomogram and its label, with ``aux_data`` holding ``"data"`` (and
            ``"voxel_size"`` where the files say it) only.

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

    def _entry(self, index: int) -> Entry:
        if not -len(self.files) <= index < len(self.files):
            raise IndexError(f"tomogram {index} of a dataset of {len(self.files)}")
        index %= len(self.files)
        entry = self._entries.get(index)
        if entry is None:
            entry = self._entries[index] = self._resolve(index)
        return entry

    def _resolve(self, index: int) -> Entry:
        file = self.files[index]
        tomo_key = os.fspath(file.tomo_path)  # a key as given: a path, or an OME-Zarr store's URL
        tomo_path = Path(tomo_key)
        tomogram = Volume.query(self._tomograms, tomo_key, channels=True)
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
            label = Volume.query(self._labels, os.fspath(file.label_path))
            check_factor(tomogram, label, "label volume", file.label_path, tomo_key)
        if self._inputs is not None:
            source = Volume.query(self._inputs, tomo_key)
            check_factor(tomogram, source, "input volume", tomo_key, tomo_key)
        return Entry(
            sample=file.sample if file.sample is not None else tomo_path.absolute().parent.name,
            tomo_name=tomo_path.name,
            split_id=None if self.split_ids is None else self.split_ids[index],
            tomogram=tomogram,
            label=label,
            label_value=value,
            input=source,
            voxel_size=label_voxel_size(tomogram, label),
        )

    def _read(self, boxes: list[_Request]) -> list[TomogramData]:
        """Reads boxes ``(index, origin, shape, aux_data)`` of the tomograms, those of one shape
        (channels, height and width of data, label and input) into one buffer.

        Returns the tomograms in the order of ``boxes``: a ``PaddedTomograms`` when they all share a
        buffer, otherwise a list of views of the buffers of their shape.
        """
        placed = [Placed.of(self._entry(index), origin, shape, aux) for index, origin, shape, aux in boxes]
        groups: dict[tuple[Any, ...], list[int]] = {}
        for i, box in enumerate(placed):
            groups.setdefault(box.buffer_shape, []).append(i)
        buffers = [self._start(shape, members, placed) for shape, members in groups.items()]
        vio.Completion.all([read for buffer in buffers for read in buffer.reads]).get()
        items: list[TomogramData | None] = [None] * len(boxes)
        for buffer in buffers:
            buffer.finish(self.scale_uint8)
            for i, item in zip(buffer.members, buffer.items()):
                items[i] = item
        if len(buffers) == 1:
            return PaddedTomograms(
                items, torch.from_numpy(buffers[0].data), torch.from_numpy(buffers[0].labels)
            )
        return items

    def _start(self, shape: tuple[Any, ...], members: list[int], placed: Sequence[Placed]) -> Buffers:
        """Makes the buffers of boxes ``members`` of ``placed``, all of ``shape`` (``Placed.buffer_shape``),
        and starts reading their tomograms, labels and inputs into them."""
        channels, (height, width), label_hw, input_hw = shape
        boxes = [placed[i] for i in members]
        depths = [box.shape[0] for box in boxes]
        count, deepest = len(boxes), max(depths)
        tomograms = [box.entry.tomogram for box in boxes]
        data = np.empty((count, channels, deepest, height, width), as_float([v.dtype for v in tomograms]))
        crops = [
            (volume, box.origin, box.shape[0], c if volume.channels else -1)
            for box, volume in zip(boxes, tomograms)
            for c in range(channels)
        ]
        flat = np.reshape(data, (count * channels, deepest, height, width), copy=False)
        reads = start_reads(self._tomograms, flat, crops)
        labels = np.zeros((count, deepest, *label_hw), np.float32)
        stored = None
        if self._labels is not None:
            volumes = [box.entry.label for box in boxes]
            stored = np.empty(labels.shape, np.result_type(*(volume.dtype for volume in volumes)))
            reads += start_reads(
                self._labels, stored, volume_crops(volumes, [box.label for box in boxes], depths)
            )
        inputs = None
        if input_hw is not None:
            sources = [box.entry.input for box in boxes]
            inputs = np.zeros((count, deepest, *input_hw), as_float([v.dtype for v in sources]))
            reads += start_reads(
                self._inputs, inputs, volume_crops(sources, [box.input for box in boxes], depths)
            )
        return Buffers(members, boxes, data, labels, stored, inputs, reads)
