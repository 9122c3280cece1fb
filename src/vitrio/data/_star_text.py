"""The text of a STAR file parsed into its blocks, as starfile parses it, at the speed of its size.

The file is read a megabyte at a time. The lines around the loops
(block names, column names, single values) are taken one by one; the rows
of a loop, nearly all of the file, go to pandas' C parser a chunk of lines
at a time, values split at spaces and tabs, a `'` read as `"` (so `'a b'` is
one value), a `#` starting a comment, `nan` and `<NA>` NaN: what starfile
asks of pandas, without reading each line in Python first. Each chunk
without quotes is checked by numpy first, so that a row with more or fewer
values than the loop has columns is an error naming its line.
"""

from __future__ import annotations

import os
import shlex
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["parse_star"]

CHUNK_BYTES = 1 << 20
"""How much of a loop's body is split at once."""


class _Lines:
    """The text of a file, taken a line or a chunk of whole lines at a time, counting its lines."""

    def __init__(self, path: str | os.PathLike[str], file: BinaryIO, limit: int):
        self._path = path
        self._file = file
        self._limit = limit
        self._taken = 0
        self._buffer = b""
        self._position = 0
        self.line_number = 0
        """How many lines were taken."""

    def _fill(self) -> bool:
        more = self._file.read(CHUNK_BYTES)
        self._taken += len(more)
        if self._taken > self._limit:
            raise ValueError(f"{self._path}: more than the {self._limit} bytes a STAR file may have")
        if more:
            self._buffer = self._buffer[self._position :] + more
            self._position = 0
        return bool(more)

    def _line_end(self) -> int:
        end = self._buffer.find(b"\n", self._position)
        while end < 0 and self._fill():
            end = self._buffer.find(b"\n", self._position)
        return len(self._buffer) if end < 0 else end

    def peek(self) -> bytes | None:
        """The next line, without its line end, stripped; None at the end of the file."""
        end = self._line_end()
        if end == self._position == len(self._buffer):
            return None
        return self._buffer[self._position : end].strip()

    def skip(self) -> None:
        """Take the next line."""
        self._position = min(self._line_end() + 1, len(self._buffer))
        self.line_number += 1

    def chunk(self) -> bytes:
        """The next whole lines, about `CHUNK_BYTES` of them; empty at the end of the file."""
        buffer = self._buffer
        while len(buffer) - self._position < CHUNK_BYTES or buffer.find(b"\n", self._position) < 0:
            if not self._fill():
                break
            buffer = self._buffer
        end = self._buffer.rfind(b"\n", self._position) + 1 or len(self._buffer)
        text = self._buffer[self._position : end]
        self._position = end
        self.line_number += text.count(b"\n")
        return text

    def give_back(self, text: bytes) -> None:
        """Put back the end of the last chunk, `text`, to be taken again."""
        self._position -= len(text)
        self.line_number -= text.count(b"\n")


def parse_star(
    path: str | os.PathLike[str], file: BinaryIO, limit: int
) -> dict[str, dict[str, Any] | pd.DataFrame]:
    """Parse the STAR file open as `file`, of at most `limit` bytes: each block by its name, a loop as a
    table, else a mapping of names to single values.

    Raises:
        ValueError: If a row of a loop has more or fewer values than the loop
            has columns, or a line of single values is not a name and a value
            (naming the file and the line), the text is not UTF-8, or the file
            is larger than `limit`.
    """
    lines = _Lines(path, file, limit)
    blocks: dict[str, Any] = {}
    line = lines.peek()
    while line is not None:
        if line.startswith(b"data_"):
            lines.skip()
            name = _text(path, lines, line[5:])
            blocks[name] = _block(path, lines, name)
        else:
            lines.skip()
        line = lines.peek()
    return blocks


def _text(path: str | os.PathLike[str], lines: _Lines, line: bytes) -> str:
    """A line outside the rows of loops, decoded; a ValueError naming it if it is not UTF-8."""
    try:
        return line.decode()
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: line {lines.line_number}: not UTF-8 text: {error}") from None


def _block(path: str | os.PathLike[str], lines: _Lines, name: str) -> dict[str, Any] | pd.DataFrame:
    """The block whose data_ line was just taken: a loop, or single values up to the next block."""
    values: dict[str, Any] = {}
    line = lines.peek()
    while line is not None and not line.startswith(b"data_"):
        if line.startswith(b"loop_") and not values:
            lines.skip()
            return _loop(path, lines, name)
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


def _loop(path: str | os.PathLike[str], lines: _Lines, name: str) -> pd.DataFrame:
    """The table of the loop whose loop_ line was just taken: its column names, then its rows."""
    import pandas as pd

    names = []
    line = lines.peek()
    while line is not None and line.startswith(b"_"):
        lines.skip()
        names.append(_text(path, lines, line.split()[0][1:]))
        line = lines.peek()
    while line is not None and not line:
        lines.skip()
        line = lines.peek()
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
    for column in names:
        values = table[column]
        if not pd.api.types.is_numeric_dtype(values) and _numeric(values.iloc[:1]):
            table[column] = pd.to_numeric(values)
    return table


def _numeric(values: pd.Series) -> bool:
    """Whether pandas takes `values` as numbers (as starfile asks it of each column it reads as text)."""
    import pandas as pd

    try:
        pd.to_numeric(values)
    except (ValueError, TypeError):
        return False
    return True


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


def _next_block(text: bytes) -> int:
    """Where the first line of `text` that starts a block (`data_`, maybe after spaces) is, else its end."""
    found = text.find(b"data_")
    while found >= 0:
        start = text.rfind(b"\n", 0, found) + 1
        if not text[start:found].strip():
            return start
        found = text.find(b"data_", found + 5)
    return len(text)
