"""Random 3-D augmentations of batches of subvolumes, each drawn for every row from a generator given.

A batch is an array of shape (rows, ..., z, y, x): z is the beam axis, the
tilt axis lies along y (as RELION and IMOD align tilt series), and any
axes between the rows and z (channels, an image and its target) are
transformed alike. What each row gets is drawn from a numpy Generator:
`augment(volumes, generator)` takes one, and so does a call,
`augmentation(batch, rng=generator)`, as a `DataLoader` gives its
transform a generator of each batch's own (seeded by the loader's seed,
the epoch and the batch's place in it), so that an epoch's augmentations
are the same however its batches are spread over threads, and again
after a resume; `Compose` chains them, handing each the generator it
is given. A call without one draws from the augmentation's own stream,
made of its `seed`. The draws of a batch are made at once, before any of
its rows is transformed.

Each says whether it keeps the missing wedge where it was. A tilt series
tilted about y measures, in Fourier space, the planes through the ky axis
tilted by the angles of the series; the wedge is the rest, about the kz
axis, stretched along ky. Mirroring x or z maps a tilt angle to its
negative, so it keeps the wedge only where the tilt range is symmetric
about 0 (a lamella's pretilt makes it not); mirroring y keeps it. Turning
the volume about z turns the wedge with it: it stays about the beam axis
with its opening angle, but its stretch moves from ky, so only a missing
region symmetric about kz (a cone, from conical tilting) stays where it
was; a half turn keeps a symmetric range's wedge.
"""

from __future__ import annotations

import functools
import operator
from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ._transforms import Transform, _is_torch

__all__ = [
    "Augmentation",
    "RandomBeamRotation",
    "RandomFlip",
    "RandomGaussianNoise",
    "RandomIntensity",
    "RandomLowPass",
    "RandomRot90",
]


def _range(value: float | Sequence[float], name: str) -> tuple[float, float]:
    """A (low, high) range of a number or a pair."""
    low, high = (value, value) if np.ndim(value) == 0 else tuple(value)
    if not float(low) <= float(high):
        raise ValueError(f"{name} is a number or a (low, high) range with low <= high, not {value!r}")
    return float(low), float(high)


class Augmentation(Transform):
    """A random transform of a batch of volumes, a draw for each row from a numpy Generator.

    Called with a batch (an array, or a dict whose field `field` holds one),
    and optionally `rng=`, a numpy Generator to draw from, it returns the
    batch with the volumes transformed, as float32: numpy arrays, and
    PyTorch tensors in host memory (through numpy), so a batch is augmented
    before it goes to a GPU.

    Args:
        seed: What starts the augmentation's own stream of draws, used by calls without `rng`.
        field: The field of a batch (a dict) it transforms.
    """

    def __init__(self, seed: int | None = None, field: str = "image"):
        self._seed, self._field = seed, field
        self._stream = np.random.default_rng(seed)

    def __call__(self, batch: Any, rng: np.random.Generator | None = None) -> Any:
        """Transform `batch`, its draws made from `rng` if given, else from the augmentation's stream."""
        generator = self._stream if rng is None else rng
        if isinstance(batch, Mapping):
            if self._field not in batch:
                raise KeyError(
                    f"the batch has no field {self._field!r} to augment; its fields are {list(batch)}"
                )
            return {**batch, self._field: self.augment(batch[self._field], generator)}
        return self.augment(batch, generator)

    def apply(self, images: Any, rng: np.random.Generator | None = None) -> Any:
        """The transform of `images`, drawn from `rng` if given, else from the augmentation's stream."""
        return self.augment(images, self._stream if rng is None else rng)

    def augment(self, volumes: Any, generator: np.random.Generator) -> Any:
        """The transform of `volumes`, (rows, ..., z, y, x), its draws made from `generator`.

        A PyTorch tensor in host memory is transformed through numpy, and handed back as a tensor.

        Raises:
            TypeError: If `volumes` is neither a numpy array nor such a tensor.
            ValueError: If it has fewer than four axes.
        """
        if _is_torch(volumes) and volumes.device.type == "cpu":
            import torch

            return torch.from_numpy(self.augment(volumes.numpy(), generator))
        if not isinstance(volumes, np.ndarray):
            raise TypeError(
                f"{type(self).__name__} augments numpy arrays and tensors in host memory, not "
                f"{type(volumes).__name__} on {getattr(volumes, 'device', 'its device')}: augment the "
                "batch before it is copied to a GPU"
            )
        if volumes.ndim < 4:
            raise ValueError(f"a batch of volumes is (rows, ..., z, y, x), not of shape {volumes.shape}")
        return self._transform(volumes.astype(np.float32, copy=False), generator)

    @abstractmethod
    def _transform(self, volumes: np.ndarray, generator: np.random.Generator) -> np.ndarray:
        """The transform of float32 `volumes`, drawn from `generator`; a new array."""

    @property
    def parameters(self) -> tuple:
        """What decides the result, besides the volumes and the draws."""
        return (self._field,)


