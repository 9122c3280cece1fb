"""The text of a STAR file parsed into its blocks, as starfile parses it, at the speed of its size.

The file is mapped whole (it is at most `limit` bytes). The lines around the
loops (block names, column names, single values) are taken one by one. The
rows of a loop, nearly all of the file, are read by the C extension where
they are plain (`vitrio._native.star_read`: printable ASCII, no quotes, each
column all integers, all numbers or all text), in one pass, numbers straight
into arrays and text into Arrow strings, as pandas would make them: a part of
`star_part_bytes` (of the configuration in force) at a time, read from the map in place and its pages let
go of once its rows are in the table, so that the rows cost the table and not the table and the
file (a map's pages read stay in the process's memory until they are let go of). Other rows go to
pandas' C parser a chunk of lines at a time, values split at spaces and
tabs, a `'` read as `"` (so `'a b'` is one value), a `#` starting a comment
(after spaces too), `nan` and `<NA>` NaN, a column numbers only where every
value is one: what starfile asks of pandas. Each chunk without quotes is
checked by numpy first, so that a row with more or fewer values than the
loop has columns is an error naming its line. A UTF-8 byte order mark is
skipped, as starfile's Python text files skip it.
"""

from __future__ import annotations

import codecs
import os
import re
import shlex
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np

from .. import _native
from .._config import configuration

if TYPE_CHECKING:
    import pandas as pd
    from typing_extensions import Buffer

__all__ = ["parse_star"]

PANDAS_CHUNK_BYTES = 1 << 20
"""How much of a loop's body pandas is given at once (whole lines, more if one is longer)."""

MAX_LOOP_COLUMNS = 65536
"""The most columns a loop may have (RELION's have tens), as many as `vitrio._native.star_read` takes."""

_TAIL = 1 << 16
"""How much of the end of a part is searched for its last line end (a part of a longer line is read again)."""


_LINE_END = re.compile(b"\n")

Keep = Callable[[list[str]], Collection[str] | None]
"""Which columns of a loop to read, given its column names: those, or None for all."""


class _Lines:
    """The text of a file, taken a line or a chunk of whole lines at a time, counting its lines; a UTF-8
    byte order mark at its start is skipped, as Python's text files (starfile's) skip it."""

    def __init__(self, text: Buffer):
        self.text = text
        """The text: bytes, or a map of the file."""
        self._view = memoryview(text)
        self.position = len(codecs.BOM_UTF8) if self._view[: len(codecs.BOM_UTF8)] == codecs.BOM_UTF8 else 0
        """Where the next line starts."""
        self.line_number = 0
        """How many lines were taken."""

    def _line_end(self, start: int) -> int:
        found = _LINE_END.search(self.text, start)  # type: ignore[call-overload]
        return len(self._view) if found is None else found.start()

    def __len__(self) -> int:
        return len(self._view)

    def peek(self) -> bytes | None:
        """The next line, without its line end, stripped; None at the end of the file."""
        if self.position == len(self._view):
            return None
        return bytes(self._view[self.position : self._line_end(self.position)]).strip()

    def skip(self) -> None:
        """Take the next line."""
        self.position = min(self._line_end(self.position) + 1, len(self._view))
        self.line_number += 1

    def take(self, end: int, lines: int) -> None:
        """Take the text up to `end`, which holds `lines` line ends."""
        self.position = end
        self.line_number += lines

    def chunk(self) -> bytes:
        """The next whole lines, about `PANDAS_CHUNK_BYTES` of them; empty at the end of the file."""
        end = min(self._line_end(self.position + PANDAS_CHUNK_BYTES) + 1, len(self._view))
        text = bytes(self._view[self.position : end])
        self.take(end, text.count(b"\n"))
        return text

    def part(self, start: int) -> memoryview:
        """The whole lines of the text from `start`, about `star_part_bytes` of them, a view of the text
        (no copy; `done` lets go of a map's pages once they are read); empty at the end of the text."""
        size = len(self)
        end = min(start + configuration().star_part_bytes, size)
        while end < size:
            searched = max(end - _TAIL, start)
            last = bytes(self._view[searched:end]).rfind(b"\n")
            if last >= 0:
                end = searched + last + 1
                break
            end = min(start + 2 * (end - start), size)  # a line longer than what is searched
        return self._view[start:end]

    def done(self, start: int, end: int) -> None:
        """The text from `start` to `end` was read: a map's pages of it leave the process's memory (the page
        cache keeps them), so that the rows cost the table and not the table and the file."""
        if not isinstance(self.text, bytes):  # a map
            _native.advise_map(self.text, np.array([start, end - start], np.int64), True)

    def give_back(self, text: bytes) -> None:
        """Put back the end of the last chunk, `text`, to be taken again."""
        self.position -= len(text)
        self.line_number -= text.count(b"\n")


