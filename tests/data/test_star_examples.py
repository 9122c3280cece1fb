"""STAR files as RELION writes them (a run_data.star of optics and particles, a model.star, a
postprocess.star) and the cases of starfile's own tests of quotes, in tests/data/star_examples: each read
by read_star as starfile reads it."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from vitrio.data import read_star, read_star_particles

from .star_oracle import assert_read_as_starfile

EXAMPLES = Path(__file__).parent / "star_examples"


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.star")))
def test_an_example_reads_as_starfile_reads_it(name: str):
    assert_read_as_starfile(EXAMPLES / name)


def test_relion_files_read_into_the_blocks_and_values_relion_wrote():
    particles = read_star_particles(EXAMPLES / "run_data.star")
    assert len(particles) == 8 and particles["rlnImageName"][0].startswith("000001@Extract/job007/Movies/")
    assert particles["rlnVoltage"].tolist() == [200.0] * 8  # from the optics group of each particle
    model = read_star(EXAMPLES / "model.star")
    assert list(model) == [
        "model_general",
        "model_classes",
        "model_class_1",
        "model_groups",
        "model_optics_group_1",
    ]
    assert model["model_general"]["rlnNrClasses"].tolist() == [3]
    assert math.isinf(model["model_class_1"]["rlnAngstromResolution"][0])
    postprocess = read_star(EXAMPLES / "postprocess.star")
    assert postprocess["general"]["rlnMaskName"].tolist() == ["MaskCreate/job020/mask.mrc"]
    assert postprocess["guinier"]["rlnLogAmplitudesMTFCorrected"].tolist()[:2] == [-99.0, -99.0]


@pytest.mark.parametrize("quote", ["single", "double"])
def test_the_quote_cases_of_starfile_read_as_its_tests_expect(quote: str):
    loop = read_star(EXAMPLES / f"loop_{quote}_quote.star")[""]
    assert loop.iloc[0, :4].tolist() == ["plain", "two words", " ", ""]
    assert loop["number_then_word"].tolist() == ["1.5", "word"]  # text, as a column with a word is
    assert loop["number_then_nothing"][0] == 2.5 and math.isnan(loop["number_then_nothing"][1])
    assert loop["nothing_then_word"].tolist() == ["", "word"]
    basic = read_star(EXAMPLES / f"basic_{quote}_quote.star")[""]
    assert basic.iloc[0].tolist() == ["plain", "two words", " ", "", 12]