def _rows(volumes: np.ndarray, flags: np.ndarray) -> np.ndarray:
    """`flags`, one for each row, shaped to broadcast over the rows of `volumes`."""
    return flags.reshape((-1,) + (1,) * (volumes.ndim - 1))


def _chance(probability: float) -> float:
    """`probability`, checked to be a chance from 0 to 1."""
    if not 0 <= probability <= 1:
        raise ValueError(f"a probability is from 0 to 1, not {probability!r}")
    return float(probability)


def _some_rows(
    volumes: np.ndarray,
    generator: np.random.Generator,
    probability: float,
    transform: Callable[[np.ndarray, np.random.Generator], np.ndarray],
) -> np.ndarray:
    """`transform` of the rows of `volumes` drawn each with `probability`, the others as they are.

    At a probability of 1 every row is transformed and nothing is drawn to choose them, so the
    draws are those of `transform` alone; else the choice is drawn first, then `transform`'s
    draws for the rows chosen alone.
    """
    if probability == 1:
        return transform(volumes, generator)
    rows = np.flatnonzero(generator.random(len(volumes)) < probability)
    out = volumes.copy()
    if len(rows):
        out[rows] = transform(volumes[rows], generator)
    return out


class RandomFlip(Augmentation):
    """Mirror each row along each of `axes` of (z, y, x), each with `probability`.

    The missing wedge: a mirror of y (the tilt axis) keeps it; of x or z it
    is kept only for a tilt range symmetric about 0 (see the module).

    Args:
        axes: Which of z (0), y (1), x (2) may be mirrored.
        probability: The chance each is, for each row.
    """

    def __init__(self, axes: Sequence[int] = (0, 1, 2), probability: float = 0.5, **kwargs: Any):
        super().__init__(**kwargs)
        self._axes = tuple(operator.index(axis) for axis in axes)
        if not set(self._axes) <= {0, 1, 2}:
            raise ValueError(f"axes are of 0 (z), 1 (y), 2 (x), not {axes}")
        self._probability = _chance(probability)

    @property
    def parameters(self) -> tuple:
        """The axes, the probability and the field."""
        return (self._axes, self._probability, *super().parameters)

    def _transform(self, volumes: np.ndarray, generator: np.random.Generator) -> np.ndarray:
        flips = generator.random((len(volumes), len(self._axes))) < self._probability
        out = np.empty_like(volumes)
        for row, flipped in enumerate(flips):
            axes = [volumes.ndim - 4 + axis for axis, flip in zip(self._axes, flipped) if flip]
            out[row] = np.flip(volumes[row], axes) if axes else volumes[row]
        return out


