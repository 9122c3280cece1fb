"""`Array`: what `vitrio.read` returns, a numpy array that also speaks the published package's API.

`Array` subclasses `numpy.ndarray`, so every numpy-based caller keeps
working, and adds what the published `vitrio.Array` has: `data_type`, a
`repr` of shape and type, a `__dlpack__` that refuses to copy. numpy has no
type for `complex_float16`, so such reads return a `HalfComplexArray`
instead, which holds the values but hands them to no one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._types import NumericalType, as_numerical_type

__all__ = ["Array", "HalfComplexArray", "new_array", "finish_half_complex"]

_CPU = (1, 0)


def _check_dlpack(dl_device: Any, copy: Any) -> None:
    if copy:
        raise BufferError("a vitrio Array never copies itself through DLPack (copy=True)")
    if dl_device is not None and tuple(dl_device) != _CPU:
        raise BufferError(f"a vitrio Array lives on the CPU, device {_CPU}, not {tuple(dl_device)}")


class Array(np.ndarray):
    """Host memory that `vitrio.read` allocated, holding one image, one volume or a whole stack.

    A `numpy.ndarray`: its memory goes to numpy, PyTorch and JAX without a
    copy, through the buffer protocol or DLPack, and it can be passed back
    to any vitrio function as a source or as `out`. Slices and other views
    of it stay `Array`s (they share its memory); the results of arithmetic
    and reductions are plain numpy arrays or scalars. `str()` prints values
    as numpy does; `repr()` shows shape and type only, as the published
    package does: `Array(shape=(4, 6), data_type=NumericalType.float32)`.

    Raises:
        TypeError: When called: only `vitrio.read` makes one.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Array:
        raise TypeError("vitrio.Array has no public constructor; vitrio.read returns one")

    @property
    def data_type(self) -> NumericalType:
        """The type of the values, as a `NumericalType`."""
        return as_numerical_type(self.dtype)

    def __array_wrap__(self, array: np.ndarray, context: Any = None, return_scalar: bool = False) -> Any:
        if return_scalar:
            return array[()]
        return array.view(np.ndarray) if isinstance(array, Array) else array

    def __dlpack__(
        self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None, copy: Any = None
    ) -> Any:
        """A DLPack capsule of the memory, versioned when the consumer allows one.

        Raises:
            BufferError: For `copy=True`, or a `dl_device` other than the CPU `(1, 0)`.
        """
        _check_dlpack(dl_device, copy)
        return self.view(np.ndarray).__dlpack__(stream=stream, max_version=max_version)

    def __dlpack_device__(self) -> tuple[int, int]:
        """`(1, 0)`: the CPU, device 0."""
        return _CPU

    def __repr__(self) -> str:
        return f"Array(shape={self.shape}, data_type=NumericalType.{self.data_type.name})"

    def __reduce__(self) -> Any:
        return (_rebuilt, (self.view(np.ndarray).copy(),))


def _rebuilt(values: np.ndarray) -> Array:
    return values.view(Array)


class HalfComplexArray:
    """The result of a read as `complex_float16`, a type numpy has not: shape and type, no values out.

    The values are kept as pairs of float16 (real, imaginary), but neither
    numpy nor DLPack can take them.

    Raises:
        TypeError: When called, and from `numpy.asarray`.
        BufferError: From `__dlpack__`.
    """

    __slots__ = ("_pairs",)

    def __new__(cls, *args: Any, **kwargs: Any) -> HalfComplexArray:
        raise TypeError("vitrio.HalfComplexArray has no public constructor; vitrio.read returns one")

    @property
    def shape(self) -> tuple[int, ...]:
        """The extents, slowest first."""
        return self._pairs.shape[:-1]

    @property
    def data_type(self) -> NumericalType:
        """`NumericalType.complex_float16`."""
        return NumericalType.complex_float16

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of an array of rank 0")
        return self.shape[0]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        raise TypeError("numpy has no complex_float16 type: read as complex_float32 instead")

    def __dlpack__(self, **kwargs: Any) -> Any:
        raise BufferError("DLPack has no complex_float16 type: read as complex_float32 instead")

    def __dlpack_device__(self) -> tuple[int, int]:
        return _CPU

    def __repr__(self) -> str:
        return f"Array(shape={self.shape}, data_type=NumericalType.complex_float16)"


def new_array(
    shape: tuple[int, ...], data_type: NumericalType
) -> tuple[Array | HalfComplexArray, np.ndarray]:
    """A new array for a read, and the numpy array the read fills.

    For `complex_float16` the read fills a complex64 array, whose values the
    holder keeps as float16 pairs once `finish_half_complex` is called.
    """
    if data_type is NumericalType.complex_float16:
        holder = object.__new__(HalfComplexArray)
        holder._pairs = np.empty((*shape, 2), dtype=np.float16)
        return holder, np.empty(shape, dtype=data_type.dtype)
    values = np.empty(shape, dtype=data_type.dtype)
    return values.view(Array), values


def finish_half_complex(holder: HalfComplexArray, values: np.ndarray) -> None:
    """Keep the complex64 `values` a read filled in `holder`, as float16 pairs."""
    holder._pairs[..., 0] = values.real
    holder._pairs[..., 1] = values.imag
