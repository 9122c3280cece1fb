"""`vitrio examples DIR`: a new folder holding small files of every name the documentation's examples use.

The examples of README.md and docs/ name what they would find on a user's disk; run them in this
folder and each runs as written:

- `stack.mrcs`, `image.mrc`, `micrograph.mrc`, `tomogram.mrc` (2.5 Å voxels): a stack of 100 images
  of 64 x 64, a 64 x 64 image, a micrograph of 256 x 256, a volume of 32 x 64 x 64;
- `movie.eer` (40 frames of 64 x 64) and `gain.mrc` (its gain reference);
- `Refine3D/job010/run_data.star`: 24 particles of 32 x 32 at 2 Å in two stacks under
  `Extract/job007/Movies/`, RELION 3.1 (data_optics and data_particles, with defocus and class
  numbers), and `stacks.txt`, the two stacks, one per line;
- `tomograms/cell_01.hdf5`, `cell_02.hdf5`: tomograms of 16 x 64 x 64 (uint8) with a label
  `labels/mito` (int8: 1, 0, and -1 where not annotated), made where h5py is installed;
- `demo-output/`: what `vitrio demo` makes before it trains, on 2 micrographs of 256 x 256:
  `particles.star`, its stacks under `Particles/`, the micrographs and their STAR files.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

import vitrio as vio
from vitrio._partial import write_new
from vitrio.data import write_star
from vitrio.extract import extract_particles
from vitrio.testing.eer import random_movie

from ._common import CliError, folders_for
from ._demo import BOX, make_micrographs

__all__ = ["DESCRIPTION", "HELP", "STACKS", "TOMOGRAMS", "add_arguments", "run"]

HELP = "make the small files the documentation's examples read"
DESCRIPTION = (
    "Make a new folder DIR holding small files of every name the Python examples of the README and "
    "docs/ use (stack.mrcs, micrograph.mrc, tomogram.mrc, movie.eer and gain.mrc, a RELION project's "
    "Refine3D/job010/run_data.star, stacks.txt, tomograms/*.hdf5, demo-output/), so that each example "
    "runs as written there. DIR must not exist yet."
)

STACKS = ("Extract/job007/Movies/mic001.mrcs", "Extract/job007/Movies/mic002.mrcs")
"""The stacks of `Refine3D/job010/run_data.star`, 12 particles each."""
TOMOGRAMS = ("tomograms/cell_01.hdf5", "tomograms/cell_02.hdf5")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `vitrio examples`."""
    parser.add_argument("folder", type=Path, metavar="DIR", help="the folder to make")


def _particles(folder: Path, rng: np.random.Generator) -> None:
    """Refine3D/job010/run_data.star, its two stacks, and stacks.txt."""
    import pandas as pd

    (folder / "Extract/job007/Movies").mkdir(parents=True)
    names = []
    for stack in STACKS:
        vio.write_stack(rng.normal(0, 1, (12, 32, 32)).astype(np.float32), folder / stack)
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
    (folder / "Refine3D/job010").mkdir(parents=True)
    write_star({"optics": optics, "particles": particles}, folder / "Refine3D/job010/run_data.star")
    write_new(folder / "stacks.txt", ("\n".join(STACKS) + "\n").encode())


def _tomograms(folder: Path, rng: np.random.Generator) -> bool:
    """tomograms/*.hdf5, where h5py is installed; whether they were made."""
    try:
        import h5py
    except ModuleNotFoundError:
        return False
    (folder / "tomograms").mkdir()
    for path in TOMOGRAMS:
        with h5py.File(folder / path, "w-") as file:
            file["data"] = rng.integers(0, 256, (16, 64, 64), dtype=np.uint8)
            file["labels/mito"] = rng.integers(-1, 2, (16, 64, 64)).astype(np.int8)
    return True


def _fill(folder: Path, rng: np.random.Generator) -> bool:
    """Write every file into `folder`; whether the tomograms were made."""
    vio.write_stack(rng.normal(0, 1, (100, 64, 64)).astype(np.float32), folder / "stack.mrcs")
    vio.write_single(rng.normal(0, 1, (64, 64)).astype(np.float32), folder / "image.mrc")
    vio.write_single(rng.normal(0, 1, (256, 256)).astype(np.float32), folder / "micrograph.mrc")
    volume = rng.normal(0, 1, (32, 64, 64)).astype(np.float32)
    vio.write_single(volume, folder / "tomogram.mrc", voxel_size=2.5)
    random_movie(folder / "movie.eer", frames=40, shape=(64, 64), density=0.05)
    vio.write_single(rng.uniform(0.9, 1.1, (64, 64)).astype(np.float32), folder / "gain.mrc")
    _particles(folder, rng)
    demo = folder / "demo-output"  # what `vitrio demo` makes before it trains
    micrographs, coordinates, _ = make_micrographs(demo, 2, 256)
    extract_particles(
        micrographs, coordinates, BOX, demo / "particles.star", stack_dir=demo / "Particles", root=demo
    )
    return _tomograms(folder, rng)


def run(args: argparse.Namespace) -> None:
    """Make the folder and its files, and say what it holds."""
    import pandas  # noqa: F401  (the STAR files: a missing one is said before any work)
    import starfile  # noqa: F401

    folder: Path = args.folder
    start = time.perf_counter()
    if os.path.lexists(folder):
        raise CliError(f"{folder}: exists already; name a new folder")
    with folders_for(folder / "stack.mrcs"):  # the folder, removed again if a file fails
        tomograms = _fill(folder, np.random.default_rng(0))
    print(
        f"made {folder}/ in {time.perf_counter() - start:.1f} s: the files the examples of the README "
        "and docs/ read"
    )
    print("  stack.mrcs image.mrc micrograph.mrc tomogram.mrc movie.eer gain.mrc stacks.txt")
    print("  Refine3D/job010/run_data.star (24 particles in Extract/job007/Movies/)")
    print("  demo-output/particles.star (what vitrio demo extracts, on 2 small micrographs)")
    if tomograms:
        print("  tomograms/cell_01.hdf5 tomograms/cell_02.hdf5")
    else:
        print("  (no tomograms/*.hdf5: they need h5py, pip install 'vitrio[cryovit]')")
    print(f"paste the examples into Python started in {folder}/")
