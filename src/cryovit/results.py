"""A model's predictions on a batch: ``model_result`` per tomogram, ``write_predictions`` to files."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import numpy as np
import torch

import vitrio as vio

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


def _prediction_path(directory: Path, sample: str, name: str, file_format: str) -> Path:
    """Where the predictions of tomogram ``name`` of ``sample`` go in ``directory``.

    Raises:
        ValueError: If the sample or tomogram name is not a plain name, or the path resolves outside.
    """
    stem = Path(_component(name, "tomogram name")).stem
    return _inside(directory, directory / _component(sample, "sample") / f"{stem}.{file_format}")


def _inside(directory: Path, path: Path) -> Path:
    """``path``, once its resolved form (links followed) is checked to lie inside ``directory``.

    Raises:
        ValueError: If it does not.
    """
    root, resolved = directory.resolve(), path.resolve()
    if not resolved.is_relative_to(root):
        raise ValueError(f"{path}: resolves to {resolved}, outside {root}; it is not written")
    return path


def write_predictions(
    result: BatchedModelResult,
    directory: str | os.PathLike[str],
    file_format: Literal["mrc", "hdf5"] = "mrc",
) -> list[Path]:
    """Writes the predictions of a result, one file per tomogram, named after the tomogram.

    Tomogram ``name.ext`` of sample ``s`` is written to ``directory/s/name.mrc`` (the predictions,
    float32) or ``directory/s/name.hdf5`` (datasets ``data``, the tomogram, and ``preds``, so that the
    file is also a tomogram ``TomogramDataset`` reads). Write them apart from the tomograms: a file
    of the same name is replaced. Sample and tomogram names must be plain names (no separator, not
    ``..``), and each path must resolve inside ``directory``: names that came with the data cannot
    place a file elsewhere.

    Args:
        result: The result, as ``model_result`` makes it.
        directory: The folder to write in; it and the sample folders are made if missing.
        file_format: ``"mrc"`` or ``"hdf5"``.

    Returns:
        The paths written, one per tomogram.

    Raises:
        ValueError: If ``file_format`` is neither, or a sample or tomogram name would place a file
            outside ``directory``; nothing is written then.
    """
    if file_format not in ("mrc", "hdf5"):
        raise ValueError(f"file_format is 'mrc' or 'hdf5', not {file_format!r}")
    directory = Path(directory)
    paths = [
        _prediction_path(directory, sample, name, file_format)
        for sample, name in zip(result.samples, result.tomo_names)
    ]
    for path, data, preds in zip(paths, result.data, result.preds):
        path.parent.mkdir(parents=True, exist_ok=True)
        _inside(directory, path)  # again, now that the sample's folder is there
        if file_format == "mrc":
            vio.write_single(preds, path)
        else:
            hdf5.write_datasets(path, {"data": data, "preds": preds})
    return paths
