"""`vitrio doctor`: a STAR file of stacks, a folder of TIFF movies and an OME-Zarr store, and the settings
it recommends as the data and the memory change."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import tifffile

import vitrio as vio

from .helpers import assert_fails, leftovers

SETTINGS = ["workers", "cache", "scratch", "read_ahead", "convert"]


def doctor(vitrio, *args) -> dict:
    result = vitrio("doctor", *args, "--json", "--seconds", "0.5")
    assert result.status == 0, result.err
    return json.loads(result.out)


def advice(figures: dict) -> dict:
    return {row["setting"]: row for row in figures["recommendations"]}


@pytest.fixture
def particles(tmp_path: Path) -> Path:
    """A STAR file of 30 particles, 20 of the 25 images of one stack and 10 of the 12 of another."""
    rng = np.random.default_rng(0)
    folder = tmp_path / "Extract"
    folder.mkdir()
    names = []
    for name, count, used in (("a.mrcs", 25, 20), ("b.mrcs", 12, 10)):
        vio.write_stack(rng.standard_normal((count, 32, 32)).astype(np.float32), folder / name)
        names += [f"{i + 1:06d}@Extract/{name}" for i in range(used)]
    star = tmp_path / "particles.star"
    vio.data.write_star({"particles": pd.DataFrame({"rlnImageName": names})}, star)
    return star


@pytest.fixture
def movies(tmp_path: Path) -> Path:
    """A folder of three zlib-compressed TIFF movies of 6 frames of 64 x 64 uint16, and a file of no image."""
    folder = tmp_path / "movies"
    folder.mkdir()
    rng = np.random.default_rng(1)
    for number in range(3):
        frames = rng.poisson(2, (6, 64, 64)).astype(np.uint16)
        tifffile.imwrite(folder / f"m{number}.tif", frames, compression="zlib", photometric="minisblack")
    (folder / "notes.txt").write_text("not an image")
    return folder


def test_a_star_file_of_stacks(vitrio, particles):
    figures = doctor(vitrio, particles, "--memory", "1G")
    dataset = figures["dataset"]
    assert (dataset["files"], dataset["images"]) == (2, 30)
    assert dataset["bytes_as_images"] == 30 * 32 * 32 * 4
    assert dataset["bytes_on_disk"] == sum(p.stat().st_size for p in (particles.parent / "Extract").iterdir())
    assert list(figures["formats"]) == ["mrc"] and not figures["formats"]["mrc"]["compressed"]
    advised = advice(figures)
    assert list(advised) == SETTINGS
    assert advised["scratch"]["value"] == "ram" and advised["scratch"]["budget"] == 30 * 32 * 32 * 4
    assert advised["convert"]["value"] is False
    assert advised["cache"]["value"] == 2
    assert set(figures["expected"]) == {"1", "2", str(figures["machine"]["threads"])}
    assert all(rates["warm"] > 0 for rates in figures["expected"].values())


def test_a_cryosparc_file_counts_the_images_it_names(vitrio, particles):
    table = np.zeros(4, dtype=[("blob/path", "S64"), ("blob/idx", "<u4")])
    table["blob/path"] = [b"Extract/a.mrcs", b"Extract/a.mrcs", b"Extract/b.mrcs", b"Extract/a.mrcs"]
    table["blob/idx"] = [0, 3, 11, 3]
    cs = particles.parent / "particles.cs"
    with open(cs, "wb") as file:
        np.save(file, table)
    figures = doctor(vitrio, cs)
    assert (figures["dataset"]["files"], figures["dataset"]["images"]) == (2, 3)


def test_a_folder_of_tiff_movies_and_the_memory(vitrio, movies):
    images = 3 * 6 * 64 * 64 * 2
    small = doctor(vitrio, movies, "--memory", "1k", "--scratch-dir", movies)
    assert (small["dataset"]["files"], small["dataset"]["images"]) == (3, 18)
    assert small["dataset"]["bytes_as_images"] == images
    assert small["formats"]["tiff"]["compressed"]
    assert "tiff" in advice(small)["convert"]["reason"]
    assert advice(small)["scratch"]["value"] == "directory"
    assert str(movies) in advice(small)["scratch"]["reason"]
    assert advice(doctor(vitrio, movies, "--memory", str(images + 1)))["scratch"]["value"] == "mapped"
    assert advice(doctor(vitrio, movies, "--memory", "1G"))["scratch"]["value"] == "ram"
    assert leftovers(movies) == ["m0.tif", "m1.tif", "m2.tif", "notes.txt"]


def test_an_ome_zarr_store_and_a_stack_together(vitrio, tmp_path, particles):
    volume = np.random.default_rng(2).standard_normal((16, 48, 48)).astype(np.float32)
    vio.write_single(volume, tmp_path / "tomogram.zarr")
    figures = doctor(vitrio, tmp_path / "tomogram.zarr", particles.parent / "Extract" / "a.mrcs")
    assert set(figures["formats"]) == {"ome-zarr", "mrc"}
    kinds = figures["dataset"]["kinds"]
    stored = sum(path.stat().st_size for path in (tmp_path / "tomogram.zarr").rglob("*") if path.is_file())
    assert kinds["store"] == {"files": 1, "images": 1, "bytes_on_disk": stored}
    assert kinds[".mrcs"]["images"] == 25
    assert figures["dataset"]["bytes_as_images"] == volume.nbytes + 25 * 32 * 32 * 4


def test_the_report_is_a_page(vitrio, particles):
    result = vitrio("doctor", particles, "--seconds", "1e-9")
    assert result.status == 0, result.err
    lines = result.out.splitlines()
    assert len(lines) < 40
    assert lines[0].startswith("dataset   2 files (2 .mrcs), 30 images")
    assert "where an image's time goes" in result.out and "expected images/s" in result.out
    advised = lines[lines.index("recommended") + 1 :]
    assert [line.split()[0] for line in advised if not line.startswith("   ")] == SETTINGS
    assert max(map(len, advised)) <= 100


def test_sampling_ends_when_its_time_is_up(vitrio, movies):
    figures = json.loads(vitrio("doctor", movies, "--json", "--seconds", "1e-9").out)
    assert figures["sample"]["files"] == 1


def test_urls_of_other_formats_are_not_supported_yet(vitrio):
    assert_fails(vitrio("doctor", "https://example.org/particles.mrcs"), "example.org", "not supported yet")


def test_a_missing_path_is_named(vitrio, tmp_path):
    assert_fails(vitrio("doctor", tmp_path / "absent.star"), "absent.star")