def _mapped(path: str | os.PathLike[str], file: BinaryIO, limit: int) -> Buffer:
    """The text of `file`, of at most `limit` bytes, mapped (a page the file no longer holds reads as
    zeros, and counts in the map's `faults`), or read where the map could not be guarded (a page it
    no longer holds would kill the process); a ValueError naming `path` if it is larger."""
    size = os.fstat(file.fileno()).st_size
    if size > limit:
        raise ValueError(f"{path}: more than the {limit} bytes a STAR file may have")
    text = _native.map_file(file.fileno(), size) if size else b""
    if size and not text.guarded:
        text = os.pread(file.fileno(), size, 0)
        if len(text) < size:
            raise ValueError(f"{path}: the file was cut short while it was read")
    return text


def parse_star(
    path: str | os.PathLike[str], file: BinaryIO, limit: int, keep: Keep | None = None
) -> dict[str, dict[str, Any] | pd.DataFrame]:
    """Parse the STAR file open as `file`, of at most `limit` bytes: each block by its name, a loop as a
    table, else a mapping of names to single values. `keep`, given a loop's column names, says which
    of them to read (None: all); the others are passed over, never converted nor kept.

    Raises:
        ValueError: If a row of a loop has more or fewer values than the loop
            has columns, or a line of single values is not a name and a value
            (naming the file and the line), the text is not UTF-8, or the file
            is larger than `limit` or cut short while it is read.
    """
    text = _mapped(path, file, limit)
    lines = _Lines(text)
    blocks: dict[str, Any] = {}
    line = lines.peek()
    while line is not None:
        if line.startswith(b"data_"):
            lines.skip()
            name = _text(path, lines, line[5:])
            blocks[name] = _block(path, lines, name, keep)
        else:
            lines.skip()
        line = lines.peek()
    if getattr(text, "faults", 0):
        raise ValueError(f"{path}: the file was cut short while it was read")
    return blocks


def _text(path: str | os.PathLike[str], lines: _Lines, line: bytes) -> str:
    """A line outside the rows of loops, decoded; a ValueError naming it if it is not UTF-8."""
    try:
        return line.decode()
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: line {lines.line_number}: not UTF-8 text: {error}") from None


def _block(
    path: str | os.PathLike[str], lines: _Lines, name: str, keep: Keep | None
) -> dict[str, Any] | pd.DataFrame:
    """The block whose data_ line was just taken: a loop, or single values up to the next block."""
    values: dict[str, Any] = {}
    line = lines.peek()
    while line is not None and not line.startswith(b"data_"):
        if line.startswith(b"loop_") and not values:
            lines.skip()
            return _loop(path, lines, name, keep)
        lines.skip()
        if line.startswith(b"_"):
            try:
                key, value = shlex.split(_text(path, lines, line))
            except ValueError:
                raise ValueError(f"{path}: line {lines.line_number}: not a name and a value") from None
            values[key[1:]] = _number(value)
        line = lines.peek()
    return values


def _number(value: str) -> int | float | str:
    """A single value, as an int, else a float, else as it is."""
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def _loop(path: str | os.PathLike[str], lines: _Lines, name: str, keep: Keep | None) -> pd.DataFrame:
    """The table of the loop whose loop_ line was just taken: its column names, then its rows."""
    names = []
    line = lines.peek()
    while line is not None and line.startswith(b"_"):
        lines.skip()
        names.append(_text(path, lines, line.split()[0][1:]))
        line = lines.peek()
    if len(names) > MAX_LOOP_COLUMNS:
        raise ValueError(
            f"{path}: the loop of data_{name} up to line {lines.line_number}: {len(names)} columns, "
            f"more than the {MAX_LOOP_COLUMNS} a loop may have"
        )
    while line is not None and not line:
        lines.skip()
        line = lines.peek()
    chosen = None if keep is None else keep(names)
    kept = [chosen is None or n in chosen for n in names]
    table = _plain_rows(lines, names, kept) if names else None
    if table is None:
        table = _parsed_rows(path, lines, name, names)
        table = table[[n for n, k in zip(names, kept) if k]] if not all(kept) else table
    for column in table.columns:
        table[column] = _numbers(table[column])
    return table


