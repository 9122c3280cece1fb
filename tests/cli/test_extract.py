"""`vitrio extract`: stacks and a STAR file RELION reads, particles equal to crops made with numpy."""

from __future__ import annotations

from pathlib import Path

import mrcfile
import numpy as np
import pandas as pd
import pytest
import starfile
import tifffile

import vitrio as vio
from vitrio import _config
from vitrio.extract import _cropping as _extract

from .conftest import Picked
from .helpers import assert_fails, leftovers


def configured(monkeypatch: pytest.MonkeyPatch, **changes) -> None:
    """The configuration in force changed for the test (`vitrio.configure` without its block)."""
    monkeypatch.setattr(_config, "_current", _config.configuration().replace(**changes))


def crop(image: np.ndarray, x: float, y: float, box: int) -> np.ndarray:
    """The box around (x, y), rounded, its centre at box // 2, zero beyond the image: by padding."""
    row, column = round(y) - box // 2 + box, round(x) - box // 2 + box
    return np.pad(image, box)[row : row + box, column : column + box]


def extract(vitrio, picked: Picked, *options: object, box: int = 16, output: object = "particles.star"):
    """Run `vitrio extract` on the picks, with `options`."""
    files = ["--micrographs", picked.micrographs, "--coordinates", picked.coordinates]
    return vitrio("extract", *files, "--box-size", box, "-o", output, *options)


