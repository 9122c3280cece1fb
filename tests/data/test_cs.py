"""read_cs on hostile headers: what a .cs file claims is bounded by what it holds."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from vitrio.data import read_cs


def _cs_file(path: Path, dtype: object, rows: int, size: int = 128) -> Path:
    """A .cs file of `size` bytes whose header claims `rows` rows of `dtype`, holding zeros after it."""
    header = io.BytesIO()
    descr = np.lib.format.dtype_to_descr(np.dtype(dtype))
    np.lib.format.write_array_header_1_0(header, {"descr": descr, "fortran_order": False, "shape": (rows,)})
    path.write_bytes(header.getvalue().ljust(size, b"\0"))
    return path


@pytest.mark.parametrize(
    "dtype",
    [
        [("blob/path", "S0")],
        [("alignments3D/pose", "<f4", (0,))],
        [("uid", "<u8", (0,)), ("blob/path", "S0")],
    ],
    ids=["S0", "a shape of 0 values", "every field empty"],
)
def test_a_field_of_0_bytes_claiming_a_billion_rows_is_refused(tmp_path: Path, dtype: object):
    cs = _cs_file(tmp_path / "claims.cs", dtype, 10**9)
    assert cs.stat().st_size == 128
    with pytest.raises(ValueError, match="claims.cs: .*0 bytes a row"):
        read_cs(cs)


def test_a_field_of_0_bytes_beside_others_is_refused_naming_it(tmp_path: Path):
    cs = _cs_file(tmp_path / "mixed.cs", [("uid", "<u8"), ("blob/path", "S0")], 2, size=256)
    with pytest.raises(ValueError, match="mixed.cs: .*blob/path: 0 bytes a row"):
        read_cs(cs)


def test_more_rows_than_the_file_holds_are_refused_before_mapping(tmp_path: Path):
    cs = _cs_file(tmp_path / "short.cs", [("uid", "<u8"), ("blob/idx", "<u4")], 10**9)
    with pytest.raises(ValueError, match=r"short.cs: .*claims 1000000000 rows of 12 bytes; it holds 0"):
        read_cs(cs)
    whole = _cs_file(tmp_path / "whole.cs", [("uid", "<u8"), ("blob/idx", "<u4")], 5, size=128 + 60)
    assert len(read_cs(whole)) == 5