def _plain_rows(lines: _Lines, names: list[str], kept: list[bool]) -> pd.DataFrame | None:
    """The rows of a loop read by `vitrio._native.star_read`, as pandas reads them, a part of the file at
    a time, the columns not `kept` passed over; None if they are not plain, or pandas does not hold text
    in Arrow strings (pyarrow missing)."""
    import pandas as pd

    strings = pd.Series(["text"]).dtype
    if len(set(names)) != len(names) or getattr(strings, "storage", None) != "pyarrow":
        return None
    import pyarrow as pa

    columns = _PlainColumns(kept)
    position, line_ends, block = lines.position, 0, False
    while position < len(lines) and not block:
        text, start = lines.part(position), 0
        while start < len(text) and not block:
            found = _native.star_read(text, start, columns.kinds, columns.outs(len(text) - start))
            if found is None:
                return None
            end, rows, ends, kinds, block, texts = found
            columns.filled(rows, kinds, texts)
            if position == lines.position and start == 0:  # the first rows foretell those to come
                columns.foretell(rows * (len(lines) - position - end) / max(end, 1))
            start, line_ends = end, line_ends + ends
        lines.done(position, position + start)
        position += start
    if not columns.rows:
        return None
    lines.take(position, line_ends)
    table = {}
    for name, values, kind in zip(names, columns.values, columns.kinds):
        if kind == ord("s"):
            continue
        if isinstance(values, list):
            texts = [
                pa.LargeStringArray.from_buffers(rows, pa.py_buffer(offsets), pa.py_buffer(data))
                for rows, offsets, data in values
            ]
            table[name] = pd.arrays.ArrowStringArray(
                pa.chunked_array(texts, pa.large_string()), dtype=strings
            )
        else:
            table[name] = values[: columns.rows]
    return pd.DataFrame(table, copy=False)


SAMPLE_ROWS = 1024
"""The rows read first, whose length foretells how many rows the loop has."""


