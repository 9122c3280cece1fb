"""Standardisation of each item of a batch: a mean of 0 and a standard deviation of 1, in the C extension."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._native import standardize
from ._transforms import Transform, _float32, _is_torch, _on_batch

__all__ = ["Standardize"]


class Standardize(Transform):
    """Give each item of a batch a mean of 0 and a standard deviation of 1.

    An item is a row of the batch's first axis, whatever its dimensions: an
    image of (rows, height, width), a volume of (rows, z, y, x), all the
    channels of a row together; a single image is a batch of one
    (`image[None]`). Each item less the mean of all its values, over their
    standard deviation of the population (numpy's `std()`, PyTorch's
    `std(correction=0)`), the result in float32. A flat item (deviation 0)
    becomes zeros; an item holding NaN or infinity becomes NaN, as in numpy.
    Values of another type are taken as float32 first.

    A numpy batch, or a PyTorch tensor in host memory, goes through the C
    extension: the mean and deviation taken in float64 of the values less
    the item's first, in one pass, then one pass that writes, the GIL
    released, so two threads of a `DataLoader` standardise two batches at
    once; the result is to float32's rounding what numpy computes in
    float64, values far from 0 (1e4 with a deviation of 1) included. A
    tensor on another device, or one that requires grad, goes through
    PyTorch's operations there, in float32, less the item's first value
    before the sums.

    Raises:
        ValueError: When applied to a single value (an array with no axis).
    """

    @property
    def parameters(self) -> tuple:
        """None: the transform has none."""
        return ()

    def __call__(self, batch: Any, rng: np.random.Generator | None = None) -> Any:
        """Transform `batch` whole: an array of items, or a dict whose field "image" holds them."""
        return _on_batch(batch, "image", self.apply, in_rows=False)

    def apply(self, images: Any) -> Any:
        """Each item of `images` (numpy or torch) standardised, float32."""
        images = _float32(images)
        if images.ndim == 0:
            raise ValueError(
                "Standardize takes a batch of items, each a row of its first axis: not one value"
            )
        if not _is_torch(images):
            return _standardized(images)
        if images.device.type == "cpu" and not images.requires_grad:
            import torch

            return torch.from_numpy(_standardized(images.numpy()))
        return _standardized_tensor(images)


def _standardized(images: np.ndarray) -> np.ndarray:
    """Each row of float32 `images` standardised by the C extension, into a new array."""
    images = np.ascontiguousarray(images)
    out = np.empty_like(images)
    if images.size:
        standardize(images, out, len(images))
    return out


def _standardized_tensor(images: Any) -> Any:
    """Each row of float32 tensor `images` standardised by PyTorch's operations on its device."""
    if images.numel() == 0:
        return images.clone()
    items = images.reshape(len(images), -1)
    # less the first value, so that the sums keep float32's precision far from 0 and a flat item is 0
    centred = items - items[:, :1]
    centred = centred - centred.mean(1, keepdim=True)
    deviation = centred.square().mean(1, keepdim=True).sqrt()
    return (centred / (deviation + (deviation == 0))).reshape(images.shape)
