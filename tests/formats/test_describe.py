"""What a file holds, from its header alone (`describe_file`, which checking many files' shapes uses),
against what the reader `open_reader` makes says: equal descriptors, or the same error, and the same
warnings, for MRC headers of every kind, broken ones among them, and files of the other formats."""

from __future__ import annotations

import os
import warnings

import mrcfile
import numpy as np
import pytest
import tifffile
from hypothesis import given, settings
from hypothesis import strategies as st

import vitrio as vio
from vitrio.formats import _contract
from vitrio.formats._registry import describe_file, describe_files, open_reader


def _outcome(call, key):
    """What `call(key)` gives, its warnings and what it raises, each warning counted afresh."""
    _contract._warned.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = call(key)
        except Exception as error:  # noqa: BLE001 - the error is what is compared
            result = (type(error), str(error))
    return result, [str(w.message) for w in caught]


def _opened(key):
    with open_reader(key) as reader:
        return reader.descriptor


def assert_described_as_opened(key):
    described, opened = _outcome(describe_file, key), _outcome(_opened, key)
    assert described == opened, key
    return described[0]


def _mrc(path, data, **fields) -> bytes:
    with mrcfile.new(str(path), overwrite=True) as mrc:
        mrc.set_data(data)
        for name, value in fields.items():
            mrc.header[name] = value
    return path.read_bytes()


HEADER_FIELDS = {
    # (offset, struct code) of the MRC2014 header fields a reader looks at
    "nx": (0, "<i4"), "ny": (4, "<i4"), "nz": (8, "<i4"), "mode": (12, "<i4"),
    "mx": (28, "<i4"), "my": (32, "<i4"), "mz": (36, "<i4"), "cella_x": (40, "<f4"),
    "mapc": (64, "<i4"), "mapr": (68, "<i4"), "maps": (72, "<i4"), "ispg": (88, "<i4"),
    "nsymbt": (92, "<i4"), "map": (208, "S4"), "machst": (212, "u1"),
}  # fmt: skip


@settings(max_examples=150)
@given(
    shape=st.sampled_from([(6, 5), (3, 6, 5), (4, 3, 2)]),
    changes=st.lists(
        st.tuples(
            st.sampled_from(sorted(HEADER_FIELDS)),
            st.sampled_from([-1, 0, 1, 2, 3, 4, 6, 12, 101, 401, 7, 1 << 20, 0x11, 0x44, 1024]),
        ),
        max_size=3,
    ),
    cut=st.sampled_from([0, 0, 1, 100, 1000]),
    extension=st.sampled_from([".mrc", ".mrcs", ".map", ".st"]),
)
def test_an_mrc_header_changed_anyhow_is_described_as_its_reader_says(
    tmp_path_factory, shape, changes, cut, extension
):
    folder = tmp_path_factory.mktemp("mrc")
    data = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    raw = bytearray(_mrc(folder / "made.mrc", data))
    for name, value in changes:
        offset, code = HEADER_FIELDS[name]
        if code == "S4":
            raw[offset : offset + 4] = b"MAP " if value % 2 else b"PAM\0"
        else:
            encoded = np.array(value).astype(code).tobytes()
            raw[offset : offset + len(encoded)] = encoded
    path = folder / f"changed{extension}"
    path.write_bytes(bytes(raw[: len(raw) - cut]))
    assert_described_as_opened(str(path))


CHANGES = st.lists(
    st.tuples(
        st.sampled_from(sorted(HEADER_FIELDS)),
        st.sampled_from([-1, 0, 1, 2, 3, 4, 6, 12, 101, 401, 7, 1 << 20, 0x11, 0x44, 1024]),
    ),
    max_size=3,
)


@settings(max_examples=60)
@given(
    kinds=st.lists(st.tuples(CHANGES, st.sampled_from([".mrc", ".mrcs"])), min_size=1, max_size=3),
    order=st.lists(st.tuples(st.integers(0, 2), st.floats(-10, 10, width=32)), min_size=1, max_size=8),
)
def test_many_files_are_described_each_as_alone(tmp_path_factory, kinds, order):
    """`describe_files`, which describes files alike once, gives of each file what `describe_file`
    does, in order: the same descriptors, warnings naming each file, and the first error."""
    folder = tmp_path_factory.mktemp("many")
    keys = []
    for number, (kind, mean) in enumerate(order):
        changes, extension = kinds[kind % len(kinds)]
        raw = bytearray(_mrc(folder / "made.mrc", np.zeros((3, 6, 5), np.float32), dmean=mean, rms=abs(mean)))
        for name, value in changes:
            offset, code = HEADER_FIELDS[name]
            encoded = (
                (b"MAP " if value % 2 else b"PAM\0")
                if code == "S4"
                else np.array(value).astype(code).tobytes()
            )
            raw[offset : offset + len(encoded)] = encoded
        keys.append(str(folder / f"{number}{extension}"))
        (folder / f"{number}{extension}").write_bytes(bytes(raw))
    assert _outcome(lambda keys: list(describe_files(keys)), keys) == _outcome(
        lambda keys: [describe_file(key) for key in keys], keys
    )


