"""read_star against starfile on STAR files drawn by Hypothesis: every file is read as starfile reads it,
by the C extension's reader and by the general one, whole or fed to pandas a few lines at a time.

The files have comments (indented, among rows, between blocks), quoted values (single, double, with
spaces inside, empty), columns of integers (to 19 digits and past int64), of numbers (exponents, signs,
NaN), of words (some of hundreds of bytes) and of a number then text, loops of up to 40 rows, blank
lines, CRLF, a byte order mark, blocks of single values and loops, empty loops. They keep clear of what
starfile itself fails on or skips (a block with neither values nor a loop, a loop of comments alone).
`VITRIO_DIFFERENTIAL=long` draws 20 times as many.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import vitrio.data._star_text

from ..differential.reads import examples
from .star_oracle import assert_read_as_starfile

_DIGITS = st.text("0123456789", min_size=1, max_size=19)
_INTEGERS = st.one_of(
    st.integers(-(2**63), 2**63 - 1), st.integers(-(10**19), 10**19), st.integers(-1000, 1000)
).map(str)
_NUMBERS = st.one_of(
    _INTEGERS,
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.floats(-1e5, 1e5).map(lambda x: f"{x:.6f}"),
    st.builds(
        lambda sign, whole, fraction, exponent: f"{sign}{whole}.{fraction}{exponent}",
        st.sampled_from(["", "-", "+"]),
        _DIGITS,
        st.text("0123456789", max_size=19),
        st.sampled_from(["", "e5", "E-3", "e+12", "e-310"]),
    ),
    st.sampled_from(["nan", "NaN", "<NA>"]),
)
# words as RELION writes names: never a `#` (a comment), a quote, `data` (a block's start, were it first)
# or `_` first (a column's name, were it first in a loop's first row)
_WORDS = st.text("abcxyzABC/_.@-0123456789", min_size=1, max_size=12).filter(lambda w: w[0] not in "_")
# names longer than a block of 64 bytes, which the reader looks at a block at a time, some lines longer
# than the 2 KiB it reads so
_LONG_WORDS = st.builds(lambda w, n: w * n, _WORDS, st.integers(8, 200))
_QUOTED_TEXT = st.text("abc xyz/.-0123456789", max_size=10)
_QUOTED = st.builds(lambda quote, text: f"{quote}{text}{quote}", st.sampled_from(["'", '"']), _QUOTED_TEXT)
_KINDS = {
    "integers": _INTEGERS,
    "numbers": _NUMBERS,
    "words": _WORDS,
    "long words": _LONG_WORDS,
    "quoted": _QUOTED,
    "anything": st.one_of(_INTEGERS, _NUMBERS, _WORDS, _QUOTED),
}
_COMMENTS = st.sampled_from(["# a comment", "  # indented", "\t# tabbed", "#", "# version 30001"])
_GAPS = st.lists(st.one_of(st.just(""), st.just("   "), _COMMENTS), max_size=2)


@st.composite
def _loop(draw) -> list[str]:
    columns = draw(st.integers(1, 5))
    kinds = [draw(st.sampled_from(sorted(_KINDS))) for _ in range(columns)]
    lines = ["loop_", *(f"_rlnColumn{c}{draw(st.sampled_from(['', f' #{c + 1}']))}" for c in range(columns))]
    lines += draw(st.lists(st.just(""), max_size=2))
    rows = draw(st.one_of(st.integers(0, 6), st.integers(20, 40)))  # many: most lines read by blocks
    for _ in range(rows):
        if rows and draw(st.integers(0, 4)) == 0:
            lines += draw(_GAPS)
        values = [draw(_KINDS[kind]) for kind in kinds]
        separators = [draw(st.sampled_from([" ", "  ", "\t", " \t "])) for _ in values]
        row = "".join(s + v for s, v in zip(separators, values)).lstrip(draw(st.sampled_from([" \t", ""])))
        lines.append(row + draw(st.sampled_from(["", "", " ", " # the rest"])))
    if rows:  # a loop of comments alone is one starfile fails on
        lines += draw(_GAPS)
    return lines


@st.composite
def _single_values(draw) -> list[str]:
    lines = []
    for c in range(draw(st.integers(1, 4))):
        value = draw(st.one_of(_INTEGERS, _NUMBERS.filter(lambda n: n != "<NA>"), _WORDS, _QUOTED))
        separator = draw(st.sampled_from([" ", "  ", "\t"]))
        lines.append(f"_rlnValue{c}{separator}{value}")
        lines += draw(st.lists(st.one_of(st.just(""), _COMMENTS), max_size=1))
    return lines


@st.composite
def _star_files(draw) -> bytes:
    lines = draw(_GAPS)
    for _ in range(draw(st.integers(1, 3))):
        name = draw(st.sampled_from(["", "optics", "particles", "general", "model_classes", "fsc"]))
        lines.append(draw(st.sampled_from(["", "  "])) + f"data_{name}")
        lines += draw(st.lists(st.just(""), max_size=2))
        lines += draw(st.one_of(_loop(), _single_values()))
        lines += draw(st.lists(st.just(""), max_size=2))
    ending = draw(st.sampled_from(["\n", "\r\n"]))
    text = ending.join(lines) + draw(st.sampled_from([ending, ""]))
    return draw(st.sampled_from([b"", b"\xef\xbb\xbf"])) + text.encode()


@examples(50)
@given(text=_star_files(), chunk=st.sampled_from([1 << 20, 64]))
def test_every_drawn_star_file_reads_as_starfile_reads_it(tmp_path_factory, text: bytes, chunk: int):
    path = Path(tmp_path_factory.mktemp("star")) / "drawn.star"
    path.write_bytes(text)
    with pytest.MonkeyPatch.context() as monkeypatch, vitrio.configure(star_part_bytes=chunk):
        monkeypatch.setattr(vitrio.data._star_text, "PANDAS_CHUNK_BYTES", chunk)
        assert_read_as_starfile(path)
