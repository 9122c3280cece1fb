"""The command as users meet it: without the extras, on several files at once, through `python -m vitrio`,
with an HDF5 plug-in installed through its entry point, and converting into types that cannot hold
the values."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import h5py
import mrcfile
import numpy as np
import pytest
import tifffile

import vitrio as vio
from vitrio.data import particle_locations, read_particles

from .helpers import assert_fails, leftovers

SOURCES = Path(__file__).resolve().parents[2] / "src"


def _command(
    *args: object, blocked: tuple[str, ...] = (), path: tuple[Path, ...] = ()
) -> subprocess.CompletedProcess:
    """Run `vitrio ARGS...` in a fresh interpreter in which the modules `blocked` cannot be imported."""
    script = (
        "import sys\n"
        f"for name in {blocked!r}:\n    sys.modules[name] = None\n"
        "from vitrio.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, (*path, SOURCES)))}
    return subprocess.run(
        [sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True, timeout=300, env=env
    )


@pytest.fixture
def stack(tmp_path: Path) -> tuple[Path, np.ndarray]:
    values = (np.random.default_rng(3).standard_normal((4, 8, 8)) * 1.5).astype(np.float32)
    values[0, 0, 0] = -2.33
    path = tmp_path / "stack.mrcs"
    with mrcfile.new(path) as mrc:
        mrc.set_data(values)
        mrc.set_image_stack()
    return path, values


# ---------------------------------------------------------------- the extras


def test_the_core_commands_work_without_the_extras(stack, tmp_path: Path):
    path, values = stack
    blocked = ("tqdm", "pandas", "starfile", "mrcfile", "matplotlib", "torch")
    result = _command("convert", path, tmp_path / "out.tif", blocked=blocked)
    assert result.returncode == 0, result.stderr
    np.testing.assert_array_equal(tifffile.imread(tmp_path / "out.tif"), values)
    assert _command("info", path, blocked=blocked).returncode == 0


EXTRACT = ("extract", "--micrographs", "m.star", "--coordinates", "c.star", "--box-size", "8", "-o", "p.star")


@pytest.mark.parametrize(
    ("arguments", "missing", "extra"),
    [
        (EXTRACT, "pandas", "cli"),
        (EXTRACT, "starfile", "cli"),
        (("demo", "--out", "demo"), "torch", "cli,torch"),
        (("demo", "--out", "demo"), "matplotlib", "cli,torch"),
        (("bench", "--quick"), "mrcfile", "bench"),
        (("bench", "--quick", "--plot", "b.png"), "matplotlib", "bench"),
        (("examples", "ex"), "pandas", "cli"),
        (("montage", "m.star", "-o", "picture.png"), "PIL", "cli"),
    ],
)
def test_a_command_that_needs_an_extra_names_it(tmp_path: Path, arguments, missing, extra):
    (tmp_path / "m.star").write_text("data_\nloop_\n_rlnMicrographName\na.mrc\n")
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys; sys.modules[{missing!r}] = None\nfrom vitrio.cli import main\n"
            "sys.exit(main(sys.argv[1:]))",
            *arguments,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(SOURCES)},
    )
    assert result.returncode == 1
    needs = f"needs {missing}, which is not installed: pip install 'vitrio[{extra}]'"
    assert result.stderr.strip().splitlines() == [f"vitrio {arguments[0]}: error: {needs}"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.star"]


def test_python_dash_m_vitrio(stack):
    result = subprocess.run(
        [sys.executable, "-m", "vitrio", "info", "--json", stack[0]],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(SOURCES)},
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)[0]["shape"] == [4, 8, 8]


# ---------------------------------------------------------------- info on several files


def test_info_reports_every_readable_file_and_fails_at_the_end(vitrio, stack, tmp_path: Path):
    (tmp_path / "notes.txt").write_text("not an image")
    result = vitrio("info", tmp_path / "gone.mrc", stack[0], tmp_path / "notes.txt", stack[0])
    assert result.status == 1
    assert result.out.count("a stack of 4 images of 8 x 8, float32") == 2
    errors = result.err.strip().splitlines()
    assert len(errors) == 2 and "gone.mrc: no such file" in errors[0] and "notes.txt" in errors[1]
    result = vitrio("info", "--json", stack[0], tmp_path / "gone.mrc")
    assert result.status == 1
    described, failed = json.loads(result.out)
    assert described["count"] == 4 and failed["file"] == str(tmp_path / "gone.mrc")
    assert "no such file" in failed["error"]


def _plugin(folder: Path) -> Path:
    """A folder to put first on the path, holding vitrio's installed metadata with the format plug-ins
    its pyproject.toml declares (cryovit's HDF5), as an install of these sources has."""
    declared = tomllib.loads((SOURCES.parent / "pyproject.toml").read_text())
    plugins = declared["project"]["entry-points"]["vitrio.formats"]
    info = folder / "site" / "vitrio-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vitrio\nVersion: 1.0\n")
    lines = "".join(f"{name} = {value}\n" for name, value in plugins.items())
    (info / "entry_points.txt").write_text(f"[vitrio.formats]\n{lines}")
    return folder / "site"


