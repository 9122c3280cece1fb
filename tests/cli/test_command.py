"""The `vitrio` command as a whole: the console script, `--help` everywhere, usage errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from vitrio.cli import main

COMMANDS = ["info", "convert", "extract", "fractionate", "bench", "demo"]


def test_the_console_script_helps():
    script = Path(sys.executable).with_name("vitrio")
    result = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: vitrio")
    for command in COMMANDS:
        assert command in result.stdout


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_helps(command: str, capsys):
    with pytest.raises(SystemExit) as exit:
        main([command, "--help"])
    assert exit.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: vitrio {command}") and "--tiny" not in out


@pytest.mark.parametrize(
    "arguments",
    [[], ["frobnicate"], ["extract", "--box-size", "0"], ["fractionate", "movie.eer", "--fractions", "two"]],
)
def test_usage_errors(arguments: list[str], capsys):
    with pytest.raises(SystemExit) as exit:
        main(arguments)
    assert exit.value.code == 2
    assert "usage: vitrio" in capsys.readouterr().err


def test_an_error_is_said_on_one_line_with_its_notes(tmp_path: Path, monkeypatch, capsys):
    # the notes of an error say what it concerns (the row of a batch, the chunk of a store)
    error = FileNotFoundError(2, "no such file", "b.mrcs")
    error.add_note("reading row 7 (1@b.mrcs)")

    def failing(args):
        raise error

    monkeypatch.setattr("vitrio.cli._info.run", failing)
    assert main(["info", str(tmp_path / "b.mrcs")]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.endswith("error: b.mrcs: no such file reading row 7 (1@b.mrcs)"), line
