"""A model's predictions on a batch: ``model_result`` per tomogram, ``write_predictions`` to files."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Literal

import numpy as np
import torch

import vitrio as vio
from vitrio.formats import open_subfolder, writing_in

from . import hdf5
from .types import BatchedModelResult, BatchedTomogramData

__all__ = ["model_result", "write_predictions"]


def model_result(
    batch: BatchedTomogramData,
    preds: torch.Tensor,
    losses: dict[str, float] | None = None,
    metrics: dict[str, float] | None = None,
) -> BatchedModelResult:
    """The result of a model on a batch, per tomogram, with the padding removed, as numpy arrays.

    Args:
        batch: The batch the model was given.
        preds: The model's predictions for the batch as it is padded, of the shape of its labels
            (``[B, D, H, W]``, or ``[B, D, 1, H, W]``).
        losses: The losses of the batch; empty if None.
        metrics: The metrics of the batch; empty if None.

    Returns:
        The result, ``samples`` and ``tomo_names`` from ``batch.metadata.identifiers``: ``data`` the
        input of each tomogram as float32 (``batch.aux_data["data"]``, which ``collate_tomograms``
        fills, ``[D, H, W]``; else from ``tomo_batch``: ``[D, H, W]``, or ``[C, D, H, W]`` with more
        than one channel), ``label`` int8 ``[D, H, W]`` (-1 where not annotated, which the spec's
        uint8 could not hold), ``preds`` float32 ``[D, H, W]``.

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
    inputs = (batch.aux_data or {}).get("data")
    if inputs is None:
        padded = batch.tomo_batch.detach()
        if padded.ndim == 5:
            padded = padded[:, :, 0] if padded.shape[2] == 1 else padded.movedim(2, 1)
        inputs = [padded[i, ..., :n, :, :] for i, n in enumerate(sizes)]
    labels = batch.labels.detach().cpu()
    preds = preds.detach().to("cpu", torch.float32)
    samples, tomo_names = batch.metadata.identifiers
    split_id = batch.metadata.split_id
    return BatchedModelResult(
        num_tomos=len(sizes),
        samples=samples,
        tomo_names=tomo_names,
        split_id=None if split_id is None else [int(s) for s in split_id.reshape(-1)],
        data=[torch.as_tensor(x).detach().to("cpu", torch.float32).numpy() for x in inputs],
        label=[labels[i, :n].numpy().astype(np.int8) for i, n in enumerate(sizes)],
        preds=[preds[i, :n].numpy() for i, n in enumerate(sizes)],
        losses=dict(losses or {}),
        metrics=dict(metrics or {}),
        aux_data=batch.aux_data,
    )


def _component(name: str, what: str) -> str:
    """``name`` if it is one plain component of a path, not empty, ``.``, ``..``, absolute or nested.

    Raises:
        ValueError: Otherwise.
    """
    separators = {os.sep, "/"} | ({os.altsep} if os.altsep else set())
    if name in ("", ".", "..") or "\0" in name or any(sep in name for sep in separators):
        raise ValueError(f"the {what} {name!r} is not a plain file or folder name; it is not written")
    return name


def write_predictions(
    result: BatchedModelResult,
    directory: str | os.PathLike[str],
    file_format: Literal["mrc", "hdf5"] = "mrc",
) -> list[Path]:
    """Writes the predictions of a result, one file per tomogram, named after the tomogram.

    Tomogram ``name.ext`` of sample ``s`` is written to ``directory/s/name.mrc`` (the predictions,
    float32, of the voxel size in Å that ``aux_data["voxel_size"]`` gives, which ``TomogramDataset``
    takes from the files: one number or ``(z, y, x)``; none where it gives None) or
    ``directory/s/name.hdf5`` (datasets ``data``, the tomogram, and ``preds``, so that the file is
    also a tomogram ``TomogramDataset`` reads; HDF5 keeps no voxel size). Write them apart from the
    tomograms: a file of the same name is replaced. Sample and tomogram names must be plain names (no
    separator, not ``..``): names that came with the data cannot place a file elsewhere. Each
    sample's folder is made and opened once, without following a symbolic link, before anything is
    written, and its files are made in the folder so opened, so a folder swapped for a link meanwhile
    cannot redirect them.

    Args:
        result: The result, as ``model_result`` makes it.
        directory: The folder to write in; it and the sample folders are made if missing.
        file_format: ``"mrc"`` or ``"hdf5"``.

    Returns:
        The paths written, one per tomogram.

    Raises:
        ValueError: If ``file_format`` is neither, a sample or tomogram name is not a plain name, or
            a sample's folder is a symbolic link; no file is written then. If a tomogram's voxel
            size is not one or three positive numbers; the files of the tomograms before it are
            written then.
        NotADirectoryError: If a file lies where a sample's folder goes; no file is written then.
    """
    if file_format not in ("mrc", "hdf5"):
        raise ValueError(f"file_format is 'mrc' or 'hdf5', not {file_format!r}")
    directory = Path(directory)
    names = [
        (_component(sample, "sample"), f"{Path(_component(name, 'tomogram name')).stem}.{file_format}")
        for sample, name in zip(result.samples, result.tomo_names)
    ]
    directory.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as opened:
        root = _opened(opened, os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
        folders = {}
        for sample, _ in names:
            if sample not in folders:
                folders[sample] = _opened(opened, open_subfolder(root, sample, str(directory / sample)))
        paths = []
        sizes = (result.aux_data or {}).get("voxel_size") or [None] * len(names)
        for (sample, name), data, preds, size in zip(names, result.data, result.preds, sizes):
            path = directory / sample / name
            with writing_in(path.parent, folders[sample]):
                if file_format == "mrc":
                    vio.write_single(preds, path, voxel_size=size)
                else:
                    hdf5.write_datasets(path, {"data": data, "preds": preds})
            paths.append(path)
    return paths


def _opened(stack: contextlib.ExitStack, fd: int) -> int:
    """``fd``, closed when ``stack`` closes."""
    stack.callback(os.close, fd)
    return fd