@pytest.fixture
def tomogram(tmp_path: Path) -> tuple[Path, np.ndarray]:
    volume = np.arange(4 * 5 * 6, dtype=np.float32).reshape(4, 5, 6)
    with h5py.File(tmp_path / "tomogram.h5", "w") as file:
        file["data"] = volume
    return tmp_path / "tomogram.h5", volume


def test_hdf5_is_read_through_the_entry_point_of_its_plugin(tomogram, stack, tmp_path: Path):
    path, _ = tomogram
    result = _command("info", "--json", path, path=(_plugin(tmp_path),))
    assert result.returncode == 0, result.stderr
    (info,) = json.loads(result.stdout)
    assert info["format"] == "hdf5" and info["shape"] == [4, 5, 6] and info["kind"] == "volume"
    # without h5py, a core install: the commands say nothing of the plug-in, until an HDF5 file is read
    site = _plugin(tmp_path / "b")
    for arguments in (("info", stack[0]), ("convert", stack[0], tmp_path / "out.tif")):
        result = _command(*arguments, blocked=("h5py",), path=(site,))
        assert (result.returncode, result.stderr) == (0, "")
    result = _command("info", path, blocked=("h5py",), path=(site,))
    assert result.returncode == 1
    (error,) = result.stderr.strip().splitlines()
    assert "tomogram.h5" in error and "needs h5py" in error
    assert error.endswith("pip install 'vitrio[cryovit]'")


