"""read_particles, read_cs, particle_locations, read_stack_list and stack_locations, on files shaped as
RELION 3.0, 3.1 and 5, cryoSPARC and cryoDRGN write them, with mrcfile writing the stacks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import mrcfile
import numpy as np
import pandas as pd
import pytest
import starfile
from hypothesis import given, settings
from hypothesis import strategies as st

import vitrio as vio
import vitrio.data._paths
from vitrio.data import (
    PathResolver,
    as_columns,
    particle_locations,
    read_cs,
    read_particles,
    read_stack_list,
    stack_locations,
)

RELION_30 = """
# RELION; version 3.0

data_

loop_
_rlnImageName #1
_rlnMicrographName #2
_rlnDefocusU #3
_rlnDetectorPixelSize #4
_rlnMagnification #5
000002@Extract/job007/Movies/a.mrcs Movies/a.mrc 10000.000000 5.000000 50000.000000
000001@Extract/job007/Movies/b.mrcs Movies/b.mrc 12000.000000 5.000000 50000.000000
"""

RELION_31 = """
# version 30001

data_optics

loop_
_rlnOpticsGroupName #1
_rlnOpticsGroup #2
_rlnVoltage #3
_rlnImagePixelSize #4
_rlnImageSize #5
opticsGroup1 1 300.000000 1.060000 16
opticsGroup2 2 200.000000 0.830000 16


# version 30001

data_particles

