"""Transforms of a batch of images: Fourier cropping, normalisation against the background, inverted contrast.

Each works on a whole batch at once, the last two axes of an array being
the image: on numpy arrays with numpy, and on PyTorch tensors with
torch.fft on the tensor's device, so that a DataLoader that hands batches
to a GPU prepares them there. Every transform computes in float32 and
returns float32; `Compose` stores the result in the type asked for
(float16 or bfloat16 halve the memory; see docs/preparing.md for the
precision each keeps). Given a batch (a dict of fields), a transform
changes the field "image", or the one `Compose` names. A step that draws
random numbers takes them from the generator it is given as rng (a
`DataLoader` gives each batch its own), which `Compose` hands on.
"""

from __future__ import annotations

import functools
import inspect
import operator
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .._concurrency import Executor, SynchronousExecutor, run_tasks
from ._dataset import Dataset
from ._extras import missing
from ._source import ArraySource

__all__ = [
    "Compose",
    "FourierCrop",
    "Invert",
    "Normalize",
    "Transform",
    "as_data_type",
    "cast_fields",
    "draws",
    "prepare_batch",
]

_HALF_TYPES = ("float16", "bfloat16", "float32")
# How many rows of a numpy batch are transformed at once.
_ROWS_AT_ONCE = 8


def _is_torch(values: Any) -> bool:
    return type(values).__module__.startswith("torch")


def takes_rng(function: Callable[..., Any] | None) -> bool:
    """Whether `function` takes a keyword argument rng, a generator of random numbers."""
    if function is None:
        return False
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):  # a callable whose signature Python cannot tell
        return False
    rng = parameters.get("rng")
    return rng is not None and rng.kind in (rng.POSITIONAL_OR_KEYWORD, rng.KEYWORD_ONLY)


def _bfloat16() -> Any:
    """ml_dtypes' bfloat16 (numpy has none; the torch extra and JAX install ml_dtypes), imported when
    first needed: its import takes most of a second.

    Raises:
        ModuleNotFoundError: If ml_dtypes is not installed, naming the extra that installs it.
    """
    try:
        from ml_dtypes import bfloat16
    except ModuleNotFoundError as error:
        raise missing(error, "bfloat16 in numpy") from None
    return bfloat16


def _check_data_type(data_type: str, in_numpy: bool) -> None:
    """Raise if `data_type` is none of the half types, or is bfloat16 held by numpy without ml_dtypes."""
    if data_type not in _HALF_TYPES:
        raise ValueError(f"data_type is one of {_HALF_TYPES}, not {data_type!r}")
    if in_numpy and data_type == "bfloat16":
        _bfloat16()


def as_data_type(values: Any, data_type: str) -> Any:
    """`values`, a numpy array, a PyTorch tensor or a JAX array, in the floating type named `data_type`.

    Tensors and JAX arrays stay where they are; anything else becomes a numpy array.
    PyTorch rounds to bfloat16 itself, with no need of ml_dtypes.

    Raises:
        ValueError: If `data_type` is not float16, bfloat16 or float32.
        ModuleNotFoundError: For bfloat16 outside PyTorch without ml_dtypes, naming the extra that
            installs it.
    """
    if _is_torch(values):
        _check_data_type(data_type, in_numpy=False)
        import torch

        return values.to(getattr(torch, data_type))
    _check_data_type(data_type, in_numpy=True)
    dtype = _bfloat16() if data_type == "bfloat16" else np.dtype(data_type)
    if isinstance(values, np.ndarray) or not hasattr(values, "astype"):
        return np.asarray(values, dtype=dtype)
    return values.astype(dtype)  # a JAX array, on its device


