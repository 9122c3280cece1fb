"""The value types: NumericalType, ImageDescriptor, ImageLocation, ImageLocationGrouping, IndexTable."""

from __future__ import annotations

import errno
import pickle
import re
from pathlib import Path, PurePosixPath

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import vitrio as vio

NT = vio.NumericalType

# ---------------------------------------------------------------- NumericalType

ALL_MEMBERS = [
    "boolean",
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
    "complex_float16",
    "complex_float32",
    "complex_float64",
]

NUMPY_EQUIVALENTS = [
    (np.bool_, NT.boolean),
    (np.int8, NT.int8),
    (np.uint8, NT.uint8),
    (np.int16, NT.int16),
    (np.uint16, NT.uint16),
    (np.int32, NT.int32),
    (np.uint32, NT.uint32),
    (np.int64, NT.int64),
    (np.uint64, NT.uint64),
    (np.float16, NT.float16),
    (np.float32, NT.float32),
    (np.float64, NT.float64),
    (np.complex64, NT.complex_float32),
    (np.complex128, NT.complex_float64),
]


def test_numerical_type_has_the_members_of_the_spec():
    assert sorted(member.name for member in NT) == sorted(ALL_MEMBERS)


@pytest.mark.parametrize(("numpy_type", "member"), NUMPY_EQUIVALENTS)
def test_numerical_type_from_numpy_types_dtypes_and_strings(numpy_type, member):
    dtype = np.dtype(numpy_type)
    for spelling in (numpy_type, dtype, dtype.name, dtype.newbyteorder(">"), member, member.name):
        assert NT(spelling) is member, spelling
        assert vio.ImageDescriptor((2, 3), 2, spelling).data_type is member, spelling


def test_numerical_type_from_python_types_and_short_codes():
    assert NT(bool) is NT.boolean
    assert NT(float) is NT.float64
    assert NT(complex) is NT.complex_float64
    assert NT("f4") is NT.float32
    assert NT("<i2") is NT.int16
    assert NT("complex_float16") is NT.complex_float16


@pytest.mark.parametrize(
    "bad", ["float128x", "nonsense", "U8", np.dtype("U3"), object, np.dtype([("a", "<i2")])]
)
def test_numerical_type_errors(bad):
    with pytest.raises(ValueError, match="is not a valid NumericalType"):
        NT(bad)
    with pytest.raises(TypeError, match="not a (numerical )?data type: "):
        vio.ImageDescriptor((2, 3), 2, bad)


def test_none_is_not_a_data_type():
    with pytest.raises(TypeError, match="not a data type: None"):
        vio.ImageDescriptor((2, 3), 2, None)


# ---------------------------------------------------------------- ImageDescriptor


def test_descriptor_properties():
    descriptor = vio.ImageDescriptor([5, 3, 4], 2, "int16")
    assert descriptor.extents == (5, 3, 4)
    assert descriptor.core_rank == 2
    assert descriptor.data_type is NT.int16
    assert vio.get_core_extents(descriptor) == (3, 4)
    assert vio.get_core_extents(vio.ImageDescriptor((2, 6, 3, 4), 3, np.float32)) == (6, 3, 4)
    assert vio.get_core_extents(vio.ImageDescriptor((3, 4), 2, np.float32)) == (3, 4)


def test_descriptor_equality_and_hash():
    a = vio.ImageDescriptor((5, 3, 4), 2, "float32")
    same = vio.ImageDescriptor([5, 3, 4], 2, np.float32)
    assert a == same and hash(a) == hash(same)
    assert len({a, same}) == 1
    assert a != vio.ImageDescriptor((5, 3, 4), 3, "float32")
    assert a != vio.ImageDescriptor((5, 3, 5), 2, "float32")
    assert a != vio.ImageDescriptor((5, 3, 4), 2, "float64")
    assert a != (5, 3, 4)


def test_descriptor_repr_names_extents_rank_and_type():
    text = repr(vio.ImageDescriptor((5, 3, 4), 2, "uint16"))
    assert "(5, 3, 4)" in text and "2" in text and "uint16" in text


