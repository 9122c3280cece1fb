"""The native standardisation of items of float32 values: what it refuses, and its writes kept to `out`."""

from __future__ import annotations

import numpy as np
import pytest

from vitrio import _native


def test_it_writes_each_item_standardised_into_out_and_nothing_beyond():
    values = np.array([[1, 2, 3, 4], [5, 5, 5, 5], [-1, 1, -1, 1]], np.float32)
    out = np.full(14, 7, np.float32)
    assert _native.standardize(values, out[1:13], 3) is None
    deviation = np.sqrt(1.25)
    expected = [
        [-1.5 / deviation, -0.5 / deviation, 0.5 / deviation, 1.5 / deviation],
        [0] * 4,
        [-1, 1, -1, 1],
    ]
    np.testing.assert_allclose(out[1:13].reshape(3, 4), expected, rtol=2**-24)
    assert out[0] == out[13] == 7


@pytest.mark.parametrize(
    ("src", "out", "rows"),
    [
        (np.zeros(12, np.float32), np.zeros(12, np.float32), 5),  # 12 values do not part into 5 items
        (np.zeros(12, np.float32), np.zeros(13, np.float32), 3),  # out is not as large
        (np.zeros(12, np.float32), np.zeros(12, np.float32), 0),
        (np.zeros(12, np.float32), np.zeros(12, np.float32), -4),
        (np.zeros(49, np.uint8)[1:].view(np.float32), np.zeros(12, np.float32), 3),  # not aligned
        (b"\0" * 7, bytearray(7), 1),  # not whole values
    ],
    ids=["rows", "size", "no-rows", "negative", "unaligned", "bytes"],
)
def test_buffers_that_are_not_items_of_float32_are_refused(src, out, rows):
    with pytest.raises(ValueError, match="aligned float32 values of one size that part into rows items"):
        _native.standardize(src, out, rows)


def test_out_must_be_writable():
    with pytest.raises(TypeError):
        _native.standardize(np.zeros(4, np.float32), bytes(16), 1)
