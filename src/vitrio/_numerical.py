"""The numerical types of image values, and their numpy dtypes.

This layer knows nothing of files or threads.
"""

from __future__ import annotations

import enum
from typing import Any

import numpy as np

__all__ = ["NumericalType", "as_numerical_type", "numpy_dtype"]


class NumericalType(enum.Enum):
    """The type of the values of an image, independent of byte order.

    `NumericalType(x)` takes what every data type argument takes: a member,
    its name (`"complex_float32"`) or value (`"complex64"`), a numpy dtype
    (of either byte order) or type, a string numpy reads as one (`"f4"`),
    or a PyTorch dtype (`torch.float32`). Anything else raises `ValueError`.
    """

    boolean = "bool"
    int8 = "int8"
    uint8 = "uint8"
    int16 = "int16"
    uint16 = "uint16"
    int32 = "int32"
    uint32 = "uint32"
    int64 = "int64"
    uint64 = "uint64"
    float16 = "float16"
    float32 = "float32"
    float64 = "float64"
    complex_float16 = "complex32"
    complex_float32 = "complex64"
    complex_float64 = "complex128"

    @property
    def itemsize(self) -> int:
        """Bytes one value takes."""
        return _ITEMSIZE[self]

    @property
    def dtype(self) -> np.dtype:
        """The native-order numpy dtype that holds the values: complex64 for `complex_float16`.

        numpy has no type of two float16 values; reads of them fill complex64 arrays.
        """
        return _HELD[self]

    @classmethod
    def _missing_(cls, value: Any) -> NumericalType | None:
        try:
            return as_numerical_type(value)
        except TypeError:
            return None


_ITEMSIZE = {
    NumericalType.boolean: 1,
    NumericalType.int8: 1,
    NumericalType.uint8: 1,
    NumericalType.int16: 2,
    NumericalType.uint16: 2,
    NumericalType.int32: 4,
    NumericalType.uint32: 4,
    NumericalType.int64: 8,
    NumericalType.uint64: 8,
    NumericalType.float16: 2,
    NumericalType.float32: 4,
    NumericalType.float64: 8,
    NumericalType.complex_float16: 4,
    NumericalType.complex_float32: 8,
    NumericalType.complex_float64: 16,
}
_BY_NAME = {t.name: t for t in NumericalType} | {t.value: t for t in NumericalType}
_BY_DTYPE = {np.dtype(t.value): t for t in NumericalType if t is not NumericalType.complex_float16}
_HELD = {t: np.dtype(np.complex64 if t is NumericalType.complex_float16 else t.value) for t in NumericalType}


def as_numerical_type(data_type: Any) -> NumericalType:
    """Turn a string, a numpy dtype or type, a PyTorch dtype, or a member into a `NumericalType`.

    Raises:
        TypeError: If `data_type` names no numerical type.
    """
    if isinstance(data_type, NumericalType):
        return data_type
    if isinstance(data_type, np.dtype) and data_type in _BY_DTYPE:  # what readers give: no name to look up
        return _BY_DTYPE[data_type]
    if isinstance(data_type, str) and data_type in _BY_NAME:
        return _BY_NAME[data_type]
    if data_type is None:
        raise TypeError("not a data type: None")
    if type(data_type).__module__ == "torch" and type(data_type).__name__ == "dtype":
        found = _BY_NAME.get(str(data_type).removeprefix("torch."))
        if found is None:
            raise TypeError(f"not a numerical data type vitrio reads: {data_type}")
        return found
    try:
        dtype = np.dtype(data_type)
    except TypeError as error:
        raise TypeError(f"not a data type: {data_type!r}") from error
    found = _BY_NAME.get(dtype.newbyteorder("=").name) if dtype.fields is None else None
    if found is None:
        raise TypeError(f"not a numerical data type: {data_type!r}")
    return found


def numpy_dtype(data_type: Any) -> np.dtype:
    """The native-order numpy dtype of a data type, exactly: its `dtype`, but none for `complex_float16`.

    Raises:
        TypeError: For `complex_float16`, which numpy has no type for, or a
            value that names no numerical type.
    """
    member = as_numerical_type(data_type)
    if member is NumericalType.complex_float16:
        raise TypeError("complex_float16 has no numpy type")
    return _HELD[member]
