"""vitrio's boxes of a copick project against copick-torch's subvolumes of the same picks.

copick-torch's `CopickDataset` cuts a box of side 2h out of a tomogram read
whole, from the voxel its pick's position (location plus the transform's
shift, over the voxel spacing) truncates to, less h; vitrio's box of the
same side holds its pick's voxel at index h too, but that voxel is the
nearest one, rounded. So at the voxel copick-torch truncates to, vitrio's
box must be its subvolume, value for value; and `copick_picks` must give
that subvolume wherever rounding and truncating agree, and a box one voxel
on along each axis where the pick's fraction of a voxel is a half or more.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import copick
import numpy as np
import pytest
from copick.models import PickableObject
from copick_torch.copick import CopickDataset
from copick_torch.pick_utils import pick_centres

import vitrio as vio

SPACING, TOMOGRAM_TYPE, BOX = 10.0, "wbp", 16
# copick writes chunks of 256^3 whatever the size; vitrio reads a chunk at most 64 times what lies in
# the array, so a tomogram holds 256^3 / 64 voxels at least
SHAPE = (64, 72, 80)  # z, y, x


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copick project of two runs (tomograms of noise), with picks of two objects at sub-voxel
    positions and transforms that shift them, written with copick's API; its configuration file."""
    folder = tmp_path_factory.mktemp("copick")
    objects = [
        PickableObject(name="ribosome", is_particle=True, label=1, radius=120.0),
        PickableObject(name="proteasome", is_particle=True, label=2, radius=60.0),
    ]
    config = folder / "copick.json"
    root = copick.new_config(str(config), str(folder / "overlay"), "test", pickable_objects=objects)
    rng = np.random.default_rng(0)
    margin = BOX // 2 + 2
    for number in range(2):
        run = root.new_run(f"TS_{number:02d}")
        tomogram = run.new_voxel_spacing(SPACING).new_tomogram(TOMOGRAM_TYPE)
        tomogram.from_numpy(rng.standard_normal(SHAPE, dtype=np.float32), levels=1)
        for name, count in (("ribosome", 12), ("proteasome", 6)):
            voxels = rng.uniform(margin, np.array(SHAPE[::-1]) - margin, size=(count, 3))  # x, y, z
            shifts = rng.uniform(-1.5, 1.5, size=(count, 3))
            transforms = np.tile(np.eye(4), (count, 1, 1))
            transforms[:, :3, 3] = shifts * SPACING
            picks = run.new_picks(name, session_id="0", user_id="test")
            picks.from_numpy((voxels - shifts) * SPACING, transforms)
    return config


def copick_torch_items(config: Path) -> tuple[np.ndarray, list[str]]:
    """copick-torch's subvolumes of the project's picks, unaugmented and unnormalised, and the object
    of each."""
    with contextlib.redirect_stdout(io.StringIO()):
        dataset = CopickDataset(config_path=str(config), boxsize=(BOX,) * 3, voxel_spacing=SPACING)
    return np.asarray(dataset._subvolumes), [dataset.keys()[i] for i in dataset._molecule_ids]


def picks_in_copick_torchs_order(config: Path) -> tuple[list[str], np.ndarray, list[str]]:
    """The run, exact voxel (z, y, x; not rounded) and object of each pick, in the order copick-torch takes
    them: the picks of tools (session "0") of each run as copick lists them."""
    runs, voxels, objects = [], [], []
    for run in copick.from_file(str(config)).runs:
        for picks in run.get_picks():
            if picks.from_tool:
                exact = pick_centres(picks)[:, ::-1] / SPACING
                runs += [run.name] * len(exact)
                voxels.append(exact)
                objects += [picks.pickable_object_name] * len(exact)
    return runs, np.concatenate(voxels), objects


def read_boxes(picks: vio.data.TomogramPicks) -> np.ndarray:
    """Every box of `picks`, in order, as read."""
    return np.concatenate([batch["image"] for batch in vio.data.DataLoader(picks.dataset(), 8)])


def vitrio_picks(config: Path) -> vio.data.TomogramPicks:
    return vio.data.copick_picks(
        str(config), BOX, voxel_spacing=SPACING, tomogram_type=TOMOGRAM_TYPE, session_id="0"
    )


def test_a_box_at_copick_torchs_voxel_is_its_subvolume(project: Path) -> None:
    subvolumes, objects = copick_torch_items(project)
    runs, exact, expected_objects = picks_in_copick_torchs_order(project)
    assert objects == expected_objects and len(subvolumes) == 36
    ours = vitrio_picks(project)
    at_their_voxels = vio.data.TomogramPicks(
        runs,
        np.floor(exact).astype(np.int64),
        (BOX,) * 3,
        [ours.classes.index(name) for name in objects],
        ours.classes,
        ours.files,
        ours.extents,
    )
    np.testing.assert_array_equal(read_boxes(at_their_voxels), subvolumes)


def test_copick_picks_rounds_where_copick_torch_truncates(project: Path) -> None:
    subvolumes, objects = copick_torch_items(project)
    runs, exact, _ = picks_in_copick_torchs_order(project)
    ours = vitrio_picks(project)
    boxes = read_boxes(ours)
    row_of = {
        (run, *voxel): row for row, (run, voxel) in enumerate(zip(ours.tomograms, ours.centres.tolist()))
    }
    agreed = 0
    for item, (run, voxel) in enumerate(zip(runs, exact)):
        rounded = np.floor(voxel + 0.5).astype(np.int64)
        row = row_of.get((run, *rounded.tolist()))
        assert row is not None, f"no box of run {run} at voxel {rounded} (z, y, x), nearest to {voxel}"
        assert ours.classes[ours.labels[row]] == objects[item]
        moved = rounded - np.floor(voxel).astype(np.int64)  # 1 where the fraction is a half or more
        if not moved.any():
            np.testing.assert_array_equal(boxes[row], subvolumes[item])
            agreed += 1
        else:
            theirs = subvolumes[item][tuple(slice(m, None) for m in moved)]
            np.testing.assert_array_equal(boxes[row][tuple(slice(None, BOX - m) for m in moved)], theirs)
    assert 0 < agreed < len(runs)
