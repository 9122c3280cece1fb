"""The C extension's STAR reading against the general parser: the rows of loops (star_read)
give the tables pandas gives or are left to it, and RELION's image names split (split_image_names) as
`ImageLocation.from_string` parses them; each function refuses what does not fit instead of reading or
writing past it."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import vitrio.data._star_text as star_text
from vitrio import ImageLocation, _native
from vitrio._locations import LocationColumns
from vitrio.data import _particles

from ..data.star_oracle import read_plain_rows

_DIGITS = st.text("0123456789", min_size=1, max_size=22)
_NUMBERS = st.one_of(
    st.integers(-(2**63), 2**63 - 1).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.floats(-1e5, 1e5).map(lambda x: f"{x:12.6f}".strip()),
    st.builds(
        lambda sign, whole, point, fraction, exponent: f"{sign}{whole}{point}{fraction}{exponent}",
        st.sampled_from(["", "-", "+"]),
        _DIGITS,
        st.sampled_from([".", ""]),
        st.text("0123456789", max_size=20),
        st.sampled_from(["", "e5", "E-3", "e+330", "e-320", "e308", "e-400", "e00001"]),
    ),
)
_ODD = st.sampled_from(
    [
        "nan",
        "NaN",
        "<NA>",
        "inf",
        "-inf",
        "Infinity",
        "True",
        "false",
        "1.2.3",
        "1e",
        "-",
        ".",
        "e5",
        "1_000",
        "NA",
        "0x1F",
        "1,5",
        "'a b'",
        '"c"',
        "a#b",
        "é",
        "\x0c",
        "\r",
    ]
)
_WORDS = st.text("abcxyzABC/_.@-0123456789<>", min_size=1, max_size=12)


@st.composite
def _loops(draw) -> bytes:
    """The text of a STAR file of a loop (and maybe a block after it): columns of numbers, of words,
    of a mixture, with odd values, comments, tabs, CRLF, blank lines, rows of the wrong length."""
    columns = draw(st.integers(1, 4))
    kinds = draw(
        st.lists(st.sampled_from(["int", "number", "word", "any"]), min_size=columns, max_size=columns)
    )
    values = {
        "int": st.integers(-(10**19), 10**19).map(str),
        "number": _NUMBERS,
        "word": _WORDS,
        "any": st.one_of(_NUMBERS, _WORDS, _ODD),
    }
    rows = []
    for _ in range(draw(st.one_of(st.integers(0, 6), st.integers(30, 60)))):  # many: lines read by blocks
        row = [draw(values[kind]) for kind in kinds]
        if draw(st.integers(0, 30)) == 0:
            row = row[:-1] if draw(st.booleans()) else [*row, "1"]
        if row and draw(st.integers(0, 20)) == 0:
            row[draw(st.integers(0, len(row) - 1))] = draw(_ODD)
        separator = draw(st.sampled_from([" ", "  ", "\t", " \t "]))
        rows.append(separator.join(row) + draw(st.sampled_from(["", "", " # a comment", "  "])))
        if draw(st.integers(0, 10)) == 0:
            rows.append(draw(st.sampled_from(["", "# between", "   ", "  # indented", "\t#"])))
    names = "".join(f"_rlnColumn{c} #{c + 1}\n" for c in range(columns))
    end = draw(st.sampled_from(["\n", "", "\n\ndata_after\n\nloop_\n_rlnX #1\n1\n", "\n  data_\n_rlnY 2\n"]))
    text = f"data_\n\nloop_\n{names}" + "\n".join(rows) + end
    if draw(st.booleans()):
        text = text.replace("\n", "\r\n")
    return text.encode()


def _parse(text: bytes, plain: bool, monkeypatch) -> dict | str:
    """The blocks of `text` as parse_star reads them, or its error as text."""
    read_plain_rows(monkeypatch, plain)
    file = io.BufferedReader(io.FileIO(_file(text), "rb"))
    try:
        return star_text.parse_star("x.star", file, 1 << 24)
    except Exception as error:
        return f"{type(error).__name__}: {error}"
    finally:
        file.close()


def _file(text: bytes) -> int:
    """A descriptor of an unnamed file holding `text` (parse_star asks the size of a real file)."""
    import os
    import tempfile

    with tempfile.TemporaryFile() as file:
        file.write(text)
        file.flush()
        file.seek(0)
        return os.dup(file.fileno())


@settings(max_examples=250, deadline=None)
@given(text=_loops())
def test_plain_rows_read_as_pandas_reads_them(text: bytes):
    with pytest.MonkeyPatch.context() as monkeypatch:
        ours, general = _parse(text, True, monkeypatch), _parse(text, False, monkeypatch)
    if isinstance(general, str) or isinstance(ours, str):
        assert ours == general
        return
    assert list(ours) == list(general)
    for name, block in general.items():
        if isinstance(block, pd.DataFrame):
            pd.testing.assert_frame_equal(ours[name], block, check_exact=True)
        else:
            assert ours[name] == block


def test_plain_rows_are_read_without_pandas_parser(monkeypatch):
    text = (
        b"data_\nloop_\n_rlnA #1\n_rlnB #2\n_rlnC #3\n  # indented\n"
        b"1@a.mrcs 2 -1.5e-3\r\n# note\n2@a.mrcs\t3 nan # end\n"
    )

    def refuse(*args):
        raise AssertionError("the plain rows went to pandas")

    monkeypatch.setattr(star_text, "_parsed_rows", refuse)
    table = _parse(text, True, monkeypatch)[""]
    assert table["rlnA"].tolist() == ["1@a.mrcs", "2@a.mrcs"]
    assert table["rlnB"].dtype == np.int64 and table["rlnB"].tolist() == [2, 3]
    assert table["rlnC"].iloc[0] == -1.5e-3 and np.isnan(table["rlnC"].iloc[1])
    assert table["rlnA"].dtype == pd.Series(["text"]).dtype


def _texts(texts: list) -> list[list[bytes]]:
    """The values of each column of text `star_read` gave, as bytes, checked against their offsets."""
    columns = []
    for parts in texts:
        values = []
        for rows, offsets, data in parts:
            offsets, data = np.frombuffer(offsets, np.int64), bytes(data)
            assert len(offsets) == rows + 1 and offsets[0] == 0 and offsets[-1] == len(data)
            values += [data[a:b] for a, b in zip(offsets[:-1], offsets[1:])]
        columns.append(values)
    return columns


def test_star_read_reads_the_rows_in_one_pass_and_refuses_what_does_not_fit():
    text = b"1 2.5 m1\n# note\n3 4 m2\n"
    outs = (np.empty(2, np.int64), np.empty(2, np.int64), np.empty(2, np.int64))
    end, rows, lines, kinds, block, texts = _native.star_read(text, 0, b"???", outs)
    assert (end, rows, lines, kinds, block) == (len(text), 2, 3, b"ift", False)
    assert outs[0].tolist() == [1, 3] and outs[1].view(np.float64).tolist() == [2.5, 4.0]
    assert _texts(texts) == [[b"m1", b"m2"]]
    # outs of room for one row: the reading stops at the second, and goes on from there
    small = (np.empty(1, np.int64), np.empty(1), b"")
    end, rows, lines, kinds, block, texts = _native.star_read(text, 0, b"??t", small)
    assert (text[end:], rows, lines, kinds) == (b"3 4 m2\n", 1, 2, b"ift")
    end, rows, lines, kinds, block, texts = _native.star_read(text, end, kinds, small)
    assert (end, rows, lines, kinds, small[0][0], small[1][0]) == (len(text), 1, 1, b"ift", 3, 4.0)
    assert _texts(texts) == [[b"m2"]]
    # integers so far become numbers where a number comes, and NaN makes them numbers too
    outs = (np.empty(2, np.int64), np.empty(2, np.int64), b"")
    assert _native.star_read(b"7 1 m\n", 0, b"fit", outs)[3] == b"fit" and outs[0].view(np.float64)[0] == 7.0
    assert _native.star_read(b"7 nan m\n", 0, b"iit", outs)[3] == b"ift" and np.isnan(
        outs[1].view(np.float64)[0]
    )
    assert _native.star_read(b"7 1 m\n8.5 2 x\n", 0, b"??t", outs)[3] == b"fit"
    assert outs[0].view(np.float64).tolist() == [7.0, 8.5]
    # the same, the values far enough from the end of the text to be read eight digits at a time
    rows = b"7 1 m\n" * 5 + b"8.5 -2 x\n" + b"9 3 z\n" * 5
    outs = (np.empty(11, np.int64), np.empty(11, np.int64), b"")
    assert _native.star_read(rows, 0, b"??t", outs)[3] == b"fit"
    assert outs[0].view(np.float64).tolist() == [7.0] * 5 + [8.5] + [9.0] * 5
    assert outs[1].tolist() == [1] * 5 + [-2] + [3] * 5
    # a block ends the rows
    found = _native.star_read(b"1 2 m\n data_x\n5 6 n\n", 0, b"???", (np.empty(2, np.int64),) * 3)
    assert found[:5] == (6, 1, 1, b"iit", True)
    for kinds, text in [
        (b"??t", b"1 2 3\n"),  # numbers in a column of text
        (b"i??", b"m 2 3\n"),  # text in a column of integers
        (b"???", b"1 2\n"),  # a row too short
        (b"???", b"1 2 3 4\n"),  # too long
        (b"???", b"1 'a b' 3\n"),  # quotes
        (b"???", b"1 -0 3\n"),  # -0 among integers
        (b"???", b"1 1.2.3 3\n"),
        (b"???", b"1 inf 3\n"),
        (b"???", b"1 True m\n"),
        (b"??t", b"1 2 <NA>\n"),
        (b"???", b"1 12345678901234567890 m\n"),  # more than int64 is read as
        (b"???", b"1 2 m\r3 4 n\n"),
        (b"???", "1 2 é\n".encode()),
    ]:
        assert _native.star_read(text, 0, kinds, (np.empty(2, np.int64),) * 3) is None, text
    for start, kinds, outs in [
        (len(text) + 1, b"???", (np.empty(2, np.int64),) * 3),
        (0, b"", ()),
        (0, b"??", (np.empty(2, np.int64),) * 3),
        (0, b"?x?", (np.empty(2, np.int64),) * 3),
        (0, b"???", (np.empty(2, np.int64), np.empty(3, np.uint8), np.empty(2))),
        (0, b"???", (np.empty(2, np.int64), np.empty(17, np.uint8)[1:], np.empty(2))),  # not aligned
    ]:
        with pytest.raises(ValueError):
            _native.star_read(b"1 2 3\n", start, kinds, outs)
    with pytest.raises(BufferError):
        _native.star_read(b"1 2 3\n", 0, b"???", (np.empty(2, np.int64), b"", np.empty(2)))  # not writable


@pytest.mark.parametrize(
    "ending", ["plain", "a quote at the end", "a block near the end", "a block near the start"]
)
def test_a_long_loop_read_in_two_halves_as_pandas_reads_it(ending: str, monkeypatch):
    rng = np.random.default_rng(5)
    rows = 40_000  # halves of more than a megabyte: each is read by a thread of its own
    values = rng.normal(0, 1e4, (rows, 3))
    lines = [
        f"{i:06d}@Movies/m{i // 200}.mrcs {a!r} {b:12.6f} {c:.3e} {i % 7}\n"
        for i, (a, b, c) in enumerate(values)
    ]
    if ending == "a quote at the end":
        lines[-1] = "'1@a b.mrcs' 1 2 3 4\n"
    elif ending == "a block near the end":
        lines[-10:] = ["data_next\nloop_\n_rlnX\n1\n"]
    elif ending == "a block near the start":
        lines[10:] = ["data_next\nloop_\n_rlnX\n", *(f"{i}\n" for i in range(rows * 10))]
    text = ("data_\nloop_\n" + "".join(f"_rlnC{c}\n" for c in range(5)) + "".join(lines)).encode()
    outs = tuple(np.empty(rows, np.int64) for _ in range(5))
    found = _native.star_read(text, text.index(b"000000@"), b"?????", outs)
    assert (found is None) == (ending == "a quote at the end")
    if ending == "plain":  # read in two halves, the text of each a part of its own
        assert found[1] == rows and found[5] and all(len(parts) == 2 for parts in found[5])
    ours, general = _parse(text, True, monkeypatch), _parse(text, False, monkeypatch)
    assert list(ours) == list(general)
    for name in general:
        pd.testing.assert_frame_equal(ours[name], general[name], check_exact=True)


@pytest.mark.parametrize("ending", ["\n", "\r\n"])
def test_values_at_every_place_of_a_block_are_read_natively(ending):
    """A line's values are found by blocks of 64 bytes: names of every length put value edges at every
    place of a block and across blocks, among tabs, runs of spaces, blank lines, comments after values
    (read byte by byte) and a line of more than 2 KiB; all read natively, each value as written."""
    names, numbers, classes, lines = [], [], [], []
    for row in range(300):
        names.append("x" * (row % 150 + 1) + f"@{row}.mrcs")
        numbers.append(row * 1.25 - 97)
        classes.append(row % 7)
        gap = [" ", "\t", "   ", " \t  "][row % 4]
        line = f"{gap * (row % 3)}{names[-1]}{gap}{numbers[-1]:.6f}{gap}{classes[-1]}"
        lines += [line + "  # a comment after the values" * (row % 17 == 0), *([""] * (row % 29 == 0))]
    names[150], numbers[150], classes[150] = "z" * 2500, 1.5, 3
    lines[lines.index(next(line for line in lines if "@150." in line))] = f"{names[150]} 1.5 3"
    text = (ending.join(lines) + ending).encode()
    outs = tuple(np.zeros(400, np.int64) for _ in range(3))
    end, rows, line_ends, kinds, block, texts = _native.star_read(text, 0, b"???", outs)
    assert (end, rows, line_ends, kinds, block) == (len(text), 300, len(lines), b"tfi", False)
    assert _texts(texts) == [[name.encode() for name in names]]
    np.testing.assert_array_equal(outs[1].view(np.float64)[:rows], numbers)
    np.testing.assert_array_equal(outs[2][:rows], classes)
    skipped = tuple(np.zeros(400, np.int64) for _ in range(3))
    assert _native.star_read(text, 0, b"sfs", skipped)[1:4] == (300, len(lines), b"sfs")
    np.testing.assert_array_equal(skipped[1].view(np.float64)[:rows], numbers)


def test_text_of_megabytes_is_read_whole():
    # each half's text grows past a megabyte, into memory of its own that grows and is cut to size
    names = [f"{i:06d}@Extract/job007/Movies/{'x' * (i % 150)}.mrcs".encode() for i in range(60_000)]
    text = b"".join(name + b" 1\n" for name in names)
    found = _native.star_read(text, 0, b"??", (np.empty(len(names), np.int64),) * 2)
    assert found[1] == len(names) and found[3] == b"ti"
    assert _texts(found[5]) == [names]
    # outs of room for 40,000 rows: the second half stops at the row past them, read on from there
    outs = (b"", np.empty(40_000, np.int64))
    end, rows, lines, kinds, block, texts = _native.star_read(text, 0, b"t?", outs)
    assert (rows, lines, kinds, block) == (40_000, 40_000, b"ti", False) and len(texts[0]) == 2
    assert text[end:].startswith(names[40_000] + b" 1\n") and _texts(texts) == [names[:40_000]]
    found = _native.star_read(text, end, kinds, outs)
    assert found[1] == len(names) - 40_000 and _texts(found[5]) == [names[40_000:]]


_NAMES = st.lists(
    st.one_of(
        st.builds(
            lambda i, p: f"{i:06d}@{p}", st.integers(1, 10**7), st.sampled_from(["a.mrcs", "b/c.mrcs"])
        ),
        st.builds(lambda i, p: f"{i}@{p}", st.integers(0, 10**20), st.text(min_size=1, max_size=6)),
        st.text(max_size=8),
    ),
    min_size=1,
    max_size=20,
)


@settings(max_examples=200, deadline=None)
@given(names=_NAMES)
def test_image_names_split_as_one_by_one(names: list[str]):
    split = _particles._split(pd.Series(names, dtype=pd.Series(["text"]).dtype))
    try:
        expected = [ImageLocation.from_string(name) for name in names]
    except ValueError:
        expected = None
    if split is None:  # left to the names one by one
        return
    assert expected is not None
    indices, codes, paths = split
    made = list(LocationColumns(paths, codes, indices))
    assert made == expected
    assert [(m.key, m.index_in_stack) for m in made] == [(e.key, e.index_in_stack) for e in expected]
    assert len(set(paths)) == len(paths)


def test_plain_image_names_are_split_by_the_extension():
    names = pd.Series(
        ["000002@Movies/a.mrcs", "000001@Movies/a.mrcs", "3@b.mrcs"], dtype=pd.Series(["t"]).dtype
    )
    indices, codes, paths = _particles._split(names)
    assert (
        indices.tolist() == [1, 0, 2] and codes.tolist() == [0, 0, 1] and paths == ["Movies/a.mrcs", "b.mrcs"]
    )


def test_split_image_names_refuses_what_does_not_fit():
    data = b"1@a2@b"
    out = np.empty(2, np.int64), np.empty(2, np.int64)
    for offsets in ([0, 3, 7], [0, 4, 3], [-1, 3, 6], [0, 3]):
        with pytest.raises(ValueError):
            _native.split_image_names(np.array(offsets, np.int64), data, *out)
    assert _native.split_image_names(np.array([0, 3, 6], np.int64), data, *out) == ["a", "b"]
