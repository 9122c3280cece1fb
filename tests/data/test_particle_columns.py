"""Particles from the table to the reads as columns: `particle_locations` gives `LocationColumns` (each
file once, the numbers of the files and the indices as arrays), which `ImageSource`, its `locations`
and `subset`, and shuffled batches read without an object a row; and an index past the end of its
stack is told in the numbering of the table it was read from."""

from __future__ import annotations

import gc
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import vitrio as vio
from vitrio._locations import LocationColumns, index_locations
from vitrio.data import DataLoader, Dataset, ImageSource, particle_locations, read_particles, write_star

PER_STACK = 20


def _project(tmp_path: Path, rows: int) -> tuple[Path, np.ndarray]:
    """A RELION 3.0 STAR file of `rows` particles under tmp_path/Refine3D/job010, their stacks under
    tmp_path/Particles (PER_STACK images of 8 x 8 each), and the image of each particle."""
    stacks = -(-rows // PER_STACK)
    images = np.arange(stacks * PER_STACK * 64, dtype=np.float32).reshape(stacks, PER_STACK, 8, 8)
    (tmp_path / "Particles").mkdir()
    for number in range(stacks):
        vio.write_stack(images[number], tmp_path / "Particles" / f"micrograph{number:03d}.mrcs")
    names = [
        f"{row % PER_STACK + 1:06d}@Particles/micrograph{row // PER_STACK:03d}.mrcs" for row in range(rows)
    ]
    job = tmp_path / "Refine3D" / "job010"
    job.mkdir(parents=True)
    star = job / "particles.star"
    write_star({"": pd.DataFrame({"rlnImageName": names, "rlnDefocusU": np.arange(rows, dtype=float)})}, star)
    return star, images.reshape(-1, 8, 8)[:rows]


def _locations_alive() -> int:
    gc.collect()
    return sum(type(thing) is vio.ImageLocation for thing in gc.get_objects())


def test_particles_go_from_the_table_to_shuffled_batches_without_an_object_a_row(tmp_path: Path):
    rows = 2_000
    star, images = _project(tmp_path, rows)
    before = _locations_alive()
    particles = read_particles(star)
    located = particle_locations(particles, star)
    source = ImageSource(located)
    every, part = source.locations, source.subset(np.arange(rows)[::-7])
    dataset = Dataset({"image": source, "defocus": particles["rlnDefocusU"].to_numpy()})
    batch = next(iter(DataLoader(dataset, 64, shuffle=True, seed=1)))
    assert _locations_alive() - before < 10  # not one a row

    np.testing.assert_array_equal(batch["image"], images[batch["index"]])
    np.testing.assert_array_equal(batch["defocus"], batch["index"].astype(float))
    np.testing.assert_array_equal(_read_all(part), images[::-7])
    # still a sequence of ImageLocation, made when one is asked for
    assert isinstance(located, Sequence) and len(located) == rows and len(every) == rows
    expected = [
        vio.ImageLocation(str(tmp_path / f"Particles/micrograph{row // PER_STACK:03d}.mrcs"), row % PER_STACK)
        for row in range(rows)
    ]
    assert located == expected and every == expected and list(located) == expected
    assert located[-1] == expected[-1] and list(located[5:8]) == expected[5:8]
    assert list(part.locations) == expected[::-7]
    assert np.asarray(located).tolist() == expected


def _read_all(source: ImageSource) -> np.ndarray:
    out = np.empty((len(source), *source.shape), source.dtype)
    source.read_async(vio.loader(), np.arange(len(source)), out).get()
    return out


def test_rows_of_several_locations_stay_columns(tmp_path: Path):
    star, images = _project(tmp_path, 40)
    located = particle_locations(read_particles(star), star)
    pairs = type(located)(located.keys, located.key_ids.reshape(20, 2), located.indices.reshape(20, 2))
    source = ImageSource(pairs)
    assert source.shape == (2, 8, 8) and source.locations.shape == (20, 2)
    assert source.locations[3, 1] == located[7] and list(source.locations[3]) == list(located[6:8])
    np.testing.assert_array_equal(_read_all(source), images.reshape(20, 2, 8, 8))


def test_an_image_past_the_end_of_its_stack_is_told_as_relion_counts_naming_the_star_file(tmp_path: Path):
    star, _ = _project(tmp_path, 3)
    particles = pd.DataFrame(
        {"rlnImageName": ["000001@Particles/micrograph000.mrcs", "000999@Particles/micrograph000.mrcs"]}
    )
    write_star({"": particles}, star)
    with pytest.raises(IndexError) as raised:
        ImageSource(particle_locations(read_particles(star), star))
    message = str(raised.value)
    assert message.startswith(f"{star}: row 1 ")
    assert f"image 999 of {tmp_path / 'Particles/micrograph000.mrcs'} (counting from 1)" in message
    assert f"past the end of its stack of {PER_STACK} images" in message


def test_a_cs_index_past_the_end_of_its_stack_is_told_counting_from_zero(tmp_path: Path):
    _project(tmp_path, 3)
    table = {"blob/path": [b">Particles/micrograph000.mrcs"] * 2, "blob/idx": np.array([0, 998], np.uint32)}
    cs = tmp_path / "J3" / "J3_particles.cs"
    cs.parent.mkdir()
    with pytest.raises(
        IndexError, match=r"J3_particles.cs: row 1 .*image 998 of .*micrograph000.mrcs \(counting from 0\)"
    ):
        ImageSource(particle_locations(table, cs))


def test_the_docstring_of_image_location_says_what_an_index_may_be():
    whole = vio.ImageLocation("a.mrc", vio.ImageLocation.no_stack_index)
    assert vio.ImageLocation.no_stack_index == -1 and not whole.has_index_in_stack
    with pytest.raises(ValueError):
        vio.ImageLocation("a.mrc", -2)
    documented = " ".join(vio.ImageLocation.__doc__.split())
    assert "If the index is negative" not in documented
    assert "ValueError: If the index is below -1, `no_stack_index`." in documented


@pytest.mark.parametrize(
    "key_ids",
    [[0, 0, 1, 0, 2, 1], [2, 0, 2, 1, 1, 0], [1, 1, 1, 1, 1, 1], [0, 2, 2, 0, 2, 0]],
    ids=["as they appear", "out of order", "one key of three", "a key unused"],
)
def test_columns_are_planned_as_their_locations_are(key_ids: list[int]):
    columns = LocationColumns(["a.mrcs", "b.mrcs", "c.mrcs"], key_ids, [5, 4, 3, 2, 1, 0])
    keys, numbers, indices = index_locations(columns)
    expected_keys, expected_numbers, expected_indices = index_locations(list(columns))
    assert keys == expected_keys and numbers.tolist() == expected_numbers.tolist()
    assert indices.tolist() == expected_indices.tolist() == [5, 4, 3, 2, 1, 0]


def test_columns_refuse_what_names_no_location():
    with pytest.raises(ValueError, match="not one of the 2 keys"):
        LocationColumns(["a", "b"], [0, 2], [0, 0])
    with pytest.raises(ValueError, match="distinct"):
        LocationColumns(["a", "a"], [0, 1], [0, 0])
    with pytest.raises(ValueError, match="below -1"):
        LocationColumns(["a"], [0], [-2])
    with pytest.raises(ValueError, match="one shape"):
        LocationColumns(["a"], [0, 0], [0])
    assert LocationColumns(["a"], [0], [-1])[0] == vio.ImageLocation("a")