class _PlainColumns:
    """The columns of a loop's plain rows as they are read: the numbers of a column in one array, first
    of room for a sample of rows (`SAMPLE_ROWS`, fewer where the text cannot hold them), then of the
    rows the sample foretells (pages never written cost nothing), grown if more come; the text of a
    column as the Arrow strings of each reading; nothing of a column `kept` leaves out."""

    def __init__(self, kept: list[bool]):
        self.kinds = b"".join(b"?" if keep else b"s" for keep in kept)
        """What the rows read make of each column, as `star_read` takes and gives them (b"s": skipped)."""
        self.values: list[Any] = [None if keep else [] for keep in kept]
        """Of each column, an int64 or float64 array, or a list of (rows, offsets, data) of text (empty
        for a column skipped)."""
        self.rows = 0
        """How many rows were read."""

    def outs(self, size: int) -> tuple[Any, ...]:
        """Where `star_read` writes the rows of the next `size` bytes: the columns of numbers from the
        rows read on, with room for at least one row."""
        if any(values is None for values in self.values):  # the first reading: room for the sample
            rows = min(size // (2 * len(self.values)), SAMPLE_ROWS) + 1  # a value and a space a column
            self.values = [np.empty(rows, np.int64) if v is None else v for v in self.values]
        for number, values in enumerate(self.values):
            if not isinstance(values, list) and len(values) <= self.rows:
                self._resize(number, 2 * len(values))
        return tuple(b"" if isinstance(values, list) else values[self.rows :] for values in self.values)

    def foretell(self, rows: float) -> None:
        """Make room for about `rows` rows more than were read."""
        for number, values in enumerate(self.values):
            if not isinstance(values, list):
                self._resize(number, self.rows + int(rows * 1.05) + 1024)

    def _resize(self, number: int, capacity: int) -> None:
        resized = np.empty(capacity, self.values[number].dtype)
        resized[: self.rows] = self.values[number][: self.rows]
        self.values[number] = resized

    def filled(self, rows: int, kinds: bytes, texts: list[list[tuple[int, Any, Any]]]) -> None:
        """Take the `rows` rows `star_read` read: their kinds of columns, the texts of those of text."""
        texts_of = iter(texts)
        for number, (kind, known) in enumerate(zip(kinds, self.kinds)):
            values = self.values[number]
            if kind == ord("t"):
                self.values[number] = values if isinstance(values, list) else []
                self.values[number].extend(next(texts_of))
            elif kind == ord("f") and known == ord("i"):  # integers so far, other numbers now: all numbers
                numbers = values.view(np.float64)
                numbers[: self.rows] = values[: self.rows]
                self.values[number] = numbers
            elif kind == ord("f") and known == ord("?"):
                self.values[number] = values.view(np.float64)
        self.kinds = kinds
        self.rows += rows


def _parsed_rows(path: str | os.PathLike[str], lines: _Lines, name: str, names: list[str]) -> pd.DataFrame:
    """The rows of a loop as pandas' C parser reads them, fed a chunk at a time, each chunk checked."""
    import pandas as pd

    body = _Body(path, lines, len(names))
    try:
        table = pd.read_csv(
            body,
            sep=r"\s+",
            header=None,
            comment="#",
            keep_default_na=False,
            na_values=["nan", "NaN", "<NA>"],
            engine="c",
        )
    except pd.errors.EmptyDataError:
        return pd.DataFrame(np.zeros((0, len(names))), columns=names)
    except (pd.errors.ParserError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: the loop of data_{name} from line {body.first_line}: {error}") from None
    if table.shape[1] != len(names):
        raise ValueError(
            f"{path}: the loop of data_{name} from line {body.first_line}: "
            f"rows of {table.shape[1]} values, for {len(names)} columns"
        )
    table.columns = names
    return table


def _numbers(values: pd.Series) -> pd.Series:
    """`values` as numbers where pandas takes every one of them as a number and not all as NaN (an
    empty text is NaN to it), else as they are: what starfile asks of pandas for each column. A number
    then text stays text; a column of text is refused at its first value, without converting the rest."""
    import pandas as pd

    if pd.api.types.is_numeric_dtype(values):
        return values
    try:
        pd.to_numeric(values.iloc[:1])
        numbers = pd.to_numeric(values)
    except (ValueError, TypeError):
        return values
    return values if numbers.isna().all() else numbers


class _Body:
    """The rows of a loop, handed to pandas a chunk at a time, up to the next block, each row checked.

    A row of a chunk without quotes must have as many values as the loop
    has columns, or none; a quote `'` is read as `"`, as starfile reads it.
    """

    def __init__(self, path: str | os.PathLike[str], lines: _Lines, count: int):
        self._path = path
        self._lines = lines
        self._count = count
        self._ended = False
        self.first_line = lines.line_number + 1
        """The line of the file the loop's rows start at."""

    def read(self, size: int = -1) -> bytes:
        if self._ended:
            return b""
        first_line = self._lines.line_number + 1
        text = self._lines.chunk()
        end = _next_block(text)
        if end < len(text) or not text:
            self._lines.give_back(text[end:])
            self._ended = True
            text = text[:end]
        if b"#" in text:  # a comment after spaces is a line of no values, as starfile strips each line
            text = _INDENTED_COMMENT.sub(b"#", text)
        if b"'" in text or b'"' in text:
            return text.replace(b"'", b'"')
        _check_rows(self._path, text, first_line, self._count)
        return text

    def __iter__(self):
        return self


def _check_rows(path: str | os.PathLike[str], text: bytes, first_line: int, count: int) -> None:
    """Raise ValueError naming the line of the first row in `text` of other than `count` values (or none)."""
    data = np.frombuffer(text, np.uint8)
    if b"#" in text:
        data = data.copy()
        comment = text.find(b"#")
        while comment >= 0:
            end = text.find(b"\n", comment)
            end = len(text) if end < 0 else end
            data[comment:end] = ord(" ")
            comment = text.find(b"#", end)
    value = (data > ord(" ")).view(np.int8)
    starts = np.flatnonzero(np.diff(value, prepend=np.int8(0)) == 1)
    line_ends = np.flatnonzero(data == ord("\n"))
    per_line = np.diff(np.searchsorted(starts, line_ends), prepend=0)
    wrong = np.flatnonzero((per_line != 0) & (per_line != count))
    if wrong.size:
        line = int(wrong[0])
        raise ValueError(
            f"{path}: line {first_line + line}: {per_line[line]} values in a row of a loop of {count} columns"
        )


_INDENTED_COMMENT = re.compile(rb"^[ \t]+#", re.MULTILINE)
"""A comment after spaces, which pandas would take as a row of NaN; starfile strips each line first."""

_BLOCK_LINE = re.compile(rb"^[ \t\r\v\f]*data_", re.MULTILINE)
"""A line that starts a block: `data_` after what `bytes.strip` takes away (as `_Lines.peek`)."""


def _next_block(text: bytes) -> int:
    """Where the first line of `text` that starts a block is, else its end: one pass over the text."""
    found = _BLOCK_LINE.search(text)
    return len(text) if found is None else found.start()
