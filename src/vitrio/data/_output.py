"""Handing batches out to PyTorch and JAX, and pinned memory to read them into.

PyTorch and JAX are imported here only, when a data loader is made to hand
batches out to them. A field that does not hold numbers (strings, objects)
stays a numpy array.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from ._dataset import Allocator

__all__ = ["holds_numbers", "torch_output", "jax_output", "pinned_allocator", "stays_on_host"]

Batch = dict[str, np.ndarray]


def holds_numbers(dtype: np.dtype) -> bool:
    """Whether a type is of numbers (booleans, integers, floats, complex, ml_dtypes' bfloat16), which
    frameworks take."""
    return dtype.kind in "biufc" or dtype.name == "bfloat16"


def stays_on_host(output: Any, device: Any, sharding: Any) -> bool:
    """Whether batches handed out as `output` stay in host memory: numpy's, a callable's, PyTorch's on
    the processor, JAX's on its CPU devices (`device` or `sharding` naming them, or its default ones)."""
    if output == "torch":
        import torch

        return device is None or torch.device(device).type == "cpu"
    if output == "jax":
        import jax

        given = sharding if sharding is not None else device
        devices = getattr(given, "device_set", None) or ([given] if given is not None else jax.devices())
        return all(getattr(each, "platform", None) == "cpu" for each in devices)
    return True


def torch_output(device: Any, non_blocking: bool) -> Callable[[Batch], dict[str, Any]]:
    """What hands a batch out as tensors of PyTorch, sharing its memory, copied to `device` if given."""
    import torch

    target = torch.device(device) if device is not None else None

    def hand_out(batch: Batch) -> dict[str, Any]:
        tensors: dict[str, Any] = {}
        for name, values in batch.items():
            if not holds_numbers(values.dtype):
                tensors[name] = values
                continue
            if values.dtype.name == "bfloat16":  # torch takes ml_dtypes' bfloat16 as its bits
                tensor = torch.from_numpy(values.view(np.uint16)).view(torch.bfloat16)
            else:
                tensor = torch.from_numpy(values)
            tensors[name] = tensor if target is None else tensor.to(target, non_blocking=non_blocking)
        return tensors

    return hand_out


def jax_output(device: Any, sharding: Any) -> Callable[[Batch], dict[str, Any]]:
    """What hands a batch out as arrays of JAX: on `device`, or laid out by `sharding`.

    With a sharding, each batch is this process's share of the global batch
    (`jax.make_array_from_process_local_data`), so a sharding over the
    devices of several processes makes one global array of their shares.
    """
    import jax

    def put(values: np.ndarray) -> Any:
        if sharding is not None:
            return jax.make_array_from_process_local_data(sharding, values)
        return jax.device_put(values, device)

    def hand_out(batch: Batch) -> dict[str, Any]:
        return {
            name: put(values) if holds_numbers(values.dtype) else values for name, values in batch.items()
        }

    return hand_out


def pinned_allocator() -> Allocator | None:
    """An allocator of pinned memory, seen as numpy arrays, or None (with a warning) when there is no CUDA.

    Like PyTorch's DataLoader, asking for pinned memory on a machine without
    CUDA warns and reads into ordinary memory.
    """
    import torch

    if not torch.cuda.is_available():
        warnings.warn(
            "pin_memory is set but CUDA is not available: batches are read into ordinary memory", stacklevel=3
        )
        return None
    types: dict[np.dtype, Any] = {}

    def allocate(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        if not holds_numbers(dtype):
            return np.empty(shape, dtype)
        if dtype not in types:
            types[dtype] = torch.from_numpy(np.empty(0, dtype)).dtype
        return torch.empty(shape, dtype=types[dtype], pin_memory=True).numpy()

    return allocate
