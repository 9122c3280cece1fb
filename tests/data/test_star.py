"""read_star, star_table, write_star and particle_optics, with starfile as the oracle."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import starfile

import vitrio
import vitrio._fs
import vitrio._native
import vitrio.data._star
import vitrio.data._star_text
from vitrio.data import particle_optics, read_star, star_table, write_star

from .star_oracle import read_plain_rows

OPTICS = pd.DataFrame(
    {
        "rlnOpticsGroupName": ["opticsGroup1", "opticsGroup2"],
        "rlnOpticsGroup": [1, 2],
        "rlnVoltage": [300.0, 200.0],
        "rlnMicrographPixelSize": [1.06, 0.83],
    }
)
MICROGRAPHS = pd.DataFrame(
    {
        "rlnMicrographName": ["Movies/a b.mrc", "Movies/c.mrc", "Movies/d.mrc"],
        "rlnOpticsGroup": [2, 1, 2],
        "rlnDefocusU": [10000.5, 12000.25, 9000.0],
    }
)


def test_written_blocks_read_back_by_starfile_and_by_read_star(tmp_path: Path):
    path = tmp_path / "micrographs.star"
    write_star({"optics": OPTICS, "micrographs": MICROGRAPHS}, path)
    theirs = starfile.read(path, always_dict=True)
    assert list(theirs) == ["optics", "micrographs"]
    pd.testing.assert_frame_equal(theirs["optics"], OPTICS)
    pd.testing.assert_frame_equal(theirs["micrographs"], MICROGRAPHS)
    ours = read_star(path)
    assert list(ours) == ["optics", "micrographs"]
    pd.testing.assert_frame_equal(ours["micrographs"], MICROGRAPHS)
    # the file has the mode the umask gives, and nothing else is left in the folder
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask
    assert [p.name for p in tmp_path.iterdir()] == ["micrographs.star"]


def test_a_block_of_single_values_reads_as_one_row(tmp_path: Path):
    path = tmp_path / "general.star"
    starfile.write({"general": {"rlnImageSize": 64, "rlnName": "x"}, "particles": MICROGRAPHS}, path)
    blocks = read_star(path)
    assert blocks["general"].to_dict("records") == [{"rlnImageSize": 64, "rlnName": "x"}]
    assert len(blocks["particles"]) == 3


def test_write_star_replaces_a_file_and_never_follows_a_link(tmp_path: Path, monkeypatch):
    victim = tmp_path / "victim"
    victim.write_text("private\n")
    path = tmp_path / "out.star"
    path.write_text("an earlier run\n")
    # where the file is first made (a name `secrets.token_hex` gives) is a link to the victim
    tokens = iter(["0" * 16, "1" * 16])
    monkeypatch.setattr(vitrio._partial.secrets, "token_hex", lambda _: next(tokens))
    planted = Path(vitrio._partial.partial_path(path, "0" * 16))
    planted.symlink_to(victim)
    write_star({"particles": MICROGRAPHS}, path)
    assert victim.read_text() == "private\n" and planted.readlink() == victim
    pd.testing.assert_frame_equal(starfile.read(path), MICROGRAPHS)
    # a link at the path itself is replaced, not written through
    link = tmp_path / "link.star"
    link.symlink_to(victim)
    monkeypatch.undo()
    write_star({"particles": MICROGRAPHS}, link)
    assert victim.read_text() == "private\n" and not link.is_symlink()
    pd.testing.assert_frame_equal(starfile.read(link), MICROGRAPHS)


def test_write_star_into_a_missing_folder_leaves_nothing(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match="missing"):
        write_star({"particles": MICROGRAPHS}, tmp_path / "missing" / "out.star")
    assert list(tmp_path.iterdir()) == []


def test_read_star_errors_name_the_file(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match="nothing.star: no such file"):
        read_star(tmp_path / "nothing.star")
    with pytest.raises(IsADirectoryError, match=str(tmp_path)):
        read_star(tmp_path)


@pytest.mark.parametrize("text", ["a list of stacks\nstack0.mrcs\n", "", "# only a comment\n"])
def test_read_star_of_a_file_that_is_not_star_says_so_naming_it(tmp_path: Path, text: str):
    path = tmp_path / "stacks.txt"
    path.write_text(text)
    with pytest.raises(ValueError, match=f"^{path}: not a STAR file: it has no data_ block$"):
        read_star(path)


def test_star_table_takes_the_preferred_block_else_the_first_with_the_columns(tmp_path: Path):
    path = tmp_path / "x.star"
    other = MICROGRAPHS.assign(rlnCoordinateX=1.0)
    blocks = {"optics": OPTICS, "other": other, "micrographs": MICROGRAPHS.iloc[1:]}
    chosen = star_table(path, blocks, ["rlnMicrographName"], prefer="micrographs")
    assert chosen["rlnMicrographName"].tolist() == ["Movies/c.mrc", "Movies/d.mrc"]
    assert chosen.index.tolist() == [0, 1]
    assert "rlnCoordinateX" in star_table(path, blocks, ["rlnMicrographName"], prefer="particles")
    with pytest.raises(ValueError, match=r"x.star: no column rlnCoordinateY in data_micrographs"):
        star_table(path, blocks, ["rlnMicrographName", "rlnCoordinateY"], prefer="micrographs")
    with pytest.raises(ValueError, match="x.star: holds no data block"):
        star_table(path, {}, ["rlnMicrographName"])


def test_particle_optics_from_the_micrographs_optics():
    optics = particle_optics("m.star", MICROGRAPHS, OPTICS, 128, pixel_size=5.0)
    assert list(optics["rlnOpticsGroup"]) == [1, 2] and list(optics["rlnVoltage"]) == [300.0, 200.0]
    assert "rlnMicrographPixelSize" not in optics
    assert optics["rlnImagePixelSize"].tolist() == [1.06, 0.83]  # those of the micrographs, not 5.0
    assert (optics["rlnImageSize"] == 128).all() and (optics["rlnImageDimensionality"] == 2).all()
    with pytest.raises(ValueError, match="m.star: no column rlnMicrographPixelSize in data_optics"):
        particle_optics("m.star", MICROGRAPHS, OPTICS.drop(columns="rlnMicrographPixelSize"), 128)
    with pytest.raises(ValueError, match="m.star: no column rlnOpticsGroup in data_optics"):
        particle_optics("m.star", MICROGRAPHS, OPTICS.drop(columns="rlnOpticsGroup"), 128)


def test_particle_optics_without_optics():
    optics = particle_optics("m.star", MICROGRAPHS, None, 64, pixel_size=1.5)
    assert optics.to_dict("list") == {
        "rlnOpticsGroup": [1, 2],
        "rlnOpticsGroupName": ["opticsGroup1", "opticsGroup2"],
        "rlnImagePixelSize": [1.5, 1.5],
        "rlnImageSize": [64, 64],
        "rlnImageDimensionality": [2, 2],
    }
    single = particle_optics("m.star", MICROGRAPHS.drop(columns="rlnOpticsGroup"), None, 64, pixel_size=2)
    assert single["rlnOpticsGroup"].tolist() == [1] and single["rlnImagePixelSize"].dtype == np.float64
    with pytest.raises(ValueError, match="m.star: no data_optics block gives the pixel size"):
        particle_optics("m.star", MICROGRAPHS, None, 64)


def test_write_star_keeps_every_digit_of_every_relion_column_type(tmp_path: Path):
    # a postprocess.star's values and a particles block's: tiny, large and long floats, ints, names
    rng = np.random.default_rng(7)
    general = pd.DataFrame(
        {"rlnFinalResolution": [3.1415926535897931], "rlnBfactorUsedForSharpening": [-87.7]}
    )
    fsc = pd.DataFrame(
        {
            "rlnSpectralIndex": np.arange(6),
            "rlnResolution": [0.0, 0.002604, 0.005208, 0.007812, 0.010417, 0.013021],
            "rlnResolutionSquared": [0.0, 6.78168e-06, 2.712674e-05, 1.929012e-06, 1e-300, 5e-324],
            "rlnFourierShellCorrelationCorrected": rng.random(6),
        }
    )
    particles = pd.DataFrame(
        {
            "rlnImageName": [f"{i:06d}@Extract/job007/Movies/a b_{i}.mrcs" for i in range(1, 4)],
            "rlnMicrographName": ["Movies/a.mrc", "Movies/b.mrc", "Movies/c.mrc"],
            "rlnCoordinateX": [1234.0, 1e16, 0.1],
            "rlnDefocusU": rng.uniform(5000, 30000, 3),
            "rlnAngleRot": [-179.99999999999997, 1 / 3, 2.5e-8],
            "rlnOpticsGroup": [1, 2, 2**53],
            "rlnClassNumber": np.array([1, 2, 3], dtype=np.int32),
            "rlnNormCorrection": np.array([1.1, 0.3, 7e-7], dtype=np.float32),
        }
    )
    path = tmp_path / "postprocess.star"
    write_star({"general": general, "fsc": fsc, "particles": particles}, path)
    theirs = starfile.read(path, always_dict=True)
    pd.testing.assert_frame_equal(theirs["general"], general)
    pd.testing.assert_frame_equal(theirs["fsc"], fsc)
    # float32 values are written as the float64 they are, and int32 read back as int64: equal values
    pd.testing.assert_frame_equal(theirs["particles"], particles, check_dtype=False)
    assert (theirs["particles"]["rlnNormCorrection"].to_numpy() == particles["rlnNormCorrection"]).all()
    assert "1.929012e-06" in path.read_text()


# Files as RELION 3.0, 3.1 and 5 and other tools write them: the layouts read_star must take as starfile does.
LAYOUTS = {
    "relion 3.0, a tab and padding": (
        "# RELION; version 3.0\n\ndata_\n\nloop_\n_rlnImageName #1\n_rlnDefocusU #2\n_rlnClassNumber #3\n"
        "000002@Extract/a.mrcs\t  10000.000000     1 \n  000001@Extract/b.mrcs 12000.5 2\n"
    ),
    "relion 3.1, optics then particles, comments between": (
        "\n# version 30001\n\ndata_optics\n\nloop_\n_rlnOpticsGroupName #1\n_rlnOpticsGroup #2\n"
        "_rlnImagePixelSize #3\nopticsGroup1 1 1.060000\nopticsGroup2 2 0.830000\n\n\n# version 30001\n\n"
        "data_particles\n\nloop_\n_rlnImageName #1\n_rlnOpticsGroup #2\n_rlnAngleRot #3\n"
        "000002@a.mrcs 2 -179.99999999999997\n# a comment line\n000001@b.mrcs 1 nan # the rest\n"
    ),
    "relion 5, single values then a loop, CRLF": (
        "# version 50001\r\n\r\ndata_general\r\n\r\n_rlnTomoSubTomosAre2DStacks 1\r\n_rlnName 'a b'\r\n"
        "_rlnSize 1.5e3\r\n\r\ndata_particles\r\n\r\nloop_\r\n_rlnTomoName #1\r\n"
        "_rlnCenteredCoordinateXAngst #2\r\n"
        "TS_01 -12.5\r\nTS_02 <NA>\r\n"
    ),
    "quoted values and an empty loop": (
        "data_movies\n\nloop_\n_rlnMicrographMovieName #1\n_rlnNote #2\n_rlnCount #3\n"
        "\"Movies/a b.tiff\" 'two words' 7\nMovies/c.tiff x 8\n\ndata_empty\n\nloop_\n_rlnA #1\n_rlnB #2\n"
    ),
    "a value of each kind in one column, and numbers as text": (
        "data_\nloop_\n_rlnA #1\n_rlnB #2\n_rlnC #3\n1 1 x\n2 2.5 1\n9007199254740993 inf 2\n"
    ),
}


@pytest.mark.parametrize("plain", [True, False], ids=["plain rows read natively", "all rows by pandas"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_read_star_equals_starfile_on_every_layout(tmp_path: Path, layout: str, plain: bool, monkeypatch):
    path = tmp_path / "file.star"
    path.write_bytes(LAYOUTS[layout].encode())
    theirs = starfile.read(path, always_dict=True)
    read_plain_rows(monkeypatch, plain)
    for chunk in (1 << 20, 64):  # whole, and split into chunks of a few lines each
        monkeypatch.setattr(vitrio.data._star_text, "PANDAS_CHUNK_BYTES", chunk)
        ours = read_star(path)
        assert list(ours) == list(theirs)
        for name, block in theirs.items():
            expected = block if isinstance(block, pd.DataFrame) else pd.DataFrame([block])
            pd.testing.assert_frame_equal(ours[name], expected, check_exact=True)


@pytest.mark.parametrize("plain", [True, False], ids=["plain rows read natively", "all rows by pandas"])
def test_a_long_loop_read_in_chunks_equals_starfile(tmp_path: Path, plain: bool, monkeypatch):
    # rows across many chunks, a block starting inside a chunk, and a last line without its line end
    rng = np.random.default_rng(3)
    particles = pd.DataFrame(
        {
            "rlnImageName": [f"{i:06d}@Extract/job007/Movies/m{i // 7}.mrcs" for i in range(1, 2001)],
            "rlnDefocusU": rng.uniform(5000, 30000, 2000),
            "rlnClassNumber": rng.integers(1, 50, 2000),
        }
    )
    path = tmp_path / "run_data.star"
    starfile.write({"optics": OPTICS, "particles": particles, "micrographs": MICROGRAPHS}, path)
    path.write_bytes(path.read_bytes().rstrip(b"\n"))
    monkeypatch.setattr(vitrio.data._star_text, "PANDAS_CHUNK_BYTES", 4096)
    read_plain_rows(monkeypatch, plain)
    with vitrio.configure(star_part_bytes=4096):
        ours, theirs = read_star(path), starfile.read(path, always_dict=True)
    assert list(ours) == ["optics", "particles", "micrographs"]
    for name in theirs:
        pd.testing.assert_frame_equal(ours[name], theirs[name], check_exact=True)


def test_plain_rows_are_read_star_part_bytes_at_a_time(tmp_path: Path, monkeypatch):
    names = [f"{i:06d}@Extract/job007/Movies/m{i // 7}.mrcs" for i in range(1, 2001)]
    particles = pd.DataFrame({"rlnImageName": names, "rlnClassNumber": np.arange(2000) % 50})
    path = tmp_path / "run_data.star"
    starfile.write({"particles": particles}, path)
    parts = []
    read = vitrio._native.star_read

    def read_part(text, start, *rest):  # a part is read from its start, and maybe on from a row inside it
        if start == 0:
            parts.append(len(text))
        return read(text, start, *rest)

    monkeypatch.setattr(vitrio._native, "star_read", read_part)
    with vitrio.configure(star_part_bytes=4096):
        pd.testing.assert_frame_equal(read_star(path)["particles"], particles, check_exact=True)
    assert len(parts) >= path.stat().st_size // 4096 and max(parts) <= 4096
    parts.clear()
    pd.testing.assert_frame_equal(read_star(path)["particles"], particles, check_exact=True)
    assert len(parts) == 1  # the file's tens of kilobytes at once


@pytest.mark.parametrize(
    "row, problem",
    [
        ("000003@a.mrcs 1.0 2 9", "4 values in a row of a loop of 3 columns"),
        ("000003@a.mrcs 1.0", "2 values"),
    ],
)
def test_a_row_of_the_wrong_length_names_its_line(tmp_path: Path, row: str, problem: str):
    path = tmp_path / "bad.star"
    rows = "".join(f"00000{i}@a.mrcs 1.0 2\n" for i in range(1, 3))
    path.write_text(f"data_particles\n\nloop_\n_rlnImageName\n_rlnDefocusU\n_rlnClassNumber\n{rows}{row}\n")
    with pytest.raises(ValueError, match=rf"bad.star: line 9: {problem}"):
        read_star(path)


def test_hostile_star_files_are_refused_with_the_file_named(tmp_path: Path, monkeypatch):
    path = tmp_path / "x.star"
    path.write_bytes(b"data_\nloop_\n_rlnA\n\xff\xfe\n")
    with pytest.raises(ValueError, match="x.star"):
        read_star(path)
    path.write_text("data_general\n_rlnA 1 2\n")
    with pytest.raises(ValueError, match="x.star: line 2: not a name and a value"):
        read_star(path)
    path.write_text("data_\nloop_\n_rlnA\n" + "1\n" * 1000)
    monkeypatch.setattr(vitrio.data._star, "MAX_STAR_BYTES", 1000)
    with pytest.raises(ValueError, match="x.star: more than the 1000 bytes a STAR file may have"):
        read_star(path)


def test_a_star_file_cut_short_while_it_is_read_is_refused(tmp_path: Path, monkeypatch):
    path = tmp_path / "cut.star"
    rows = "".join(f"{i:06d}@Movies/a.mrcs {i * 0.5}\n" for i in range(1, 2000))
    path.write_text(f"data_particles\n\nloop_\n_rlnImageName\n_rlnDefocusU\n{rows}")
    mapped = vitrio.data._star_text._mapped

    def cut_once_mapped(*args):
        text = mapped(*args)
        os.truncate(path, 100)  # the pages past the first now read as zeros
        return text

    monkeypatch.setattr(vitrio.data._star_text, "_mapped", cut_once_mapped)
    with pytest.raises(ValueError, match="cut.star"):
        read_star(path)


def test_a_star_file_is_read_whole_where_no_map_can_be_guarded(tmp_path: Path):
    """With every guard of the maps taken, a map of the file would kill the process if the file were cut
    short: the text is read instead, and equals what starfile reads."""
    path = tmp_path / "p.star"
    rows = "".join(f"{i:06d}@Movies/a.mrcs {i * 0.5}\n" for i in range(1, 200))
    path.write_text(f"data_particles\n\nloop_\n_rlnImageName\n_rlnDefocusU\n{rows}")
    page = tmp_path / "page"
    page.write_bytes(b"\0" * 4096)
    fd = os.open(page, os.O_RDONLY)
    try:
        held = []
        while not held or held[-1].guarded:
            held.append(vitrio._native.map_file(fd, 4096))
        table = read_star(path)["particles"]
    finally:
        del held
        os.close(fd)
    expected = starfile.read(path, always_dict=True)["particles"]
    pd.testing.assert_frame_equal(table, expected, check_dtype=False)


def _numbers_file(path: Path, texts: list[str]) -> Path:
    """A STAR file of a loop of one column of `texts` and a column of text beside it."""
    rows = "".join(f"{i}@a.mrcs {text}\n" for i, text in enumerate(texts, 1))
    path.write_text(f"data_particles\n\nloop_\n_rlnImageName #1\n_rlnDefocusU #2\n{rows}")
    return path


def _bits(numbers) -> list[int]:
    return np.asarray(numbers, np.float64).view(np.int64).tolist()


# Where the conversion of decimal text is hardest: the edges of the exact powers of ten and of 2^53,
# halfway cases, more digits than a double holds, the smallest and largest doubles, and zero.
EDGES = [
    *("0", "-0.0", "0.000", "-0e5", "+0.0", "1", "-1", "+1.5", ".5", "5.", "-.25e1", "1E5", "1e+05", "1e-05"),
    *("0.1", "0.2", "0.3", "1e22", "1e23", "1e-22", "1e-23", "9007199254740992", "9007199254740993.0"),
    *("9007199254740993e-10", "9007199254740991e22", "9007199254740993e22", "123456789012345678e-3"),
    *("1234567890123456789.5", "12345678901234567890e-5", "0.30000000000000004", "2.5e-16"),
    *("1.7976931348623157e308", "1.7976931348623159e308", "2e308", "4.9e-324", "2.4e-324", "2.5e-324"),
    *("2.2250738585072011e-308", "2.2250738585072014e-308", "1e-400", "1e00000000000000000005", "1e0000022"),
    *("1234567.1234567", "-9999999.9999999", "12345678.5", "1.12345678", "0000000.0000001", "7."),
    *("-0000000.0000000", "-.0000001", "+1234567", "-1234567", "12345678", "-0", "+0", "00"),
    *("4.35679e-4", "8.589973e9", "0.000000000000000000000000000000000000000000000001", "7.038531e-26"),
    *(
        "1.00000000000000011102230246251565404236316680908203125",
        "1.00000000000000011102230246251565404236316680908203124",
    ),
    *(
        "9999999999999999e22",
        "179769313486231580793728971405303415079934132710037826936173778980444968292764750946649017977587207096330286416692887910946555547851940402630657488671505820681908902000708383676273854845817711531764475730270069855571366959622842914819860834936475292719074168444365510704342711559699508093042880177904174497791.9999999999999999999999999999999999999999999999999999999999999999999999",
        "-1.5e-310",
    ),
]


@pytest.mark.parametrize("plain", [True, False])
def test_numbers_read_bit_for_bit_as_strtod_reads_them(tmp_path: Path, plain: bool, monkeypatch):
    # Python's float() rounds decimal text to the nearest double, as strtod does: every number read must
    # be that double, bit for bit, whether the rows are plain (read in one pass by the C extension, never
    # by pandas) or left to pandas.
    rng = np.random.default_rng(11)
    texts = [text for text in EDGES if len(text) < 128] + ["nan", "NaN"]
    for _ in range(3000):
        digits = "".join(map(str, rng.integers(0, 10, rng.integers(1, 25))))
        point = int(rng.integers(0, len(digits) + 1))
        sign = ["", "-", "+"][int(rng.integers(0, 3))]
        exponent = f"e{int(rng.integers(-330, 330))}" if rng.random() < 0.3 else ""
        texts.append(f"{sign}{digits[:point]}.{digits[point:]}{exponent}")
    texts += [repr(float(x)) for x in rng.normal(0, 1e4, 500)]
    texts += [f"{x:12.6f}".strip() for x in rng.uniform(-1e4, 1e4, 500)]
    texts += [repr(float(x)) for x in rng.uniform(-1, 1, 300) * 10.0 ** rng.integers(-320, 300, 300)]
    path = _numbers_file(tmp_path / "numbers.star", texts)
    if plain:
        monkeypatch.setattr(
            vitrio.data._star_text, "_parsed_rows", lambda *args: pytest.fail("read by pandas")
        )
    read_plain_rows(monkeypatch, plain)
    values = read_star(path)["particles"]["rlnDefocusU"]
    assert values.dtype == np.float64
    pd.testing.assert_series_equal(
        values, starfile.read(path)["rlnDefocusU"], check_exact=True, check_names=False
    )
    expected = [float(text) for text in texts]
    wrong = [(t, v, e) for t, v, e in zip(texts, values, expected) if _bits([v]) != _bits([e])]
    assert not wrong, wrong[:5]


@pytest.mark.parametrize("odd", ["long", "inf", "-inf", "Infinity", "-Infinity"])
def test_numbers_the_c_extension_leaves_to_pandas_read_as_strtod_reads_them(tmp_path: Path, odd: str):
    # longer than strtod is given, or infinities: the loop is read by pandas, each number still nearest
    texts = ["1.5", "nan", *(text for text in EDGES if len(text) >= 128)] if odd == "long" else ["1.5", odd]
    values = read_star(_numbers_file(tmp_path / "numbers.star", texts))["particles"]["rlnDefocusU"]
    assert _bits(values) == _bits([float(text) for text in texts])


def test_an_integer_written_minus_zero_is_minus_zero_where_its_column_holds_other_numbers(tmp_path: Path):
    # read a part at a time: "-0" among the integers of the first part, "1.5" in a later one
    texts = ["-0", *map(str, range(1, 400)), "1.5", "-0"]
    path = _numbers_file(tmp_path / "numbers.star", texts)
    with vitrio.configure(star_part_bytes=1024):
        values = read_star(path)["particles"]["rlnDefocusU"]
    assert _bits(values) == _bits([float(text) for text in texts])
    integers = read_star(_numbers_file(tmp_path / "integers.star", ["-0", "2"]))["particles"]["rlnDefocusU"]
    assert integers.dtype == np.int64 and integers.tolist() == [0, 2]


def test_rows_more_than_the_first_part_foretold_are_read_whole(tmp_path: Path, monkeypatch):
    # long rows first, then short ones: the columns' room, foretold by the first part, runs out, and the
    # part is read on from the row that did not fit, integers becoming numbers on the way
    names = [f"{i:06d}@Extract/job007/Movies/{'m' * 200}.mrcs" for i in range(1, 41)]
    names += [f"{i}@a.mrcs" for i in range(41, 3001)]
    numbers = [str(i) for i in range(2960)] + [f"{i}.5" for i in range(40)]
    particles = pd.DataFrame({"rlnImageName": names, "rlnDefocusU": numbers})
    path = tmp_path / "run_data.star"
    starfile.write({"particles": particles}, path)
    starts = []
    read = vitrio._native.star_read
    monkeypatch.setattr(
        vitrio._native,
        "star_read",
        lambda text, start, *rest: starts.append(start) or read(text, start, *rest),
    )
    with vitrio.configure(star_part_bytes=8192):
        ours = read_star(path)["particles"]
    assert any(starts)  # a part read on from a row inside it
    read_plain_rows(monkeypatch, False)
    pd.testing.assert_frame_equal(ours, read_star(path)["particles"], check_exact=True)
    assert ours["rlnDefocusU"].dtype == np.float64


@pytest.mark.parametrize("plain", [True, False], ids=["plain rows read natively", "all rows by pandas"])
@pytest.mark.parametrize(
    "columns",
    [
        ["rlnDefocusU"],
        ["rlnImageName", "rlnVoltage"],
        ["rlnClassNumber", "rlnDefocusU", "rlnOpticsGroupName"],
        ["rlnOpticsGroup", "rlnImageName"],
    ],
)
def test_particles_read_for_some_columns_are_those_columns_of_the_whole_table(
    tmp_path: Path, plain: bool, columns: list[str], monkeypatch
):
    """The columns not asked for are passed over (their values never converted): what is asked equals
    the whole table's columns, in its order, the optics groups' among them, over parts and halves."""
    rng = np.random.default_rng(5)
    count = 3000
    particles = pd.DataFrame(
        {
            "rlnImageName": [f"{i:06d}@Extract/job007/Movies/m{i // 7}.mrcs" for i in range(1, count + 1)],
            "rlnMicrographName": [f"Movies/m{i // 7}.mrc" for i in range(count)],
            "rlnDefocusU": rng.uniform(5000, 30000, count),
            "rlnAngleRot": rng.uniform(-180, 180, count),
            "rlnOpticsGroup": rng.integers(1, 3, count),
            "rlnClassNumber": rng.integers(1, 50, count),
        }
    )
    path = tmp_path / "run_data.star"
    starfile.write({"optics": OPTICS, "particles": particles}, path)
    read_plain_rows(monkeypatch, plain)
    whole = vitrio.data.read_particles(path)
    with vitrio.configure(star_part_bytes=64 << 10):  # parts, each read in two halves
        ours = vitrio.data.read_particles(path, columns=columns)
    pd.testing.assert_frame_equal(ours, whole[[c for c in whole.columns if c in columns]], check_exact=True)
    with pytest.raises(ValueError, match=rf"{path}: no column rlnNothing among the particles'"):
        vitrio.data.read_particles(path, columns=["rlnDefocusU", "rlnNothing"])


def test_a_skipped_column_is_passed_over_but_must_be_plain_as_any(tmp_path: Path):
    text = b"1 a 2.5\n3 bb -4\n"
    read = vitrio._native.star_read
    outs = (np.zeros(2, np.int64), b"", np.zeros(2, np.int64))
    end, rows, lines, kinds, block, texts = read(text, 0, b"?s?", outs)
    assert (end, rows, kinds, texts) == (len(text), 2, b"isf", [])
    assert outs[0].tolist() == [1, 3] and outs[2].view(np.float64).tolist() == [2.5, -4.0]
    assert read(b'1 "a b" 2\n', 0, b"?s?", outs) is None  # a quote: the general parser's
    with pytest.raises(ValueError, match="b's'"):
        read(text, 0, b"?x?", outs)