def test_descriptor_pickles():
    descriptor = vio.ImageDescriptor((2, 7, 3, 4), 3, "complex64")
    copy = pickle.loads(pickle.dumps(descriptor))
    assert copy == descriptor and copy.core_rank == 3 and copy.data_type is NT.complex_float32


@pytest.mark.parametrize(("extents", "core_rank"), [((3, 4), 3), ((3, 4), 0), ((-1, 4), 2), ((), 1)])
def test_descriptor_rejects_impossible_shapes(extents, core_rank):
    fits = f"core_rank {core_rank} does not fit extents {re.escape(str(extents))}"
    with pytest.raises(ValueError, match=f"{fits}|extents must not be negative: {re.escape(str(extents))}"):
        vio.ImageDescriptor(extents, core_rank, "float32")


# ---------------------------------------------------------------- ImageLocation


def test_location_properties():
    whole = vio.ImageLocation("a.mrc")
    assert whole.key == "a.mrc"
    assert whole.index_in_stack == vio.ImageLocation.no_stack_index
    assert not whole.has_index_in_stack
    one = vio.ImageLocation("a.mrcs", 0)
    assert one.index_in_stack == 0 and one.has_index_in_stack


def test_location_from_relion_text():
    location = vio.ImageLocation.from_string("3@stack.mrcs")
    assert location.key == "stack.mrcs" and location.index_in_stack == 2
    assert vio.ImageLocation.from_string("000012@Particles/run_1.mrcs") == vio.ImageLocation(
        "Particles/run_1.mrcs", 11
    )
    whole = vio.ImageLocation.from_string("micrographs/a.mrc")
    assert whole.key == "micrographs/a.mrc" and not whole.has_index_in_stack


def test_location_str_is_relion_text():
    assert str(vio.ImageLocation("stack.mrcs", 2)) == "3@stack.mrcs"
    assert str(vio.ImageLocation("a.mrc")) == "a.mrc"


@pytest.mark.parametrize("text", ["", "   ", "0@stack.mrcs", "@stack.mrcs", "3@", "x@stack.mrcs", "-1@a.mrc"])
def test_location_from_malformed_text(text):
    with pytest.raises(ValueError, match=f"not an image location: {re.escape(repr(text))}"):
        vio.ImageLocation.from_string(text)


_KEY = st.text(alphabet="abcXYZ019_-./ ", min_size=1, max_size=20).filter(
    lambda k: k.strip() == k and not k[0].isdigit()
)


@settings(max_examples=60, deadline=None)
@given(key=_KEY, index=st.integers(-1, 10**9))
def test_location_str_round_trip(key, index):
    location = vio.ImageLocation(key, index)
    assert vio.ImageLocation.from_string(str(location)) == location


def test_location_rejects_negative_index_and_bad_keys():
    with pytest.raises(ValueError, match="index_in_stack must not be negative: -2"):
        vio.ImageLocation("a.mrc", -2)
    with pytest.raises(TypeError, match="a key is a str or os.PathLike, not int"):
        vio.ImageLocation(3, 0)


def test_a_location_is_built_from_any_key_and_the_hint_comes_where_its_file_is_missing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    location = vio.ImageLocation("3@stack.mrc")  # a constructor never parses
    assert location.key == "3@stack.mrc" and not location.has_index_in_stack
    assert vio.ImageLocation("3@stack.mrc", 1).index_in_stack == 1
    for opening in (lambda: vio.read(location), lambda: vio.query_descriptor(location.key)):
        with pytest.raises(vio.ImageFileNotFoundError, match="ImageLocation.from_string") as raised:
            opening()
        assert isinstance(raised.value, ValueError) and isinstance(raised.value, RuntimeError)
        assert raised.value.errno == errno.ENOENT and "3@stack.mrc: no such file" in str(raised.value)
    with pytest.raises(vio.ImageFileNotFoundError) as raised:
        vio.read("stack.mrc")
    assert "from_string" not in str(raised.value)