class RandomRot90(Augmentation):
    """Turn each row, with `probability`, a random number of quarter turns in the (y, x) plane, as
    numpy.rot90 on (y, x).

    The missing wedge: not kept; a quarter turn moves it from along ky to
    along kx (a half turn keeps it for a symmetric tilt range).

    Args:
        probability: The chance a row is turned (by 0 to 3 quarter turns, each as likely).
    """

    def __init__(self, probability: float = 1.0, **kwargs: Any):
        super().__init__(**kwargs)
        self._probability = _chance(probability)

    @property
    def parameters(self) -> tuple:
        """The probability and the field."""
        return (self._probability, *super().parameters)

    def _transform(self, volumes: np.ndarray, generator: np.random.Generator) -> np.ndarray:
        if volumes.shape[-1] != volumes.shape[-2]:
            raise ValueError(f"quarter turns in (y, x) need square sections, not {volumes.shape[-2:]}")
        return _some_rows(volumes, generator, self._probability, self._turn)

    def _turn(self, volumes: np.ndarray, generator: np.random.Generator) -> np.ndarray:
        turns = generator.integers(0, 4, size=len(volumes))
        out = np.empty_like(volumes)
        for row, turn in enumerate(turns.tolist()):
            out[row] = np.rot90(volumes[row], turn, axes=(-2, -1))
        return out


class RandomBeamRotation(Augmentation):
    """Turn each row, with `probability`, about the beam axis (z) by an angle drawn from `degrees`,
    interpolated linearly.

    The turn is about the voxel at index extent // 2 of y and x, where a box
    holds its pick (odd sides turn about the middle, so quarter turns are
    numpy.rot90's exactly), counterclockwise in (y, x) as numpy.rot90 turns;
    values needed from beyond the box are those of its nearest edge.

    The missing wedge: not kept, but for a missing region symmetric about the
    beam axis (a cone); it stays about kz with its opening angle, its
    stretch along ky turned by the angle (see the module).

    Args:
        degrees: The range the angle is drawn from, uniformly, in degrees.
        probability: The chance a row is turned.
    """

    def __init__(
        self, degrees: float | Sequence[float] = (-180.0, 180.0), probability: float = 1.0, **kwargs: Any
    ):
        super().__init__(**kwargs)
        self._degrees = _range(degrees, "degrees")
        self._probability = _chance(probability)

    @property
    def parameters(self) -> tuple:
        """The range of angles, the probability and the field."""
        return (self._degrees, self._probability, *super().parameters)

    def _transform(self, volumes: np.ndarray, generator: np.random.Generator) -> np.ndarray:
        return _some_rows(volumes, generator, self._probability, self._turn)

    def _turn(self, volumes: np.ndarray, generator: np.random.Generator) -> np.ndarray:
        angles = np.deg2rad(generator.uniform(*self._degrees, size=len(volumes)))
        return rotate_about_z(volumes, angles)