def cast_fields(dataset: Dataset, data_type: str | None, output: Any = "numpy") -> Callable[[Any], Any]:
    """What puts the fields of `dataset` read from files (not columns) of a batch in `data_type`.

    A batch that is not a dict, as a DataLoader's transform may make it, is left as it is.

    Args:
        dataset: Whose fields.
        data_type: The type, or None to leave each field as it is.
        output: What the batches are handed out as, as `DataLoader` names it: only numpy's (or a
            callable's) bfloat16 needs ml_dtypes.

    Raises:
        ValueError: If `data_type` is not None, float16, bfloat16 or float32.
        ModuleNotFoundError: For bfloat16 held by numpy without ml_dtypes, naming the extra that installs it.
    """
    if data_type is None:
        return lambda batch: batch
    _check_data_type(data_type, in_numpy=output not in ("torch", "jax"))
    read = [name for name, source in dataset.fields.items() if not isinstance(source, ArraySource)]

    def cast(batch: Any) -> Any:
        if not isinstance(batch, Mapping):
            return batch
        return {
            name: as_data_type(values, data_type) if name in read else values
            for name, values in batch.items()
        }

    return cast


def _float32(images: Any) -> Any:
    if _is_torch(images):
        import torch

        return images.to(torch.float32)
    return np.asarray(images, dtype=np.float32)


def prepare_batch(transform: Callable[[Any], Any], images: Any, executor: Executor | None = None) -> Any:
    """`transform` of `images`; of a numpy array, a few rows at a time, on `executor`'s threads if given.

    numpy's FFTs of a whole batch of large images at once spill the caches,
    and release the GIL: a few images at a time, on several threads, go
    faster. A tensor, or a single image, is transformed whole.
    """
    if _is_torch(images) or np.ndim(images) < 3 or len(images) <= _ROWS_AT_ONCE:
        return transform(images)
    first = transform(images[:_ROWS_AT_ONCE])
    out = np.empty((len(images), *first.shape[1:]), dtype=first.dtype)
    out[:_ROWS_AT_ONCE] = first

    def rows_from(start: int) -> None:
        out[start : start + _ROWS_AT_ONCE] = transform(images[start : start + _ROWS_AT_ONCE])

    starts = range(_ROWS_AT_ONCE, len(images), _ROWS_AT_ONCE)
    run_tasks(
        executor or SynchronousExecutor(), [functools.partial(rows_from, s) for s in starts], (out, images)
    ).get()
    return out


def _on_batch(batch: Any, field: str, function: Callable[[Any], Any], in_rows: bool = True) -> Any:
    """`function` applied to `batch`, an array of images, or to its field `field` if it is a dict; as
    `prepare_batch` does, a few rows at a time, if `in_rows`, else to the whole array at once."""
    prepare = prepare_batch if in_rows else lambda transform, images: transform(images)
    if isinstance(batch, Mapping):
        if field not in batch:
            raise KeyError(f"the batch has no field {field!r} to transform; its fields are {list(batch)}")
        return {**batch, field: prepare(function, batch[field])}
    return prepare(function, batch)


class Transform(ABC):
    """A step that prepares a batch of images, the last two axes of an array being each image.

    Called with a numpy array or a PyTorch tensor, it returns the transformed
    images as float32, of the same kind and on the same device; called with
    a batch (a dict of fields), it returns the batch with its field "image"
    transformed. Transforms are equal when of one class and parameters, which
    is what a `PreparedSource` is keyed by.

    A step that draws random numbers takes a keyword argument rng in its
    `apply`: the numpy Generator it is called with, or, called without one,
    a generator of fresh entropy.
    """

    def __call__(self, batch: Any, rng: np.random.Generator | None = None) -> Any:
        """Transform `batch`: an array of images, or a dict whose field "image" holds them."""
        return _on_batch(batch, "image", lambda images: _apply(self, _float32(images), rng))

    @abstractmethod
    def apply(self, images: Any) -> Any:
        """The transform of float32 `images` (numpy or torch), of shape (..., height, width)."""

    @property
    @abstractmethod
    def parameters(self) -> tuple:
        """What decides the result, besides the images."""

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.parameters == self.parameters  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.parameters))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(map(repr, self.parameters))})"