def test_location_ordering_is_by_key_then_index():
    locations = [
        vio.ImageLocation("b", 0),
        vio.ImageLocation("a", 10),
        vio.ImageLocation("a", 2),
        vio.ImageLocation("a"),
        vio.ImageLocation("b", 1),
    ]
    assert sorted(locations) == [
        vio.ImageLocation("a"),
        vio.ImageLocation("a", 2),
        vio.ImageLocation("a", 10),
        vio.ImageLocation("b", 0),
        vio.ImageLocation("b", 1),
    ]
    assert vio.ImageLocation("a", 9) < vio.ImageLocation("b", 0) <= vio.ImageLocation("b", 0)
    assert vio.ImageLocation("b", 1) > vio.ImageLocation("b", 0) >= vio.ImageLocation("a", 99)


def test_location_hash_and_equality():
    assert vio.ImageLocation("a", 1) == vio.ImageLocation("a", 1)
    assert vio.ImageLocation("a", 1) != vio.ImageLocation("a", 2)
    assert vio.ImageLocation("a") != vio.ImageLocation("a", 0)
    assert len({vio.ImageLocation("a", 1), vio.ImageLocation("a", 1), vio.ImageLocation("b", 1)}) == 2
    assert {vio.ImageLocation("a", 1): "x"}[vio.ImageLocation("a", 1)] == "x"


def test_location_pickles():
    for location in (vio.ImageLocation("dir/s.mrcs", 41), vio.ImageLocation("w.mrc")):
        copy = pickle.loads(pickle.dumps(location))
        assert copy == location and copy.index_in_stack == location.index_in_stack


def test_location_takes_path_like_keys(tmp_path):
    path = tmp_path / "s.mrcs"
    assert vio.ImageLocation(path, 3).key == str(path)
    assert vio.ImageLocation(PurePosixPath("x/y.mrc")).key == "x/y.mrc"
    assert vio.ImageLocation(Path("x/y.mrc"), 0) == vio.ImageLocation("x/y.mrc", 0)


# ---------------------------------------------------------------- ImageLocationGrouping


def test_grouping_by_file_keys_ascending():
    locations = [
        vio.ImageLocation("c", 4),
        vio.ImageLocation("a", 7),
        vio.ImageLocation("b", 0),
        vio.ImageLocation("a", 1),
        vio.ImageLocation("c", 2),
        vio.ImageLocation("a", 3),
    ]
    grouping = vio.ImageLocationGrouping(locations)
    assert len(grouping) == 3
    assert [group.key for group in grouping] == ["a", "b", "c"]
    assert grouping[0].key == "a" and list(grouping[0].indices) == [1, 3, 7]
    assert list(grouping[1].indices) == [0]
    assert list(grouping[2].indices) == [2, 4]
    for group in grouping:
        for index, position in zip(group.location_indices, group.positions):
            assert locations[position] == vio.ImageLocation(group.key, int(index))
    positions = sorted(int(p) for group in grouping for p in group.positions)
    assert positions == list(range(len(locations)))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["k", "a", "z", "m", "b"]), st.integers(0, 20)), max_size=30))
def test_grouping_holds_every_location_once(pairs):
    locations = [vio.ImageLocation(key, index) for key, index in pairs]
    grouping = vio.ImageLocationGrouping(locations)
    assert [g.key for g in grouping] == sorted({key for key, _ in pairs})
    seen = []
    for group in grouping:
        assert list(group.location_indices) == sorted(group.location_indices)
        assert group.indices == tuple(sorted(set(group.location_indices.tolist())))
        for index, position in zip(group.location_indices, group.positions):
            assert locations[int(position)] == vio.ImageLocation(group.key, int(index))
            seen.append(int(position))
    assert sorted(seen) == list(range(len(locations)))


def test_grouping_of_whole_files_and_nothing():
    assert len(vio.ImageLocationGrouping([])) == 0
    grouping = vio.ImageLocationGrouping(["y.mrc", Path("x.mrc")])
    assert [g.key for g in grouping] == ["x.mrc", "y.mrc"]
    assert grouping[0].indices == () and grouping[0].is_whole
    assert list(grouping[0].location_indices) == [vio.ImageLocation.no_stack_index]
    assert list(grouping[0].positions) == [1]