def test_files_alike_are_described_once(tmp_path, monkeypatch):
    paths = []
    for number in range(5):
        paths.append(tmp_path / f"stack{number}.mrcs")
        _mrc(paths[-1], np.full((4, 6, 5), number, np.float32))  # statistics of their own
    _mrc(tmp_path / "other.mrcs", np.zeros((3, 6, 5), np.float32))
    described = []
    original = vio.formats.mrc.MrcFormat.describe.__func__
    monkeypatch.setattr(
        vio.formats.mrc.MrcFormat,
        "describe",
        classmethod(lambda cls, key, *rest: described.append(key) or original(cls, key, *rest)),
    )
    keys = [str(path) for path in (*paths, tmp_path / "other.mrcs", paths[0])]
    descriptors = list(describe_files(keys))
    assert descriptors == [vio.ImageDescriptor((4, 6, 5), 2, "float32")] * 5 + [
        vio.ImageDescriptor((3, 6, 5), 2, "float32"),
        vio.ImageDescriptor((4, 6, 5), 2, "float32"),
    ]
    assert described == [keys[0], keys[5]]
    (tmp_path / "folder.mrcs").mkdir()
    os.mkfifo(tmp_path / "fifo.mrcs")  # refused, never waited on
    odd_ones = [("missing.mrcs", vio.ImageFileNotFoundError), ("folder.mrcs", IsADirectoryError)]
    for odd, error in [*odd_ones, ("fifo.mrcs", OSError)]:
        files = describe_files([keys[0], str(tmp_path / odd), keys[1]])
        assert next(files) == descriptors[0]
        with pytest.raises(error, match=odd):
            next(files)


def test_files_of_a_format_that_tells_none_alike_are_read_once_each(tmp_path, monkeypatch):
    """A TIFF's head read first says nothing of other TIFFs: after the first, TIFFs are opened once each,
    by the way `describe_file` goes, while each MRC stack's head is read for the description it shares."""
    from vitrio.formats import _registry

    keys = []
    for number in range(4):
        keys.append(str(tmp_path / f"{number}.tif"))
        tifffile.imwrite(keys[-1], np.zeros((2, 4, 5), np.uint16), photometric="minisblack")
        keys.append(str(tmp_path / f"{number}.mrcs"))
        _mrc(tmp_path / f"{number}.mrcs", np.full((3, 6, 5), number, np.float32))
    heads = []
    read_head = _registry.read_head
    monkeypatch.setattr(
        _registry, "read_head", lambda path, size: heads.append(path) or read_head(path, size)
    )
    assert list(describe_files(keys)) == [describe_file(key) for key in keys]
    assert heads == [keys[0], *(key for key in keys if key.endswith(".mrcs"))]


@pytest.mark.parametrize(
    "shape, fields, expected",
    [
        ((6, 5), {}, vio.ImageDescriptor((6, 5), 2, "float32")),
        ((3, 6, 5), {"ispg": 0}, vio.ImageDescriptor((3, 6, 5), 2, "float32")),
        ((4, 6, 5), {"ispg": 401, "mz": 2}, vio.ImageDescriptor((2, 2, 6, 5), 3, "float32")),
        ((4, 6, 5), {"mapc": 3, "mapr": 2, "maps": 1}, vio.ImageDescriptor((5, 6, 4), 3, "float32")),
        ((6, 5), {"nsymbt": 80}, vio.ImageDescriptor((6, 5), 2, "float32")),  # no extended header there
    ],
)
def test_mrc_layouts_are_described_as_their_readers_say(tmp_path, shape, fields, expected):
    path = tmp_path / "layout.mrc"
    _mrc(path, np.zeros(shape, np.float32), **fields)
    assert assert_described_as_opened(str(path)) == expected


def test_a_truncated_mrc_file_is_refused_by_its_description(tmp_path):
    path = tmp_path / "cut.mrcs"
    raw = _mrc(path, np.zeros((3, 6, 5), np.float32))
    path.write_bytes(raw[:-4])
    error, _ = _outcome(describe_file, str(path))
    assert error[0] is vio.FormatError and "truncated" in error[1] and str(path) in error[1]
    assert_described_as_opened(str(path))


def test_files_of_the_other_formats_are_described_as_their_readers_say(tmp_path):
    tiff = tmp_path / "stack.tif"
    tifffile.imwrite(tiff, np.zeros((3, 4, 5), np.uint16), photometric="minisblack")
    assert assert_described_as_opened(str(tiff)) == vio.ImageDescriptor((3, 4, 5), 2, "uint16")
    missing = tmp_path / "missing.mrc"
    error = assert_described_as_opened(str(missing))
    assert error[0] is vio.ImageFileNotFoundError


def test_checking_many_stacks_makes_no_reader_of_an_mrc_file(tmp_path, monkeypatch):
    """An ImageSource asks each stack for its shape without mapping it: no RawArrayReader is made."""
    paths = []
    for number in range(3):
        paths.append(tmp_path / f"stack{number}.mrcs")
        _mrc(paths[-1], np.full((4, 6, 5), number, np.float32))
    made = []
    monkeypatch.setattr(vio.formats.mrc.RawArrayReader, "__init__", lambda self, *a, **k: made.append(a))
    source = vio.data.ImageSource([vio.ImageLocation(path, 3) for path in paths])
    assert source.shape == (6, 5) and made == []
    with pytest.raises(IndexError, match="past the end of a stack of 4"):
        vio.data.ImageSource([vio.ImageLocation(paths[1], 4)])
