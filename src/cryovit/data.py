"""Tomograms and their labels read through vitrio, batched for a model, and its predictions written back.

``TomogramDataset`` reads the tomograms of a list of ``FileData`` (MRC, TIFF or HDF5) whole or as
random crops, as ``TomogramData``; ``collate_tomograms`` pads them into a ``BatchedTomogramData``;
``model_result`` turns a batch and the model's predictions into a ``BatchedModelResult``, and
``write_predictions`` writes its predictions as MRC or HDF5 files named after the tomograms.

Files and labels:

- A tomogram is a volume ``[D, H, W]`` (an MRC or TIFF volume, a stack of ``D`` sections, or an HDF5
  dataset), read as float32 ``[D, 1, H, W]``. In an HDF5 file it is the dataset ``data`` (or the one
  named by ``data_key``); ``cryovit.hdf5`` is the vitrio format plug-in that reads it.
- An HDF5 label file holds one volume per label, ``labels/<name>``; a voxel is in the label where the
  volume is not zero. ``FileData.labels`` is not used for such files: the file says what it holds.
- An MRC or TIFF label file holds one integer volume for all labels: 0 is background and
  ``FileData.labels[i]`` is the label of value ``i + 1``.

Crops read only their box from the files (``vio.read_patches_async``): a memory map for MRC, plain
TIFF and contiguous HDF5 datasets, a hyperslab for chunked or compressed HDF5 ones. All the tomograms
of ``__getitems__`` (which torch's ``DataLoader`` calls for a batch) are read at once on the
dataset's threads, straight into the padded tensors of their batch, which ``collate_tomograms`` then
takes without a copy.

In a batch, ``labels`` is int8: 0 and 1 for the slices of a tomogram and ``LABEL_PADDING`` (-1) for
the slices padded after it, which a loss leaves out with ``labels >= 0``; int8 keeps the labels of a
batch a quarter of the size float32 would.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

import vitrio as vio

from . import hdf5
from .types import BatchedModelResult, BatchedTomogramData, BatchedTomogramMetadata, FileData, TomogramData

__all__ = [
    "LABEL_PADDING",
    "TomogramDataset",
    "collate_tomograms",
    "model_result",
    "write_predictions",
]

LABEL_PADDING = -1
"""The label of the padded slices of a batch: neither background (0) nor foreground (1)."""

Box = tuple[int, int, int]


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

    def start_read(self, loader: vio.ImageLoader, origin: Box, out: np.ndarray) -> vio.Completion:
        """Starts reading the box of ``out``'s shape at ``origin`` into ``out``."""
        centre = np.asarray(origin) + np.asarray(out.shape) // 2
        if not self.sections:
            return vio.read_patches_async(loader, out[None], self.key, centre[None])
        return vio.Completion.gather(
            vio.read_patches_async(
                loader, out[z : z + 1], vio.ImageLocation(self.key, origin[0] + z), centre[None, 1:]
            )
            for z in range(out.shape[0])
        )


