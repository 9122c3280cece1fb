"""A copick project whose static root is in S3 (moto's server): its tomograms are read at their s3:// keys."""

from __future__ import annotations

from pathlib import Path

import copick
import numpy as np
import pytest

import vitrio as vio

from ..zarr.s3 import LocalS3
from .project import PICKS, SPACING, STATIC_USERS, add_picks, exact_voxel, make_static, write_config

BOX = (6, 6, 6)


@pytest.fixture
def s3():
    server = LocalS3()
    yield server
    server.stop()


def _static_in_s3(s3: LocalS3, folder: Path) -> tuple[Path, dict[str, np.ndarray]]:
    """A project's configuration whose static root (its tomograms and picks) is in S3, its overlay in
    `folder`, and the tomograms' values by run."""
    (folder / "static").mkdir()
    volumes = make_static(folder / "static")
    static = s3.put_store(str(folder / "static"), "lab", "project")
    path = write_config(
        folder / "copick.json",
        static_root=static,
        static_fs_args=s3.options,
        overlay_root=f"local://{folder / 'overlay'}",
    )
    return path, volumes


def test_the_tomograms_of_a_static_root_in_s3_are_read_at_their_urls(s3: LocalS3, tmp_path: Path) -> None:
    path, volumes = _static_in_s3(s3, tmp_path)
    root = copick.from_file(str(path))
    for name, picks in PICKS.items():
        add_picks(root.get_run(name), [pick for pick in picks if pick[1] not in STATIC_USERS])
    picks = vio.data.copick_picks(
        path, BOX, voxel_spacing=SPACING, tomogram_type="wbp", storage_options=s3.options
    )
    assert picks.files == {
        name: f"s3://lab/project/ExperimentRuns/{name}/VoxelSpacing10.000/wbp.zarr#0" for name in PICKS
    }
    exact = [exact_voxel(p[3], p[4]) for name in sorted(PICKS) for p in PICKS[name] if p[0] != "membrane"]
    assert sorted(map(tuple, picks.centres.tolist())) == sorted(
        tuple(np.floor(v + 0.5).astype(int).tolist()) for v in exact
    )
    loader = vio.data.DataLoader(picks.dataset(image="box"), 4, loader=vio.loader(storage_options=s3.options))
    read = np.concatenate([batch["box"] for batch in loader])
    for row, (name, centre) in enumerate(zip(picks.tomograms.tolist(), picks.centres)):
        padded = np.pad(volumes[name], 6)
        start = centre - 3 + 6
        np.testing.assert_array_equal(read[row], padded[tuple(slice(s, s + 6) for s in start)], err_msg=name)
    assert s3.gets("lab/project/ExperimentRuns/TS_01/VoxelSpacing10.000/wbp.zarr/0/")  # chunks fetched


def test_a_picks_file_in_s3_larger_than_allowed_is_refused_unread(
    s3: LocalS3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vitrio.data import _copick

    path, _ = _static_in_s3(s3, tmp_path)
    monkeypatch.setattr(_copick, "MAX_PICKS_BYTES", 10)  # the static root's picks only: none in the overlay
    with pytest.raises(ValueError, match=r"lab/project/ExperimentRuns/.*json: \d+ bytes, more than the 10 "):
        vio.data.copick_picks(
            path, BOX, voxel_spacing=SPACING, tomogram_type="wbp", storage_options=s3.options
        )
    assert not [get for get in s3.gets("lab/project/") if "/Picks/" in get]  # refused unread
