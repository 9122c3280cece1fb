"""RELION 5 tomography sets read as labelled subvolumes: each box is the tomogram's voxels around its pick."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import vitrio as vio

SHAPE = (20, 24, 28)  # (z, y, x) of each tomogram file
TILT_PIXEL = 2.5  # Å, of the unbinned tilt series
BOX = 5


def write_set(
    root: Path,
    binning: int,
    voxels: np.ndarray,
    offsets: np.ndarray,
    angstroms: bool = False,
    header_voxel: float | None = -1.0,
    table: dict | None = None,
    particles: dict | None = None,
) -> tuple[list[np.ndarray], Path, Path]:
    """Two tomograms of SHAPE at `binning`, a particle at each voxel plus offset (z, y, x), alternating."""
    rng = np.random.default_rng(binning)
    arrays, rows = [], []
    for number in range(2):
        array = rng.standard_normal(SHAPE).astype(np.float32)
        voxel_size = TILT_PIXEL * binning if header_voxel == -1.0 else header_voxel
        vio.write_single(array, root / f"tomo{number}.mrc", voxel_size=voxel_size)
        arrays.append(array)
        rows.append(
            {
                "rlnTomoName": f"TS_0{number}",
                "rlnTomoReconstructedTomogram": f"tomo{number}.mrc",
                "rlnTomoTiltSeriesPixelSize": TILT_PIXEL,
                "rlnTomoTomogramBinning": float(binning),
                "rlnTomoSizeX": SHAPE[2] * binning,
                "rlnTomoSizeY": SHAPE[1] * binning,
                "rlnTomoSizeZ": SHAPE[0] * binning,
            }
        )
    tomograms = pd.DataFrame(rows)
    for column, values in (table or {}).items():
        tomograms[column] = values
    unbinned = (np.asarray(voxels, np.float64) + offsets)[:, ::-1] * binning  # x, y, z
    columns: dict = {"rlnTomoName": [f"TS_0{i % 2}" for i in range(len(voxels))]}
    for axis, letter in enumerate("XYZ"):
        if angstroms:
            size = SHAPE[2 - axis] * binning
            columns[f"rlnCenteredCoordinate{letter}Angst"] = (unbinned[:, axis] - size / 2) * TILT_PIXEL
        else:
            columns[f"rlnCoordinate{letter}"] = unbinned[:, axis]
    columns.update(particles or {})
    vio.data.write_star({"global": tomograms}, root / "tomograms.star")
    vio.data.write_star({"particles": pd.DataFrame(columns)}, root / "particles.star")
    return arrays, root / "particles.star", root / "tomograms.star"


VOXELS = np.array([[10, 12, 14], [5, 6, 7], [14, 17, 20], [3, 3, 3], [9, 20, 25]])
OFFSETS = np.array(
    [[0.4, -0.4, 0.0], [0.6, 0.2, -0.6], [0.0, 0.49, -0.49], [-0.3, 0.3, 0.1], [0.2, -0.2, 0.45]]
)


def expected_box(array: np.ndarray, centre: np.ndarray) -> np.ndarray:
    """The box of BOX around `centre` (at index BOX // 2), zeros beyond the array."""
    padded = np.pad(array, BOX)
    start = np.asarray(centre) - BOX // 2 + BOX
    return padded[tuple(slice(s, s + BOX) for s in start)]


@pytest.mark.parametrize("angstroms", [False, True], ids=["pixels", "angstroms"])
@pytest.mark.parametrize("binning", [1, 4])
def test_each_box_is_the_tomogram_around_the_nearest_voxel(
    tmp_path: Path, binning: int, angstroms: bool
) -> None:
    arrays, particles, tomograms = write_set(tmp_path, binning, VOXELS, OFFSETS, angstroms)
    picks = vio.data.tomogram_picks(particles, tomograms, BOX)
    nearest = np.floor(VOXELS + OFFSETS + 0.5).astype(int)
    assert picks.centres.tolist() == nearest.tolist()
    boxes = picks.dataset()[:]["image"]
    for row, centre in enumerate(nearest):
        np.testing.assert_array_equal(boxes[row], expected_box(arrays[row % 2], centre), err_msg=f"row {row}")
    table = picks.table
    kept = np.stack([table[f"offset_{a}"] for a in "zyx"], axis=1)
    np.testing.assert_allclose(kept, VOXELS + OFFSETS - nearest, atol=1e-6)
    assert (np.abs(kept) <= 0.5 + 1e-9).all()
    assert table["tomogram"].tolist() == picks.tomograms.tolist() == ["TS_00", "TS_01"] * 2 + ["TS_00"]
    assert picks.voxel_sizes == {"TS_00": TILT_PIXEL * binning, "TS_01": TILT_PIXEL * binning}


def test_a_half_voxel_rounds_up_not_down(tmp_path: Path) -> None:
    voxels, offsets = np.array([[4, 4, 4], [6, 6, 6]]), np.array([[0.5, 0.5, 0.5], [0.499, 0.499, 0.499]])
    _, particles, tomograms = write_set(tmp_path, 1, voxels, offsets)
    picks = vio.data.tomogram_picks(particles, tomograms, BOX)
    assert picks.centres.tolist() == [[5, 5, 5], [6, 6, 6]]


def test_labels_map_a_column_to_integers_and_say_the_mapping(tmp_path: Path) -> None:
    names = {"rlnClassNumber": [2, 1, 2, 5, 1], "kind": ["ribo", "proteasome", "ribo", "ribo", "x"]}
    _, particles, tomograms = write_set(tmp_path, 1, VOXELS, OFFSETS, particles=names)
    by_number = vio.data.tomogram_picks(particles, tomograms, BOX, label="rlnClassNumber")
    assert by_number.classes == [1, 2, 5]
    assert by_number.labels.tolist() == [1, 0, 1, 2, 0]
    by_name = vio.data.tomogram_picks(particles, tomograms, BOX, label="kind")
    assert [by_name.classes[label] for label in by_name.labels] == names["kind"]
    fixed = vio.data.tomogram_picks(
        particles, tomograms, BOX, label="kind", classes=["x", "ribo", "proteasome"]
    )
    assert fixed.labels.tolist() == [1, 2, 1, 1, 0]
    batch = fixed.dataset()[:]
    assert batch["label"].tolist() == [1, 2, 1, 1, 0]
    with pytest.raises(ValueError, match="kind has values"):
        vio.data.tomogram_picks(particles, tomograms, BOX, label="kind", classes=["ribo"])
    with pytest.raises(ValueError, match="no column rlnNothing"):
        vio.data.tomogram_picks(particles, tomograms, BOX, label="rlnNothing")


def test_a_header_voxel_size_other_than_the_tables_is_an_error_naming_both(tmp_path: Path) -> None:
    _, particles, tomograms = write_set(tmp_path, 4, VOXELS, OFFSETS, header_voxel=7.0)
    with pytest.raises(ValueError) as caught:
        vio.data.tomogram_picks(particles, tomograms, BOX)
    message = str(caught.value)
    assert "tomograms.star" in message and "tomo0.mrc" in message
    assert "10 Å" in message and "7" in message
    picks = vio.data.tomogram_picks(particles, tomograms, BOX, check_header=False)
    assert picks.voxel_sizes["TS_00"] == 10.0


def test_an_unknown_pixel_size_stays_unknown_and_refuses_angstroms(tmp_path: Path) -> None:
    unknown = {"rlnTomoTiltSeriesPixelSize": [np.nan, np.nan]}
    _, particles, tomograms = write_set(tmp_path, 1, VOXELS, OFFSETS, header_voxel=None, table=unknown)
    picks = vio.data.tomogram_picks(particles, tomograms, BOX)
    assert picks.voxel_sizes == {"TS_00": None, "TS_01": None}
    _, particles, tomograms = write_set(tmp_path, 1, VOXELS, OFFSETS, True, header_voxel=None, table=unknown)
    with pytest.raises(ValueError, match=r"placed in Å.*no pixel size"):
        vio.data.tomogram_picks(particles, tomograms, BOX)


def test_the_pixel_size_of_a_header_serves_where_the_table_has_none(tmp_path: Path) -> None:
    unknown = {"rlnTomoTiltSeriesPixelSize": [np.nan, np.nan]}
    arrays, particles, tomograms = write_set(tmp_path, 4, VOXELS, OFFSETS, True, table=unknown)
    picks = vio.data.tomogram_picks(particles, tomograms, BOX)
    assert picks.voxel_sizes["TS_01"] == TILT_PIXEL * 4
    assert picks.centres.tolist() == np.floor(VOXELS + OFFSETS + 0.5).astype(int).tolist()


def test_origins_shift_the_particles_as_relion_has_them(tmp_path: Path) -> None:
    shifts = np.array([[2.0, 0.0, -1.0]] * len(VOXELS))  # x, y, z in unbinned pixels
    origins = {f"rlnOrigin{a}Angst": shifts[:, i] * TILT_PIXEL for i, a in enumerate("XYZ")}
    _, particles, tomograms = write_set(tmp_path, 1, VOXELS, np.zeros_like(OFFSETS), particles=origins)
    picks = vio.data.tomogram_picks(particles, tomograms, BOX)
    assert picks.centres.tolist() == (VOXELS - shifts[:, ::-1]).astype(int).tolist()


def test_a_particle_outside_its_tomogram_or_of_an_unknown_one_is_an_error(tmp_path: Path) -> None:
    _, particles, tomograms = write_set(tmp_path, 1, np.array([[3, 3, 3], [25, 3, 3]]), np.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"particles.star: pick 1 lies outside tomogram 'TS_01'.*tomo1.mrc"):
        vio.data.tomogram_picks(particles, tomograms, BOX)
    vio.data.write_star(
        {
            "particles": pd.DataFrame(
                {"rlnTomoName": ["TS_09"], **{f"rlnCoordinate{a}": [1.0] for a in "XYZ"}}
            )
        },
        particles,
    )
    with pytest.raises(ValueError, match="tomogram 'TS_09' of a particle is not in"):
        vio.data.tomogram_picks(particles, tomograms, BOX)


def test_a_tomogram_file_is_found_beside_the_table_or_named_missing(tmp_path: Path) -> None:
    _, particles, tomograms = write_set(tmp_path, 1, VOXELS, OFFSETS)
    (tmp_path / "tomo1.mrc").unlink()
    with pytest.raises(FileNotFoundError, match="tomo1.mrc"):
        vio.data.tomogram_picks(particles, tomograms, BOX)


def test_the_binning_is_given_where_the_table_has_none(tmp_path: Path) -> None:
    no_binning = {"rlnTomoTomogramBinning": [np.nan, np.nan]}
    arrays, particles, tomograms = write_set(tmp_path, 4, VOXELS, OFFSETS, table=no_binning)
    with pytest.raises(ValueError, match="no rlnTomoTomogramBinning for tomogram 'TS_00'; give the binning"):
        vio.data.tomogram_picks(particles, tomograms, BOX)
    picks = vio.data.tomogram_picks(particles, tomograms, BOX, binning=4)
    assert picks.centres.tolist() == np.floor(VOXELS + OFFSETS + 0.5).astype(int).tolist()


def test_a_tomogram_whose_file_is_not_the_size_the_table_says_refuses_angstroms(tmp_path: Path) -> None:
    wrong = {"rlnTomoSizeX": [SHAPE[2] * 4 + 40] * 2}
    _, particles, tomograms = write_set(tmp_path, 4, VOXELS, OFFSETS, True, table=wrong)
    with pytest.raises(ValueError, match=r"tomogram 'TS_00'.*size of \[152.0, 96.0, 80.0\].*tomo0.mrc holds"):
        vio.data.tomogram_picks(particles, tomograms, BOX)


def test_a_tomogram_named_twice_or_a_coordinate_that_is_no_number_is_an_error(tmp_path: Path) -> None:
    _, particles, tomograms = write_set(
        tmp_path, 1, VOXELS, OFFSETS, particles={"rlnCoordinateY": [1.0, np.nan, 1.0, 1.0, 1.0]}
    )
    with pytest.raises(ValueError, match="particles.star: particle 1 has a coordinate that is not a number"):
        vio.data.tomogram_picks(particles, tomograms, BOX)
    twice = {"rlnTomoName": ["TS_00", "TS_00"]}
    _, particles, tomograms = write_set(tmp_path, 1, VOXELS, OFFSETS, table=twice)
    with pytest.raises(ValueError, match="tomograms.star: tomogram 'TS_00' is named twice"):
        vio.data.tomogram_picks(particles, tomograms, BOX)


def test_the_files_of_a_table_that_names_none_are_given_by_tomogram(tmp_path: Path) -> None:
    arrays, particles, tomograms = write_set(tmp_path, 4, VOXELS, OFFSETS, True)
    table = vio.data.read_star(tomograms)["global"].drop(columns=["rlnTomoReconstructedTomogram"])
    vio.data.write_star({"global": table}, tomograms)
    with pytest.raises(ValueError, match="no column rlnTomoReconstructedTomogram"):
        vio.data.tomogram_picks(particles, tomograms, BOX)
    moved = tmp_path / "reconstruction"
    moved.mkdir()
    (tmp_path / "tomo0.mrc").rename(moved / "TS_00_10.00Apx.mrc")
    files = {"TS_00": moved / "TS_00_10.00Apx.mrc", "TS_01": tmp_path / "tomo1.mrc"}
    picks = vio.data.tomogram_picks(particles, tomograms, BOX, files=files)
    boxes = picks.dataset()[:]["image"]
    nearest = np.floor(VOXELS + OFFSETS + 0.5).astype(int)
    for row, centre in enumerate(nearest):
        np.testing.assert_array_equal(boxes[row], expected_box(arrays[row % 2], centre))
    with pytest.raises(ValueError, match="files names no file for tomogram 'TS_01'"):
        vio.data.tomogram_picks(particles, tomograms, BOX, files={"TS_00": files["TS_00"]})
