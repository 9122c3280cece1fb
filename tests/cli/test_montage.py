"""`vitrio montage`: the PNG's size, each tile's grey levels, the labels, and its failures."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import mrcfile
import numpy as np
import pandas as pd
import pytest
import tifffile
from PIL import Image

import vitrio as vio
from vitrio.cli import _demo, _montage
from vitrio.cli._montage import BACKGROUND, GAP, LABEL_MARGIN, LINE_HEIGHT, tile_values
from vitrio.data import write_star
from vitrio.testing.eer import random_movie

from .helpers import Result, assert_fails, leftovers

Run = Callable[..., Result]


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def picture(path: str | Path) -> tuple[np.ndarray, list[str]]:
    """The grey levels of a montage PNG, and the labels it lists in its Description."""
    with Image.open(path) as image:
        rgb = np.asarray(image.convert("RGB"))
        description = image.text["Description"]
    return rgb[..., 0], description.split("\n")


def cell(
    pixels: np.ndarray, slot: int, columns: int, size: int, shape: tuple[int, int], lines: int = 1
) -> np.ndarray:
    """What the montage shows in tile `slot`, of `shape` centred in its cell of `size`, with labels of
    `lines` under the cells."""
    top = GAP + (slot // columns) * (size + lines * LINE_HEIGHT + LABEL_MARGIN + GAP) + (size - shape[0]) // 2
    left = GAP + (slot % columns) * (size + GAP) + (size - shape[1]) // 2
    return pixels[top : top + shape[0], left : left + shape[1]]


def grid_size(count: int, columns: int, size: int, lines: int = 1) -> tuple[int, int]:
    rows = -(-count // columns)
    return rows * (size + lines * LINE_HEIGHT + LABEL_MARGIN + GAP) + GAP, columns * (size + GAP) + GAP


def test_a_stack_shows_the_images_it_names_each_mapped_from_its_percentiles(vitrio: Run) -> None:
    images = np.random.default_rng(0).normal(3.0, 2.0, (12, 32, 32)).astype(np.float32)
    vio.write_stack(images, "stack.mrcs")
    result = vitrio("montage", "stack.mrcs", "-o", "m.png", "--every", "2", "-n", "5", "--tile", "32")
    assert result.status == 0, result.err
    pixels, labels = picture("m.png")
    assert pixels.shape == grid_size(5, 3, 32)
    assert labels == ["1@stack.mrcs", "3@stack.mrcs", "5@stack.mrcs", "7@stack.mrcs", "9@stack.mrcs"]
    for slot, index in enumerate([0, 2, 4, 6, 8]):
        np.testing.assert_array_equal(
            cell(pixels, slot, 3, 32, (32, 32)), tile_values(images[index], (1, 99))
        )
    assert (pixels[:GAP] == BACKGROUND).all()
    # The label strip under a tile holds its text: light pixels on the background.
    strip = pixels[GAP + 32 : GAP + 32 + LINE_HEIGHT + LABEL_MARGIN, GAP : GAP + 32]
    assert strip.max() > 128


def test_indices_clip_and_columns(vitrio: Run) -> None:
    images = np.random.default_rng(1).uniform(0, 100, (6, 16, 16)).astype(np.float32)
    vio.write_stack(images, "stack.mrcs")
    args = ("--indices", "5,0", "--clip", "10,90", "--tile", "16", "--columns", "1")
    assert vitrio("montage", "stack.mrcs", "-o", "m.png", *args).status == 0
    pixels, labels = picture("m.png")
    assert pixels.shape == grid_size(2, 1, 16)
    assert labels == ["6@stack.mrcs", "1@stack.mrcs"]
    np.testing.assert_array_equal(cell(pixels, 0, 1, 16, (16, 16)), tile_values(images[5], (10, 90)))
    np.testing.assert_array_equal(cell(pixels, 1, 1, 16, (16, 16)), tile_values(images[0], (10, 90)))


def test_tile_values_maps_percentiles_to_black_and_white() -> None:
    values = np.arange(101, dtype=np.float32).reshape(1, 101)
    grey = tile_values(values, (10, 90))
    assert grey[0, 10] == 0 and grey[0, 90] == 255 and grey[0, 0] == 0 and grey[0, 100] == 255
    assert grey[0, 50] == 128
    assert (tile_values(np.ones((4, 4), np.float32), (1, 99)) == 128).all()


def test_a_micrograph_is_binned_by_a_whole_factor_into_its_tile(vitrio: Run) -> None:
    image = np.random.default_rng(2).normal(0, 1, (100, 150)).astype(np.float32)
    vio.write_single(image, "micrograph.mrc")
    assert vitrio("montage", "micrograph.mrc", "-o", "m.png", "--tile", "50").status == 0
    pixels, labels = picture("m.png")
    assert pixels.shape == grid_size(1, 1, 50)
    assert labels == ["micrograph.mrc"]
    binned = image[:99].reshape(33, 3, 50, 3).mean(axis=(1, 3))
    np.testing.assert_array_equal(cell(pixels, 0, 1, 50, (33, 50)), tile_values(binned, (1, 99)))
    around = cell(pixels, 0, 1, 50, (50, 50))
    assert (around[:8] == BACKGROUND).all() and (around[41:] == BACKGROUND).all()


def test_a_small_image_is_enlarged_by_a_whole_factor(vitrio: Run) -> None:
    image = np.random.default_rng(3).normal(0, 1, (10, 12)).astype(np.float32)
    vio.write_single(image, "small.mrc")
    assert vitrio("montage", "small.mrc", "-o", "m.png", "--tile", "40").status == 0
    pixels, _ = picture("m.png")
    enlarged = np.repeat(np.repeat(image, 3, axis=0), 3, axis=1)
    assert pixels.shape == grid_size(1, 1, 36)
    np.testing.assert_array_equal(cell(pixels, 0, 1, 36, (30, 36)), tile_values(enlarged, (1, 99)))


def tomogram(shape: tuple[int, int, int], voxel: float | None) -> np.ndarray:
    volume = np.random.default_rng(4).normal(0, 1, shape).astype(np.float32)
    with mrcfile.new("tomogram.mrc") as mrc:
        mrc.set_data(volume)
        if voxel is not None:
            mrc.voxel_size = voxel
    return volume


def test_a_tomogram_shows_its_three_central_sections_with_a_scale_bar(vitrio: Run) -> None:
    volume = tomogram((20, 24, 32), 2.5)
    assert vitrio("montage", "tomogram.mrc", "-o", "m.png", "--tile", "32").status == 0
    pixels, labels = picture("m.png")
    assert pixels.shape == grid_size(3, 3, 32, lines=2)  # side by side, in one row
    assert [label.split(",")[0] for label in labels] == [
        "tomogram.mrc XY 2.5 Å",
        "tomogram.mrc XZ",
        "tomogram.mrc YZ",
    ]
    # A quarter of the 80 Å width (60 Å of YZ) rounds down to a bar of 2 nm, 8 pixels (1 nm, 4 pixels),
    # white, in the bottom left.
    assert [label.split(", ")[1] for label in labels] == ["bar 2 nm", "bar 2 nm", "bar 1 nm"]
    sections = [volume[10], volume[:, 12, :], volume[:, :, 16]]
    for slot, (section, length) in enumerate(zip(sections, (8, 8, 4))):
        shown = cell(pixels, slot, 3, 32, section.shape, lines=2)
        bar = np.zeros(section.shape, bool)
        rows, thick = section.shape[0], 2
        bar[rows - 2 * thick : rows - thick, thick : thick + length] = True
        assert (shown[bar] == 255).all()
        np.testing.assert_array_equal(shown[~bar], tile_values(section, (1, 99))[~bar])


def test_a_tiff_volume_has_a_scale_bar_only_from_metadata_that_means_a_length(vitrio: Run) -> None:
    volume = np.random.default_rng(4).normal(0, 1, (8, 32, 32)).astype(np.float32)
    # 300 dots per inch, as image editors write: no pixel size, no bar
    tifffile.imwrite(
        "dpi.tif", volume, resolution=(300, 300), resolutionunit="INCH", metadata={"axes": "ZYX"}
    )
    # ImageJ's scale: 4 pixels per nm, sections 0.25 nm apart
    tifffile.imwrite(
        "imagej.tif",
        volume,
        imagej=True,
        resolution=(4, 4),
        metadata={"axes": "ZYX", "unit": "nm", "spacing": 0.25},
    )
    assert vitrio("montage", "dpi.tif", "imagej.tif", "-o", "m.png", "--tile", "32").status == 0
    _, labels = picture("m.png")
    assert labels[:3] == ["dpi.tif XY", "dpi.tif XZ", "dpi.tif YZ"]
    assert [label.split(", ")[0] for label in labels[3:]] == [
        "imagej.tif XY 2.5 Å",
        "imagej.tif XZ",
        "imagej.tif YZ",
    ]
    assert all(", bar " in label for label in labels[3:])


def test_sections_are_evenly_spaced_xy_sections(vitrio: Run) -> None:
    volume = tomogram((9, 16, 16), None)
    assert vitrio("montage", "tomogram.mrc", "-o", "m.png", "--sections", "3", "--tile", "16").status == 0
    pixels, labels = picture("m.png")
    # mrcfile leaves the cell zero: the voxel size is not known, and no bar is drawn.
    assert labels == [f"tomogram.mrc z={z}" for z in (2, 4, 6)]
    for slot, z in enumerate((2, 4, 6)):
        shown = cell(pixels, slot, 2, 16, (16, 16), lines=2)
        np.testing.assert_array_equal(shown, tile_values(volume[z], (1, 99)))


def test_an_eer_movie_shows_its_first_fraction_and_its_sum(vitrio: Run) -> None:
    movie = random_movie(Path("movie.eer"), frames=20, shape=(64, 64), density=0.2)
    result = vitrio("montage", "movie.eer", "-o", "m.png", "--fractions", "4", "--tile", "64")
    assert result.status == 0, result.err
    pixels, labels = picture("m.png")
    assert pixels.shape == grid_size(2, 2, 64, lines=2)
    assert labels == ["movie.eer 1st of 4 fractions", "movie.eer sum of 20 frames"]
    counts = movie.counts().astype(np.float32)
    np.testing.assert_array_equal(
        cell(pixels, 0, 2, 64, (64, 64), 2), tile_values(counts[:5].sum(0), (1, 99))
    )
    np.testing.assert_array_equal(cell(pixels, 1, 2, 64, (64, 64), 2), tile_values(counts.sum(0), (1, 99)))


def particles_star(files: int, per_file: int, box: int) -> tuple[np.ndarray, pd.DataFrame]:
    """Stacks of particles and particles.star naming them, with a class number per particle."""
    rng = np.random.default_rng(5)
    Path("Extract").mkdir()
    images = rng.normal(0, 1, (files, per_file, box, box)).astype(np.float32)
    names = []
    for number, stack in enumerate(images):
        vio.write_stack(stack, f"Extract/mic{number:03d}.mrcs")
        names += [f"{i + 1:06d}@Extract/mic{number:03d}.mrcs" for i in range(per_file)]
    table = pd.DataFrame({"rlnImageName": names, "rlnClassNumber": rng.integers(1, 9, len(names))})
    write_star({"particles": table}, "particles.star")
    return images.reshape(-1, box, box), table


def test_star_particles_labelled_with_a_column(vitrio: Run) -> None:
    images, table = particles_star(3, 4, 16)
    args = ("--star", "particles.star", "--label", "rlnClassNumber", "--every", "3", "--tile", "16")
    assert vitrio("montage", "-o", "m.png", *args).status == 0
    pixels, labels = picture("m.png")
    rows = [0, 3, 6, 9]
    assert labels == [f"rlnClassNumber: {table['rlnClassNumber'][r]}" for r in rows]
    for slot, row in enumerate(rows):
        np.testing.assert_array_equal(cell(pixels, slot, 2, 16, (16, 16)), tile_values(images[row], (1, 99)))
    assert vitrio("montage", "-o", "n.png", "--star", "particles.star", "-n", "2", "--tile", "16").status == 0
    assert picture("n.png")[1] == ["1@mic000.mrcs", "2@mic000.mrcs"]


def test_a_thousand_particles_of_two_hundred_files_are_one_batch_read(
    vitrio: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    particles_star(200, 5, 16)
    calls = []
    read = vio.read_batch_async
    monkeypatch.setattr(vio, "read_batch_async", lambda *a: calls.append(len(a[2])) or read(*a))
    args = ("--star", "particles.star", "-n", "1000", "--tile", "16")
    assert vitrio("montage", "-o", "m.png", *args).status == 0
    assert calls == [1000]
    assert picture("m.png")[0].shape == grid_size(1000, 32, 16)


def test_the_images_a_read_holds_and_the_files_kept_open_are_the_configurations(
    vitrio: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    particles_star(4, 5, 16)
    volume = np.arange(6 * 8 * 10, dtype=np.float32).reshape(6, 8, 10)
    vio.write_single(volume, "tomogram.mrc")
    calls, kept = [], []
    read, provider = vio.read_batch_async, vio.reader_provider
    monkeypatch.setattr(vio, "read_batch_async", lambda *a: calls.append(len(a[2])) or read(*a))
    monkeypatch.setattr(vio, "reader_provider", lambda *a, **k: kept.append(k["cache"]) or provider(*a, **k))
    args = ("--star", "particles.star", "-n", "20", "--tile", "16")
    with vio.configure(montage_read_bytes=6 * 16 * 16 * 4, montage_open_files=3):
        assert vitrio("montage", "-o", "m.png", *args).status == 0
        assert calls == [6, 6, 6, 2] and kept == [3]  # 4 files, 3 kept open
        kept.clear()
        assert vitrio("montage", "tomogram.mrc", "-o", "t.png", "--tile", "16").status == 0
        assert kept == [1]  # one file


def test_a_missing_or_unreadable_file_is_one_line_and_nothing_written(vitrio: Run, tmp_path: Path) -> None:
    vio.write_stack(np.zeros((2, 8, 8), np.float32), "stack.mrcs")
    assert_fails(vitrio("montage", "stack.mrcs", "missing.mrc", "-o", "m.png"), "missing.mrc")
    Path("junk.mrc").write_bytes(b"not an image at all" * 10)
    assert_fails(vitrio("montage", "stack.mrcs", "junk.mrc", "-o", "m.png"), "junk.mrc")
    assert_fails(vitrio("montage", "stack.mrcs", "--indices", "2", "-o", "m.png"), "stack.mrcs", "2")
    assert_fails(vitrio("montage", "-o", "m.png"), "--star")
    assert_fails(vitrio("montage", "stack.mrcs", "-o", "m.jpg"), "m.jpg")
    vio.write_stack(np.zeros((50, 32, 32), np.float32), "whole.mrcs")
    Path("truncated.mrcs").write_bytes(Path("whole.mrcs").read_bytes()[:20000])
    Path("whole.mrcs").unlink()
    assert_fails(vitrio("montage", "stack.mrcs", "truncated.mrcs", "-o", "m.png"), "truncated.mrcs")
    assert leftovers(tmp_path) == ["junk.mrc", "stack.mrcs", "truncated.mrcs"]
    assert vitrio("montage", "stack.mrcs", "-o", "m.png").status == 0
    assert_fails(vitrio("montage", "stack.mrcs", "-o", "m.png"), "m.png", "--force")


def test_the_sections_of_volumes_sit_side_by_side_beside_a_square_grid_of_others(vitrio: Run) -> None:
    tomogram((8, 16, 16), None)
    vio.write_stack(np.zeros((9, 16, 16), np.float32), "stack.mrcs")
    assert vitrio("montage", "tomogram.mrc", "-o", "one.png", "--tile", "16").status == 0
    assert picture("one.png")[0].shape == grid_size(3, 3, 16, lines=2)
    assert vitrio("montage", "tomogram.mrc", "--sections", "4", "-o", "xy.png", "--tile", "16").status == 0
    assert picture("xy.png")[0].shape == grid_size(4, 2, 16, lines=2)  # XY sections alone: a square grid
    assert vitrio("montage", "stack.mrcs", "-n", "4", "-o", "four.png", "--tile", "16").status == 0
    assert picture("four.png")[0].shape == grid_size(4, 2, 16)
    assert vitrio("montage", "tomogram.mrc", "tomogram.mrc", "-o", "two.png", "--tile", "16").status == 0
    assert picture("two.png")[0].shape == grid_size(6, 3, 16, lines=2)  # a volume a row


def test_a_star_file_of_no_particles_or_a_file_of_no_image_is_named(vitrio: Run) -> None:
    write_star({"particles": pd.DataFrame({"rlnImageName": [], "rlnClassNumber": []})}, "empty.star")
    assert_fails(vitrio("montage", "--star", "empty.star", "-o", "m.png"), "empty.star", "no particles")
    vio.write_stack(np.zeros((0, 8, 8), np.float32), "empty.mrcs")
    assert_fails(vitrio("montage", "empty.mrcs", "-o", "m.png"), "empty.mrcs", "no image")
    assert not Path("m.png").exists()


def test_the_folders_of_the_picture_are_made(vitrio: Run, tmp_path: Path) -> None:
    vio.write_stack(np.zeros((2, 8, 8), np.float32), "stack.mrcs")
    assert vitrio("montage", "stack.mrcs", "-o", "new/sub/m.png").status == 0
    assert picture("new/sub/m.png")[1] == ["1@stack.mrcs", "2@stack.mrcs"]


def test_a_wrong_label_column_names_the_columns(vitrio: Run) -> None:
    particles_star(1, 2, 8)
    result = vitrio("montage", "--star", "particles.star", "--label", "rlnNope", "-o", "m.png")
    assert_fails(result, "rlnNope", "rlnClassNumber")


def test_bad_arguments_are_refused(vitrio: Run) -> None:
    for bad in (("--clip", "99,1"), ("--clip", "x"), ("--indices", "-1"), ("--every", "0")):
        with pytest.raises(SystemExit) as stop:
            vitrio("montage", "a.mrc", "-o", "m.png", *bad)
        assert stop.value.code == 2


def test_fit_image_factor() -> None:
    fitted, step = _montage.fit_image(np.ones((300, 90), np.float32), 128)
    assert fitted.shape == (100, 30) and step == 3.0
    fitted, step = _montage.fit_image(np.ones((20, 30), np.float32), 128)
    assert fitted.shape == (80, 120) and step == 0.25


def test_the_demo_draws_held_out_particles_labelled_true_predicted_and_cut_at_an_edge(
    vitrio: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn = []
    save = _demo.save_figure
    monkeypatch.setattr(
        _demo, "save_figure", lambda figure, *a: drawn.append(figure.axes) or save(figure, *a)
    )
    out = tmp_path / "demo"
    result = vitrio("demo", "--out", out, "--micrographs", 2, "--size", 384, "--epochs", 1)
    assert result.status == 0, result.err
    # training.png: one legend, of every curve of both axes
    (axes,) = drawn
    curves = sorted(line.get_label() for axis in axes for line in axis.get_lines())
    (legend,) = [axis.get_legend() for axis in axes if axis.get_legend() is not None]
    assert sorted(text.get_text() for text in legend.get_texts()) == curves
    assert sorted(curves) == ["chance", "held-out accuracy", "training loss"]
    pixels, labels = picture(out / "particles.png")
    kinds = ("monomer", "dimer", "trimer")
    particles = vio.data.read_particles(out / "particles.star")
    classes = particles["rlnClassNumber"].to_numpy() - 1
    names = particles["rlnImageName"].tolist()
    shown = vio.data.read_star_particles(out / "shown.star")
    rows = [names.index(name) for name in shown["rlnImageName"]]
    training, held_out = _demo.split(len(particles))
    assert set(rows) <= set(held_out) and not set(rows) & set(training)
    images = [
        vio.read(location) for location in vio.data.particle_locations(particles, out / "particles.star")
    ]
    # what lies beyond a micrograph's edge is zero: noise is never exactly zero
    edge = np.array([(image == 0).any() for image in images])
    assert edge[rows].any() == edge[held_out].any()
    for label, row in zip(labels, rows):
        told = re.fullmatch(r"true: (\w+)(, at edge)? predicted: (\w+)", label)
        assert told is not None, label
        assert told[1] == kinds[classes[row]] and bool(told[2]) == edge[row] and told[3] in kinds
    enlarged = np.repeat(np.repeat(images[rows[0]], 2, axis=0), 2, axis=1)  # 64 x 64 in tiles of 128
    np.testing.assert_array_equal(cell(pixels, 0, 8, 128, (128, 128), 2), tile_values(enlarged, (1, 99)))


def test_a_stack_of_volumes_shows_the_sections_of_the_volumes_chosen(vitrio: Run) -> None:
    volumes = np.random.default_rng(6).normal(0, 1, (3, 8, 16, 16)).astype(np.float32)
    vio.write(volumes, "volumes.mrc", vio.ImageDescriptor((3, 8, 16, 16), 3, "float32"))
    assert vitrio("montage", "volumes.mrc", "--indices", "2", "-o", "m.png", "--tile", "16").status == 0
    pixels, labels = picture("m.png")
    assert [label.split(",")[0] for label in labels] == [
        "3@volumes.mrc XY",
        "3@volumes.mrc XZ",
        "3@volumes.mrc YZ",
    ]
    # every XY section of a volume shallower than --sections
    assert vitrio("montage", "volumes.mrc", "--indices", "0", "--sections", "20", "-o", "s.png").status == 0
    assert [label.split(" ")[1] for label in picture("s.png")[1]] == [f"z={z}" for z in range(8)]
