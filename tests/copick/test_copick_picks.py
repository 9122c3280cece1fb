"""copick projects read as labelled subvolumes: each box is the tomogram's voxels around its pick.

The projects are made with copick's own API (tests/copick/project.py), and
each box is checked against what copick itself reads of the tomogram
(`CopickTomogram.numpy`, through zarr 2), at the voxel the pick rounds to.
"""

from __future__ import annotations

import os
from pathlib import Path

import copick
import numpy as np
import pytest

import vitrio as vio

from .project import (
    PICKS,
    SPACING,
    TOMOGRAMS,
    add_picks,
    exact_voxel,
    make_static,
    overlay,
    write_config,
    write_tomogram,
)

BOX = (5, 7, 9)


@pytest.fixture(scope="module")
def static(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, np.ndarray]]:
    """The static folder of a project, made once, and its tomograms' values by run."""
    folder = tmp_path_factory.mktemp("static")
    return folder, make_static(folder)


@pytest.fixture
def project(static: tuple[Path, dict[str, np.ndarray]], tmp_path: Path) -> Path:
    """The configuration file of the static project beneath an overlay of this test's own."""
    return overlay(static[0], tmp_path)


def expected(objects: list[str]) -> list[tuple[str, str, np.ndarray]]:
    """(run, object, exact voxel) of each pick of `objects`, in the order copick_picks gives them."""
    rows = []
    for run, picks in sorted(PICKS.items()):
        for object_name in objects:
            for pick in sorted(picks, key=lambda pick: (pick[1], pick[2])):  # by user and session
                if pick[0] == object_name:
                    rows.append((run, object_name, exact_voxel(pick[3], pick[4])))
    return rows


