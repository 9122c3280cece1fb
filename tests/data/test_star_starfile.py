"""read_star where it once read otherwise than starfile, or slower than the size of the file: each case
against starfile's own reading, by the C extension's reader and by the general one."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

import vitrio.data._star_text
from vitrio.data import read_star

from .star_oracle import assert_read_as_starfile, starfile_blocks

MIB = 1 << 20


def _seconds_to_read(path: Path, runs: int) -> float:
    """The fastest of `runs` readings of `path`, in seconds: what the reading costs, less what a loaded
    machine adds to some of them."""
    times = []
    for _ in range(runs):
        start = time.process_time()
        read_star(path)
        times.append(time.process_time() - start)
    return min(times)


def test_a_long_line_of_a_loop_left_to_pandas_reads_in_time_linear_in_its_length(tmp_path: Path):
    # a quoted value (which the C extension leaves to pandas) of `data_` over and over, none of which
    # starts a line: each must not cost a look back to the start of the line
    def file(size: int) -> Path:
        path = tmp_path / f"long{size}.star"
        path.write_bytes(b'data_x\nloop_\n_rlnA\n"' + b"data_" * (size // 5) + b'"\n')
        return path

    small, large = file(1 * MIB), file(8 * MIB)
    assert len(read_star(large)["x"]["rlnA"][0]) == 8 * MIB // 5 * 5
    # 8 times the text: linear takes about 8 times as long, quadratic 64; 32 leaves room for a loaded
    # machine, and the processor time of the fastest run counts no wait for a core
    assert _seconds_to_read(large, 3) < 32 * _seconds_to_read(small, 5)


HEADER = "data_particles\n\nloop_\n_rlnImageName #1\n_rlnClassNumber #2\n"
ROWS = "1@a.mrcs 1\n2@a.mrcs 2\n3@a.mrcs 3\n"


@pytest.mark.parametrize(
    "text",
    [
        HEADER + "  # a comment first\n" + ROWS,
        HEADER + "1@a.mrcs 1\n\t# a comment between\n2@a.mrcs 2\n 3@a.mrcs 3\n",
        (HEADER + "   # first\r\n" + ROWS + "  # last\r\n").replace("\n", "\r\n").replace("\r\r", "\r"),
        "  # a comment before the block\n" + HEADER + "  # only comments\n",
    ],
    ids=["first", "between rows", "CRLF, first and last", "before the block, and no rows"],
)
def test_an_indented_comment_in_a_loop_is_a_comment(tmp_path: Path, text: str):
    path = tmp_path / "commented.star"
    path.write_text(text)
    if "only comments" in text:  # starfile fails on a loop of comments alone (pandas finds no columns)
        assert read_star(path)["particles"].shape == (0, 2)
        return
    particles = starfile_blocks(path)["particles"]
    assert particles["rlnClassNumber"].tolist() == [1, 2, 3] and particles["rlnClassNumber"].dtype == np.int64
    assert_read_as_starfile(path)


def test_a_column_of_a_number_then_text_stays_text(tmp_path: Path):
    # the columns of starfile's own loop_single_quote.star and loop_double_quote.star, in both quotes
    for q, name in (("'", "loop_single_quote"), ('"', "loop_double_quote")):
        path = tmp_path / f"{name}.star"
        path.write_text(
            "data_\n\nloop_\n_no_quote_string #1\n_quote_string #2\n_whitespace_string #3\n_empty_string #4\n"
            "_number_and_string #5\n_number_and_empty #6\n_number #7\n_empty_string_and_normal_string #8\n"
            f"noquote {q}quote string{q} {q} {q} {q}{q} 4.0 5.0 6.0 {q}{q}\n"
            f"noquote {q}quote string{q} {q} {q} {q}{q} noquote {q}{q} 7.0 test\n"
        )
        table = read_star(path)[""]
        assert table["number_and_string"].tolist() == ["4.0", "noquote"]
        assert table["number_and_empty"].tolist()[0] == 5.0 and np.isnan(table["number_and_empty"][1])
        assert table["empty_string"].tolist() == ["", ""]
        assert table["whitespace_string"].tolist() == [" ", " "]
        assert_read_as_starfile(path)


def test_a_byte_order_mark_is_skipped(tmp_path: Path):
    path = tmp_path / "marked.star"
    path.write_bytes(b"\xef\xbb\xbf" + (HEADER + ROWS).encode())
    assert list(read_star(path)) == ["particles"]
    assert_read_as_starfile(path)
    path.write_bytes(b"\xef\xbb\xbfdata_general\n_rlnImageSize 64\n")
    assert_read_as_starfile(path)


def test_a_loop_of_no_columns_or_of_too_many_is_refused_naming_the_file(tmp_path: Path):
    path = tmp_path / "columns.star"
    path.write_text("data_\nloop_\n\n1@a.mrcs 1\n")
    with pytest.raises(ValueError, match="columns.star: line 4: 2 values in a row of a loop of 0 columns"):
        read_star(path)
    # no columns and no rows: an empty table, as starfile reads it
    path.write_text("data_a\nloop_\n\ndata_b\n_rlnImageSize 64\n")
    assert_read_as_starfile(path)
    many = vitrio.data._star_text.MAX_LOOP_COLUMNS + 1
    path.write_text("data_wide\nloop_\n" + "".join(f"_c{i}\n" for i in range(many)) + "1\n")
    with pytest.raises(
        ValueError, match=f"columns.star: the loop of data_wide up to line {many + 2}: {many} columns"
    ):
        read_star(path)


def test_integers_of_19_digits_read_exact_and_past_int64_as_starfile_reads_them(tmp_path: Path):
    path = tmp_path / "digits.star"
    path.write_text(
        "data_\nloop_\n_rlnLarge\n_rlnPast\n_rlnBelow\n_rlnMixed\n_rlnDecimals\n"
        "9223372036854775807 9999999999999999999 -9999999999999999999 9007199254740993 1234567890.123456789\n"
        "-9223372036854775808 18446744073709551615 1 1.5 -0.1234567890123456789e-5\n"
        "1234567890123456789 1 -1 2 123456789012345678.9\n"
        "-1234567890123456789 2 -2 3 1.0000000000000002220446\n"
    )
    table = read_star(path)[""]
    assert table["rlnLarge"].dtype == np.int64
    assert table["rlnLarge"].tolist() == [2**63 - 1, -(2**63), 1234567890123456789, -1234567890123456789]
    assert table["rlnMixed"].tolist()[0] == 9007199254740992.0  # the double nearest 2**53 + 1
    assert_read_as_starfile(path)


@pytest.mark.parametrize(
    "rows, names, notes",
    [
        (
            "\"Movies/a b.tiff\" 'x' \"1\"\n'Movies/c.tiff' \"y z\" '2'\n",
            ["Movies/a b.tiff", "Movies/c.tiff"],
            ["x", "y z"],
        ),
        # no spaces inside the quotes: rows the C extension would read as plain, were quotes plain
        (
            "\"Movies/a.tiff\" 'x' \"1\"\n'Movies/c.tiff' \"y\" '2'\n",
            ["Movies/a.tiff", "Movies/c.tiff"],
            ["x", "y"],
        ),
        ("Movies/a.tiff 'x' 1\nMovies/c.tiff y 2\n", ["Movies/a.tiff", "Movies/c.tiff"], ["x", "y"]),
    ],
    ids=["spaces inside", "single words", "one quoted value"],
)
def test_quoted_values_are_read_without_their_quotes_by_either_reader(
    tmp_path: Path, rows: str, names: list[str], notes: list[str]
):
    path = tmp_path / "quotes.star"
    path.write_text("data_\nloop_\n_rlnMicrographName\n_rlnNote\n_rlnCount\n" + rows)
    table = read_star(path)[""]
    assert table["rlnMicrographName"].tolist() == names and table["rlnNote"].tolist() == notes
    assert table["rlnCount"].tolist() == [1, 2]
    assert_read_as_starfile(path)
