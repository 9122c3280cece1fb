"""Locations, descriptors, groupings and index tables as the published package makes and shows them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import vitrio as vio
from vitrio import NumericalType as NT


def test_default_location_names_nothing():
    location = vio.ImageLocation()
    assert location.key == "" and location.index_in_stack == vio.ImageLocation.no_stack_index
    assert not location.has_index_in_stack
    assert vio.ImageLocation("a.mrc", 2**64 - 1) == vio.ImageLocation("a.mrc")  # the published no_stack_index


def test_reprs_are_in_keyword_form():
    assert repr(vio.ImageLocation("stack.mrc", 2)) == "ImageLocation(key='stack.mrc', index_in_stack=2)"
    assert repr(vio.ImageLocation("stack.mrc")) == "ImageLocation(key='stack.mrc')"
    assert (
        repr(vio.ImageDescriptor((6, 3, 4), 2, NT.float32))
        == "ImageDescriptor(extents=(6, 3, 4), core_rank=2, data_type=NumericalType.float32)"
    )


def test_grouping_groups_hold_sorted_unique_indices():
    grouping = vio.ImageLocationGrouping(
        [vio.ImageLocation("a.mrcs", 4), vio.ImageLocation("b.mrc"), vio.ImageLocation("a.mrcs", 1)]
        + [vio.ImageLocation("a.mrcs", 4)]
    )
    a, b = grouping
    assert a.key == "a.mrcs" and a.indices == (1, 4) and a.is_whole is False
    assert repr(a) == "ImageLocationGrouping.Group(key='a.mrcs', indices=(1, 4))"
    assert b.key == "b.mrc" and b.indices == () and b.is_whole is True
    mixed = vio.ImageLocationGrouping([vio.ImageLocation("c.mrcs", 3), vio.ImageLocation("c.mrcs")])
    assert mixed[0].is_whole and mixed[0].indices == ()


def test_default_index_table_has_rank_0_for_good():
    table = vio.IndexTable()
    assert table.rank == 0 and len(table) == 0
    table.add([])
    assert table.rank == 0 and len(table) == 1
    with pytest.raises(ValueError):
        table.add([1])


def test_index_table_from_array_takes_only_exposed_memory():
    rows = np.array([[1, 2], [3, 4]], dtype=np.int32)
    for exposed in (rows, memoryview(rows), torch.from_numpy(rows)):
        np.testing.assert_array_equal(np.asarray(vio.IndexTable.from_array(exposed)), rows)

    class OnlyArray:
        def __array__(self, dtype=None, copy=None):
            return rows

    for refused in ([[1, 2], [3, 4]], OnlyArray()):
        with pytest.raises(TypeError):
            vio.IndexTable.from_array(refused)


def test_index_table_as_numpy_is_a_uintp_copy():
    table = vio.IndexTable.from_array(np.array([[5, 6, 7]], dtype=np.int64))
    values = np.asarray(table)
    assert values.dtype == np.uintp and values.shape == (1, 3)
    values[0, 0] = 0
    assert table[0] == (5, 6, 7)
    with pytest.raises(ValueError):
        np.asarray(table, copy=False)


def test_patches_take_an_index_table_of_centres(tmp_path):
    image = np.arange(64, dtype=np.float32).reshape(8, 8)
    vio.write_single(image, tmp_path / "a.mrc")
    centres = vio.IndexTable.from_array(np.array([[4, 4]]))
    out = np.zeros((1, 2, 2), np.float32)
    vio.read_patches_async(vio.loader(workers=1), out, tmp_path / "a.mrc", centres).get()
    np.testing.assert_array_equal(out[0], image[3:5, 3:5])