loop_
_rlnImageName #1
_rlnMicrographName #2
_rlnDefocusU #3
_rlnOpticsGroup #4
000002@Extract/job007/Movies/a.mrcs Movies/a.mrc 10000.000000 2
000001@Extract/job007/Movies/b.mrcs Movies/b.mrc 12000.000000 1
000003@Extract/job007/Movies/a.mrcs Movies/a.mrc 11000.000000 1
"""

# RELION 5 adds columns to both blocks (tomography's among them), and keeps the layout.
RELION_5 = (
    RELION_31.replace("# version 30001", "# version 50001")
    .replace(
        "_rlnImageSize #5\n",
        "_rlnImageSize #5\n_rlnImageDimensionality #6\n_rlnCtfDataAreCtfPremultiplied #7\n",
    )
    .replace(" 1.060000 16\n", " 1.060000 16 2 0\n")
    .replace(" 0.830000 16\n", " 0.830000 16 2 0\n")
)
RELION_5 = (
    RELION_5.replace("_rlnOpticsGroup #4\n", "_rlnOpticsGroup #4\n_rlnClassNumber #5\n_rlnGroupNumber #6\n")
    .replace(" 2\n000001", " 2 1 1\n000001")
    .replace(" 12000.000000 1\n", " 12000.000000 1 3 1\n")
)
RELION_5 = RELION_5.replace(" 11000.000000 1\n", " 11000.000000 1 2 2\n")


def _stacks(project: Path) -> dict[str, np.ndarray]:
    """Two stacks of 16 x 16 images under project/Extract/job007/Movies, written by mrcfile."""
    rng = np.random.default_rng(0)
    stacks = {}
    folder = project / "Extract" / "job007" / "Movies"
    folder.mkdir(parents=True)
    for name in ("a", "b"):
        data = rng.standard_normal((3, 16, 16)).astype(np.float32)
        with mrcfile.new(folder / f"{name}.mrcs") as mrc:
            mrc.set_data(data)
            mrc.set_image_stack()
            mrc.voxel_size = 1.06
        stacks[name] = data
    return stacks


def _read(locations: list[vio.ImageLocation]) -> np.ndarray:
    out = np.empty((len(locations), 16, 16), np.float32)
    vio.read_batch_async(vio.loader(), out, locations).get()
    return out


@pytest.mark.parametrize("version", ["3.0", "3.1", "5"])
def test_relion_particles_of_every_version_resolve_under_the_project(tmp_path: Path, version: str):
    stacks = _stacks(tmp_path)
    job = tmp_path / "Refine3D" / "job010"
    job.mkdir(parents=True)
    star = job / "run_data.star"
    star.write_text({"3.0": RELION_30, "3.1": RELION_31, "5": RELION_5}[version])
    table = read_particles(star)
    assert table["rlnDefocusU"].iloc[0] == 10000.0
    if version != "3.0":
        # each particle has its optics group's pixel size and voltage, group 2 first
        assert table["rlnImagePixelSize"].tolist() == [0.83, 1.06, 1.06]
        assert table["rlnVoltage"].tolist() == [200.0, 300.0, 300.0]
    if version == "5":
        assert table["rlnClassNumber"].tolist() == [1, 3, 2]
        assert table["rlnImageDimensionality"].tolist() == [2, 2, 2]
    # the paths are relative to the project, two folders above the STAR file: found without a root
    located = particle_locations(table, star)
    assert located[0] == vio.ImageLocation(str(tmp_path / "Extract/job007/Movies/a.mrcs"), 1)
    images = _read(located)
    np.testing.assert_array_equal(images[0], stacks["a"][1])
    np.testing.assert_array_equal(images[1], stacks["b"][0])
    # the same with the project named as root
    assert particle_locations(table, star, root=tmp_path) == located


def test_a_star_file_with_unknown_optics_groups_names_them(tmp_path: Path):
    star = tmp_path / "p.star"
    star.write_text(RELION_31.replace("12000.000000 1", "12000.000000 7"))
    with pytest.raises(ValueError, match=r"p.star: optics groups \[7\]"):
        read_particles(star)


@pytest.mark.parametrize("far", [False, True])
def test_each_particle_gets_the_columns_of_its_optics_group(tmp_path: Path, far: bool):
    # groups out of order, one named twice (its first row counts), numbers close together or far apart
    big = 10**12 if far else 9
    optics = pd.DataFrame(
        {
            "rlnOpticsGroupName": ["five", "two", "five again", "big"],
            "rlnOpticsGroup": [5, 2, 5, big],
            "rlnVoltage": [300.0, 200.0, 100.0, 120.0],
        }
    )
    groups = [big, 2, 5, 5, 2, big]
    particles = pd.DataFrame({"rlnImageName": [f"{i}@a.mrcs" for i in range(1, 7)], "rlnOpticsGroup": groups})
    star = tmp_path / "p.star"
    starfile.write({"optics": optics, "particles": particles}, star)
    table = read_particles(star)
    expected = {big: ("big", 120.0), 2: ("two", 200.0), 5: ("five", 300.0)}
    assert table["rlnOpticsGroupName"].tolist() == [expected[g][0] for g in groups]
    assert table["rlnVoltage"].tolist() == [expected[g][1] for g in groups]
    odd = -(10**13) if far else 0
    unknown = particles.assign(rlnOpticsGroup=[big, 2, 5, 7, 2, odd])
    starfile.write({"optics": optics, "particles": unknown}, star, overwrite=True)
    with pytest.raises(ValueError, match=rf"p.star: optics groups \[{odd}, 7\]"):
        read_particles(star)


def _cs_table(count: int) -> np.ndarray:
    """A table with the fields and types of a cryoSPARC particles .cs file."""
    dtype = [
        ("uid", "<u8"),
        ("blob/path", "S256"),
        ("blob/idx", "<u4"),
        ("blob/shape", "<u4", (2,)),
        ("blob/psize_A", "<f4"),
        ("blob/sign", "<f4"),
        ("blob/import_sig", "<u8"),
        ("ctf/type", "S1"),
        ("ctf/accel_kv", "<f4"),
        ("ctf/cs_mm", "<f4"),
        ("ctf/amp_contrast", "<f4"),
        ("ctf/df1_A", "<f4"),
        ("ctf/df2_A", "<f4"),
        ("ctf/df_angle_rad", "<f4"),
        ("alignments3D/pose", "<f4", (3,)),
    ]
    table = np.zeros(count, dtype=dtype)
    table["uid"] = np.arange(count, dtype=np.uint64) + 2**63
    table["blob/shape"] = 16
    table["blob/psize_A"] = 1.06
    table["ctf/df1_A"] = np.linspace(9000, 15000, count)
    table["ctf/accel_kv"] = 300
    return table


def test_cryosparc_particles_with_project_paths_and_bytes(tmp_path: Path):
    stacks = _stacks(tmp_path)
    (tmp_path / "J12").mkdir()
    table = _cs_table(3)
    table["blob/path"] = [
        b">Extract/job007/Movies/b.mrcs",  # > : relative to the project directory
        b"Extract/job007/Movies/a.mrcs",
        str(tmp_path / "Extract/job007/Movies/a.mrcs").encode(),  # absolute
    ]
    table["blob/idx"] = [2, 0, 1]
    cs = tmp_path / "J12" / "J12_particles.cs"
    with open(cs, "wb") as file:  # cryoSPARC saves with np.save to an open file, as .cs
        np.save(file, table)
    particles = read_cs(cs)
    pd.testing.assert_frame_equal(read_particles(cs), particles)
    assert particles["blob/path"][0] == ">Extract/job007/Movies/b.mrcs"
    assert particles["uid"].dtype == np.uint64 and particles["uid"][0] == 2**63
    assert particles["blob/psize_A"].tolist() == pytest.approx([1.06] * 3)
    assert as_columns(particles)["blob/shape"].tolist() == [[16, 16]] * 3
    assert particles["ctf/df1_A"].tolist() == pytest.approx([9000, 12000, 15000])
    located = particle_locations(particles, cs)
    images = _read(located)
    np.testing.assert_array_equal(images, np.stack([stacks["b"][2], stacks["a"][0], stacks["a"][1]]))
    # the structured array itself works as a table too
    assert particle_locations(table, cs) == located


def test_a_cs_file_that_is_not_a_table_or_holds_objects_is_refused(tmp_path: Path):
    plain = tmp_path / "plain.npy"
    np.save(plain, np.zeros((3, 4)))
    plain = plain.rename(tmp_path / "plain.cs")
    with pytest.raises(ValueError, match="plain.cs: not a cryoSPARC .cs file"):
        read_cs(plain)
    objects = tmp_path / "objects.npy"
    np.save(objects, np.array([(1, "x")], dtype=[("uid", "u8"), ("blob/path", "O")]), allow_pickle=True)
    objects = objects.rename(tmp_path / "objects.cs")
    with pytest.raises(ValueError, match="objects.cs: not a cryoSPARC .cs file"):
        read_cs(objects)
    truncated = tmp_path / "truncated.cs"
    with open(truncated, "wb") as file:
        np.save(file, _cs_table(1000))
    truncated.write_bytes(truncated.read_bytes()[:2000])
    with pytest.raises(ValueError, match="truncated.cs"):
        read_cs(truncated)
    with pytest.raises(FileNotFoundError, match="missing.cs: no such file"):
        read_cs(tmp_path / "missing.cs")


def test_a_data_directory_takes_the_path_as_written_then_the_bare_name(tmp_path: Path):
    stacks = _stacks(tmp_path / "project")
    star = tmp_path / "elsewhere" / "particles.star"
    star.parent.mkdir()
    starfile.write({"particles": pd.DataFrame({"rlnImageName": ["000003@Movies/a.mrcs"]})}, star)
    # as written under the root
    located = particle_locations(read_particles(star), star, root=tmp_path / "project/Extract/job007")
    np.testing.assert_array_equal(_read(located)[0], stacks["a"][2])
    # by its bare name under the root, as cryoDRGN's --datadir
    flat = tmp_path / "project/Extract/job007/Movies"
    assert particle_locations(read_particles(star), star, root=flat)[0].key == str(flat / "a.mrcs")


def test_a_missing_file_names_every_path_tried(tmp_path: Path):
    star = tmp_path / "Class2D" / "job003" / "particles.star"
    star.parent.mkdir(parents=True)
    starfile.write({"particles": pd.DataFrame({"rlnImageName": ["000001@Extract/x.mrcs"]})}, star)
    table = read_particles(star)
    with pytest.raises(FileNotFoundError) as raised:
        particle_locations(table, star)
    message = str(raised.value)
    assert str(star) in message and "(root= in Python, --root in a command)" in message
    for folder in (star.parent, star.parent.parent, tmp_path):
        assert str(folder / "Extract/x.mrcs") in message
    with pytest.raises(
        FileNotFoundError, match=rf"{tmp_path / 'data/Extract/x.mrcs'} nor {tmp_path}/data/x.mrcs"
    ):
        particle_locations(table, star, root=tmp_path / "data")
    assert PathResolver(star, tmp_path).candidates(b">/abs/x.mrcs") == [
        "/abs/x.mrcs",
        str(tmp_path / "x.mrcs"),
    ]


_PARTS = st.sampled_from(["a", "b", "Extract", ".", "..", "", "job007", "x.mrcs", ">y"])


@settings(max_examples=300)
@given(st.lists(_PARTS, min_size=1, max_size=6), st.booleans(), st.sampled_from(["", ">"]))
def test_a_written_path_may_mean_itself_under_each_folder_normalised(parts, absolute, spelled):
    """However a path is written (dots, empty parts, `..` above the folders), the candidates are the path
    under each folder of the metadata file, normalised, each once; an absolute path as it is."""
    star = "/project/Class2D/job003/particles.star"
    written = spelled + ("/" if absolute else "") + "/".join(parts)
    path = written.removeprefix(">")
    folders = ["/project/Class2D/job003", "/project/Class2D", "/project"]
    tried = [path] if os.path.isabs(path) else [os.path.join(f, path) for f in folders]
    expected = list(dict.fromkeys(os.path.normpath(p) for p in tried))
    resolver = PathResolver(star)
    assert resolver.candidates(written) == expected
    assert resolver.candidates(written.encode()) == expected  # once more, its folders known


_TREE = st.lists(
    st.tuples(
        st.sampled_from(["", "Extract", "Extract/job007", "job010/Extract", "Refine3D/job010/Extract"]),
        st.sampled_from(["a.mrcs", "b.mrcs", "c.mrcs", "A.mrcs"]),
        st.sampled_from(["file", "file", "folder", "link", "broken link"]),
    ),
    max_size=10,
)


@settings(max_examples=100)
@given(
    tree=_TREE,
    written=st.lists(
        st.tuples(
            st.sampled_from(["Extract", "Extract/job007", "job007", "/abs", ".."]), st.sampled_from("abcA")
        ),
        min_size=1,
        max_size=12,
    ),
)
def test_many_paths_resolve_as_each_alone(tmp_path_factory, tree, written):
    """`resolve_all`, which reads a folder many paths may be in once, finds what resolving each path
    alone finds, or raises what the first that fails raises: files, folders and links (some broken) at
    the paths, missing folders, and names spelled in another case."""
    root = tmp_path_factory.mktemp("project")
    (root / "target").write_bytes(b"")
    for folder, name, kind in tree:
        path = root / "Refine3D" / "job010" / ".." / ".." / folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() or path.is_symlink():
            continue
        if kind == "file":
            path.write_bytes(b"")
        elif kind == "folder":
            path.mkdir()
        else:
            path.symlink_to(root / "target" if kind == "link" else root / "nowhere")
    star = root / "Refine3D" / "job010" / "run_data.star"
    star.parent.mkdir(parents=True, exist_ok=True)
    paths = [f"{folder}/{letter}.mrcs" for folder, letter in written]

    def outcome(resolve):
        try:
            return resolve(PathResolver(star))
        except FileNotFoundError as error:
            return str(error)

    alone = outcome(lambda resolver: [resolver(path) for path in paths])
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(vitrio.data._paths, "_LISTED_FROM", 1)  # every folder read
        assert outcome(lambda resolver: resolver.resolve_all(paths)) == alone


def test_the_stacks_of_a_job_two_folders_down_are_found_as_the_project_holds_them(tmp_path: Path):
    """Locations of a table written in Refine3D/job010 of a project: its 80 stacks (enough for their
    folder to be read once) are found under the project, and a stack missing is named."""
    movies = tmp_path / "Extract" / "job007" / "Movies"
    movies.mkdir(parents=True)
    names = [f"Extract/job007/Movies/m{i:02d}.mrcs" for i in range(80)]
    for name in names:
        (tmp_path / name).write_bytes(b"")
    star = tmp_path / "Refine3D" / "job010" / "run_data.star"
    star.parent.mkdir(parents=True)
    table = pd.DataFrame({"rlnImageName": [f"{i % 3 + 1}@{name}" for i, name in enumerate(names)]})
    locations = particle_locations(table, star)
    assert locations.keys == [str(tmp_path / name) for name in names]
    (tmp_path / names[41]).unlink()
    missing = f"{names[41]}' is not at .* nor {tmp_path / names[41]}; name"
    with pytest.raises(FileNotFoundError, match=missing):
        particle_locations(table, star)


def test_a_stack_list_and_every_image_of_its_stacks(tmp_path: Path):
    stacks = _stacks(tmp_path)
    single = tmp_path / "single.mrc"
    with mrcfile.new(single) as mrc:
        mrc.set_data(np.ones((16, 16), np.float32))
    listing = tmp_path / "Extract" / "stacks.txt"
    listing.write_text("# made by hand\njob007/Movies/a.mrcs\n\n  job007/Movies/b.mrcs  \n" + f"{single}\n")
    paths = read_stack_list(listing)
    assert paths == [
        str(tmp_path / "Extract/job007/Movies/a.mrcs"),
        str(tmp_path / "Extract/job007/Movies/b.mrcs"),
        str(single),
    ]
    locations = stack_locations(paths)
    assert len(locations) == 7 and locations[6] == vio.ImageLocation(str(single))
    np.testing.assert_array_equal(_read(locations[:6]), np.concatenate([stacks["a"], stacks["b"]]))
    empty = tmp_path / "empty.txt"
    empty.write_text("\n# nothing\n")
    with pytest.raises(ValueError, match="empty.txt: names no stack"):
        read_stack_list(empty)
    listing.write_text("job007/Movies/c.mrcs\n")
    with pytest.raises(FileNotFoundError, match="stacks.txt: 'job007/Movies/c.mrcs' is not at"):
        read_stack_list(listing)


def test_a_relion_location_given_as_a_key_points_to_the_parsers(tmp_path: Path, monkeypatch):
    _stacks(tmp_path)
    monkeypatch.chdir(tmp_path)
    text = "000002@Extract/job007/Movies/a.mrcs"
    with pytest.raises(ValueError, match=r"ImageLocation.from_string\(text\), or parse_locations"):
        vio.read(text)
    with pytest.raises(ValueError, match="a key is a file's path"):
        vio.query_descriptor(text)
    assert vio.read(vio.ImageLocation.from_string(text)).shape == (16, 16)
    # a file that is named so is read as it is
    vio.write_single(np.ones((4, 4), np.float32), tmp_path / "1@odd.mrc")
    assert vio.read("1@odd.mrc").sum() == 16


@pytest.mark.parametrize(
    "blocked, call, needed_by",
    [
        ("pandas", "read_particles('run_data.star')", "read_star"),
        ("pandas", "read_particles('J12_particles.cs')", "read_cs"),
        ("starfile", "write_star({}, 'out.star')", "write_star"),
        ("pandas", "particle_optics('micrographs.star', {}, None, 64, 1.0)", "particle_optics"),
    ],
)
def test_a_table_module_that_is_missing_names_the_extra(
    tmp_path: Path, blocked: str, call: str, needed_by: str
):
    (tmp_path / "run_data.star").write_text(RELION_31)
    np.save(tmp_path / "J12_particles.npy", _cs_table(2))
    (tmp_path / "J12_particles.npy").rename(tmp_path / "J12_particles.cs")
    script = (
        f"import sys; sys.modules[{blocked!r}] = None\n"
        "from vitrio.data import particle_optics, read_particles, write_star\n"
        "try:\n"
        f"    {call}\n"
        "except ModuleNotFoundError as error:\n"
        "    print(error)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert result.stdout.strip() == f"{needed_by} needs {blocked}: pip install 'vitrio[star]'", result.stderr
    assert not (tmp_path / "out.star").exists()


def test_a_star_file_without_particles_names_its_blocks(tmp_path: Path):
    # a postprocess.star, and a RELION 3.0 file of micrographs: no block has rlnImageName
    postprocess = tmp_path / "postprocess.star"
    general = {"rlnFinalResolution": 3.2}
    starfile.write({"general": general, "fsc": pd.DataFrame({"rlnResolution": [0.1, 0.2]})}, postprocess)
    with pytest.raises(ValueError, match=r"postprocess.star: holds no particles.*data_general, data_fsc"):
        read_particles(postprocess)
    micrographs = tmp_path / "micrographs.star"
    micrographs.write_text("data_\n\nloop_\n_rlnMicrographName #1\nMovies/a.mrc\nMovies/b.mrc\n")
    with pytest.raises(ValueError, match=r"micrographs.star: holds no particles.*\(it has data_\)"):
        read_particles(micrographs)
    # a data_particles block without image names is passed over for the block that has them
    both = tmp_path / "both.star"
    names = pd.DataFrame({"rlnImageName": ["000001@a.mrcs"]})
    starfile.write({"particles": pd.DataFrame({"rlnCoordinateX": [1.0]}), "found": names}, both)
    assert read_particles(both)["rlnImageName"].tolist() == ["000001@a.mrcs"]


def test_image_names_of_every_spelling_locate_as_parsed_one_by_one(tmp_path: Path):
    _stacks(tmp_path)
    star = tmp_path / "particles.star"
    a, b = (str(tmp_path / f"Extract/job007/Movies/{n}.mrcs") for n in "ab")
    names = ["000003@Extract/job007/Movies/a.mrcs", " 12@Extract/job007/Movies/b.mrcs ", "1@" + a]
    expected = [vio.ImageLocation(a, 2), vio.ImageLocation(b, 11), vio.ImageLocation(a, 0)]
    # text columns of pandas (pyarrow's, or Python objects), numpy's text and bytes
    for column in (
        pd.Series(names),
        pd.Series(names, dtype=object),
        np.array(names),
        np.array(names, dtype=bytes),
    ):
        assert particle_locations({"rlnImageName": column}, star) == expected
    # a name without an index is a whole file; a name that is not a location is refused as from_string does
    located = particle_locations({"rlnImageName": ["Extract/job007/Movies/a.mrcs", names[0]]}, star)
    assert located == [vio.ImageLocation(a), expected[0]]
    for wrong in ("0@Extract/job007/Movies/a.mrcs", "", "x@y@z"):
        with pytest.raises(ValueError, match="not an image location"):
            particle_locations({"rlnImageName": [names[0], wrong]}, star)


def test_the_names_of_many_particles_share_their_few_paths(tmp_path: Path):
    _stacks(tmp_path)
    star = tmp_path / "particles.star"
    count = 30_000
    names = pd.Series([f"{i % 3 + 1:06d}@Extract/job007/Movies/{'ab'[i % 2]}.mrcs" for i in range(count)])
    located = particle_locations(pd.DataFrame({"rlnImageName": names}), star)
    assert [location.index_in_stack for location in located[:4]] == [0, 1, 2, 0]
    # each distinct path is one string, shared by its locations
    assert len({id(location.key) for location in located}) == 2


def test_cs_paths_that_are_not_utf8_are_decoded_as_file_names(tmp_path: Path):
    table = _cs_table(2)
    table["blob/path"] = [b"J1/a.mrcs", b"J1/\xff.mrcs"]
    cs = tmp_path / "odd.cs"
    with open(cs, "wb") as file:
        np.save(file, table)
    assert read_cs(cs)["blob/path"].tolist() == ["J1/a.mrcs", os.fsdecode(b"J1/\xff.mrcs")]
    table["blob/path"] = [b"J1/a.mrcs", b"J1/b.mrcs"]
    with open(cs, "wb") as file:
        np.save(file, table)
    assert read_cs(cs)["blob/path"].tolist() == ["J1/a.mrcs", "J1/b.mrcs"]
