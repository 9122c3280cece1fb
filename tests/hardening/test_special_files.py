"""Special files where a file is read: a FIFO (named pipe), which would block a reader forever, and a
link to `/dev/zero`, which never ends. Each read raises an error naming the file instead of blocking
or growing: vio.read of each format, the particles of STAR and .cs files, a STAR file naming a FIFO as
its stack, a list of stacks, and the HDF5 plug-in. Each group of cases runs in a fresh interpreter
with a time limit, so that a read that blocks fails the test rather than hanging it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.hardening.helpers import run_script

IMAGES = (".mrc", ".mrcs", ".tif", ".eer", ".dm4", ".h5")
TABLES = (".star", ".cs", ".txt")

_CHECK = """
import json, os, sys
import numpy as np
import vitrio as vio
import cryovit.hdf5
from vitrio.data import particle_locations, read_particles, read_stack_list

folder = {folder!r}
outcomes = {{}}

def check(name, call):
    try:
        call()
        outcomes[name] = "read"
    except (OSError, ValueError) as error:  # FormatError is a ValueError
        outcomes[name] = type(error).__name__ if name.split(":")[-1] in str(error) else f"unnamed: {{error}}"

def batch(locations):
    out = np.zeros((len(locations), 4, 4), np.float32)
    vio.read_batch_async(vio.loader(workers=1), out, locations).get()

{cases}
print(json.dumps(outcomes))
"""

_IMAGE_CASES = """
for extension in {extensions!r}:
    for kind in ("pipe", "zero"):
        name = kind + extension
        check("read:" + name, lambda: vio.read(os.path.join(folder, name)))
for kind in ("pipe", "zero"):
    name = kind + ".h5"
    check("is_hdf5:" + name, lambda: cryovit.hdf5.is_hdf5(os.path.join(folder, name)))
    check("label_names:" + name, lambda: cryovit.hdf5.label_names(os.path.join(folder, name)))
"""

_TABLE_CASES = """
for kind in ("pipe", "zero"):
    for extension in (".star", ".cs"):
        name = kind + extension
        check("read_particles:" + name, lambda: read_particles(os.path.join(folder, name)))
    name = kind + ".txt"
    check("read_stack_list:" + name, lambda: read_stack_list(os.path.join(folder, name)))
    star = os.path.join(folder, "names-" + kind + ".star")
    name = kind + ".mrcs"
    check("particles:" + name, lambda: batch(particle_locations(read_particles(star), star)))
"""


@pytest.fixture
def specials(tmp_path: Path) -> Path:
    """A folder of a FIFO `pipe.EXT` and a link `zero.EXT` to /dev/zero for each extension, and a STAR
    file naming each as its stack of particles."""
    for extension in IMAGES + TABLES:
        os.mkfifo(tmp_path / f"pipe{extension}")
        (tmp_path / f"zero{extension}").symlink_to("/dev/zero")
    for kind in ("pipe", "zero"):
        (tmp_path / f"names-{kind}.star").write_text(
            f"data_particles\n\nloop_\n_rlnImageName #1\n1@{kind}.mrcs\n2@{kind}.mrcs\n"
        )
    return tmp_path


@pytest.mark.parametrize("group", ["images", "tables"])
def test_a_fifo_or_dev_zero_is_refused_naming_the_file_without_blocking(specials: Path, group: str) -> None:
    cases = _IMAGE_CASES.format(extensions=IMAGES) if group == "images" else _TABLE_CASES
    outcomes = run_script(_CHECK.format(folder=str(specials), cases=cases), timeout=120)
    expected = 2 * (len(IMAGES) + 2) if group == "images" else 2 * 4
    assert len(outcomes) == expected
    wrong = {name: outcome for name, outcome in outcomes.items() if outcome not in ("OSError", "ValueError")}
    assert not wrong, wrong
