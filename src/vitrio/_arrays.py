"""Seeing the caller's memory as numpy arrays, without copying it, and gathering images between arrays.

An array is anything that exposes host memory through the buffer protocol
or DLPack: a numpy array, a CPU tensor of PyTorch or JAX, a `memoryview`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._types import DestinationTypeError, ReadOnlyDestinationError, as_numerical_type

__all__ = [
    "as_destination",
    "as_source",
    "gather",
    "check_numeric_destination",
    "check_destination_type",
    "as_casting",
    "holds_values",
]

_NUMERIC = "biufc"


def _kind(dtype: np.dtype) -> str:
    """numpy's kind of `dtype`, with ml_dtypes' bfloat16 (a kind 'V' to numpy) counted as floating."""
    return "f" if dtype.kind == "V" and dtype.name == "bfloat16" else dtype.kind  # kind first: name is slow


def _view(array: Any, what: str) -> np.ndarray:
    if isinstance(array, np.ndarray):
        return array
    if hasattr(array, "__dlpack__") and not isinstance(array, memoryview):
        try:
            return np.from_dlpack(array)
        except (BufferError, RuntimeError, TypeError) as error:
            raise ValueError(f"the {what} is not in host memory numpy can see: {error}") from error
    try:
        return np.asarray(memoryview(array))
    except TypeError as error:
        raise TypeError(
            f"the {what} must expose host memory through the buffer protocol or DLPack, "
            f"not {type(array).__name__}"
        ) from error


def as_destination(array: Any) -> np.ndarray:
    """A writable numpy view of `array`, the memory reads land in.

    Raises:
        TypeError: If `array` exposes no host memory.
        ReadOnlyDestinationError: If that memory is read only (a `TypeError` and a `ValueError`).
        ValueError: If it is not on the host.
    """
    view = _view(array, "destination")
    if not view.flags.writeable:
        raise ReadOnlyDestinationError(f"the destination is read only ({type(array).__name__})")
    return view


def check_numeric_destination(dtype: np.dtype) -> None:
    """Raise `DestinationTypeError` if a destination of `dtype` holds no numbers (objects, text, records)."""
    if _kind(np.dtype(dtype)) not in _NUMERIC:
        raise DestinationTypeError(f"a destination holds numbers, not values of type {np.dtype(dtype)}")


def holds_values(data_type: Any, dtype: np.dtype) -> bool:
    """Whether a numeric destination of `dtype` holds values of `data_type` without loss.

    A floating or complex type takes every real type (rounding as numpy
    does); only a complex type takes complex values; an integer type takes
    the integers (and booleans) it holds without loss (`numpy.can_cast(file,
    dest, "safe")`); a boolean destination takes booleans alone.
    """
    dtype = np.dtype(dtype)
    kind = _kind(dtype)
    member = as_numerical_type(data_type)
    stored = member.dtype
    if kind == "c" or (kind == "f" and stored.kind != "c"):
        return True
    if kind in "iu" and stored.kind in "biu" and np.can_cast(stored, dtype, "safe"):
        return True
    return kind == "b" and stored.kind == "b"


def as_casting(casting: Any) -> str | None:
    """`casting` checked: None (the destination must hold every value, `holds_values`) or "unsafe"
    (any numeric destination, converting as numpy's `casting="unsafe"` does).

    Raises:
        ValueError: For any other value.
    """
    if casting is None or casting == "unsafe":
        return casting
    raise ValueError(
        f"casting is None (a destination holds every value) or 'unsafe' (any conversion), not {casting!r}"
    )


def check_destination_type(key: str, data_type: Any, dtype: np.dtype, casting: str | None = None) -> None:
    """Raise `DestinationTypeError` unless a destination of `dtype` is numeric and, without
    `casting="unsafe"`, can hold the values of the file at `key`, as `holds_values` says."""
    dtype = np.dtype(dtype)
    check_numeric_destination(dtype)
    if casting == "unsafe" or holds_values(data_type, dtype):
        return
    member = as_numerical_type(data_type)
    raise DestinationTypeError(
        f"{key}: holds {member.name} values, which a destination of type {dtype} cannot hold without loss; "
        'read into a floating point array and convert, or pass casting="unsafe" to convert as numpy '
        "does (fractions cut toward zero, no range check)"
    )


def as_source(array: Any) -> np.ndarray:
    """A numpy view of `array`, the values a write takes, or an array numpy makes of it."""
    if isinstance(array, np.ndarray) or hasattr(array, "__dlpack__"):
        return _view(array, "source")
    return np.asarray(array)


def gather(images: np.ndarray, indices: np.ndarray, out: np.ndarray, slots: np.ndarray) -> None:
    """Copy `images[indices[j]]` into `out[slots[j]]` for every `j`, converting to `out`'s type.

    Slots that make one contiguous block of `out` of the images' type take
    one gather (`numpy.take`, or where `images` is not in row order, such as a
    DataFrame's columns, fancy indexing: `take` would copy all of `images`
    first); others one `numpy.copyto` each. The indices must be within `images`.
    """
    if len(slots) == 1:  # a slice of one, so that a row of one value stays an array
        slot, index = int(slots[0]), int(indices[0])
        np.copyto(out[slot : slot + 1], images[index : index + 1], casting="unsafe")
        return
    first = int(slots[0]) if len(slots) else 0
    if (
        out.dtype == images.dtype
        and len(slots) > 1
        and int(slots[-1]) - first == len(slots) - 1
        and bool((np.diff(slots) == 1).all())
    ):
        block = out[first : first + len(slots)]
        if block.flags.c_contiguous and images.flags.c_contiguous:
            np.take(images, indices, axis=0, out=block, mode="clip")
            return
        if block.flags.c_contiguous:
            block[...] = images[indices]
            return
    for index, slot in zip(indices.tolist(), slots.tolist()):
        np.copyto(out[slot : slot + 1], images[index : index + 1], casting="unsafe")
