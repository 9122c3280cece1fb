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
from ._extras import missing

__all__ = ["check_output", "hand_out", "holds_numbers", "pinned_allocator", "stays_on_host"]

Batch = dict[str, np.ndarray]


def check_output(named: str | None, device: Any, sharding: Any, pin_memory: Any, allocator: Any) -> None:
    """Refuse what does not apply to the output named (`named`, None for a callable).

    Raises:
        ValueError: If device, sharding or pin_memory is given where it does not apply.
    """
    if device is not None and named not in ("torch", "jax"):
        raise ValueError("device applies to output 'torch' or 'jax' only")
    if sharding is not None and (named != "jax" or device is not None):
        raise ValueError("sharding applies to output 'jax' only, and not with device")
    if pin_memory and (named != "torch" or allocator is not None):
        raise ValueError("pin_memory applies to output 'torch' only, and not with an allocator")


def hand_out(
    output: Any, device: Any, sharding: Any, pin_memory: bool | None
) -> tuple[Callable[[Batch], Any] | None, Allocator | None]:
    """What hands a batch out as `output` says (None for numpy), and the allocator of pinned memory to read
    it into where PyTorch's batches go to CUDA (`pin_memory`, by default when `device` is CUDA).

    Raises:
        ModuleNotFoundError: If output is 'torch' or 'jax' and it is not installed, naming the extra.
    """
    if output == "torch":
        try:
            import torch
        except ModuleNotFoundError as error:
            raise missing(error, "output='torch'") from None
        if pin_memory is None:
            pin_memory = device is not None and torch.device(device).type == "cuda"
        pinned = pinned_allocator() if pin_memory else None
        return torch_output(device, non_blocking=pinned is not None), pinned
    if output == "jax":
        try:
            import jax  # noqa: F401 (the output imports it when it hands out)
        except ModuleNotFoundError as error:
            raise missing(error, "output='jax'") from None
        return jax_output(device, sharding), None
    return (None if isinstance(output, str) else output), None


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
            "pin_memory is set but CUDA is not available: batches are read into ordinary memory", stacklevel=4
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
