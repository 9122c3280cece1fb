"""Property tests: whatever shape and type, what is written reads back equal, in MRC and TIFF."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import vitrio as vio

from .helpers import NUMPY_TYPES

# The type each file holds for the type written (MRC widens or narrows to its modes).
MRC_TYPES = {
    "int8": "int8",
    "int16": "int16",
    "uint16": "uint16",
    "float16": "float16",
    "float32": "float32",
    "complex64": "complex64",
    "uint8": "uint16",
    "bool": "uint16",
    "float64": "float32",
}
TIFF_TYPES = {t: t for t in NUMPY_TYPES} | {"bool": "uint8"}

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Infinities are written and read back like any value; the MRC header statistics of such data are
# infinite or NaN, which numpy notes with a RuntimeWarning.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _arrays(types: dict[str, str], ranks: tuple[int, ...]):
    @st.composite
    def build(draw):
        written = draw(st.sampled_from(sorted(types)))
        rank = draw(st.sampled_from(ranks))
        shape = draw(hnp.array_shapes(min_dims=rank, max_dims=rank, min_side=1, max_side=9))
        dtype = np.dtype(written)
        if dtype.kind == "f" and types[written] != written:
            # float64 into float32: values float32 holds exactly
            elements = st.floats(-1e6, 1e6, width=32)
        elif dtype.kind == "f":
            elements = st.floats(allow_nan=False, width=dtype.itemsize * 8)
        elif dtype.kind == "c":
            elements = st.complex_numbers(allow_nan=False, allow_infinity=False, width=dtype.itemsize * 8)
        else:
            elements = None
        values = draw(hnp.arrays(dtype, shape, elements=elements))
        return values, types[written]

    return build()


def _round_trip(values: np.ndarray, stored: str, extension: str, stack: bool) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / ("file" + extension)
        (vio.write_stack if stack else vio.write_single)(values, path)
        descriptor = vio.query_descriptor(path)
        core_rank = values.ndim - 1 if stack else values.ndim
        if extension == ".mrc" and values.ndim == 3 and values.shape[0] == 1:
            # an MRC file with nz == 1 is one image (a .mrcs file would stay a stack)
            expected = vio.ImageDescriptor(values.shape[1:], 2, stored)
        else:
            expected = vio.ImageDescriptor(values.shape, core_rank, stored)
        assert descriptor == expected
        back = vio.read(path)
        assert back.dtype == np.dtype(stored)
        np.testing.assert_array_equal(back.reshape(values.shape), values.astype(stored))
        if stack:
            last = values.shape[0] - 1
            np.testing.assert_array_equal(
                vio.read(vio.ImageLocation(path, last)), values[last].astype(stored)
            )
        assert sorted(p.name for p in Path(directory).iterdir()) == [path.name]


@SETTINGS
@given(_arrays(MRC_TYPES, (2, 3)))
def test_mrc_write_single_round_trip(case):
    _round_trip(*case, ".mrc", stack=False)


@SETTINGS
@given(_arrays(MRC_TYPES, (3, 4)))
def test_mrc_write_stack_round_trip(case):
    _round_trip(*case, ".mrc", stack=True)


@SETTINGS
@given(_arrays(TIFF_TYPES, (2, 3)))
def test_tiff_write_single_round_trip(case):
    _round_trip(*case, ".tif", stack=False)


@SETTINGS
@given(_arrays(TIFF_TYPES, (3, 4)))
def test_tiff_write_stack_round_trip(case):
    _round_trip(*case, ".tif", stack=True)


@SETTINGS
@given(_arrays(MRC_TYPES, (3,)))
def test_mrcs_write_stack_round_trip(case):
    _round_trip(*case, ".mrcs", stack=True)
