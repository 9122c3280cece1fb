"""Gain references of EER renderings: an array, or the key of an image file, as a float32 image."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..._types import as_key
from .._registry import open_reader

__all__ = ["load_gain"]


def load_gain(gain: Any) -> np.ndarray:
    """A gain reference as a read-only float32 image: an array, or the key of an image file."""
    if isinstance(gain, (str, os.PathLike)):
        with open_reader(gain) as reader:
            if reader.image_count != 1 or len(reader.core_extents) != 2:
                raise ValueError(
                    f"{as_key(gain)}: a gain reference is one 2-D image, not {reader.descriptor}"
                )
            array = np.empty(reader.core_extents, dtype=np.float32)
            reader.read_run(0, [array])
    else:
        array = np.array(gain, dtype=np.float32)
        if array.ndim != 2:
            raise ValueError(f"a gain reference is a 2-D image, not of shape {array.shape}")
    array.flags.writeable = False
    return array