@dataclasses.dataclass(frozen=True)
class _Entry:
    """What the dataset learnt of one of its files the first time it read it."""

    sample: str
    tomo_name: str
    split_id: int | None
    tomogram: _Volume
    label: _Volume | None
    label_value: int | None


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
        workers: How many threads read; defaults to the machine's cores, at most 4.
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
        self._executor = vio.ThreadPoolExecutor(workers or min(4, os.cpu_count() or 1))
        registered = vio.formats.registered_formats()
        self._tomograms = vio.loader(
            cache=cache, formats=(hdf5.hdf5_format(data_key), *registered), executor=self._executor
        )
        self._labels = (
            None
            if label is None
            else vio.loader(
                cache=cache,
                formats=(hdf5.hdf5_format(f"labels/{label}"), *registered),
                executor=self._executor,
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
            ValueError: If the tomogram and the label volume differ in shape, or a file holds no volume.
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
        """Closes the files kept open and stops the threads; reading later opens and starts them again."""
        for loader in (self._tomograms, self._labels):
            if loader is not None:
                loader.readers.clear()
        self._executor.shutdown()

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
        tomo_path = Path(file.tomo_path)
        tomogram = _Volume.query(self._tomograms, tomo_path)
        label, value = None, None
        if self.label is not None:
            if file.label_path is None:
                raise KeyError(f"{tomo_path}: no label {self.label!r}: the tomogram has no label file")
            if hdf5.is_hdf5(file.label_path):
                names = hdf5.label_names(file.label_path)
            else:
                names = list(file.labels or [])
                value = names.index(self.label) + 1 if self.label in names else None
            if self.label not in names:
                raise KeyError(f"{file.label_path}: no label {self.label!r}; its labels are {names}")
            label = _Volume.query(self._labels, file.label_path)
            if label.shape != tomogram.shape:
                raise ValueError(
                    f"the tomogram {tomo_path} has shape {tomogram.shape}, "
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
        """Reads boxes ``(index, origin, shape, aux_data)`` into padded buffers, all at once."""
        shapes = [shape for _, _, shape, _ in boxes]
        shared = len({shape[1:] for shape in shapes}) == 1
        if shared:
            data, labels = _padded_buffers(shapes)
            slots = [(data[i, : shape[0]], labels[i, : shape[0]]) for i, shape in enumerate(shapes)]
        else:
            slots = [tuple(buffer[0] for buffer in _padded_buffers([shape])) for shape in shapes]
        reads, comparisons = [], []
        for (index, origin, shape, _), (data_slot, label_slot) in zip(boxes, slots):
            entry = self._entry(index)
            reads.append(entry.tomogram.start_read(self._tomograms, origin, data_slot.numpy()[:, 0]))
            if entry.label is None:
                continue
            stored = np.empty(shape, entry.label.dtype)
            reads.append(entry.label.start_read(self._labels, origin, stored))
            comparisons.append((stored, entry.label_value, label_slot.numpy().view(np.bool_)))
        vio.Completion.gather(reads).get()
        for stored, value, out in comparisons:
            if value is None:
                np.not_equal(stored, 0, out=out)
            else:
                np.equal(stored, value, out=out)
        items = []
        for (index, _, _, aux_data), (data_slot, label_slot) in zip(boxes, slots):
            entry = self._entry(index)
            items.append(
                TomogramData(
                    sample=entry.sample,
                    tomo_name=entry.tomo_name,
                    split_id=entry.split_id,
                    data=data_slot,
                    label=label_slot.view(torch.bool),
                    aux_data=aux_data,
                    batch_size=[],
                )
            )
        return _PaddedTomograms(items, data, labels) if shared else items


def _padded_buffers(shapes: Sequence[Box]) -> tuple[torch.Tensor, torch.Tensor]:
    """A float32 ``[B, D, 1, H, W]`` and an int8 ``[B, D, H, W]`` buffer for boxes of one height and width.

    ``D`` is the greatest depth; the slices past each box's depth are padding, filled with zeros and
    ``LABEL_PADDING``; the labels of the boxes are zeros. numpy fills them: torch's threads would
    contend with the reading ones.
    """
    depth, (height, width) = max(shape[0] for shape in shapes), shapes[0][1:]
    data = np.empty((len(shapes), depth, 1, height, width), dtype=np.float32)
    labels = np.zeros((len(shapes), depth, height, width), dtype=np.int8)
    for i, shape in enumerate(shapes):
        data[i, shape[0] :] = 0
        labels[i, shape[0] :] = LABEL_PADDING
    return torch.from_numpy(data), torch.from_numpy(labels)


class _PaddedTomograms(list):
    """The tomograms one ``__getitems__`` read, a list that also holds the padded buffers they are views of.

    ``collate_tomograms`` takes the buffers as its batch, without copying, while the list still holds
    those tomograms, in order, with their data and labels where they were read.
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
    buffers = tomograms.padded_buffers() if isinstance(tomograms, _PaddedTomograms) else None
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


def model_result(
    batch: BatchedTomogramData,
    preds: torch.Tensor,
    losses: dict[str, float] | None = None,
    metrics: dict[str, float] | None = None,
) -> BatchedModelResult:
    """The result of a model on a batch, per tomogram, with the padding removed, as numpy arrays.

    Args:
        batch: The batch the model was given.
        preds: The model's predictions for the batch as it is padded, ``[B, D, H, W]`` or
            ``[B, D, 1, H, W]``.
        losses: The losses of the batch; empty if None.
        metrics: The metrics of the batch; empty if None.

    Returns:
        The result: ``data`` float32 ``[D, H, W]`` per tomogram (``[D, C, H, W]`` with more than one
        channel), ``label`` uint8 ``[D, H, W]``, ``preds`` float32 ``[D, H, W]``.

    Raises:
        ValueError: If ``preds`` does not have the shape of the batch's labels.
    """
    if preds.ndim == batch.labels.ndim + 1 and preds.shape[2] == 1:
        preds = preds[:, :, 0]
    if preds.shape != batch.labels.shape:
        raise ValueError(
            f"predictions of shape {tuple(preds.shape)} do not fit a batch of labels "
            f"{tuple(batch.labels.shape)}"
        )
    sizes = batch.tomo_sizes.tolist()
    data = batch.tomo_batch.detach().to("cpu", torch.float32)
    if data.ndim == 5 and data.shape[2] == 1:
        data = data[:, :, 0]
    labels = batch.labels.detach().cpu()
    preds = preds.detach().to("cpu", torch.float32)
    identifiers = batch.metadata.identifiers
    split_id = batch.metadata.split_id
    return BatchedModelResult(
        num_tomos=len(sizes),
        samples=[sample for sample, _ in identifiers],
        tomo_names=[name for _, name in identifiers],
        split_id=None if split_id is None else [int(s) for s in split_id],
        data=[data[i, :n].numpy() for i, n in enumerate(sizes)],
        label=[labels[i, :n].numpy().astype(np.uint8) for i, n in enumerate(sizes)],
        preds=[preds[i, :n].numpy() for i, n in enumerate(sizes)],
        losses=dict(losses or {}),
        metrics=dict(metrics or {}),
        aux_data=batch.aux_data,
    )


def write_predictions(
    result: BatchedModelResult,
    directory: str | os.PathLike[str],
    file_format: Literal["mrc", "hdf5"] = "mrc",
) -> list[Path]:
    """Writes the predictions of a result, one file per tomogram, named after the tomogram.

    Tomogram ``name.ext`` of sample ``s`` is written to ``directory/s/name.mrc`` (the predictions,
    float32) or ``directory/s/name.hdf5`` (datasets ``data``, the tomogram, and ``preds``, so that the
    file is also a tomogram ``TomogramDataset`` reads). Write them apart from the tomograms: a file
    of the same name is replaced.

    Args:
        result: The result, as ``model_result`` makes it.
        directory: The folder to write in; it and the sample folders are made if missing.
        file_format: ``"mrc"`` or ``"hdf5"``.

    Returns:
        The paths written, one per tomogram.

    Raises:
        ValueError: If ``file_format`` is neither.
    """
    if file_format not in ("mrc", "hdf5"):
        raise ValueError(f"file_format is 'mrc' or 'hdf5', not {file_format!r}")
    paths = []
    for sample, name, data, preds in zip(result.samples, result.tomo_names, result.data, result.preds):
        path = Path(directory) / sample / f"{Path(name).stem}.{file_format}"
        path.parent.mkdir(parents=True, exist_ok=True)
        if file_format == "mrc":
            vio.write_single(preds, path)
        else:
            hdf5.write_datasets(path, {"data": data, "preds": preds})
        paths.append(path)
    return paths
