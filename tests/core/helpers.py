"""What the tests of the core share: the numeric numpy types, the patch a centre defines, and the
hand-made MRC files of `vitrio.testing.mrc`, an implementation independent of vitrio's writer."""

from __future__ import annotations

import numpy as np

from vitrio.testing.mrc import (  # noqa: F401 - handed on to the tests
    MODE_DTYPES,
    STAMP_BIG,
    STAMP_LITTLE,
    mrc_header,
    read_header_field,
    write_mrc_by_hand,
)

NUMPY_TYPES = (
    "int8",
    "uint8",
    "int16",
    "uint16",
    "int32",
    "uint32",
    "int64",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
)
"""Every numeric numpy type, by name: what TIFF holds and vitrio reads into."""


def expected_patch(image: np.ndarray, centre, shape, fill) -> np.ndarray:
    """What a patch holds, by the definition: index `extent // 2` of the patch is the centre."""
    patch = np.full(shape, fill, dtype=np.float64)
    for offset in np.ndindex(*shape):
        source = tuple(c - s // 2 + o for c, s, o in zip(centre, shape, offset))
        if all(0 <= p < e for p, e in zip(source, image.shape)):
            patch[offset] = image[source]
    return patch
