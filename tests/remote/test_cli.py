"""`vitrio extract` and `vitrio montage` of files at `s3://` URLs, with `--storage-options`, against the
same commands run on the local copies."""

from __future__ import annotations

import json
from pathlib import Path

import mrcfile
import numpy as np
import pytest
from PIL import Image

import vitrio as vio
from vitrio.cli import main
from vitrio.data import read_particles
from vitrio.testing.eer import random_movie

from ..dask.conftest import make_project


def _put_folder(s3, folder: Path, prefix: str) -> str:
    """Copy every file under `folder` into the bucket under `prefix`; the URL of that prefix."""
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            url = s3.put(path, f"{prefix}/{path.relative_to(folder).as_posix()}")
    return url[: url.index(prefix) + len(prefix)]


@pytest.fixture(scope="module")
def project(s3, tmp_path_factory):
    """Two micrographs with 15 picks each and their STAR files, here and at the URL returned."""
    folder = tmp_path_factory.mktemp("project")
    made = make_project(folder, micrographs=2, per_micrograph=15, size=96)
    return made, _put_folder(s3, folder, "extract")


def _stacks_and_table(star: Path) -> tuple[list[np.ndarray], list[str], object]:
    """The stacks an extraction wrote (by name), each particle's `n@stack name`, and its other columns."""
    table = read_particles(star)
    names = [f"{n}@{Path(path).name}" for n, path in (name.split("@") for name in table["rlnImageName"])]
    stacks = sorted(star.parent.glob("*.mrcs"))
    return [mrcfile.read(path) for path in stacks], names, table.drop(columns="rlnImageName")


def test_extract_from_urls_equals_the_local_run(s3, project, tmp_path):
    made, url = project
    common = ["--box-size", "24", "-j", "2"]
    local, remote = tmp_path / "local" / "particles.star", tmp_path / "remote" / "particles.star"
    here = ["--micrographs", str(made.micrographs), "--coordinates", str(made.coordinates)]
    assert main(["extract", *here, *common, "-o", str(local)]) == 0
    options = tmp_path / "options.json"  # the credentials in a file, off the command line
    options.write_text(json.dumps(s3.options))
    args = ["--micrographs", f"{url}/micrographs.star", "--coordinates", f"{url}/coords.star"]
    assert main(["extract", *args, "--storage-options", f"@{options}", *common, "-o", str(remote)]) == 0
    local_stacks, local_names, local_table = _stacks_and_table(local)
    remote_stacks, remote_names, remote_table = _stacks_and_table(remote)
    assert len(remote_stacks) == 2 and sum(len(s) for s in remote_stacks) == made.count
    for a, b in zip(local_stacks, remote_stacks):
        np.testing.assert_array_equal(b, a)
    assert remote_names == local_names and remote_table.equals(local_table)
    assert np.abs(remote_stacks[0]).max() > 0


@pytest.fixture(scope="module")
def pictured(s3, files, tmp_path_factory):
    """A folder with a stack, a volume, an EER movie and a STAR file naming particles of the stack in a
    folder below it, and the URL of its copy."""
    folder = tmp_path_factory.mktemp("pictured")
    (folder / "Extract").mkdir()
    for name in ("stack.mrcs", "volume.mrc"):
        (folder / ("Extract/" + name if name == "stack.mrcs" else name)).write_bytes(
            files[name][0].read_bytes()
        )
    random_movie(folder / "movie.eer", frames=6, shape=(48, 48), seed=5)
    rows = "".join(f"{i:06d}@Extract/stack.mrcs {i * 10}.5\n" for i in (4, 2, 9))
    (folder / "particles.star").write_text("data_particles\n\nloop_\n_rlnImageName\n_rlnDefocusU\n" + rows)
    return folder, _put_folder(s3, folder, "pictured")


def _picture(path: Path) -> tuple[np.ndarray, str]:
    with Image.open(path) as image:
        return np.asarray(image), image.text["Description"]


@pytest.mark.parametrize(
    "chosen",
    [
        ["Extract/stack.mrcs", "volume.mrc", "movie.eer", "--every", "3"],
        ["--star", "particles.star", "--label", "rlnDefocusU"],
    ],
)
def test_montage_of_urls_equals_the_local_one(s3, pictured, tmp_path, chosen):
    folder, url = pictured
    here = [str(folder / a) if "." in a else a for a in chosen]
    there = [f"{url}/{a}" if "." in a else a for a in chosen]
    common = ["--tile", "48", "-j", "2"]
    assert main(["montage", *here, *common, "-o", str(tmp_path / "local.png")]) == 0
    options = json.dumps(s3.options)
    assert (
        main(["montage", *there, *common, "--storage-options", options, "-o", str(tmp_path / "r.png")]) == 0
    )
    (local, labels), (remote, remote_labels) = _picture(tmp_path / "local.png"), _picture(tmp_path / "r.png")
    np.testing.assert_array_equal(remote, local)
    assert remote_labels == labels and len(labels.split("\n")) == (3 if "--star" in chosen else 4 + 3 + 2)
    if "--star" in chosen:
        assert labels.split("\n") == ["rlnDefocusU: 40.5", "rlnDefocusU: 20.5", "rlnDefocusU: 90.5"]
    assert len(np.unique(remote)) > 2 and vio.query_descriptor(folder / "movie.eer").image_count == 6


@pytest.mark.parametrize("content", [None, b"\xff", b"[1]", b" " * (1 << 20) + b"{}"])
def test_storage_options_from_a_file_that_cannot_hold_them_are_refused_naming_it(tmp_path, capsys, content):
    path = tmp_path / "options.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(SystemExit) as stopped:
        main(["info", "--storage-options", f"@{path}", "s3://bucket/x.mrc"])
    assert stopped.value.code == 2
    error = capsys.readouterr().err
    assert "--storage-options" in error and (str(path) in error or "a JSON object" in error)
