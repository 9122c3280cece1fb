"""Links planted where `vitrio.extract` writes do not redirect its writes: their victim is untouched."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import mrcfile
import numpy as np
import pytest
import starfile

import vitrio._fs
from vitrio import extract as extraction
from vitrio.extract import Extraction, extract_particles

from .conftest import Picked
from .test_extract import check_particles, configured

PLANTED = "0123456789abcdef"
OUTPUTS = ["particles.star", "a.mrcs", "b.mrcs", "c.mrcs"]


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file of someone else's, such as their ~/.bashrc."""
    home = tmp_path / "home"
    home.mkdir()
    path = home / ".bashrc"
    path.write_text("export PATH=$HOME/bin:$PATH\n")
    return path


@pytest.fixture
def planted(victim: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Links to the victim at each name an output was or is first written at, in the working directory.

    The old names held the process id; the new ones a random token too, which
    `secrets.token_hex` here gives as PLANTED on every other call: each new
    file's first try is a planted name, its second a fresh one.
    """
    links = []
    for name in OUTPUTS:
        planted = Path(vitrio._partial.partial_path(name, PLANTED))
        for link in (Path(f".{name}.{os.getpid()}.partial"), planted):
            links.append(Path(os.path.relpath(link)))
            links[-1].symlink_to(victim)
    calls = itertools.count()
    monkeypatch.setattr(
        vitrio._partial.secrets,
        "token_hex",
        lambda _: PLANTED if next(calls) % 2 == 0 else f"{next(calls):016x}",
    )
    return links


def untouched(victim: Path, links: list[Path]) -> None:
    assert victim.read_text() == "export PATH=$HOME/bin:$PATH\n"
    assert all(link.is_symlink() and link.readlink() == victim for link in links)


def test_planted_links_do_not_redirect_the_outputs(picked: Picked, victim: Path, planted: list[Path]):
    written = []
    result = extract_particles(
        picked.micrographs, picked.coordinates, 16, "particles.star", progress=written.append
    )
    untouched(victim, planted)
    assert isinstance(result, Extraction) and result.stacks == [Path(name) for name in OUTPUTS[1:]]
    assert sum(written) == len(picked.picks) == len(result.particles)
    blocks = starfile.read("particles.star", always_dict=True)
    assert list(blocks) == ["optics", "particles"] and len(blocks["particles"]) == len(picked.picks)
    check_particles(blocks["particles"], picked, 16)
    hidden = sorted(p for p in Path().iterdir() if p.name.startswith("."))
    assert hidden == sorted(planted)  # no unfinished file left beside them
    assert not any(p.is_symlink() for p in map(Path, OUTPUTS))


@pytest.mark.parametrize("failure", [KeyboardInterrupt, OSError])
def test_a_failed_extraction_leaves_the_victim_and_removes_its_files(
    picked: Picked, victim: Path, planted: list[Path], monkeypatch, failure
):
    configured(monkeypatch, extract_batch_bytes=4 * 16 * 16 * 4)  # batches of 4: a stack is 10

    def write_star(*args):
        raise failure("no space left on device")

    monkeypatch.setattr(extraction, "write_star", write_star)
    before = sorted(Path().rglob("*"))
    with pytest.raises(failure):
        extract_particles(picked.micrographs, picked.coordinates, 16, "particles.star")
    untouched(victim, planted)
    assert sorted(Path().rglob("*")) == before


def test_a_failed_extraction_removes_its_stacks_from_their_folder_alone(picked: Picked, monkeypatch):
    # another user exchanges the stacks' folder for a link to a folder of the user's holding files of
    # the stacks' names, before the failure: those files are not removed
    kept = Path("kept")
    kept.mkdir()
    for name in OUTPUTS[1:]:
        (kept / name).write_text("the user's own")

    def write_star(*args):
        os.rename("Particles", "Particles.moved")
        os.symlink(kept.resolve(), "Particles")
        raise OSError("no space left on device")

    monkeypatch.setattr(extraction, "write_star", write_star)
    with pytest.raises(OSError, match="no space left"):
        extract_particles(picked.micrographs, picked.coordinates, 16, "particles.star", stack_dir="Particles")
    assert all((kept / name).read_text() == "the user's own" for name in OUTPUTS[1:])
    assert not list(Path("Particles.moved").iterdir())  # the stacks written are removed where they are


def test_outputs_that_exist_are_kept_unless_forced(picked: Picked):
    Path("b.mrcs").write_text("mine")
    with pytest.raises(FileExistsError, match="b.mrcs: exists already"):
        extract_particles(picked.micrographs, picked.coordinates, 16, "particles.star")
    assert Path("b.mrcs").read_text() == "mine" and not Path("particles.star").exists()
    extract_particles(picked.micrographs, picked.coordinates, 16, "particles.star", force=True)
    assert mrcfile.read("b.mrcs").shape == (10, 16, 16)
    with pytest.raises(IsADirectoryError, match="Micrographs: is a directory"):
        extract_particles(picked.micrographs, picked.coordinates, 16, "Micrographs", force=True)
    with pytest.raises(NotADirectoryError, match="b.mrcs: is not a folder"):
        extract_particles(picked.micrographs, picked.coordinates, 16, "b.mrcs/particles.star", force=True)


def test_without_a_pixel_size_anywhere(picked: Picked):
    micrographs = starfile.read(picked.micrographs, always_dict=True)["micrographs"]
    starfile.write(micrographs, picked.micrographs)
    table = picked.picks[picked.picks["rlnMicrographName"] == "Micrographs/b.tif"]
    starfile.write(table, picked.coordinates)  # a TIFF header gives no pixel size
    with pytest.raises(ValueError, match="micrographs.star: no data_optics block gives the pixel size"):
        extract_particles(picked.micrographs, picked.coordinates, 16, "particles.star")
    done = extract_particles(picked.micrographs, picked.coordinates, 16, "particles.star", pixel_size=0.9)
    assert done.optics["rlnImagePixelSize"].tolist() == [0.9]
    assert np.all(done.particles["rlnImageName"].str.endswith("@b.mrcs"))


def test_the_library_does_not_import_the_command():
    code = "import sys, vitrio.extract; print(sorted(m for m in sys.modules if m.startswith('vitrio.cli')))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.strip() == "[]"
