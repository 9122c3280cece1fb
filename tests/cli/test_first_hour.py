"""What a new user meets first: `vitrio examples`, `make demo`, and messages in the command line's words."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import vitrio as vio
from vitrio.cli import main
from vitrio.extract import extract_particles
from vitrio.testing.eer import random_movie

from .helpers import assert_fails

ROOT = Path(__file__).resolve().parents[2]


def _usage_error(capsys: pytest.CaptureFixture[str], *args: object) -> str:
    """What argparse says of `vitrio ARGS...`, which it refuses with status 2 and a usage line."""
    with pytest.raises(SystemExit) as exit:
        main([str(arg) for arg in args])
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert "usage: vitrio" in err
    return err.strip().splitlines()[-1]


def test_examples_refuses_a_folder_that_exists(vitrio, tmp_path: Path):
    assert_fails(vitrio("examples", tmp_path), str(tmp_path), "exists already")


def test_a_failed_examples_leaves_no_folder(vitrio, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    def failing(folder: Path, rng: np.random.Generator) -> bool:
        vio.write_single(np.zeros((8, 8), np.float32), folder / "stack.mrcs")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("vitrio.cli._examples._fill", failing)
    assert_fails(vitrio("examples", tmp_path / "new" / "examples"), "No space left")
    assert list(tmp_path.iterdir()) == []


def test_make_demo_installs_the_demo_alone():
    alone = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    recipe = subprocess.run(
        ["make", "--no-print-directory", "-n", "-B", "demo"],
        cwd=ROOT,
        env=alone,  # as a user types it, not as a recipe of `make test` would run it
        capture_output=True,
        text=True,
        check=True,
    )
    installs = [line for line in recipe.stdout.splitlines() if "pip install" in line and "-e" in line]
    assert installs == [".venv-demo/bin/pip install --quiet -e '.[cli,torch]'"], recipe.stdout
    assert "test" not in recipe.stdout.replace("make test", "")
    assert ".venv/" not in recipe.stdout
    assert recipe.stdout.splitlines()[-1] == ".venv-demo/bin/vitrio demo --out demo-output"
    ignored = subprocess.run(["git", "check-ignore", "-q", ".venv-demo/bin/python"], cwd=ROOT)
    assert ignored.returncode == 0, ".gitignore leaves .venv-demo/ to be committed"


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        (
            ["convert", "a.mrcs", "b.mrcs", "--normalize", "-3"],
            "argument --normalize: not a number of 0 or more",
        ),
        (["convert", "a.mrcs", "b.mrcs", "--fourier-crop", "0"], "argument --fourier-crop: not a positive"),
        (
            ["fractionate", "m.eer", "--dose-per-fraction", "1", "--total-dose", "-4", "-o", "m.mrc"],
            "argument --total-dose: not a positive number: '-4'",
        ),
        (
            ["fractionate", "m.eer", "--dose-per-fraction", "0", "--total-dose", "4", "-o", "m.mrc"],
            "argument --dose-per-fraction: not a positive number",
        ),
        (["doctor", "a.mrcs", "--seconds", "-1"], "argument --seconds: not a positive number: '-1'"),
        (["doctor", "a.mrcs", "--seconds", "0"], "argument --seconds: not a positive number"),
    ],
)
def test_numbers_out_of_range_are_refused_with_a_usage_line(arguments, said, capsys):
    line = _usage_error(capsys, *arguments)
    assert said in line, line
    assert "_" not in line.partition("error:")[2].split(":")[0], line  # options as typed, not Python names


def test_the_grouping_file_writes_the_unit_the_errors_write(vitrio, tmp_path: Path):
    movie = random_movie(tmp_path / "movie.eer", frames=6, shape=(16, 16))
    result = vitrio(
        "fractionate", movie.path, "--dose-per-fraction", 2, "--total-dose", 6, "-o", tmp_path / "m.mrc"
    )
    assert result.status == 0, result.err
    first = (tmp_path / "m.fractions.txt").read_text("utf-8").splitlines()[0]
    assert first == "# movie.eer: 6 frames of 1 e/Å²", first


def test_a_missing_file_is_said_the_same_way_by_every_command(vitrio, tmp_path: Path):
    gone = tmp_path / "gone.mrc"
    star = tmp_path / "gone.star"
    for arguments in (
        ["info", gone],
        ["convert", gone, tmp_path / "out.mrc"],
        ["montage", gone, "-o", tmp_path / "m.png"],
        ["fractionate", gone, "--fractions", 2, "-o", tmp_path / "f.mrc"],
        ["extract", "--micrographs", star, "--coordinates", star, "--box-size", 8, "-o", tmp_path / "p.star"],
    ):
        result = vitrio(*arguments)
        assert_fails(result, "no such file")
        assert "[Errno" not in result.err, result.err
        assert result.err.split("error: ")[1].startswith(str(tmp_path / "gone.")), result.err


def test_extract_speaks_of_casting_as_its_option(vitrio, picked, tmp_path: Path):
    output = tmp_path / "new" / "particles.star"
    result = vitrio(
        "extract", "--micrographs", picked.micrographs, "--coordinates", picked.coordinates,
        "--box-size", 16, "-o", output, "--data-type", "int16",
    )  # fmt: skip
    assert_fails(result, "float32", "int16", "--casting unsafe")
    assert 'casting="unsafe"' not in result.err


def test_a_failed_extract_leaves_no_folder_it_made(vitrio, picked, tmp_path: Path):
    made = tmp_path / "made"
    result = vitrio(
        "extract", "--micrographs", picked.micrographs, "--coordinates", picked.coordinates,
        "--box-size", 16, "-o", made / "job" / "particles.star", "--stack-dir", made / "job" / "stacks",
        "--data-type", "int16",
    )  # fmt: skip
    assert result.status == 1, result
    assert not made.exists()


def test_a_key_at_a_url_without_its_extra_names_the_extra():
    program = (
        "import sys; sys.modules['fsspec'] = None\n"  # as where vitrio[remote] is not installed
        "from vitrio.cli import main\n"
        "sys.exit(main(['info', 's3://bucket/tomogram.mrc']))\n"
    )
    ran = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300)
    assert ran.returncode == 1, ran.stderr
    (line,) = ran.stderr.splitlines()
    assert "s3://bucket/tomogram.mrc" in line and "pip install 'vitrio[remote]'" in line, line


def test_a_url_that_cannot_be_reached_is_one_line_naming_it(vitrio, tmp_path: Path):
    url = "http://127.0.0.1:9/data"  # the discard port: nothing listens
    for command in (
        ["info", f"{url}/tomogram.mrc"],
        ["convert", f"{url}/tomogram.mrc", tmp_path / "out.mrc"],
        ["montage", f"{url}/tomogram.mrc", "-o", tmp_path / "m.png"],
        ["montage", "--star", f"{url}/particles.star", "-o", tmp_path / "m.png"],
        ["extract", "--micrographs", f"{url}/m.star", "--coordinates", f"{url}/c.star", "--box-size", 8,
         "-o", tmp_path / "p.star"],
        ["fractionate", f"{url}/movie.eer", "--fractions", 2, "-o", tmp_path / "f.mrc"],
    ):  # fmt: skip
        result = vitrio(*command)
        assert_fails(result, url, "cannot connect")
    assert list(tmp_path.iterdir()) == []


def test_the_command_names_every_format(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "OME-Zarr" in capsys.readouterr().out


def test_cryovit_data_without_its_extra_names_the_extra():
    program = "import sys; sys.modules['torch'] = None\nimport cryovit.data\n"  # as without vitrio[cryovit]
    ran = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300)
    assert ran.returncode == 1
    assert ran.stderr.splitlines()[-1] == (
        "ModuleNotFoundError: cryovit.data needs torch, which is not installed: pip install 'vitrio[cryovit]'"
    )


def test_bench_draws_no_chart_unasked_and_needs_no_clone(vitrio, tmp_path: Path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    result = vitrio("bench", "--tiny", "--data", tmp_path / "data")
    assert result.status == 0, result.err
    assert list(tmp_path.rglob("*.png")) == []
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    help = " ".join(capsys.readouterr().out.split())
    assert "clone of the repository" not in help and "--plot PNG" in help


def test_montage_says_where_it_cuts_and_names_its_label_columns(vitrio, tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    vio.write_stack(np.zeros((70, 8, 8), np.float32), "stack.mrcs")
    result = vitrio("montage", "stack.mrcs", "--tile", 8, "-o", "m.png")
    assert result.status == 0, result.err
    assert "64 tiles (the first 64 of 70: -n 70 shows all)" in result.out
    assert "of 70" not in vitrio("montage", "stack.mrcs", "-n", 70, "--tile", 8, "-o", "all.png").out


def test_a_failed_extract_particles_leaves_no_folder_it_made(picked, tmp_path: Path):
    made = tmp_path / "made"
    with pytest.raises(vio.DestinationTypeError):
        extract_particles(
            picked.micrographs, picked.coordinates, 16, made / "job" / "particles.star",
            stack_dir=made / "job" / "stacks", data_type="int16",
        )  # fmt: skip
    assert not made.exists()