class FourierCrop(Transform):
    """Shrink images by keeping the centre of their 2-D Fourier transform, as cryoDRGN's downsample does.

    The images' centred Hartley transform (the real minus the imaginary part
    of the Fourier transform, the zero frequency at index n // 2) is cropped
    to `size` around that centre, and transformed back, divided by the
    cropped image's pixel count: so the sum of an image is kept (a constant
    image of value c becomes one of c * (n / size)^2), and for even sizes the
    result is that of cryoDRGN's `downsample -D size` to float32 rounding.
    Odd sizes keep the same centre, n // 2. The pixel size grows by n / size.

    Args:
        size: The side of the cropped images, or their (height, width).

    Raises:
        ValueError: If a side is not positive; when applied, if it exceeds the images'.
    """

    def __init__(self, size: int | tuple[int, int]):
        sides = (size, size) if isinstance(size, int) or np.ndim(size) == 0 else tuple(size)
        if len(sides) != 2 or any(operator.index(side) < 1 for side in sides):
            raise ValueError(f"a Fourier crop's size is a positive side or (height, width): {size!r}")
        self._size = (operator.index(sides[0]), operator.index(sides[1]))

    @property
    def size(self) -> tuple[int, int]:
        """The (height, width) of the cropped images."""
        return self._size

    @property
    def parameters(self) -> tuple:
        """The size."""
        return (self._size,)

    def apply(self, images: Any) -> Any:
        """The cropped images, float32, as the class says."""
        (height, width), (m, k) = images.shape[-2:], self._size
        if m > height or k > width:
            raise ValueError(f"a Fourier crop to {m} x {k} of images of {height} x {width}: it only shrinks")
        fft, axes, axis = _fourier(images)
        rows, columns, conjugate, phase = _crop_plan(height, width, m, k)
        if _is_torch(images):
            import torch

            rows, columns, conjugate, phase = (
                torch.from_numpy(a).to(images.device) for a in (rows, columns, conjugate, phase)
            )
        # the kept frequencies of the real input's half spectrum (rfft2, its columns of the crop alone),
        # those of negative x by symmetry, shifted as if the image's centre were at 0
        half = fft.fft(fft.rfft(images, **{axis: -1})[..., : k // 2 + 1], **{axis: -2})[..., rows, columns]
        cropped = (half.real + 1j * (half.imag * conjugate)) * phase
        back = fft.fft2(fft.ifftshift(cropped.real - cropped.imag, **axes))
        return fft.fftshift(back.real - back.imag, **axes) / (m * k)


def _apply(step: Transform, images: Any, rng: np.random.Generator | None) -> Any:
    """`step.apply` of float32 `images`, given `rng` (or a generator of fresh entropy) if it takes one."""
    if not _draws(type(step)):
        return step.apply(images)
    return step.apply(images, rng=rng if rng is not None else np.random.default_rng())


@functools.cache
def _draws(kind: type[Transform]) -> bool:
    """Whether the steps of a class draw random numbers: their `apply` takes rng."""
    return takes_rng(kind.apply)


@functools.lru_cache(maxsize=16)
def _crop_plan(height: int, width: int, m: int, k: int) -> tuple[np.ndarray, ...]:
    """Where each frequency of an m x k crop (zero at m // 2, k // 2) lies in the half spectrum of
    an image of height x width (numpy's rfft2): its rows and columns, +1 where it is read as it is
    and -1 where conjugated (a negative x frequency), and the phase that centres the image at
    (height // 2, width // 2)."""
    fy = (np.arange(m) - m // 2)[:, None]
    fx = (np.arange(k) - k // 2)[None, :]
    negative = np.broadcast_to(fx < 0, (m, k))
    rows = np.where(negative, -fy, fy) % height
    columns = np.abs(np.broadcast_to(fx, (m, k)))
    conjugate = np.where(negative, -1, 1).astype(np.float32)
    phase = np.exp(2j * np.pi * (fy * (height // 2) / height + fx * (width // 2) / width)).astype(
        np.complex64
    )
    return rows, columns, conjugate, phase


def _fourier(images: Any) -> tuple[Any, dict[str, tuple[int, int]], str]:
    """The FFT module for `images` (numpy's or torch's), the axes of the image, and its name of one axis."""
    if _is_torch(images):
        import torch

        return torch.fft, {"dim": (-2, -1)}, "dim"
    return np.fft, {"axes": (-2, -1)}, "axis"


class Normalize(Transform):
    """Give each image a mean of 0 and a standard deviation of 1 over its background, as RELION does.

    The background is the pixels farther than `background_radius` from the
    centre, (height // 2, width // 2); their mean is subtracted from the
    image and it is divided by their standard deviation (of the population,
    as RELION's particle normalisation computes it). An image whose
    background is flat is only shifted.

    Args:
        background_radius: The radius, in pixels of the images it is given, of the circle left out.

    Raises:
        ValueError: If the radius is negative; when applied, if no pixel lies outside the circle.
    """

    def __init__(self, background_radius: float):
        if not float(background_radius) >= 0:
            raise ValueError(f"a background radius is 0 or more pixels, not {background_radius!r}")
        self._radius = float(background_radius)

    @property
    def background_radius(self) -> float:
        """The radius of the circle left out, in pixels."""
        return self._radius

    @property
    def parameters(self) -> tuple:
        """The background radius."""
        return (self._radius,)

    def apply(self, images: Any) -> Any:
        """The normalised images, float32."""
        height, width = images.shape[-2:]
        y, x = np.ogrid[:height, :width]
        outside = (y - height // 2) ** 2 + (x - width // 2) ** 2 > self._radius**2
        if not outside.any():
            raise ValueError(
                f"no pixel of images of {height} x {width} lies outside a background radius of {self._radius}"
            )
        if _is_torch(images):
            import torch

            outside = torch.from_numpy(outside).to(images.device)
        background = images[..., outside]
        mean = background.mean(-1)[..., None]
        deviation = (((background - mean) ** 2).mean(-1) ** 0.5)[..., None, None]
        return (images - mean[..., None]) / (deviation + (deviation == 0))


class Invert(Transform):
    """Invert the contrast: every value negated."""

    @property
    def parameters(self) -> tuple:
        """None: the transform has none."""
        return ()

    def apply(self, images: Any) -> Any:
        """The negated images, float32."""
        return -images


class Compose:
    """Transforms applied one after the other, the result stored in the type asked for.

    Args:
        *steps: The transforms, in order.
        data_type: The type of the result: 'float32' (the default), 'float16' or 'bfloat16'.
        field: The field of a batch (a dict) the steps transform.

    Raises:
        ValueError: If there is no step, one is not a `Transform`, or `data_type` is none of the three.
    """

    def __init__(self, *steps: Transform, data_type: str = "float32", field: str = "image"):
        if not steps or not all(isinstance(step, Transform) for step in steps):
            raise ValueError(f"Compose takes one or more transforms, not {steps!r}")
        _check_data_type(data_type, in_numpy=False)
        self._steps, self._data_type, self._field = steps, data_type, field

    @property
    def steps(self) -> tuple[Transform, ...]:
        """The transforms, in order."""
        return self._steps

    @property
    def data_type(self) -> str:
        """The type of the result."""
        return self._data_type

    @property
    def parameters(self) -> tuple:
        """Each step, and the type of the result."""
        return (*self._steps, self._data_type)

    def apply(self, images: Any, rng: np.random.Generator | None = None) -> Any:
        """The images through every step, in the type of the result; `rng` goes to the steps that draw."""
        images = _float32(images)
        for step in self._steps:
            images = _apply(step, images, rng)
        return as_data_type(images, self._data_type)

    def __call__(self, batch: Any, rng: np.random.Generator | None = None) -> Any:
        """Transform `batch`: an array of images, or a dict whose field `field` holds them."""
        return _on_batch(batch, self._field, lambda images: self.apply(images, rng=rng))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Compose) and (other.parameters, other._field) == (
            self.parameters,
            self._field,
        )

    def __hash__(self) -> int:
        return hash((Compose, self.parameters, self._field))

    def __repr__(self) -> str:
        steps = ", ".join(map(repr, self._steps))
        return f"Compose({steps}, data_type={self._data_type!r}, field={self._field!r})"


def draws(transform: Callable[..., Any] | None) -> bool:
    """Whether `transform` draws random numbers: a `Transform` whose `apply` takes rng, a `Compose` of
    one, or another callable that takes rng."""
    if isinstance(transform, Compose):
        return any(_draws(type(step)) for step in transform.steps)
    if isinstance(transform, Transform):
        return _draws(type(transform))
    return takes_rng(transform)
