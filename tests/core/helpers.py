"""What the tests of the core share: the numeric numpy types, and the hand-made MRC files of
`vitrio.testing.mrc`, an implementation independent of vitrio's writer."""

from __future__ import annotations

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
