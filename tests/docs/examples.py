"""The world the code examples of README.md and docs/ run in, as a pytest plugin of pytest-markdown-docs.

`tests/docs/test_examples.py` runs `pytest --markdown-docs -p tests.docs.examples README.md docs`: each
Python block of those files is a test, run in a fresh working directory that holds small files of
the names the examples use (`files` below). The examples name what they would find on a user's
disk (a RELION project, an EER movie and its gain, tomograms), and these stand in for it:

- `Refine3D/job010/run_data.star`: 24 particles of 32 x 32 in two stacks under `Extract/job007/`,
  RELION 3.1 (data_optics and data_particles, with defocus and class numbers);
- `stacks.txt`: the two stacks, one per line;
- `stack.mrcs`, `image.mrc`, `micrograph.mrc`, `tomogram.mrc` (2.5 Å voxels): a stack of 100 images
  of 64 x 64, a 64 x 64 image, a micrograph of 256 x 256, a volume of 32 x 64 x 64;
- `movie.eer` (40 frames of 64 x 64) and `gain.mrc` (its gain reference);
- `tomograms/*.hdf5`: two tomograms of 16 x 64 x 64 with a `labels/mito` dataset;
- `demo-output/`: what `make demo` leaves before it trains, under the same names: `particles.star`
  (the particles of two micrographs of 256 x 256, of three kinds as `rlnClassNumber`), its stacks
  under `Particles/`, and the micrographs and their STAR files.

The examples show what a user would type, without checks tied to these files; the checks are here,
in `CHECKS`: each is run on the names an example left, the example told by one of its lines, and
every one of them must have run (`pytest_sessionfinish`).

Two names are defined in every example, as an example's reader would have them: `tomogram_paths`,
the two tomograms, and `model`, a small 3-D network that maps a batch of tomograms `[B, D, C, H, W]`
to one logit per voxel `[B, D, H, W]`.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import mrcfile
import numpy as np
import pandas as pd
import pytest
from PIL import Image
from pytest_markdown_docs._runners import DefaultRunner, register_runner

import vitrio as vio
from vitrio.cli._demo import BOX, make_micrographs
from vitrio.data import write_star
from vitrio.extract import extract_particles
from vitrio.testing.eer import random_movie

TOMOGRAMS = ["tomograms/cell_01.hdf5", "tomograms/cell_02.hdf5"]
DEMO = "demo-output"

Check = Callable[[dict[str, Any]], None]
# The checks of the examples, by the page and a line of the example they check.
CHECKS: dict[tuple[str, str], Check] = {}
_RAN: set[tuple[str, str]] = set()


def check(page: str, line: str) -> Callable[[Check], Check]:
    """Register `function(names)` as a check of the example of `page` (a file name) holding `line`."""

    def register(function: Check) -> Check:
        CHECKS[(page, line)] = function
        return function

    return register


@register_runner(default=True)
class CheckedRunner(DefaultRunner):
    """Runs an example as pytest-markdown-docs does, then the checks registered for it on its names."""

    def runtest(self, test: Any, args: dict[str, Any], **options: Any) -> None:
        super().runtest(test, args, **options)
        for (page, line), function in CHECKS.items():
            if Path(test.source_path).name == page and line in test.source:
                function(args)
                _RAN.add((page, line))


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Fail the run if a check found no example to check (its example was changed or removed)."""
    missing = sorted(set(CHECKS) - _RAN)
    if missing:
        print(f"checks that found no example to check: {missing}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@check("data.md", "locations = vio.data.stack_locations(stacks)")
def _every_image_of_the_stacks(names: dict[str, Any]) -> None:
    assert len(names["locations"]) == 24
    assert names["named"] == names["indexed"]
    assert set(names["blocks"]) == {"optics", "particles"}


@check("data.md", 'star = "demo-output/particles.star"')
def _the_demo_particles(names: dict[str, Any]) -> None:
    assert set(names["batch"]) == {"image", "defocus", "pixel_size", "index"}
    assert tuple(names["images"].shape[1:]) == (BOX, BOX) and len(names["dataset"]) == len(names["particles"])


@check("index.md", 'locations = [vio.ImageLocation("particles.mrcs", i) for i in range(0, 100, 2)]')
def _half_of_the_stack(names: dict[str, Any]) -> None:
    np.testing.assert_array_equal(names["batch"], vio.read("particles.mrcs")[::2])


@check("index.md", 'star = "demo-output/particles.star"')
def _a_batch_of_the_demo_particles(names: dict[str, Any]) -> None:
    assert tuple(names["images"].shape[1:]) == (BOX, BOX) and str(names["images"].dtype) == "torch.float32"


@check("README.md", 'star = "demo-output/particles.star"')
def _the_readme_reads_the_demo_particles(names: dict[str, Any]) -> None:
    assert set(names["batch"]) == {"image", "defocus", "pixel_size", "index"}


@check("cli.md", 'star = "demo-output/particles.star"')
def _montages(names: dict[str, Any]) -> None:
    assert names["done"] == 0 and names["failed"] == 1
    with Image.open("classes.png") as picture:
        assert len(picture.text["Description"].split("\n")) == 12
    with Image.open("more.png") as picture:  # the three sections of the tomogram, and two of the movie
        assert len(picture.text["Description"].split("\n")) == 5
    assert not Path("nothing.png").exists()


@check(
    "data.md",
    "batches = vio.data.DataLoader(dataset, 32, shuffle=True, seed=0, loader=loader, pad_last=True)",
)
def _the_last_batch_padded(names: dict[str, Any]) -> None:
    assert [len(batch["image"]) for batch in names["epoch"]] == [32, 32, 32, 32]  # stack.mrcs: 100 images
    assert names["real"] == 4


@check("scratch.md", 'second = np.concatenate([batch["image"] for batch in batches])')
def _both_epochs(names: dict[str, Any]) -> None:
    np.testing.assert_array_equal(np.sort(names["first"], axis=0), np.sort(names["second"], axis=0))
    assert names["first"].shape == (100, 64, 64)  # stack.mrcs


@check("formats.md", 'fractions = vio.read("movie.eer", readers=readers)')
def _fractions(names: dict[str, Any]) -> None:
    assert names["frames"] == (40, 64, 64) and names["fractions"].shape == (4, 32, 32)  # movie.eer


@check("formats.md", 'with vio.formats.open_reader("tomogram.mrc") as reader:')
def _the_voxel_size(names: dict[str, Any]) -> None:
    found = (names["format_name"], names["voxel_size"], names["source"], names["rank"])
    assert found == ("mrc", (2.5, 2.5, 2.5), "MRC cell", 3)


@check("formats.md", "box = (slice(8, 24), slice(16, 48), slice(0, 32))")
def _the_box(names: dict[str, Any]) -> None:
    np.testing.assert_array_equal(names["values"], vio.read("tomogram.mrc")[names["box"]])


def _particles(rng: np.random.Generator) -> None:
    stacks = ["Extract/job007/Movies/mic001.mrcs", "Extract/job007/Movies/mic002.mrcs"]
    Path("Extract/job007/Movies").mkdir(parents=True)
    names = []
    for stack in stacks:
        vio.write_stack(rng.normal(0, 1, (12, 32, 32)).astype(np.float32), stack)
        names += [f"{i + 1:06d}@{stack}" for i in range(12)]
    optics = pd.DataFrame(
        {
            "rlnOpticsGroupName": ["opticsGroup1"],
            "rlnOpticsGroup": [1],
            "rlnMicrographOriginalPixelSize": [1.0],
            "rlnVoltage": [300.0],
            "rlnSphericalAberration": [2.7],
            "rlnAmplitudeContrast": [0.1],
            "rlnImagePixelSize": [2.0],
            "rlnImageSize": [32],
            "rlnImageDimensionality": [2],
        }
    )
    particles = pd.DataFrame(
        {
            "rlnImageName": names,
            "rlnOpticsGroup": 1,
            "rlnDefocusU": rng.uniform(8000, 20000, len(names)),
            "rlnDefocusV": rng.uniform(8000, 20000, len(names)),
            "rlnClassNumber": rng.integers(1, 4, len(names)),
        }
    )
    Path("Refine3D/job010").mkdir(parents=True)
    write_star({"optics": optics, "particles": particles}, "Refine3D/job010/run_data.star")
    Path("stacks.txt").write_text("\n".join(stacks) + "\n")


def _tomograms(rng: np.random.Generator) -> None:
    Path("tomograms").mkdir()
    for path in TOMOGRAMS:
        with h5py.File(path, "w") as file:
            file["data"] = rng.integers(0, 256, (16, 64, 64), dtype=np.uint8)
            mito = rng.integers(-1, 2, (16, 64, 64)).astype(np.int8)
            file["labels/mito"] = mito


@pytest.fixture(scope="session")
def demo_output(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What `make demo` leaves in demo-output/ before it trains, made once."""
    out = tmp_path_factory.mktemp("demo") / DEMO
    micrographs, coordinates, _ = make_micrographs(out, 2, 256)
    extract_particles(
        micrographs, coordinates, BOX, out / "particles.star", stack_dir=out / "Particles", root=out
    )
    return out


@pytest.fixture(autouse=True)
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, demo_output: Path) -> Path:
    """A fresh working directory holding the files the examples read (see the module's docstring)."""
    monkeypatch.chdir(tmp_path)
    shutil.copytree(demo_output, DEMO)
    rng = np.random.default_rng(0)
    _particles(rng)
    vio.write_stack(rng.normal(0, 1, (100, 64, 64)).astype(np.float32), "stack.mrcs")
    vio.write_single(rng.normal(0, 1, (64, 64)).astype(np.float32), "image.mrc")
    vio.write_single(rng.normal(0, 1, (256, 256)).astype(np.float32), "micrograph.mrc")
    with mrcfile.new("tomogram.mrc") as mrc:
        mrc.set_data(rng.normal(0, 1, (32, 64, 64)).astype(np.float32))
        mrc.voxel_size = 2.5
    random_movie(Path("movie.eer"), frames=40, shape=(64, 64), density=0.05)
    vio.write_single(rng.uniform(0.9, 1.1, (64, 64)).astype(np.float32), "gain.mrc")
    _tomograms(rng)
    return tmp_path


def _model() -> Any:
    import torch
    from torch import nn

    class Segmenter(nn.Module):
        """[B, D, C, H, W] -> [B, D, H, W]: a 3-D convolution over depth, height and width."""

        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv3d(1, 1, 3, padding=1)

        def forward(self, tomograms: torch.Tensor) -> torch.Tensor:
            return self.conv(tomograms.float().transpose(1, 2)).squeeze(1)

    torch.manual_seed(0)
    return Segmenter()


def pytest_markdown_docs_globals() -> dict[str, Any]:
    """The names every example may use as if the reader had defined them."""
    return {"tomogram_paths": list(TOMOGRAMS), "model": _model()}