def box_of(volume: np.ndarray, centre: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The box of `shape` around `centre` (at index extent // 2), zeros beyond the volume."""
    pad = max(shape)
    padded = np.pad(volume, pad)
    start = np.asarray(centre) - np.asarray(shape) // 2 + pad
    return padded[tuple(slice(s, s + e) for s, e in zip(start, shape))]


def test_each_box_is_copicks_tomogram_around_the_nearest_voxel(project: Path) -> None:
    picks = vio.data.copick_picks(project, BOX, voxel_spacing=SPACING, tomogram_type="wbp")
    rows = expected(["ribosome", "proteasome"])  # the particles; membrane is none
    assert picks.classes == ["ribosome", "proteasome"]
    assert picks.tomograms.tolist() == [run for run, _, _ in rows]
    assert picks.labels.tolist() == [picks.classes.index(name) for _, name, _ in rows]
    exact = np.array([voxel for _, _, voxel in rows])
    nearest = np.floor(exact + 0.5).astype(np.int64)
    assert picks.centres.tolist() == nearest.tolist()
    assert not np.array_equal(nearest, np.trunc(exact))  # some picks round up: a truncation would differ
    root = copick.from_file(str(project))
    boxes = picks.dataset()[:]["image"]
    for row, (run, _, _) in enumerate(rows):
        tomogram = root.get_run(run).get_voxel_spacing(SPACING).get_tomograms("wbp")[0]
        np.testing.assert_array_equal(
            boxes[row], box_of(tomogram.numpy(), nearest[row], BOX), err_msg=f"row {row} in {run}"
        )
    assert picks.extents == {name: shape for name, (shape, _) in TOMOGRAMS.items()}
    assert picks.voxel_sizes == {name: SPACING for name in TOMOGRAMS}
    for name, key in picks.files.items():  # the static folder's store, at its full resolution
        assert key.endswith(f"/ExperimentRuns/{name}/VoxelSpacing10.000/wbp.zarr#0") and "overlay" not in key


def test_the_table_keeps_each_picks_origin_location_and_rounding(project: Path) -> None:
    picks = vio.data.copick_picks(project, 5, voxel_spacing=SPACING, tomogram_type="wbp")
    table = picks.table
    assert list(table.columns) == [
        "tomogram",
        "run",
        "object",
        "user_id",
        "session_id",
        "instance_id",
        "score",
        "location_x",
        "location_y",
        "location_z",
        "transformation",
        "voxel_z",
        "voxel_y",
        "voxel_x",
        "offset_z",
        "offset_y",
        "offset_x",
        "label",
    ]
    exact = np.array([voxel for _, _, voxel in expected(["ribosome", "proteasome"])])
    offsets = table[["offset_z", "offset_y", "offset_x"]].to_numpy()
    np.testing.assert_allclose(offsets, exact - picks.centres, atol=1e-9)
    assert (np.abs(offsets) <= 0.5).all()
    assert table[["voxel_z", "voxel_y", "voxel_x"]].to_numpy().tolist() == picks.centres.tolist()
    shifted = table[table["object"] == "proteasome"].iloc[0]  # located less its shift of (3, -2, 4) Å
    assert (shifted["user_id"], shifted["session_id"], shifted["run"]) == ("bob", "2", "TS_00")
    position = np.array([shifted[f"location_{a}"] for a in "xyz"]) + shifted["transformation"][:3, 3]
    np.testing.assert_allclose(position / SPACING, exact_voxel((5, 6, 7), (-0.5, 0.2, 0.3))[::-1])
    assert shifted["transformation"][:3, 3].tolist() == [3.0, -2.0, 4.0]
    assert set(table["user_id"]) == {"alice", "bob", "carol", "tool"}
    assert table["label"].tolist() == picks.labels.tolist()


def test_objects_users_sessions_and_runs_choose_the_picks(project: Path) -> None:
    picks = vio.data.copick_picks(
        project, 5, voxel_spacing=SPACING, tomogram_type="wbp", objects=["proteasome", "membrane", "ribosome"]
    )
    assert picks.classes == ["proteasome", "membrane", "ribosome"]
    assert (picks.table["object"] == "membrane").sum() == 1
    assert picks.labels.tolist() == [picks.classes.index(o) for o in picks.table["object"]]
    alice = vio.data.copick_picks(project, 5, voxel_spacing=SPACING, tomogram_type="wbp", user_id="alice")
    assert set(alice.table["user_id"]) == {"alice"} and len(alice) == 3
    sessions = vio.data.copick_picks(
        project, 5, voxel_spacing=SPACING, tomogram_type="wbp", session_id=["0", "3"]
    )
    assert sorted(sessions.table["user_id"]) == ["carol", "tool"]
    one_run = vio.data.copick_picks(project, 5, voxel_spacing=SPACING, tomogram_type="wbp", runs=["TS_01"])
    assert set(one_run.tomograms.tolist()) == {"TS_01"} and len(one_run) == 3
    opened = vio.data.copick_picks(
        copick.from_file(str(project)), 5, voxel_spacing=SPACING, tomogram_type="wbp"
    )
    by_path = vio.data.copick_picks(project, 5, voxel_spacing=SPACING, tomogram_type="wbp")
    assert opened.centres.tolist() == by_path.centres.tolist() and len(opened) == 7


def test_a_run_with_picks_but_no_such_tomogram_is_an_error_naming_it(project: Path) -> None:
    root = copick.from_file(str(project))
    lonely = root.new_run("TS_09")
    add_picks(lonely, [("ribosome", "alice", "1", (3, 3, 3), (0.0, 0.0, 0.0), None)])
    with pytest.raises(ValueError, match=rf"{project}: run 'TS_09' has picks but no voxel spacing 10 Å"):
        vio.data.copick_picks(project, 5, voxel_spacing=SPACING, tomogram_type="wbp")
    lonely.new_voxel_spacing(SPACING)
    with pytest.raises(ValueError, match=r"run 'TS_09' has picks but no tomograms of type 'wbp' at voxel"):
        vio.data.copick_picks(project, 5, voxel_spacing=SPACING, tomogram_type="wbp")
    with pytest.raises(ValueError, match=r"run 'TS_00' has picks but no tomograms of type 'denoised'"):
        vio.data.copick_picks(project, 5, voxel_spacing=SPACING, tomogram_type="denoised")
    with pytest.raises(
        ValueError, match=r"run 'TS_00' has picks but no voxel spacing 7.5 Å \(it has \[10.0\]\)"
    ):
        vio.data.copick_picks(project, 5, voxel_spacing=7.5, tomogram_type="wbp")
    named = vio.data.copick_picks(
        project, 5, voxel_spacing=SPACING, tomogram_type="wbp", runs=["TS_00", "TS_01"]
    )
    assert "TS_09" not in named.tomograms.tolist()
    # TS_02 has no tomogram and no picks: passed over without a word
    assert "TS_02" not in named.files and {r.name for r in root.runs} >= {"TS_02"}


def test_a_pick_outside_its_tomogram_is_an_error_naming_run_and_object(project: Path) -> None:
    run = copick.from_file(str(project)).get_run("TS_01")
    add_picks(run, [("proteasome", "dave", "4", (39, 10, 10), (0.5, 0.0, 0.0), None)])
    with pytest.raises(
        ValueError, match=r"run 'TS_01', a pick of 'proteasome' by user 'dave' in session '4' .* outside"
    ):
        vio.data.copick_picks(project, 5, voxel_spacing=SPACING, tomogram_type="wbp")
    add_picks(run, [("ribosome", "erin", "5", (0, 0, 0), (-0.49, -0.49, -0.49), None)])
    inside = vio.data.copick_picks(project, 5, voxel_spacing=SPACING, tomogram_type="wbp", user_id="erin")
    assert inside.centres.tolist() == [[0, 0, 0]]


def test_a_tomogram_whose_voxels_are_not_the_spacing_is_an_error_naming_both(tmp_path: Path) -> None:
    path = write_config(tmp_path / "copick.json", overlay_root=f"local://{tmp_path / 'root'}")
    run = copick.from_file(str(path)).new_run("TS_00")
    write_tomogram(run, np.zeros((64, 64, 64), np.float32), None, 12.0)
    add_picks(run, [("ribosome", "alice", "1", (3, 3, 3), (0.0, 0.0, 0.0), None)])
    with pytest.raises(
        ValueError, match=r"run 'TS_00': the tomogram .* at voxel spacing 10 Å, .*wbp.zarr, has "
    ):
        vio.data.copick_picks(path, 5, voxel_spacing=SPACING, tomogram_type="wbp")


def test_unknown_objects_runs_and_projects_are_errors_naming_them(project: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"objects \['virus'\] are not among its pickable objects"):
        vio.data.copick_picks(project, 5, voxel_spacing=SPACING, tomogram_type="wbp", objects=["virus"])
    with pytest.raises(ValueError, match=r"has no run 'TS_77'"):
        vio.data.copick_picks(project, 5, voxel_spacing=SPACING, tomogram_type="wbp", runs=["TS_77"])
    with pytest.raises(ValueError, match=r"runs \['TS_00', 'TS_00'\] name one twice"):
        vio.data.copick_picks(project, 5, voxel_spacing=SPACING, tomogram_type="wbp", runs=["TS_00"] * 2)
    with pytest.raises(FileNotFoundError, match="nothing.json"):
        vio.data.copick_picks(tmp_path / "nothing.json", 5, voxel_spacing=SPACING, tomogram_type="wbp")
    broken = tmp_path / "broken.json"
    broken.write_text('{"config_type": "filesystem", "name": ')
    with pytest.raises(ValueError, match=r"broken.json: not a copick configuration: Expecting value"):
        vio.data.copick_picks(broken, 5, voxel_spacing=SPACING, tomogram_type="wbp")


def test_a_large_configuration_or_picks_file_or_one_that_is_no_file_is_refused_unread(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a project's files can make copick read is bounded, and a FIFO is refused, never waited on."""
    from vitrio.data import _copick

    def read(**only: object) -> object:
        return vio.data.copick_picks(project, 5, voxel_spacing=SPACING, tomogram_type="wbp", **only)

    size = project.stat().st_size
    monkeypatch.setattr(_copick, "MAX_CONFIGURATION_BYTES", size - 1)
    with pytest.raises(ValueError, match=rf"copick.json: {size} bytes or more, more than the {size - 1} "):
        read()
    monkeypatch.undo()
    picks = tmp_path / "overlay/ExperimentRuns/TS_00/Picks/alice_1_ribosome.json"
    monkeypatch.setattr(_copick, "MAX_PICKS_BYTES", 10)
    with pytest.raises(
        ValueError, match=rf"{picks}: {picks.stat().st_size} bytes or more, more than the 10 "
    ):
        read()
    monkeypatch.undo()
    for text, error in [
        ('{"points": [', "Expecting value"),  # cut short
        ("[1, 2]", "argument after \\*\\* must be a mapping"),
        ('{"points": "many"}', "validation error"),  # what copick's model refuses
        ("[" * 100_000 + "]" * 100_000, "recursion"),
    ]:
        picks.write_text(text)
        with pytest.raises(ValueError, match=rf"run 'TS_00', picks of 'ribosome' by user 'alice' .*{error}"):
            read()
    picks.unlink()
    os.mkfifo(picks)
    with pytest.raises(
        ValueError, match=rf"{picks}: a FIFO \(named pipe\), not a regular file; it is not read"
    ):
        read()


def test_a_loader_of_picks_background_balance_split_and_augmentation_resumes(project: Path) -> None:
    picks = vio.data.copick_picks(project, 8, voxel_spacing=SPACING, tomogram_type="wbp")
    train, validation = picks.split((1, 1), seed=0)
    assert set(train.tomograms.tolist()).isdisjoint(validation.tomograms.tolist())
    epoch_set = train.with_background(count=6, min_distance=6, seed=1, epoch=2)
    assert epoch_set.classes == ["ribosome", "proteasome", "background"]

    def loader() -> vio.data.DataLoader:
        return vio.data.DataLoader(
            epoch_set.dataset(),
            batch_sampler=vio.data.BalancedBatchSampler(epoch_set.labels, 3, seed=2),
            transform=vio.data.RandomFlip(axes=(1,)),
        )

    first = loader()
    first.set_epoch(2)
    epoch = iter(first)
    batches = [next(epoch)]
    state = first.state_dict()
    batches += list(epoch)
    plain, flipped = epoch_set.dataset(), 0
    for batch in batches:
        assert batch["image"].shape[1:] == (8, 8, 8)
        for image, index in zip(batch["image"], batch["index"].tolist()):
            box = plain[[index]]["image"][0]
            flipped += not np.array_equal(image, box)
            assert np.array_equal(image, box) or np.array_equal(image, box[:, ::-1]), index
    assert flipped
    counts = np.bincount(np.concatenate([batch["label"] for batch in batches]), minlength=3)
    assert counts.max() - counts.min() <= 1 and counts.sum() >= len(epoch_set), counts
    again = loader()
    again.load_state_dict(state)
    rest = list(again)
    assert len(rest) == len(batches) - 1
    for batch, expected_batch in zip(rest, batches[1:]):
        assert batch["index"].tolist() == expected_batch["index"].tolist()
        np.testing.assert_array_equal(batch["image"], expected_batch["image"])


def test_a_copick_tomogram_smaller_than_its_one_chunk_is_read(tmp_path: Path) -> None:
    path = write_config(tmp_path / "copick.json", overlay_root=f"local://{tmp_path / 'root'}")
    run = copick.from_file(str(path)).new_run("TS_00")
    volume = np.arange(32 * 24 * 16, dtype=np.float32).reshape(32, 24, 16)
    write_tomogram(run, volume, None, SPACING)  # in copick's chunks of 256^3, one chunk of 64 MiB
    add_picks(run, [("ribosome", "alice", "1", (6, 7, 8), (0.0, 0.0, 0.0), None)])
    picks = vio.data.copick_picks(path, 5, voxel_spacing=SPACING, tomogram_type="wbp")
    (box,) = [batch["image"][0] for batch in vio.data.DataLoader(picks.dataset(), 1)]
    z, y, x = picks.centres[0]
    np.testing.assert_array_equal(box, volume[z - 2 : z + 3, y - 2 : y + 3, x - 2 : x + 3])