def _program(script: str, site: Path, blocked: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """Run `script` in a fresh interpreter with the plug-ins of `site`, warnings shown, `blocked` missing."""
    blocking = f"import sys\nfor name in {blocked!r}:\n    sys.modules[name] = None\n"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, (site, SOURCES)))}
    return subprocess.run(
        [sys.executable, "-W", "always", "-c", blocking + script],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_a_program_reads_a_plugins_format_without_loading_it(tomogram, stack, tmp_path: Path):
    path, volume = tomogram
    site = _plugin(tmp_path)
    read = (
        "import sys, numpy as np, vitrio as vio\n"
        f"np.asarray(vio.read({str(stack[0])!r}))\n"
        "assert 'cryovit.hdf5' not in sys.modules  # a file a registered format claims loads no plug-in\n"
        f"values = np.asarray(vio.read({str(path)!r}))\n"
        "again = np.zeros((1, 4, 5, 6), np.float32)\n"
        f"vio.read_batch_async(vio.loader(workers=1), again, [vio.ImageLocation({str(path)!r})]).get()\n"
        "first = vio.formats.registered_formats()[0].name\n"
        "print(first, values.shape, float(values.sum()), float(again.sum()))\n"
    )
    result = _program(read, site)
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    total = str(float(volume.sum()))
    assert result.stdout.split() == ["hdf5", "(4,", "5,", "6)", total, total]
    listed = "import vitrio as vio\nprint([f.name for f in vio.formats.registered_formats()])\n"
    result = _program(listed, site)
    assert result.returncode == 0 and "'hdf5'" in result.stdout, result.stderr
    # h5py missing: no warning importing or listing, and reading an HDF5 file names the extra
    result = _program(listed, site, blocked=("h5py",))
    assert (result.returncode, result.stderr) == (0, "") and "'hdf5'" not in result.stdout
    refused = (
        "import vitrio as vio\n"
        "try:\n"
        f"    vio.read({str(path)!r})\n"
        "except vio.FormatError as error:\n"
        "    print(error)\n"
    )
    result = _program(refused, site, blocked=("h5py",))
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    assert str(path) in result.stdout and "the format plug-in hdf5 needs h5py" in result.stdout
    assert result.stdout.strip().endswith("pip install 'vitrio[cryovit]'")


# ---------------------------------------------------------------- convert: types that cannot hold the values


def test_a_type_the_format_cannot_store_is_refused_naming_those_it_can(vitrio, stack, tmp_path: Path):
    path, _ = stack
    assert_fails(
        vitrio("convert", path, tmp_path / "out.mrc", "--data-type", "uint8"),
        "out.mrc",
        "uint8",
        "int16, uint16",
    )
    tifffile.imwrite(tmp_path / "counts.tif", np.arange(64, dtype=np.int32).reshape(8, 8))
    tifffile.imwrite(tmp_path / "double.tif", np.linspace(0, 1, 64).reshape(8, 8))
    for name, dtype in (("counts.tif", "int32"), ("double.tif", "float64")):
        assert_fails(
            vitrio("convert", tmp_path / name, tmp_path / "out.mrc"), "out.mrc", dtype, "--data-type"
        )
    assert (
        vitrio("convert", tmp_path / "double.tif", tmp_path / "out.mrc", "--data-type", "float32").status == 0
    )
    with mrcfile.open(tmp_path / "out.mrc") as mrc:
        np.testing.assert_array_equal(mrc.data, np.linspace(0, 1, 64).reshape(8, 8).astype(np.float32))
    assert leftovers(tmp_path) == ["counts.tif", "double.tif", "out.mrc", "stack.mrcs"]


def test_a_type_the_format_lacks_is_widened_as_write_stack_widens_it(vitrio, tmp_path: Path):
    movie = np.random.default_rng(5).integers(0, 256, (3, 8, 8), dtype=np.uint8)
    vio.write_stack(movie, tmp_path / "movie.tif")
    assert vitrio("convert", tmp_path / "movie.tif", tmp_path / "movie.mrcs").status == 0
    vio.write_stack(movie, tmp_path / "written.mrcs")
    for name in ("movie.mrcs", "written.mrcs"):
        with mrcfile.open(tmp_path / name) as mrc:
            assert mrc.data.dtype == np.uint16
            np.testing.assert_array_equal(mrc.data, movie)
    vio.write_stack(movie > 127, tmp_path / "mask.tif")
    assert vitrio("convert", tmp_path / "mask.tif", tmp_path / "mask.mrcs").status == 0
    np.testing.assert_array_equal(mrcfile.read(tmp_path / "mask.mrcs"), (movie > 127).astype(np.uint16))


def test_values_a_type_cannot_hold_stop_the_conversion_unless_scaled_or_clipped(
    vitrio, stack, tmp_path: Path
):
    path, values = stack
    out = tmp_path / "out.tif"
    result = vitrio("convert", path, out, "--data-type", "uint8")
    assert_fails(
        result, "stack.mrcs", f"values from {values.min():.6g} to {values.max():.6g}", "uint8 (0 to 255)"
    )
    assert "--scale" in result.err and not out.exists()
    assert vitrio("convert", path, out, "--data-type", "uint8", "--clip").status == 0
    np.testing.assert_array_equal(tifffile.imread(out), np.clip(np.rint(values), 0, 255).astype(np.uint8))
    assert vitrio("convert", path, out, "--data-type", "uint8", "--scale", "--force").status == 0
    scaled = tifffile.imread(out)
    assert scaled.dtype == np.uint8 and scaled.min() == 0 and scaled.max() == 255
    assert scaled.flat[np.argmin(values)] == 0 and scaled.flat[np.argmax(values)] == 255
    expected = np.rint((values - values.min()) * (255 / (values.max() - values.min())))
    np.testing.assert_allclose(scaled, expected, atol=1)
    # whole numbers within the range go as they are; fractions do not
    whole = tmp_path / "whole.mrcs"
    with mrcfile.new(whole) as mrc:
        mrc.set_data(np.array([[[-300.0, 2.0], [7.0, 30000.0]]], np.float32))
    assert vitrio("convert", whole, tmp_path / "whole.mrc", "--data-type", "int16").status == 0
    with mrcfile.open(tmp_path / "whole.mrc") as mrc:
        assert mrc.data.dtype == np.int16 and mrc.data.ravel().tolist() == [-300, 2, 7, 30000]
    assert_fails(
        vitrio("convert", path, tmp_path / "f.mrc", "--data-type", "int16"), "stack.mrcs", "fractions"
    )
    assert_fails(
        vitrio("convert", path, tmp_path / "g.mrc", "--data-type", "float16", "--scale"), "--scale", "integer"
    )


def test_convert_keeps_the_voxel_size(vitrio, tmp_path: Path):
    with mrcfile.new(tmp_path / "map.mrc") as mrc:
        mrc.set_data(np.zeros((4, 6, 8), np.float32))
        mrc.voxel_size = (1.06, 1.5, 2.25)
    assert vitrio("convert", tmp_path / "map.mrc", tmp_path / "copy.mrc").status == 0
    with mrcfile.open(tmp_path / "copy.mrc") as mrc:
        assert [float(mrc.voxel_size[axis]) for axis in "xyz"] == pytest.approx([1.06, 1.5, 2.25])
    result = vitrio("convert", tmp_path / "map.mrc", tmp_path / "map.tif")
    assert result.status == 0 and result.err == ""
    with tifffile.TiffFile(tmp_path / "map.tif") as tiff:  # ImageJ's hyperstack: pixels per nm, spacing in nm
        assert tiff.imagej_metadata["unit"] == "nm"
        assert tiff.imagej_metadata["spacing"] == pytest.approx(0.225)
        x_resolution = tiff.pages[0].tags["XResolution"].value
    assert x_resolution[0] / x_resolution[1] == pytest.approx(1 / 0.106, rel=1e-4)
    assert vio.query_metadata(tmp_path / "map.tif").voxel_size == pytest.approx((2.25, 1.5, 1.06), rel=1e-4)


# ---------------------------------------------------------------- extract: paths as RELION means them


def test_extract_finds_micrographs_as_relion_names_them_and_keeps_the_pixel_size(
    vitrio, picked, tmp_path: Path, monkeypatch
):
    # the micrographs STAR file sits in its job's folder, its paths relative to the project two folders up
    job = tmp_path / "CtfFind" / "job003"
    job.mkdir(parents=True)
    star = picked.micrographs.rename(job / "micrographs_ctf.star")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    output = tmp_path / "Extract" / "job004" / "particles.star"
    arguments = ["--micrographs", star, "--coordinates", picked.coordinates, "--box-size", 16, "-o", output]
    assert vitrio("extract", *arguments, "--root", tmp_path).status == 0
    particles = read_particles(output)
    assert particles["rlnImageName"][0].split("@")[1].startswith("Extract/job004/")  # relative to --root
    assert particles["rlnImagePixelSize"].tolist() == [1.5] * len(picked.picks)
    images = np.empty((len(particles), 16, 16), np.float32)
    vio.read_batch_async(vio.loader(), images, particle_locations(particles, output)).get()
    first = picked.picks.iloc[0]
    y, x = round(first["rlnCoordinateY"]), round(first["rlnCoordinateX"])
    assert images[0][8, 8] == picked.images[first["rlnMicrographName"]][y, x]
    # the stacks' headers say the optics group's pixel size, as the STAR file does
    stack = particle_locations(particles, output)[0].key
    with mrcfile.open(stack) as mrc:
        assert float(mrc.voxel_size.x) == pytest.approx(1.5) and float(mrc.voxel_size.y) == pytest.approx(1.5)
    # without --root, the micrographs are found two folders above the STAR file all the same
    assert vitrio("extract", *arguments, "--force").status == 0
    # a data directory holding the micrographs by their bare names, as cryoDRGN's --datadir
    flat = tmp_path / "flat"
    flat.mkdir()
    for name in picked.images:
        (flat / Path(name).name).write_bytes((tmp_path / name).read_bytes())
    (tmp_path / "Micrographs" / "a.mrc").unlink()
    assert vitrio("extract", *arguments, "--force", "--root", flat).status == 0
    result = vitrio("extract", *arguments, "--force")
    assert_fails(
        result,
        star,
        "'Micrographs/a.mrc' is not at",
        tmp_path / "Micrographs/a.mrc",
        "(root= in Python, --root in a command)",
    )
