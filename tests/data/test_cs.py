"""read_cs: numpy's `.cs` files and cryoSPARC's compressed streams read as their tables (several values a
row as 2-D arrays, only the fields asked for), and on hostile headers what a file claims is bounded by
what it holds."""

from __future__ import annotations

import io
import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest

import vitrio as vio
import vitrio._native
from vitrio.data import as_columns, read_cs


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


def _lz4_block(data: bytes) -> bytes:
    """An LZ4 block of `data`: greedy matches of 4 bytes and more (overlapping ones among them, for runs),
    the last 5 bytes literals, as LZ4's block format has it."""

    def more(count: int) -> bytes:
        return bytes([255] * ((count - 15) // 255) + [(count - 15) % 255]) if count >= 15 else b""

    block, anchor, at, seen = bytearray(), 0, 0, {}
    while at + 4 <= len(data) - 5:
        earlier = seen.get(data[at : at + 4])
        seen[data[at : at + 4]] = at
        if earlier is None or at - earlier > 65535:
            at += 1
            continue
        match = 4
        while at + match < len(data) - 5 and data[earlier + match] == data[at + match]:
            match += 1
        literals = data[anchor:at]
        block += bytes([min(len(literals), 15) << 4 | min(match - 4, 15)]) + more(len(literals)) + literals
        block += (at - earlier).to_bytes(2, "little") + more(match - 4)
        at = anchor = at + match
    literals = data[anchor:]
    return bytes(block + bytes([min(len(literals), 15) << 4]) + more(len(literals)) + literals)


def _stream_file(path: Path, table: np.ndarray, compressed: set[str]) -> Path:
    """`table` written as cryoSPARC's compressed stream: texts (numpy's `S` fields) in the heap, the
    fields of `compressed` LZ4 blocks."""
    heap, offsets, fields, columns = bytearray(b"\0"), {b"": 0}, [], []
    for name in table.dtype.names:
        field = table.dtype.fields[name][0]
        if field.kind == "S":
            for text in table[name].tolist():
                if text not in offsets:
                    offsets[text] = len(heap)
                    heap += text + b"\0"
            values = np.array([offsets[text] for text in table[name].tolist()], "<u8")
            fields.append([name, "|O"])
        else:
            values = np.ascontiguousarray(table[name])
            fields.append([name, field.base.str, *([list(field.shape)] if field.shape else [])])
        data = values.tobytes()
        columns.append(_lz4_block(data) if name in compressed else data)
    header = {
        "length": len(table),
        "dtype": fields,
        "compression": "lz4",
        "compressed_fields": sorted(compressed),
    }
    encoded = json.dumps(header).encode()
    parts = [b"\x95CSDAT", struct.pack("<I", len(encoded)), encoded]
    parts += [struct.pack("<I", len(column)) + column for column in columns]
    path.write_bytes(b"".join(parts) + bytes(heap))
    return path


def _particles(rows: int) -> np.ndarray:
    rng = np.random.default_rng(3)
    table = np.zeros(
        rows,
        dtype=[
            ("uid", "<u8"),
            ("blob/path", "S40"),
            ("blob/idx", "<u4"),
            ("blob/shape", "<u4", (2,)),
            ("ctf/df1_A", "<f4"),
            ("alignments3D/pose", "<f4", (3,)),
            ("alignments3D/shift", ">f8", (2,)),
            ("ctf/anisomag", "<f4", (2, 2)),
            ("location/micrograph_path", "S40"),
        ],
    )
    table["uid"] = rng.integers(0, 2**63, rows, dtype=np.uint64)
    micrographs = np.arange(rows) // 7
    table["blob/path"] = [f">J2/extract/m{m:04d}_particles.mrcs".encode() for m in micrographs]
    table["location/micrograph_path"] = [
        b"" if m % 3 == 0 else f"J1/m{m:04d}.mrc".encode() for m in micrographs
    ]
    table["blob/idx"] = np.arange(rows) % 7
    table["blob/shape"] = 64
    table["ctf/df1_A"] = rng.uniform(5000, 30000, rows)
    table["alignments3D/pose"] = rng.normal(size=(rows, 3))
    table["alignments3D/shift"] = rng.normal(size=(rows, 2))
    table["ctf/anisomag"] = rng.normal(size=(rows, 2, 2))
    return table


def _assert_fields_equal(read: object, table: np.ndarray, names: list[str] | None = None) -> None:
    columns = as_columns(read)
    assert list(columns) == (names or list(table.dtype.names))
    for name, values in columns.items():
        expected = table[name]
        if expected.dtype.kind == "S":
            assert values.tolist() == [os.fsdecode(text) for text in expected.tolist()], name
        else:
            assert values.shape == expected.shape and values.dtype == expected.dtype.newbyteorder("="), name
            np.testing.assert_array_equal(values, expected, err_msg=name)


def test_several_values_a_row_are_2d_arrays_and_only_the_fields_asked_for_are_read(tmp_path: Path):
    table = _particles(500)
    cs = tmp_path / "J3_particles.cs"
    with open(cs, "wb") as file:
        np.save(file, table)
    particles = read_cs(cs)
    _assert_fields_equal(particles, table)
    assert particles["alignments3D/pose"].iloc[0] == pytest.approx(table["alignments3D/pose"][0].tolist())
    assert as_columns(particles)["alignments3D/pose"].shape == (500, 3)
    assert particles["blob/path"].dtype == "category" and len(particles["blob/path"].cat.categories) == 72
    wanted = ["blob/idx", "alignments3D/pose", "blob/path"]
    _assert_fields_equal(read_cs(cs, fields=wanted), table, ["blob/path", "blob/idx", "alignments3D/pose"])
    with pytest.raises(ValueError, match=r"J3_particles.cs: no field ctf/df2_A; it has uid, blob/path"):
        read_cs(cs, fields=["ctf/df2_A"])


def test_cs_part_bytes_bounds_each_read_of_rows(tmp_path: Path, monkeypatch):
    table = _particles(500)
    cs = tmp_path / "J3_particles.cs"
    with open(cs, "wb") as file:
        np.save(file, table)
    reads = []
    preadv = os.preadv

    def counted(fd: int, buffers: list, offset: int) -> int:
        reads.append(sum(memoryview(b).nbytes for b in buffers))
        return preadv(fd, buffers, offset)

    monkeypatch.setattr(os, "preadv", counted)
    read_cs(cs)
    assert reads == [500 * table.dtype.itemsize]  # the default holds them all in one part
    reads.clear()
    part = 64 * table.dtype.itemsize
    with vio.configure(cs_part_bytes=part):
        _assert_fields_equal(read_cs(cs), table)
    assert reads == [part] * 7 + [(500 - 7 * 64) * table.dtype.itemsize]


@pytest.mark.parametrize("compressed", ["all but uid", "none"])
def test_a_compressed_stream_built_by_its_format_reads_as_the_table(tmp_path: Path, compressed: str):
    table = _particles(1000)
    names = set(table.dtype.names) - {"uid"} if compressed == "all but uid" else set()
    cs = _stream_file(tmp_path / "J4_particles.cs", table, names)
    _assert_fields_equal(read_cs(cs), table)
    _assert_fields_equal(read_cs(cs, fields=["ctf/anisomag", "uid"]), table, ["uid", "ctf/anisomag"])
    empty = _stream_file(tmp_path / "empty.cs", table[:0], names)
    _assert_fields_equal(read_cs(empty), table[:0])


def test_a_compressed_stream_written_by_cryosparc_tools_reads_as_its_table(tmp_path: Path):
    from cryosparc import dataset

    table = _particles(3000)
    table["alignments3D/shift"] = table["alignments3D/shift"].astype(
        "<f8"
    )  # cryosparc-tools keeps native types
    cs = tmp_path / "J5_particles.cs"
    dataset.Dataset(table).save(cs, format=dataset.CSDAT_FORMAT)
    assert cs.read_bytes().startswith(b"\x95CSDAT")
    _assert_fields_equal(read_cs(cs), table)


def _claiming(path: Path, header: dict, columns: list[bytes], heap: bytes = b"\0") -> Path:
    encoded = json.dumps(header).encode()
    columns = [struct.pack("<I", len(column)) + column for column in columns]
    path.write_bytes(b"\x95CSDAT" + struct.pack("<I", len(encoded)) + encoded + b"".join(columns) + heap)
    return path


def test_what_a_compressed_stream_claims_is_bounded_by_what_it_holds(tmp_path: Path):
    def refused(match: str, header: dict, columns: list[bytes], heap: bytes = b"\0") -> None:
        with pytest.raises(
            ValueError, match=f"claims.cs: not a cryoSPARC .cs file \\(a compressed stream\\): {match}"
        ):
            read_cs(_claiming(tmp_path / "claims.cs", header, columns, heap))

    lz4 = {"compression": "lz4"}
    # a billion rows of a column of a few bytes: refused before anything is allocated
    refused(
        r"x: 5 bytes cannot hold 1000000000 rows",
        {"length": 10**9, "dtype": [["x", "<f8"]], **lz4, "compressed_fields": ["x"]},
        [b"\x1f\x00\x01\x00\x00"],
    )
    refused(r"x: 8 bytes cannot hold 2 rows", {"length": 2, "dtype": [["x", "<f8"]], **lz4}, [bytes(8)])
    refused(r"x: 10 bytes cannot hold 10 rows", {"length": 10, "dtype": [["x", "<f8"]], **lz4}, [bytes(10)])
    short = _claiming(tmp_path / "short.cs", {"length": 10, "dtype": [["x", "<f8"]], **lz4}, [bytes(80)], b"")
    short.write_bytes(short.read_bytes()[:-70])
    with pytest.raises(
        ValueError, match=r"short.cs: .*x of 80 bytes at byte \d+ runs past the end of the file"
    ):
        read_cs(short)
    refused(
        r"x: not an LZ4 block",
        {"length": 2, "dtype": [["x", "<f8"]], **lz4, "compressed_fields": ["x"]},
        [b"\x10\x00\x05\x00\x00\x00"],  # a match 5 bytes back after 1 byte
    )
    refused(
        r"an offset of a text, 99, past the heap",
        {"length": 1, "dtype": [["p", "|O"]], **lz4},
        [bytes([99]) + bytes(7)],
    )
    refused(r"p: not a type of numbers or texts", {"length": 1, "dtype": [["p", "|V8"]], **lz4}, [bytes(8)])
    refused(r"p: a shape of 1 to 3 extents", {"length": 1, "dtype": [["p", "<f4", [0]]], **lz4}, [b""])
    refused(
        r"a compression other than LZ4",
        {"length": 1, "dtype": [["x", "<u1"]], "compression": "zstd"},
        [b"\0"],
    )
    refused(r"its header does not give its rows", {"dtype": [["x", "<u1"]]}, [b"\0"])
    (tmp_path / "claims.cs").write_bytes(b"\x95CSDAT" + struct.pack("<I", 3) + b"{x}")
    with pytest.raises(ValueError, match=r"its header is not JSON"):
        read_cs(tmp_path / "claims.cs")
    (tmp_path / "claims.cs").write_bytes(b"\x95CSDAT" + struct.pack("<I", 2**31) + b"{}")
    with pytest.raises(ValueError, match=r"a header of 2147483648 bytes"):
        read_cs(tmp_path / "claims.cs")


def test_lz4_blocks_that_do_not_fill_their_output_exactly_are_refused():
    data = b"particles " * 100 + b"end."
    block = _lz4_block(data)
    assert len(block) < len(data) // 4  # runs and repeats are matches
    out = bytearray(len(data))
    vitrio._native.lz4_decode(block, out)
    assert bytes(out) == data
    for wrong in (bytearray(len(data) - 1), bytearray(len(data) + 1)):
        with pytest.raises(ValueError):
            vitrio._native.lz4_decode(block, wrong)
    for cut in (1, 2, len(block) // 2, len(block) - 1):
        with pytest.raises(ValueError):
            vitrio._native.lz4_decode(block[:cut], bytearray(len(data)))
    with pytest.raises(ValueError):
        vitrio._native.lz4_decode(b"", bytearray(1))
