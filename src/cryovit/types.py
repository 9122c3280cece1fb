"""Custom types and dataclasses for CryoViT models.

The tomogram classes are tensordict tensorclasses made with ``nocast=True``, so that ``int`` fields
(``split_id``, ``min_slices``) keep their Python value instead of becoming 0-d tensors, and with
``skip_post_init_on_rebuild=True``, so that ``__post_init__`` checks data as it comes in (construction,
loading) and not again on every indexing, ``clone`` or ``torch.stack``. A ``list`` field of a batched
tensorclass is stored by tensordict as a stack along the batch dimension: it must hold one entry per
element of the batch, and indexing or ``unbind`` slices it with the tensors.

Saving and loading never unpickle, since a saved folder may come from someone else and a pickle runs
their code. ``memmap``, ``save`` and the like save every non-tensor field as JSON (in tensordict's
``meta.json``) and refuse a field that is not JSON (a numpy scalar, a ``Path``), which tensordict
would pickle; ``load``, ``load_memmap``, ``load_memmap_`` and ``load_`` refuse a folder holding a
pickle and load with tensordict's ``allow_pickle=False``; the tensors and numpy arrays of ``aux_data``
are saved beside, in the safetensors layout (``AUX_TENSORS``), and loaded as they were (``cryovit._io``
does this). Load a state dict with ``torch.load(path, weights_only=True)``, which reads tensors and
plain Python values without running code.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from tensordict import NonTensorData, tensorclass

from ._io import AUX_TENSORS as AUX_TENSORS  # the file named in the docstring above
from ._io import loading, saving
from ._tensorclass import WHOLE_LISTS, TensorClassMixin

__all__ = [
    "Sample",
    "ModelType",
    "FileData",
    "TomogramData",
    "BatchedTomogramMetadata",
    "BatchedTomogramData",
    "BatchedModelResult",
]


class Sample(enum.Enum):
    """Enum of all valid CryoET Samples."""

    BACHD = "BACHD"
    BACHD_Microtubules = "BACHD Microtubules"
    dN17_BACHD = "dN17 BACHD"
    Q109 = "Q109"
    Q109_Microtubules = "Q109 Microtubules"
    Q18 = "Q18"
    Q18_Microtubules = "Q18 Microtubules"
    Q20 = "Q20"
    Q53 = "Q53"
    Q53_KD = "Q53 PIAS1"
    Q66 = "Q66"
    Q66_GRFS1 = "Q66 GRFS1"
    Q66_KD = "Q66 PIAS1"
    WT = "Wild Type"
    WT_Microtubules = "Wild Type Microtubules"
    cancer = "Cancer"
    AD = "AD"
    AD_Abeta = "AD Abeta"
    Aged = "Aged"
    Young = "Young"
    RGC_CM = "RGC CM"
    RGC_control = "RGC Control"
    RGC_naPP = "RGC naPP"
    RGC_PP = "RGC PP"
    CZI_Algae = "Algae"
    CZI_Campy_C = "Campy C"
    CZI_Campy_CDel = "Campy C-Deletion"
    CZI_Campy_F = "Campy F"
    CZI_Fibroblast = "Mouse Fibroblast"


class ModelType(enum.Enum):
    """Enum of all valid model types."""

    CRYOVIT = "cryovit"
    UNET3D = "unet3d"
    SAM2 = "sam2"
    MEDSAM = "medsam"


@dataclasses.dataclass
class FileData:
    """This class represents the file data for a single tomogram.

    Args:
        tomo_path: A path to the raw tomogram data: a file, or an OME-Zarr store (a path, or a URL
            given as a string, such as ``"s3://bucket/tomo.zarr"``).
        label_path: A path to the segmentation labels (a file, or an OME-Zarr label volume). None if
            not available.
        labels: The label names. None if not available.
        sample: The sample. None if not available.
    """

    tomo_path: Path | str
    label_path: Path | str | None = None
    labels: list[str] | None = None
    sample: str | None = None


@tensorclass(nocast=True, skip_post_init_on_rebuild=True)
class TomogramData(TensorClassMixin):
    """One tomogram and its segmentation labels, as a tensorclass (usually of ``batch_size=[]``).

    ``data`` is laid out either way the CryoViT pipeline makes it: channel-first, ``[C, D, H, W]`` (or
    ``[D, H, W]``), as its datasets give it, or depth-first, ``[D, C, H, W]``, as its DINO feature
    extraction does (the tomogram resized for the model, ``[D, 1, H', W']``; precomputed features,
    ``[D, 1536, h, w]``). ``label`` is ``[D, H, W]`` or ``[1, D, H, W]``; its height and width may
    differ from the data's (features of patches, a resized tomogram). The layout is read from the
    depths: data is channel-first if its axis -3 has the label's depth, else depth-first if its first
    axis has (``depth_first``); data and label are kept as given. numpy arrays are cast to tensors
    (without a copy). A label holds 1 (in), 0 (out) and -1 (not annotated, left out of a loss): the
    spec's type says ``BoolTensor``, which cannot hold -1, so any dtype is taken (``TomogramDataset``
    gives float32).

    Attributes:
        sample: The sample the tomogram comes from.
        tomo_name: The file name of the tomogram.
        split_id: The split (e.g. cross-validation fold) the tomogram is in, or None.
        data: The tomogram, a float ``[C, D, H, W]``, ``[D, C, H, W]`` or ``[D, H, W]`` tensor or numpy
            array (after the batch dimensions, if any).
        label: The segmentation labels, a ``[D, H', W']`` or ``[1, D, H', W']`` tensor or numpy array.
        aux_data: Optional auxiliary data, kept as it is given (numpy arrays stay numpy arrays).
        batch_size: The batch size of the tensorclass (keyword only).
        device: The device of the tensors, or None (keyword only).
        names: The names of the batch dimensions, or None (keyword only).

    Raises:
        TypeError: If ``data`` or ``label`` is neither a tensor nor a numpy array.
        ValueError: If ``data`` is not a 3-D or 4-D float tensor, ``label`` not ``[D, H, W]`` or
            ``[1, D, H, W]``, or no reading of ``data`` has the label's depth; the message gives both
            shapes.
    """

    sample: str
    tomo_name: str
    split_id: int | None
    data: torch.FloatTensor
    label: torch.BoolTensor
    aux_data: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        """Casts numpy arrays to tensors and checks the shapes and type of ``data`` and ``label``."""
        name = f"{self.sample}/{self.tomo_name}"
        for field in ("data", "label"):
            value = getattr(self, field)
            if isinstance(value, np.ndarray):
                setattr(self, field, torch.from_numpy(value))
        data, label, nb = self.data, self.label, self.batch_dims
        if not isinstance(data, torch.Tensor) or not isinstance(label, torch.Tensor):
            raise TypeError(
                f"tomogram {name}: data and label must be tensors or numpy arrays, "
                f"got {type(data).__name__} and {type(label).__name__}"
            )
        if data.ndim - nb not in (3, 4) or not data.is_floating_point():
            raise ValueError(
                f"tomogram {name}: data must be a float [C, D, H, W], [D, C, H, W] or [D, H, W] tensor, "
                f"got {data.dtype} of shape {tuple(data.shape[nb:])}"
            )
        if _depth_first(data.shape[nb:], label.shape[nb:]) is None:
            raise ValueError(
                f"tomogram {name}: data of shape {tuple(data.shape[nb:])} and label of shape "
                f"{tuple(label.shape[nb:])} do not agree in depth: data is [C, D, H, W], [D, C, H, W] or "
                "[D, H, W] and label [D, H, W] or [1, D, H, W], of the same D"
            )

    @property
    def depth_first(self) -> bool:
        """Whether ``data`` is laid out ``[D, C, H, W]``, not ``[C, D, H, W]`` or ``[D, H, W]``.

        Read from the depths, as ``__post_init__`` checks them: channel-first where both fit.
        """
        nb = self.batch_dims
        return bool(_depth_first(self.data.shape[nb:], self.label.shape[nb:]))


def _depth_first(data: torch.Size, label: torch.Size) -> bool | None:
    """Whether data of shape ``data`` is depth-first for a label of shape ``label``: False for
    channel-first (or 3-D) data of the label's depth, True for ``[D, C, H, W]`` data of it, None if
    neither has it or the label is not ``[D, H, W]`` or ``[1, D, H, W]``."""
    if not (len(label) == 3 or (len(label) == 4 and label[0] == 1)):
        return None
    depth = label[-3]
    if data[-3] == depth:
        return False
    if len(data) == 4 and data[0] == depth:
        return True
    return None


@tensorclass(nocast=True, skip_post_init_on_rebuild=True)
class BatchedTomogramMetadata(TensorClassMixin):
    """The names and ids of the tomograms of a batch, as a tensorclass.

    As the CryoViT pipeline builds it: ``samples`` and ``tomo_names`` are the distinct values, in the
    order first seen, and ``unique_id[i] = (j, k)`` says tomogram ``i`` is of sample ``samples[j]`` and
    named ``tomo_names[k]``. It is made with ``batch_size=[]`` (lists of distinct values have no entry
    per tomogram); put in a ``BatchedTomogramData`` of ``batch_size=[B]`` it takes that batch size,
    ``unique_id`` and ``split_id`` are sliced with the batch, and the two lists are kept whole (each
    is one tensordict ``NonTensorData``, not a stack), so that ``identifiers`` of an indexed or
    unbound batch still names its tomograms.

    Attributes:
        samples: The distinct samples of the batch.
        tomo_names: The distinct file names of the batch.
        unique_id: A ``[B, 2]`` long tensor, as above (``from_names`` makes it).
        split_id: The split of each tomogram (ints or 0-d int tensors, or a ``[B]`` tensor), kept as a
            ``[B]`` int32 tensor, or None.
        batch_size: The batch size of the tensorclass, ``[]`` (keyword only).
        device: The device of the tensors, or None (keyword only).
        names: The names of the batch dimensions, or None (keyword only).

    Raises:
        ValueError: If ``unique_id`` is not a tensor whose last dimension is 2.
    """

    samples: list[str]
    tomo_names: list[str]
    unique_id: torch.LongTensor
    split_id: list[torch.IntTensor] | None

    def __post_init__(self) -> None:
        """Keeps the lists whole, ``split_id`` as one tensor, and checks the shape of ``unique_id``."""
        if not isinstance(self.unique_id, torch.Tensor) or self.unique_id.shape[-1:] != (2,):
            raise ValueError(f"unique_id must be a [B, 2] tensor, got {self.unique_id!r}")
        self.samples = NonTensorData(list(self.samples))
        self.tomo_names = NonTensorData(list(self.tomo_names))
        if self.split_id is not None and not isinstance(self.split_id, torch.Tensor):
            self.split_id = torch.as_tensor(
                [int(s) for s in self.split_id], dtype=torch.int32, device=self.unique_id.device
            )

    @classmethod
    def from_names(
        cls,
        samples: Sequence[str],
        tomo_names: Sequence[str],
        split_id: Sequence[int] | None = None,
        device: torch.device | str | None = None,
    ) -> BatchedTomogramMetadata:
        """Makes the metadata of a batch from the sample and name of each of its tomograms.

        Args:
            samples: The sample of each tomogram.
            tomo_names: The file name of each tomogram.
            split_id: The split of each tomogram, or None.
            device: The device of the tensors, or None.

        Returns:
            The metadata, of ``batch_size=[]``, with the distinct samples and names and ``unique_id``.

        Raises:
            ValueError: If the sequences are not all as long.
        """
        if len(samples) != len(tomo_names) or (split_id is not None and len(split_id) != len(samples)):
            raise ValueError("samples, tomo_names and split_id must have one entry per tomogram")
        distinct_samples = list(dict.fromkeys(samples))
        distinct_names = list(dict.fromkeys(tomo_names))
        ids = [[distinct_samples.index(s), distinct_names.index(t)] for s, t in zip(samples, tomo_names)]
        return cls(
            samples=distinct_samples,
            tomo_names=distinct_names,
            unique_id=torch.tensor(ids, dtype=torch.long, device=device).reshape(-1, 2),
            split_id=None if split_id is None else list(split_id),
            batch_size=[],
            device=device,
        )

    @property
    def identifiers(self) -> tuple[list[str], list[str]]:
        """The sample and the name of each tomogram: ``(samples_per_tomogram, names_per_tomogram)``.

        Read through ``unique_id``, so that it follows indexing and ``unbind`` of the batch: the
        pipeline's evaluation steps do ``samples, tomo_names = batch.metadata.identifiers``.
        """
        rows = self.unique_id.reshape(-1, 2).tolist()
        samples, names = self.samples, self.tomo_names
        return [samples[j] for j, _ in rows], [names[k] for _, k in rows]


@tensorclass(nocast=True, skip_post_init_on_rebuild=True)
class BatchedTomogramData(TensorClassMixin):
    """A batch of tomograms padded to the same depth, as a tensorclass of ``batch_size=[B]``.

    Attributes:
        tomo_batch: The tomograms, a ``[B, D, C, H, W]`` or ``[B, D, H, W]`` tensor, each padded
            after its last slice to the greatest depth ``D``.
        tomo_sizes: A ``[B]`` integer tensor, the depth of each tomogram before padding
            (``collate_tomograms`` makes it int32, as the pipeline does).
        labels: The segmentation labels of the tomograms, ``[B, D, H', W']``, padded alike.
        metadata: The names and ids of the tomograms.
        min_slices: The least number of slices a tomogram of the batch may have: an int, or a 0-d
            tensor, which is kept as its int.
        aux_data: Optional auxiliary data, a list of values per key for the tomograms of the batch,
            kept whole (each item of ``unbind`` gets the same dict). The pipeline's test and predict
            steps read ``aux_data["data"]``, the unpadded input of each tomogram.
        batch_size: The batch size of the tensorclass, ``[B]`` (keyword only).
        device: The device of the tensors, or None (keyword only).
        names: The names of the batch dimensions, or None (keyword only).
    """

    tomo_batch: torch.Tensor
    tomo_sizes: torch.Tensor
    labels: torch.Tensor
    metadata: BatchedTomogramMetadata
    min_slices: int
    aux_data: dict[str, list[Any]] | None = None

    @property
    def num_tomos(self) -> int:
        """Returns the number of tomograms in the batch."""
        return self.tomo_batch.shape[0]

    @property
    def num_slices(self) -> int:
        """Returns the maximum number of slices in the batch."""
        return self.tomo_batch.shape[1]

    @property
    def flat_tomo_batch(self) -> torch.Tensor:
        """Returns a ``[BxD, C, H, W]`` tensor from a ``[B, D, C, H, W]`` tensor (C is optional).

        The reshape of ``tomo_batch``, padding included, so that ``flat.view(B, D, ...)`` gives the
        batch back; slice ``n`` of tomogram ``b`` is at ``b * D + n``.
        """
        return self.tomo_batch.reshape(-1, *self.tomo_batch.shape[2:])

    def index_to_flat_batch(self, idx: int) -> torch.Tensor:
        """Returns the indices in ``flat_tomo_batch`` of slice ``idx`` of each tomogram that has it.

        ``flat_tomo_batch[index_to_flat_batch(n)]`` equals ``tomo_batch[tomo_sizes > n, n]``: the
        index of tomogram ``b`` is ``b * D + n``.

        Args:
            idx: The slice, from 0 to ``num_slices - 1``.

        Returns:
            A 1-D long tensor, one index per tomogram deeper than ``idx``, in batch order.

        Raises:
            IndexError: If ``idx`` is negative or not less than ``num_slices``.
        """
        if not 0 <= idx < self.num_slices:
            raise IndexError(f"slice {idx} is out of range for a batch of {self.num_slices} slices")
        tomograms = torch.arange(self.num_tomos, device=self.tomo_sizes.device)
        return (tomograms * self.num_slices + idx)[self.tomo_sizes > idx]


_batch_init = BatchedTomogramData.__init__


@functools.wraps(_batch_init)
def _init_batch(self: BatchedTomogramData, *args: Any, **kwargs: Any) -> None:
    """Takes ``min_slices`` as an int or a 0-d tensor (which a batch of ``[B]`` could not hold)."""
    args = list(args)
    if len(args) > 4:
        args[4] = _as_int(args[4])
    elif "min_slices" in kwargs:
        kwargs["min_slices"] = _as_int(kwargs["min_slices"])
    _batch_init(self, *args, **kwargs)


def _as_int(value: Any) -> Any:
    return int(value) if isinstance(value, torch.Tensor) and value.ndim == 0 else value


BatchedTomogramData.__init__ = _init_batch  # type: ignore[method-assign]

WHOLE_LISTS[BatchedTomogramMetadata] = ("samples", "tomo_names")


@dataclasses.dataclass
class BatchedModelResult:
    """This class represents the model result from a batch of tomograms, organized per tomogram.

    Args:
        num_tomos: The number of tomograms in the batch.
        samples: The sample for each tomogram in the batch.
        tomo_names: The file name for each tomogram in the batch.
        split_id: The optional split id for each tomogram in the batch.
        data: The raw tomogram data for each tomogram in the batch.
        label: The true segmentation labels for each tomogram in the batch.
        preds: The model predictions for each tomogram in the batch.
        losses: A dictionary of losses for each tomogram in the batch.
        metrics: A dictionary of metrics for each tomogram in the batch.
        aux_data: An optional dictionary containing auxiliary data for each tomogram in the batch.
    """

    num_tomos: int
    samples: list[str]
    tomo_names: list[str]
    split_id: list[int] | None
    data: list[npt.NDArray[np.float32]]
    label: list[npt.NDArray[np.uint8]]
    preds: list[npt.NDArray[np.float32]]
    losses: dict[str, float]
    metrics: dict[str, float]
    aux_data: dict[str, list[Any]] | None = None


# tensordict 0.15 sets a deprecated fields() on every tensorclass, whatever the class defines; keep the
# classmethod of the spec, as dataclasses.fields, which it will be replaced by.
for _cls in (TomogramData, BatchedTomogramMetadata, BatchedTomogramData):
    _cls.fields = classmethod(dataclasses.fields)  # type: ignore[assignment]


# Saving checks that every non-tensor field is JSON, which tensordict writes in meta.json, the tensors
# of aux_data going to AUX_TENSORS; loading never unpickles: a saved folder may come from someone
# else, and a pickle runs their code.
for _cls in (TomogramData, BatchedTomogramMetadata, BatchedTomogramData):
    for _name in ("memmap", "memmap_", "memmap_like", "save", "dumps"):
        setattr(_cls, _name, saving(_cls.__dict__[_name]))
    for _name in ("load", "load_memmap"):
        setattr(_cls, _name, loading(_cls.__dict__[_name].__func__))
del _cls, _name