def particles_of(path: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    blocks = starfile.read(path, always_dict=True)
    assert list(blocks) == ["optics", "particles"]
    return blocks["optics"], blocks["particles"]


def check_particles(
    particles: pd.DataFrame, picked: Picked, box: int, root: Path = Path()
) -> dict[str, np.ndarray]:
    """Every particle equals its crop of its micrograph; the stacks read with mrcfile, by name."""
    stacks = {}
    for number, row in enumerate(particles.itertuples()):
        index, stack = row.rlnImageName.split("@")
        if stack not in stacks:
            with mrcfile.open(root / stack, permissive=False) as mrc:
                stacks[stack] = mrc.data.copy()
        expected = crop(picked.images[row.rlnMicrographName], row.rlnCoordinateX, row.rlnCoordinateY, box)
        np.testing.assert_array_equal(
            stacks[stack][int(index) - 1],
            expected.astype(stacks[stack].dtype),
            err_msg=f"particle {number + 1}",
        )
    return stacks


@pytest.mark.parametrize("box", [32, 15])
def test_particles_are_the_crops_of_their_micrographs(vitrio, picked: Picked, box: int):
    result = extract(
        vitrio, picked, "--stack-dir", "Extract/Stacks", box=box, output="Extract/particles.star"
    )
    assert result.status == 0, result.err
    assert "extracted 30 particles" in result.out
    _, particles = particles_of(Path("Extract/particles.star"))
    carried = particles[list(picked.picks.columns)]
    pd.testing.assert_frame_equal(carried, picked.picks, check_dtype=False, check_exact=False)
    stacks = check_particles(particles, picked, box)
    assert sorted(stacks) == [f"Extract/Stacks/{m}.mrcs" for m in "abc"]
    assert all(len(values) == 10 and values.dtype == np.float32 for values in stacks.values())
    # each micrograph's particles fill its stack in the order of the coordinates, counting from one
    for stack, values in stacks.items():
        indices = [int(name.split("@")[0]) for name in particles["rlnImageName"] if name.endswith(stack)]
        assert indices == list(range(1, len(values) + 1))
    assert (particles["rlnOpticsGroup"] == 1).all()
    defocus = {"Micrographs/a.mrc": 10000.0, "Micrographs/b.tif": 12000.0, "Micrographs/c.mrc": 14000.0}
    assert particles["rlnDefocusU"].tolist() == [defocus[m] for m in particles["rlnMicrographName"]]


def test_the_optics_block_is_that_of_the_particles(vitrio, picked: Picked):
    assert extract(vitrio, picked, box=24).status == 0
    optics, _ = particles_of(Path("particles.star"))
    row = optics.iloc[0].to_dict()
    assert len(optics) == 1 and "rlnMicrographPixelSize" not in row
    assert row["rlnOpticsGroup"] == 1 and row["rlnOpticsGroupName"] == "opticsGroup1"
    assert row["rlnImagePixelSize"] == 1.5 and row["rlnMicrographOriginalPixelSize"] == 0.75
    assert row["rlnImageSize"] == 24 and row["rlnImageDimensionality"] == 2
    assert row["rlnVoltage"] == 300.0 and row["rlnSphericalAberration"] == 2.7
    # the stacks go beside the STAR file by default
    assert sorted(p.name for p in Path().glob("*.mrcs")) == ["a.mrcs", "b.mrcs", "c.mrcs"]


def test_without_optics_the_pixel_size_comes_from_the_header(vitrio, picked: Picked):
    micrographs = starfile.read(picked.micrographs, always_dict=True)["micrographs"]
    starfile.write(micrographs.drop(columns="rlnOpticsGroup"), picked.micrographs)
    assert extract(vitrio, picked).status == 0
    optics, particles = particles_of(Path("particles.star"))
    assert optics["rlnImagePixelSize"].tolist() == [1.5] and optics["rlnOpticsGroup"].tolist() == [1]
    assert (particles["rlnOpticsGroup"] == 1).all()
    assert extract(vitrio, picked, "--pixel-size", 2.5, "--force").status == 0
    assert particles_of(Path("particles.star"))[0]["rlnImagePixelSize"].tolist() == [2.5]


def test_micrographs_of_dots_per_inch_give_no_pixel_size_to_the_particles(vitrio, picked: Picked):
    # the first micrograph a TIFF of 300 dpi, as image editors write them, and no optics block
    tifffile.imwrite("Micrographs/b.tif", picked.images["Micrographs/b.tif"], resolution=(300, 300))
    micrographs = starfile.read(picked.micrographs, always_dict=True)["micrographs"]
    starfile.write(micrographs.drop(columns="rlnOpticsGroup").iloc[[1, 0, 2, 3]], picked.micrographs)
    assert_fails(extract(vitrio, picked), "micrographs.star", "pixel size")
    assert leftovers(Path()) == sorted([*picked.images, picked.coordinates.name, picked.micrographs.name])
    assert extract(vitrio, picked, "--pixel-size", 1.06).status == 0
    optics, _ = particles_of(Path("particles.star"))
    assert optics["rlnImagePixelSize"].tolist() == [1.06]
    with mrcfile.open("b.mrcs", permissive=False) as mrc:
        assert float(mrc.voxel_size.x) == pytest.approx(1.06)


def test_root_data_type_and_batches_across_micrographs(vitrio, picked: Picked, tmp_path, monkeypatch):
    configured(monkeypatch, extract_batch_bytes=5 * 12 * 12 * 2)  # batches of 5, spanning micrographs
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")  # paths are relative to --root, not to where the command runs
    output = tmp_path / "out" / "particles.star"
    result = extract(
        vitrio, picked, "--root", tmp_path, "--data-type", "float16", "-j", 2, box=12, output=output
    )
    assert result.status == 0, result.err
    _, particles = particles_of(output)
    for name, micrograph in zip(particles["rlnImageName"], particles["rlnMicrographName"]):
        assert name.split("@")[1] == f"out/{Path(micrograph).stem}.mrcs"  # relative to --root
    stacks = check_particles(particles, picked, 12, root=tmp_path)
    assert all(values.dtype == np.float16 for values in stacks.values())


def test_an_integer_type_of_float_micrographs_takes_casting_unsafe(vitrio, picked: Picked):
    for name in picked.images:  # values of int16's range, with fractions
        picked.images[name] = np.ascontiguousarray(picked.images[name] * 300)
        vio.write_single(picked.images[name], name, voxel_size=1.5)
    assert_fails(extract(vitrio, picked, "--data-type", "int16"), "float32", "int16", "--casting unsafe")
    assert not Path("particles.star").exists()
    assert extract(vitrio, picked, "--data-type", "int16", "--casting", "unsafe").status == 0
    stacks = check_particles(particles_of(Path("particles.star"))[1], picked, 16)  # crops cast by numpy
    assert all(values.dtype == np.int16 for values in stacks.values())


def test_micrographs_of_one_name_get_stacks_of_their_own(vitrio, picked: Picked):
    Path("Other").mkdir()
    vio.write_single(np.ones((40, 40), np.float32), "Other/a.mrc")
    blocks = starfile.read(picked.micrographs, always_dict=True)
    blocks["micrographs"] = pd.DataFrame({"rlnMicrographName": ["Micrographs/a.mrc", "Other/a.mrc"]})
    starfile.write(blocks, picked.micrographs)
    picks = {"rlnMicrographName": ["Other/a.mrc", "Micrographs/a.mrc"], "rlnCoordinateX": [20.0, 30.0]}
    starfile.write(pd.DataFrame({**picks, "rlnCoordinateY": [20.0, 30.0]}), picked.coordinates)
    assert extract(vitrio, picked, box=8).status == 0
    _, particles = particles_of(Path("particles.star"))
    assert particles["rlnImageName"].tolist() == ["000001@a_2.mrcs", "000001@a.mrcs"]
    assert (mrcfile.read("a_2.mrcs") == 1).all()


# ---------------------------------------------------------------- a user's mistakes


def test_a_missing_star_file(vitrio, picked: Picked):
    picked.micrographs.unlink()
    assert_fails(extract(vitrio, picked), picked.micrographs, "no such file")


def test_a_star_file_without_the_columns(vitrio, picked: Picked):
    before = leftovers(Path())
    starfile.write(picked.picks.drop(columns="rlnCoordinateY"), picked.coordinates)
    assert_fails(extract(vitrio, picked), picked.coordinates, "rlnCoordinateY")
    picked.coordinates.write_text("this is not a STAR file\n")
    assert_fails(extract(vitrio, picked), picked.coordinates)
    assert leftovers(Path()) == before


def test_a_box_larger_than_a_micrograph(vitrio, picked: Picked):
    assert_fails(extract(vitrio, picked, box=91), "Micrographs/b.tif", "91")


def test_a_missing_micrograph(vitrio, picked: Picked):
    Path("Micrographs/c.mrc").unlink()
    assert_fails(extract(vitrio, picked), "Micrographs/c.mrc")


def test_a_pick_on_a_micrograph_not_listed(vitrio, picked: Picked):
    picks = picked.picks.copy()
    picks.loc[3, "rlnMicrographName"] = "Micrographs/z.mrc"
    starfile.write(picks, picked.coordinates)
    assert_fails(extract(vitrio, picked), "Micrographs/z.mrc", picked.micrographs)


def test_a_pick_outside_its_micrograph(vitrio, picked: Picked):
    picks = picked.picks.copy()
    picks.loc[2, "rlnCoordinateX"] = -3.0
    starfile.write(picks, picked.coordinates)
    assert_fails(extract(vitrio, picked), picked.coordinates, "particle 3")


def test_outputs_that_exist(vitrio, picked: Picked):
    Path("particles.star").write_text("mine")
    assert_fails(extract(vitrio, picked), "particles.star", "--force")
    assert Path("particles.star").read_text() == "mine" and not list(Path().glob("*.mrcs"))
    Path("particles.star").unlink()
    Path("b.mrcs").write_text("mine")
    assert_fails(extract(vitrio, picked), "b.mrcs", "--force")
    assert extract(vitrio, picked, "--force").status == 0
    assert mrcfile.read("b.mrcs").shape == (10, 16, 16)


@pytest.mark.parametrize("failure", [KeyboardInterrupt, OSError])
def test_an_interrupted_extraction_leaves_nothing(vitrio, picked: Picked, monkeypatch, failure):
    configured(monkeypatch, extract_batch_bytes=4 * 16 * 16 * 4)  # batches of 4: a stack is 10
    real = _extract.write_batch_async
    calls = []

    def write_batch_async(*args):
        calls.append(args)
        if len(calls) == 6:
            assert Path("Stacks/new/a.mrcs").is_file()  # the first stack is finished
            raise failure("no space left on device")
        return real(*args)

    monkeypatch.setattr(_extract, "write_batch_async", write_batch_async)
    before = leftovers(Path())
    result = extract(vitrio, picked, "--stack-dir", "Stacks/new", output="Out/particles.star")
    if failure is KeyboardInterrupt:
        assert result.status == 130 and "interrupted" in result.err
    else:
        assert_fails(result, "no space left on device")
    assert len(calls) == 6
    assert leftovers(Path()) == before
    assert not Path("Out").exists() and not Path("Stacks/new").exists()