# ---------------------------------------------------------------- IndexTable


def test_index_table_add_len_index_rank():
    table = vio.IndexTable(3)
    assert table.rank == 3 and len(table) == 0
    table.add([1, 2, 3])
    table.add((4, 5, 6))
    table.add(np.array([7, 8, 9], dtype=np.uint16))
    assert len(table) == 3
    assert tuple(table[0]) == (1, 2, 3) and tuple(table[2]) == (7, 8, 9) and tuple(table[-1]) == (7, 8, 9)
    with pytest.raises(IndexError, match="entry 3 of a table of 3"):
        table[3]
    array = np.asarray(table)
    assert array.shape == (3, 3) and array.dtype == np.uintp
    np.testing.assert_array_equal(array, [[1, 2, 3], [4, 5, 6], [7, 8, 9]])


def test_index_table_grows_past_its_reservation_and_clears():
    table = vio.IndexTable(2)
    table.reserve(4)
    assert len(table) == 0
    for i in range(100):
        table.add([i, 2 * i])
    assert len(table) == 100
    np.testing.assert_array_equal(np.asarray(table)[:, 1], 2 * np.arange(100))
    table.clear()
    assert len(table) == 0 and np.asarray(table).shape == (0, 2)
    table.add([5, 6])
    assert tuple(table[0]) == (5, 6)


def test_index_table_array_is_a_copy():
    table = vio.IndexTable(2)
    table.add([1, 2])
    np.asarray(table)[0, 0] = 99
    assert tuple(table[0]) == (1, 2)


def test_index_table_rejects_bad_entries():
    with pytest.raises(ValueError, match="rank must not be negative: -1"):
        vio.IndexTable(-1)
    table = vio.IndexTable(2)
    with pytest.raises(ValueError, match=r"an entry of this table has 2 values, not \(3,\)"):
        table.add([1, 2, 3])
    with pytest.raises(ValueError, match=r"an index table holds no negative index: \[1, -2\]"):
        table.add([1, -2])
    assert len(table) == 0


def test_index_table_from_array():
    values = np.array([[0, 1], [5, 9], [3, 3]], dtype=np.int32)
    table = vio.IndexTable.from_array(values)
    assert table.rank == 2 and len(table) == 3
    np.testing.assert_array_equal(np.asarray(table), values)
    values[0, 0] = 7
    assert tuple(table[0]) == (0, 1)
    assert len(vio.IndexTable.from_array(np.zeros((0, 3), dtype=np.int64))) == 0


@pytest.mark.parametrize(
    ("array", "error"),
    [
        (np.array([[1.0, 2.0]]), TypeError),
        (np.array([[1.5, 2.0]], dtype=np.float32), TypeError),
        (np.array([[1, -2]]), ValueError),
        (np.array([1, 2]), ValueError),
        (np.zeros((2, 2, 2), dtype=np.int64), ValueError),
    ],
)
def test_index_table_from_bad_array(array, error):
    with pytest.raises(error):
        vio.IndexTable.from_array(array)


def test_every_type_is_held_by_one_numpy_dtype():
    held = {member: member.dtype for member in NT}
    assert held[NT.complex_float16] == np.complex64 and held[NT.float16] == np.float16
    assert all(
        dtype.itemsize == member.itemsize
        for member, dtype in held.items()
        if member.name != "complex_float16"
    )
    assert all(NT(dtype) is member for member, dtype in held.items() if member is not NT.complex_float16)


def test_a_single_image_counts_one_and_an_empty_stack_none():
    assert vio.ImageDescriptor((5, 6), 2, "float32").image_count == 1
    assert vio.ImageDescriptor((0, 5, 6), 2, "float32").image_count == 0
    assert vio.ImageDescriptor((2, 3, 5, 6), 2, "float32").image_count == 6
