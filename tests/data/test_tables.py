"""as_columns, make_locations and parse_locations."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from vitrio import ImageLocation
from vitrio.data import as_columns, make_locations, parse_locations


def test_as_columns_of_a_dataframe_a_mapping_and_a_structured_array():
    frame = pd.DataFrame({"b": [1.5, 2.5], "a": ["x", "y"]})
    columns = as_columns(frame)
    assert list(columns) == ["b", "a"]
    assert isinstance(columns["b"], np.ndarray) and columns["b"].tolist() == [1.5, 2.5]
    mapping = as_columns({"u": [1, 2, 3], "v": np.zeros((3, 2))})
    assert list(mapping) == ["u", "v"] and mapping["v"].shape == (3, 2)
    structured = np.zeros(4, dtype=[("blob/idx", "<u4"), ("blob/path", "S20"), ("ctf", "<f4", (2,))])
    structured["blob/idx"] = [3, 2, 1, 0]
    columns = as_columns(structured)
    assert list(columns) == ["blob/idx", "blob/path", "ctf"]
    assert columns["blob/idx"].tolist() == [3, 2, 1, 0] and columns["ctf"].shape == (4, 2)
    assert np.shares_memory(columns["blob/idx"], structured)


def test_as_columns_errors():
    with pytest.raises(TypeError, match="a table is a pandas DataFrame, .* not list"):
        as_columns([1, 2, 3])
    with pytest.raises(TypeError, match="a table is a pandas DataFrame, .* not ndarray"):
        as_columns(np.zeros(3))
    with pytest.raises(ValueError, match="not all as long"):
        as_columns({"a": [1, 2], "b": [1, 2, 3]})
    with pytest.raises(ValueError, match=r"columns \['a'\] hold a single value, not a value for each row"):
        as_columns({"a": 3})


def test_make_locations_as_cryosparc_states_them(tmp_path):
    keys = np.array([b">J1/extract/a.mrc", b"/abs/b.mrc", b"J1/extract/a.mrc"], dtype="S40")
    locations = make_locations(keys, np.array([0, 5, 2], dtype=np.uint32), root=tmp_path)
    assert locations == [
        ImageLocation(tmp_path / "J1/extract/a.mrc", 0),
        ImageLocation("/abs/b.mrc", 5),
        ImageLocation(tmp_path / "J1/extract/a.mrc", 2),
    ]
    assert make_locations(["x.mrc", Path("y.mrc")]) == [ImageLocation("x.mrc"), ImageLocation("y.mrc")]
    assert make_locations([">p/z.mrcs"], [1]) == [ImageLocation("p/z.mrcs", 1)]
    with pytest.raises(ValueError, match="2 indices for 3 keys"):
        make_locations(["a", "b", "c"], [0, 1])
    with pytest.raises(ValueError, match="an index in a stack cannot be negative: -1"):
        make_locations(["a"], [-1])


def test_parse_locations_as_relion_writes_them(tmp_path):
    texts = ["000003@Extract/job5/a.mrcs", b"1@/abs/b.mrcs", "Micrographs/m.mrc"]
    assert parse_locations(texts) == [
        ImageLocation("Extract/job5/a.mrcs", 2),
        ImageLocation("/abs/b.mrcs", 0),
        ImageLocation("Micrographs/m.mrc"),
    ]
    assert parse_locations(pd.Series(texts), root=tmp_path) == [
        ImageLocation(tmp_path / "Extract/job5/a.mrcs", 2),
        ImageLocation("/abs/b.mrcs", 0),
        ImageLocation(tmp_path / "Micrographs/m.mrc"),
    ]
    for bad in ["0@a.mrcs", "", "x@a.mrcs", 3.5]:
        with pytest.raises(ValueError, match=f"not an image location: {re.escape(repr(bad))}"):
            parse_locations(["1@fine.mrcs", bad])
