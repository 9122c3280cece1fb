"""Saving and loading cryovit's tensorclasses without a pickle.

``saving`` wraps tensordict's ``memmap``, ``save`` and the like: every non-tensor field must be JSON
(tensordict writes it in ``meta.json``, and would pickle anything else), and the tensors and numpy
arrays of ``aux_data`` go to ``AUX_TENSORS`` beside, in the safetensors layout. ``loading`` wraps
``load`` and ``load_memmap``: a folder holding a pickle is refused, tensordict loads with
``allow_pickle=False``, and the tensors and arrays of ``aux_data`` are read back from ``AUX_TENSORS`` by
hand. ``arrays_as_tensors`` and ``tensors_as_arrays`` carry the numpy arrays of ``aux_data`` through a
state dict as tensors, which ``torch.load(weights_only=True)`` reads.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import is_tensor_collection

from vitrio.formats import new_file, open_readonly

__all__ = [
    "AUX_TENSORS",
    "arrays_as_tensors",
    "check_json",
    "loading",
    "refuse_pickles",
    "saving",
    "tensors_as_arrays",
]


def check_json(value: Any, where: str) -> None:
    """Raises TypeError unless the non-tensor fields of ``value`` (a tensorclass) are JSON values.

    tensordict saves such a field in its ``meta.json``, and pickles anything else.
    """
    for field in dataclasses.fields(value):
        item = getattr(value, field.name)
        if isinstance(item, torch.Tensor):
            continue
        if is_tensor_collection(item):
            if dataclasses.is_dataclass(item):
                check_json(item, f"{where}.{field.name}")
            continue
        try:
            json.dumps(item, allow_nan=False)
        except (TypeError, ValueError) as error:
            raise TypeError(
                f"{where}.{field.name}: a {type(item).__name__} is not saved: a non-tensor field holds "
                "JSON values only (str, int, float, bool, None, lists and dicts of them), so that "
                f"loading it needs no pickle ({error})"
            ) from error


def refuse_pickles(prefix: str | Path) -> None:
    """Raises ValueError if the saved folder ``prefix`` holds a pickle, or anything but folders and
    regular files (a FIFO would block the load, a link could read another file), anywhere."""
    for folder, folders, names in os.walk(prefix):
        for name in folders + names:
            path = os.path.join(folder, name)
            mode = os.lstat(path).st_mode
            if not (stat.S_ISREG(mode) or (stat.S_ISDIR(mode) and name in folders)):
                raise ValueError(f"{path}: not a regular file or folder, which a saved folder holds only")
            if name.endswith((".pickle", ".pkl")):
                raise ValueError(
                    f"{path}: a pickle, which is never loaded (it could run any "
                    "code); the fields of cryovit's types are saved as JSON"
                )


AUX_TENSORS = "aux_data_tensors.safetensors"
"""The file of a saved folder holding the tensors of ``aux_data``, in the safetensors layout: an
8-byte little-endian header length, a JSON header naming each tensor's type, shape and byte range,
then the raw bytes. Nothing in it can run code."""

_SAFE_TYPES = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}
_TORCH_TYPES = {code: dtype for dtype, code in _SAFE_TYPES.items()}


def _tensor_bytes(tensors: Sequence[torch.Tensor]) -> bytes:
    """``tensors`` in the safetensors layout, named "0", "1", ..."""
    header: dict[str, Any] = {}
    blobs: list[bytes] = []
    offset = 0
    for i, tensor in enumerate(tensors):
        if tensor.dtype not in _SAFE_TYPES:
            raise ValueError(f"aux_data holds a tensor of {tensor.dtype}, which cannot be saved")
        blob = tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        header[str(i)] = {
            "dtype": _SAFE_TYPES[tensor.dtype],
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + len(blob)],
        }
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text + b"".join(blobs)


def _read_tensors(path: Path) -> list[torch.Tensor]:
    """The tensors a file of ``_tensor_bytes`` holds.

    Raises:
        ValueError: If the file is not of that layout, naming it.
    """
    with open(open_readonly(os.fspath(path)), "rb") as file:
        content = file.read()
    try:
        length = int.from_bytes(content[:8], "little")
        if len(content) < 8 or length > len(content) - 8:
            raise ValueError("its header is longer than the file")
        header = json.loads(content[8 : 8 + length])
        data = memoryview(content)[8 + length :]
        tensors = []
        for i in range(len(header)):
            entry = header[str(i)]
            dtype = _TORCH_TYPES[entry["dtype"]]
            shape = [int(n) for n in entry["shape"]]
            begin, end = (int(n) for n in entry["data_offsets"])
            count = int(np.prod(shape, dtype=np.int64))
            if min(shape, default=0) < 0 or not 0 <= begin <= end <= len(data):
                raise ValueError(f"tensor {i} lies outside the file")
            if end - begin != count * torch.empty((), dtype=dtype).element_size():
                raise ValueError(f"tensor {i} does not fill its bytes")
            raw = torch.frombuffer(bytearray(data[begin:end]), dtype=torch.uint8) if end > begin else None
            tensors.append(torch.empty(shape, dtype=dtype) if raw is None else raw.view(dtype).reshape(shape))
    except (KeyError, TypeError, ValueError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: the tensors of aux_data cannot be loaded: {error}") from error
    return tensors


_MARK = "__cryovit_aux_tensor__"
_ARRAY = "__cryovit_aux_array__"
"""``{_MARK: n}`` stands for tensor ``n`` of ``AUX_TENSORS`` in a saved ``aux_data``, ``{_ARRAY: n}`` for
it as a numpy array; in a state dict, ``{_ARRAY: tensor}`` stands for a numpy array."""


def _map_aux(aux: dict[str, Any], convert: Any) -> dict[str, Any]:
    """``aux`` with ``convert`` applied to each value, and to each item of a list value."""
    return {
        key: [convert(v) for v in value] if isinstance(value, list) else convert(value)
        for key, value in aux.items()
    }


def _is_mark(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and (_MARK in value or _ARRAY in value)


def _array_tensor(array: np.ndarray) -> torch.Tensor | None:
    """``array`` as a tensor (of its memory where it is contiguous and writable), or None where torch
    has no tensor of its type (objects, strings, another byte order)."""
    try:
        return torch.from_numpy(np.require(array, requirements="CW"))
    except (TypeError, ValueError):
        return None


def _split_aux(aux: Any) -> tuple[Any, list[torch.Tensor]]:
    """``aux`` with each tensor and numpy array (a value, or an item of a list value) replaced by a
    mark, and the tensors; ``aux`` itself when it holds none."""
    if not isinstance(aux, dict):
        return aux, []
    tensors: list[torch.Tensor] = []

    def mark(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            tensors.append(value.detach().cpu().clone())
            return {_MARK: len(tensors) - 1}
        tensor = _array_tensor(value) if isinstance(value, np.ndarray) else None
        if tensor is None:
            return value
        tensors.append(tensor)
        return {_ARRAY: len(tensors) - 1}

    marked = _map_aux(aux, mark)
    return (marked, tensors) if tensors else (aux, [])


def _join_aux(aux: Any, tensors: Sequence[torch.Tensor]) -> Any:
    """The inverse of ``_split_aux``."""

    def unmark(value: Any) -> Any:
        if not _is_mark(value):
            return value
        if _MARK in value:
            return tensors[value[_MARK]]
        return tensors[value[_ARRAY]].numpy()

    return _map_aux(aux, unmark)


def _holds_marks(aux: Any) -> bool:
    if not isinstance(aux, dict):
        return False
    values = [v for value in aux.values() for v in (value if isinstance(value, list) else [value])]
    return any(_is_mark(v) for v in values)


def arrays_as_tensors(aux: dict[str, Any]) -> dict[str, Any]:
    """``aux`` for a state dict: each numpy array (a value, or an item of a list value) as
    ``{_ARRAY: tensor}``, which ``torch.load(weights_only=True)`` reads."""

    def mark(value: Any) -> Any:
        tensor = _array_tensor(value) if isinstance(value, np.ndarray) else None
        return value if tensor is None else {_ARRAY: tensor}

    return _map_aux(aux, mark)


def tensors_as_arrays(aux: dict[str, Any]) -> dict[str, Any]:
    """The inverse of ``arrays_as_tensors``."""

    def unmark(value: Any) -> Any:
        if isinstance(value, dict) and set(value) == {_ARRAY} and isinstance(value[_ARRAY], torch.Tensor):
            return value[_ARRAY].detach().cpu().numpy()
        return value

    return _map_aux(aux, unmark)


def _set_aux(obj: Any, aux: Any) -> None:
    """Sets ``aux_data`` of ``obj``, which saving may have locked."""
    locked = obj.is_locked
    if locked:
        obj.unlock_()
    obj.set("aux_data", aux)
    if locked:
        obj.lock_()


def saving(method: Any) -> Any:
    @functools.wraps(method)
    def save(self: Any, prefix: str | Path | None = None, *args: Any, **kwargs: Any) -> Any:
        aux = getattr(self, "aux_data", None)
        marked, tensors = _split_aux(aux)
        if tensors and prefix is None:
            marked = aux  # nothing is written to disk
        if marked is not aux:
            _set_aux(self, marked)
        try:
            check_json(self, type(self).__name__)
            result = method(self, prefix, *args, **kwargs)
        finally:
            if marked is not aux:
                _set_aux(self, aux)
        if marked is not aux:
            with new_file(Path(prefix) / AUX_TENSORS) as partial, partial.file() as stream:
                stream.write(_tensor_bytes(tensors))
            if result is not self and dataclasses.is_dataclass(result):
                _set_aux(result, aux)
        return result

    return save


def _restore_aux(obj: Any, prefix: str | Path) -> Any:
    """Puts the tensors of ``prefix``'s ``AUX_TENSORS`` back into the ``aux_data`` of loaded ``obj``."""
    aux = getattr(obj, "aux_data", None)
    if _holds_marks(aux):
        path = Path(prefix) / AUX_TENSORS
        tensors = _read_tensors(path)
        try:
            _set_aux(obj, _join_aux(aux, tensors))
        except (IndexError, TypeError) as error:
            raise ValueError(f"{path}: aux_data names a tensor the file does not hold") from error
    return obj


def loading(method: Any) -> Any:
    @functools.wraps(method)
    def load(cls: Any, prefix: str | Path, *args: Any, **kwargs: Any) -> Any:
        refuse_pickles(prefix)
        kwargs["allow_pickle"] = False
        return _restore_aux(method(cls, prefix, *args, **kwargs), prefix)

    return classmethod(load)
