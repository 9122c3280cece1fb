"""Running the `vitrio` command in-process, and checking how it fails."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from vitrio.cli import main


@dataclass
class Result:
    """What a run of the command gave: its exit status and what it printed."""

    status: int
    out: str
    err: str


def run(capsys: pytest.CaptureFixture[str], *args: object) -> Result:
    """Run `vitrio ARGS...` in this process."""
    status = main([str(arg) for arg in args])
    captured = capsys.readouterr()
    return Result(status, captured.out, captured.err)


def assert_fails(result: Result, *names: object) -> None:
    """The run failed on a user's mistake: status 1, one line on standard error naming each of `names`."""
    assert result.status == 1, result
    assert "Traceback" not in result.err
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    for name in names:
        assert str(name) in lines[0]


def leftovers(folder: Path) -> list[str]:
    """The names of the files under `folder`, hidden ones (such as unfinished outputs) included."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