def rotate_about_z(volumes: np.ndarray, angles: np.ndarray) -> np.ndarray:
    """Each row of `volumes` (rows, ..., y, x) turned by its angle in radians about (y // 2, x // 2)."""
    rows, height, width = len(volumes), volumes.shape[-2], volumes.shape[-1]
    # (rows, the rest, y * x): a voxel of (y, x) is interpolated alike in every plane of the rest
    planes = volumes.reshape(rows, -1, height * width)
    y, x = np.mgrid[:height, :width].astype(np.float32)
    y, x = y - height // 2, x - width // 2
    cos = np.cos(angles).astype(np.float32)[:, None, None]
    sin = np.sin(angles).astype(np.float32)[:, None, None]
    # where each output voxel comes from: the inverse turn of its place (counterclockwise as rot90 turns)
    source_y = (cos * y + sin * x + height // 2).reshape(rows, -1)
    source_x = (cos * x - sin * y + width // 2).reshape(rows, -1)
    y0, x0 = np.floor(source_y), np.floor(source_x)
    wy, wx = source_y - y0, source_x - x0
    corners = []  # the index in y * x of each output voxel's corner, and its weight
    for dy, dx, weight in (
        (0, 0, (1 - wy) * (1 - wx)),
        (0, 1, (1 - wy) * wx),
        (1, 0, wy * (1 - wx)),
        (1, 1, wy * wx),
    ):
        yy = np.clip(y0 + dy, 0, height - 1).astype(np.intp)
        xx = np.clip(x0 + dx, 0, width - 1).astype(np.intp)
        corners.append((yy * width + xx, weight))
    turned = np.empty_like(planes)
    corner = np.empty(planes.shape[1:], dtype=planes.dtype)
    for row in range(rows):
        for number, (index, weight) in enumerate(corners):
            # the first corner lands in the row itself, the others in corner and are added to it; the
            # indices are in range, and mode="clip" lets take write into target without a copy of its own
            target = turned[row] if number == 0 else corner
            np.take(planes[row], index[row], axis=1, out=target, mode="clip")
            target *= weight[row]
            if number:
                turned[row] += corner
    return turned.reshape(volumes.shape)


class RandomIntensity(Augmentation):
    """Scale each row, with `probability`, by a factor and add an offset, each drawn uniformly from its
    range.

    The missing wedge: kept; a factor scales every frequency, an offset is the zero frequency alone.

    Args:
        scale: The range of the factor.
        offset: The range of the offset.
        probability: The chance a row is scaled and offset.
    """

    def __init__(
        self,
        scale: float | Sequence[float] = (0.9, 1.1),
        offset: float | Sequence[float] = (-0.1, 0.1),
        probability: float = 1.0,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self._scale, self._offset = _range(scale, "scale"), _range(offset, "offset")
        self._probability = _chance(probability)

    @property
    def parameters(self) -> tuple:
        """The ranges of the factor and offset, the probability and the field."""
        return (self._scale, self._offset, self._probability, *super().parameters)

    def _transform(self, volumes: np.ndarray, generator: np.random.Generator) -> np.ndarray:
        return _some_rows(volumes, generator, self._probability, self._scale_and_offset)

    def _scale_and_offset(self, volumes: np.ndarray, generator: np.random.Generator) -> np.ndarray:
        scale = generator.uniform(*self._scale, size=len(volumes)).astype(np.float32)
        offset = generator.uniform(*self._offset, size=len(volumes)).astype(np.float32)
        return volumes * _rows(volumes, scale) + _rows(volumes, offset)


class RandomGaussianNoise(Augmentation):
    """Add Gaussian noise of mean 0 to each row, with `probability`, its standard deviation drawn
    uniformly from `std`.

    The missing wedge: not kept empty; the noise is white, so it puts power inside the wedge too.

    Args:
        std: The standard deviation, or the range it is drawn from for each row.
        probability: The chance a row is given noise.
    """

    def __init__(self, std: float | Sequence[float] = (0.0, 0.1), probability: float = 1.0, **kwargs: Any):
        super().__init__(**kwargs)
        self._std = _range(std, "std")
        if self._std[0] < 0:
            raise ValueError(f"a standard deviation is 0 or more, not {std!r}")
        self._probability = _chance(probability)

    @property
    def parameters(self) -> tuple:
        """The range of the standard deviation, the probability and the field."""
        return (self._std, self._probability, *super().parameters)

    def _transform(self, volumes: np.ndarray, generator: np.random.Generator) -> np.ndarray:
        return _some_rows(volumes, generator, self._probability, self._noise)

    def _noise(self, volumes: np.ndarray, generator: np.random.Generator) -> np.ndarray:
        std = generator.uniform(*self._std, size=len(volumes)).astype(np.float32)
        noisy = standard_normal(generator, volumes.shape)
        noisy *= _rows(volumes, std)
        noisy += volumes
        return noisy


def standard_normal(generator: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Values of the standard normal distribution, float32, of `shape`, drawn from `generator`.

    By the Box-Muller transform of uniform draws (numpy vectorises float32
    logarithms and cosines), about half the time of numpy's own normal
    draws; the least uniform draw, 2^-24, bounds their magnitude at 5.77.
    """
    count = int(np.prod(shape))
    pairs = (count + 1) // 2
    uniform = generator.random(2 * pairs, dtype=np.float32)
    radius, angle = uniform[:pairs], uniform[pairs:]
    np.subtract(np.float32(1), radius, out=radius)  # in (0, 1], whose logarithm is finite
    np.log(radius, out=radius)
    radius *= np.float32(-2)
    np.sqrt(radius, out=radius)
    angle *= np.float32(2 * np.pi)
    values = np.empty(2 * pairs, dtype=np.float32)
    np.cos(angle, out=values[:pairs])
    np.sin(angle, out=values[pairs:])
    values[:pairs] *= radius
    values[pairs:] *= radius
    return values[:count].reshape(shape)


@functools.lru_cache(maxsize=8)
def _frequency_radius(shape: tuple[int, ...]) -> np.ndarray:
    """The magnitude of each frequency of a real FFT of a volume of `shape`, in cycles per voxel (read
    only: made once for each shape of the batches a loader transforms)."""
    frequencies = np.meshgrid(
        np.fft.fftfreq(shape[0]), np.fft.fftfreq(shape[1]), np.fft.rfftfreq(shape[2]), indexing="ij"
    )
    radius = np.sqrt(sum(f**2 for f in frequencies))
    radius.flags.writeable = False
    return radius


class RandomLowPass(Augmentation):
    """Low-pass filter each row, with `probability`, at a cutoff drawn uniformly from `cutoff`.

    The filter keeps the frequencies of the volume (its last three axes)
    whose magnitude, in cycles per voxel (0.5 is Nyquist), is below the
    cutoff, and sets the others to zero.

    The missing wedge: kept where it was; the filter depends on the
    magnitude of a frequency alone, so it zeroes no frequency the wedge
    holds and fills none it lacks (it adds the shell beyond the cutoff to
    what is missing).

    Args:
        cutoff: The range of the cutoff, in cycles per voxel, positive.
        probability: The chance a row is filtered.
    """

    def __init__(
        self, cutoff: float | Sequence[float] = (0.15, 0.45), probability: float = 0.5, **kwargs: Any
    ):
        super().__init__(**kwargs)
        self._cutoff = _range(cutoff, "cutoff")
        if not self._cutoff[0] > 0:
            raise ValueError(f"a cutoff is positive, not {cutoff!r}")
        self._probability = _chance(probability)

    @property
    def parameters(self) -> tuple:
        """The range of the cutoff, the probability and the field."""
        return (self._cutoff, self._probability, *super().parameters)

    def _transform(self, volumes: np.ndarray, generator: np.random.Generator) -> np.ndarray:
        return _some_rows(volumes, generator, self._probability, self._filter)

    def _filter(self, volumes: np.ndarray, generator: np.random.Generator) -> np.ndarray:
        cutoffs = generator.uniform(*self._cutoff, size=len(volumes))
        axes = (-3, -2, -1)
        radius = _frequency_radius(volumes.shape[-3:])
        # numpy 2 transforms complex64 far faster scaled than unscaled, so the forward transform is
        # scaled by 1 / voxels (norm="forward") as well as the inverse, and the kept frequencies are
        # scaled back by the number of voxels
        spectrum = np.fft.rfftn(volumes, axes=axes, norm="forward")
        keep = radius[None] <= cutoffs.reshape((-1,) + (1,) * 3)
        gain = (keep * np.float32(np.prod(volumes.shape[-3:]))).astype(np.float32)
        spectrum *= gain.reshape((len(volumes),) + (1,) * (volumes.ndim - 4) + radius.shape)
        return np.fft.irfftn(spectrum, s=volumes.shape[-3:], axes=axes).astype(np.float32, copy=False)
