"""The DM3/DM4 reader: real files against rosettasciio's reading of them, files made by
`vitrio.testing.dm`, bad files."""

from __future__ import annotations

import json
import os
import random
import tarfile
from pathlib import Path

import numpy as np
import pytest

import vitrio as vio
from vitrio._types import NumericalType, numpy_dtype
from vitrio.formats import FormatError, dm, open_reader, registered_formats
from vitrio.formats.dm import DigitalMicrographFormat, DigitalMicrographReader
from vitrio.testing.dm import DATA_TYPES, dm_file, image_entry, spectrum_entry, thumbnail

from .. import DM_SAMPLES as ARCHIVE
from .. import need_dm_samples

pytestmark = pytest.mark.timeout(120)

DM = [DigitalMicrographFormat]
CLEAN_ERRORS = (ValueError, OSError, IndexError)


def _sample_names() -> list[str]:
    if not ARCHIVE.is_file():
        return []
    with tarfile.open(ARCHIVE) as tar:
        return sorted(Path(n).name for n in tar.getnames() if n.endswith((".dm3", ".dm4")))


SAMPLES = _sample_names()
each_sample = pytest.mark.parametrize("name", SAMPLES or ["absent"])  # "absent": the samples fixture says so


@pytest.fixture(scope="session")
def samples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder the sample archive is extracted into."""
    need_dm_samples()
    folder = tmp_path_factory.mktemp("dm-samples")
    with tarfile.open(ARCHIVE) as tar:
        tar.extractall(folder, filter="data")
    return folder


def _read_all(reader: DigitalMicrographReader, dtype: np.dtype) -> np.ndarray:
    """Every image of the reader, as a stack if the file is one."""
    out = np.empty((reader.image_count, *reader.core_extents), dtype=dtype)
    reader.read_run(0, list(out))
    return out if reader.descriptor.is_stack else out[0]


# ---------------------------------------------------------------- real files


@each_sample
def test_reads_like_the_oracle(samples: Path, name: str):
    oracle = np.load(samples / f"{name}.npy")
    with open_reader(samples / name, formats=DM) as reader:
        assert isinstance(reader, DigitalMicrographReader)
        descriptor = reader.descriptor
        assert descriptor.core_rank == 2
        assert descriptor.extents == oracle.shape
        assert numpy_dtype(descriptor.data_type) == oracle.dtype
        image = _read_all(reader, oracle.dtype)
    np.testing.assert_array_equal(image, oracle, strict=True)


@each_sample
def test_reads_converted(samples: Path, name: str):
    oracle = np.load(samples / f"{name}.npy")
    wide = np.complex128 if oracle.dtype.kind == "c" else np.float64
    with open_reader(samples / name, formats=DM) as reader:
        image = _read_all(reader, np.dtype(wide))
    np.testing.assert_array_equal(image, oracle.astype(wide), strict=True)


@each_sample
def test_reads_a_region(samples: Path, name: str):
    oracle = np.load(samples / f"{name}.npy")
    with open_reader(samples / name, formats=DM) as reader:
        last = reader.image_count - 1
        core = oracle[last] if reader.descriptor.is_stack else oracle
        height, width = reader.core_extents
        region = (slice(height // 2, height), slice(0, max(1, width // 2)))
        out = np.empty(core[region].shape, dtype=oracle.dtype)
        reader.read_region(last, region, out)
    np.testing.assert_array_equal(out, core[region], strict=True)


def test_manifest_agrees(samples: Path):
    manifest = json.loads((samples / "manifest.json").read_text())["files"]
    assert sorted(manifest) == SAMPLES
    for name, entry in manifest.items():
        with open_reader(samples / name, formats=DM) as reader:
            assert reader.descriptor.extents == tuple(entry["shape"]), name
            assert numpy_dtype(reader.descriptor.data_type) == np.dtype(entry["dtype"]), name


def test_registered_and_chosen_by_contents(samples: Path):
    assert DigitalMicrographFormat in registered_formats()
    for name in ("2D-float32.dm3", "3D-uint16.dm4"):
        with open_reader(samples / name) as reader:
            assert isinstance(reader, DigitalMicrographReader)


def test_first_image_of_two_is_read(samples: Path):
    with open_reader(samples / "two-images-uint16.dm3", formats=DM) as reader:
        assert reader.image_path == "ImageList/1"
        assert reader.descriptor.extents == (512, 512)
        assert reader.pixel_units == ("nm", "nm")
        assert reader.pixel_size == pytest.approx((0.0177515782, 0.0177515782))


def test_calibration_of_a_stack(samples: Path):
    with open_reader(samples / "stack-uint32.dm3", formats=DM) as reader:
        assert reader.descriptor.extents == (3, 2, 16)
        assert reader.image_count == 3
        assert reader.pixel_units == ("", "µm", "µm")
        assert reader.pixel_size == pytest.approx((1.0, 0.0599829033, 0.0599829033))


def test_bool_image_reads_as_bool(samples: Path):
    with open_reader(samples / "2D-bool.dm4", formats=DM) as reader:
        assert reader.descriptor.data_type is NumericalType.boolean
        assert reader.file_dtype == np.uint8


def test_parse_reads_little_and_skips_the_data(samples: Path, monkeypatch: pytest.MonkeyPatch):
    path = samples / "two-images-uint16.dm3"
    counts: list[int] = []
    pread = os.pread

    def counting(fd: int, count: int, offset: int) -> bytes:
        counts.append(count)
        return pread(fd, count, offset)

    monkeypatch.setattr(os, "pread", counting)
    with open_reader(path, formats=DM):
        pass
    assert max(counts) <= 1 << 16
    assert sum(counts) < path.stat().st_size // 2


# ---------------------------------------------------------------- hand-made files


def _write(tmp_path: Path, name: str, content: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(content)
    return path


TYPES = [(dtype.type, *encoded) for dtype, encoded in DATA_TYPES.items() if dtype.kind != "b"]


@pytest.mark.parametrize("version", [3, 4])
@pytest.mark.parametrize("little", [True, False], ids=["little", "big"])
@pytest.mark.parametrize(("dtype", "data_type", "element"), TYPES, ids=[t[0].__name__ for t in TYPES])
def test_hand_made_in_either_byte_order(tmp_path: Path, version, little, dtype, data_type, element):
    values = (np.arange(3 * 4 * 5) - 7).reshape(3, 4, 5).astype(dtype)
    if values.dtype.kind == "c":
        values = values * (1 - 2j)
    content = dm_file(
        version, [thumbnail(little), image_entry(values, data_type, element, little)], [0], little
    )
    path = _write(tmp_path, f"image.dm{version}", content)
    with open_reader(path, formats=DM) as reader:
        assert reader.descriptor.extents == (3, 4, 5)
        assert reader.file_dtype == np.dtype(dtype).newbyteorder("<" if little else ">")
        np.testing.assert_array_equal(_read_all(reader, np.dtype(dtype)), values, strict=True)
        out = np.empty((2, 3), np.float64 if values.dtype.kind != "c" else np.complex128)
        reader.read_region(2, (slice(1, 3), slice(2, 5)), out)
        np.testing.assert_array_equal(out, values[2, 1:3, 2:5])


@pytest.mark.parametrize("version", [3, 4])
def test_hand_made_calibration_and_no_thumbnail(tmp_path: Path, version: int):
    values = np.arange(6, dtype=np.uint16).reshape(2, 3)
    entry = image_entry(values, 10, [4], units=["Å", "nm"])
    path = _write(tmp_path, "image.dm", dm_file(version, [entry]))
    with open_reader(path, formats=DM) as reader:
        assert reader.image_path == "ImageList/0"
        assert reader.pixel_size == (1.5, 0.5)
        assert reader.pixel_units == ("nm", "Å")
        np.testing.assert_array_equal(_read_all(reader, np.dtype(np.uint16)), values)


@pytest.mark.parametrize("version", [3, 4])
@pytest.mark.parametrize(
    ("shape", "signal", "units", "said"),
    [
        # EELS: 2 x 2 positions, 2,048 channels of energy loss
        ((2048, 2, 2), "EELS", ("nm", "nm", "eV"), "Signal 'EELS'"),
        # cathodoluminescence along a line: 67 positions, 1,336 wavelengths of 0.0934 nm
        ((1336, 67), "CL", ("µm", "nm"), "Signal 'CL'"),
    ],
)
def test_spectrum_images_are_refused_naming_what_they_hold(tmp_path, version, shape, signal, units, said):
    values = np.zeros(shape, np.float32)
    scales = (0.05, 0.0934) if signal == "CL" else (2.5, 2.5, 0.25)
    entry = spectrum_entry(values, signal, units, scales)
    path = _write(tmp_path, f"si.dm{version}", dm_file(version, [thumbnail(), entry], [0]))
    with pytest.raises(FormatError) as caught:
        open_reader(path, formats=DM)
    message = str(caught.value)
    assert str(path) in message and "ImageList/1 holds a spectrum image" in message and said in message
    assert " x ".join(map(str, reversed(shape))) in message and ", ".join(units) in message
    with pytest.raises(FormatError, match="spectrum image"):
        vio.query_metadata(path)


@pytest.mark.parametrize("version", [3, 4])
def test_a_spectrum_is_refused_as_one(tmp_path: Path, version: int):
    entry = spectrum_entry(np.zeros(2048, np.float32), "EELS", ["eV"], [0.25], fmt="Spectrum")
    path = _write(tmp_path, f"spectrum.dm{version}", dm_file(version, [entry]))
    with pytest.raises(FormatError, match=r"spectrum.dm\d: ImageList/0 holds a spectrum .*Format 'Spectrum'"):
        open_reader(path, formats=DM)


@pytest.mark.parametrize(
    ("units", "reason"),
    [
        (["nm", "nm", "eV"], "an axis is in eV, a unit of energy"),  # no Meta Data, as older files
        (["keV", "nm", ""], "an axis is in keV"),
        (["s", "nm"], "axes are not all spatial"),  # a kymograph: time along x
        (["nm", "1/nm"], "axes are not all spatial"),
    ],
)
def test_data_with_axes_not_spatial_is_refused(tmp_path: Path, units: list[str], reason: str):
    values = np.zeros((4, 3, 2)[3 - len(units) :], np.float32)
    path = _write(tmp_path, "data.dm4", dm_file(4, [image_entry(values, units=units)]))
    with pytest.raises(FormatError, match=reason) as caught:
        open_reader(path, formats=DM)
    assert str(path) in str(caught.value)


def test_stacks_over_time_and_diffraction_patterns_are_read(tmp_path: Path):
    # a series of images 0.5 s apart: the stack's axis is no axis of an image
    series = _write(
        tmp_path,
        "series.dm4",
        dm_file(4, [image_entry(np.zeros((3, 4, 5), np.float32), units=["nm", "nm", "s"])]),
    )
    with open_reader(series, formats=DM) as reader:
        assert reader.descriptor.extents == (3, 4, 5) and reader.voxel_size == pytest.approx((15.0, 5.0))
        assert reader.voxel_size_source == "DM calibration"
    # a diffraction pattern, in inverse length: read, without a pixel size
    pattern = _write(
        tmp_path,
        "pattern.dm4",
        dm_file(4, [image_entry(np.zeros((4, 5), np.float32), units=["1/nm", "1/nm"])]),
    )
    with open_reader(pattern, formats=DM) as reader:
        assert reader.voxel_size is None and reader.voxel_size_source is None


def test_a_unit_without_a_scale_gives_no_pixel_size(tmp_path: Path):
    # a length unit with no Scale tag says nothing of the size: unknown, not 1 unit a pixel
    unscaled = _write(
        tmp_path,
        "unscaled.dm4",
        dm_file(4, [image_entry(np.zeros((4, 5), np.float32), units=["nm", "nm"], scales=[None, 0.5])]),
    )
    with open_reader(unscaled, formats=DM) as reader:
        assert reader.voxel_size is None and reader.voxel_size_source is None


def test_binary_values_read_as_nonzero(tmp_path: Path):
    stored = np.array([[0, 1], [255, 0]], np.uint8)
    path = _write(tmp_path, "mask.dm4", dm_file(4, [image_entry(stored, 14, [8])]))
    with open_reader(path, formats=DM) as reader:
        np.testing.assert_array_equal(_read_all(reader, np.dtype(bool)), stored != 0)
        np.testing.assert_array_equal(_read_all(reader, np.dtype(np.float32)), stored != 0)


def test_dm4_skips_other_groups_unread(tmp_path: Path):
    values = np.ones((2, 2), np.float32)
    junk = ("Junk", [("", ([99, 1, 2], b"\xff" * 40))])
    content = dm_file(4, [image_entry(values, 2, [6])], extra=[junk])
    with open_reader(_write(tmp_path, "skip.dm4", content), formats=DM) as reader:
        np.testing.assert_array_equal(_read_all(reader, np.dtype(np.float32)), values)
    with pytest.raises(FormatError, match=r"Junk/0.* encoded type \[99"):
        open_reader(
            _write(tmp_path, "skip.dm3", dm_file(3, [image_entry(values, 2, [6])], extra=[junk])), formats=DM
        )


@pytest.mark.parametrize(
    ("data_type", "shape", "message"),
    [
        (23, (2, 2), "RGB"),
        (8, (2, 2), "RGB"),
        (5, (2, 2), "packed complex"),
        (77, (2, 2), "DM data type 77"),
        (10, (5,), "1-D data"),
        (10, (2, 0), "not all positive"),
    ],
)
def test_unread_kinds_of_image(tmp_path: Path, data_type: int, shape, message: str):
    entry = image_entry(np.zeros(shape, np.uint32), data_type, [5])
    path = _write(tmp_path, "odd.dm3", dm_file(3, [entry]))
    with pytest.raises(FormatError, match=message) as caught:
        open_reader(path, formats=DM)
    assert str(path) in str(caught.value)


def test_data_too_short_for_its_dimensions(tmp_path: Path):
    entry = image_entry(np.zeros((2, 3), np.uint16), 11, [4])
    path = _write(tmp_path, "short.dm3", dm_file(3, [entry]))
    with pytest.raises(FormatError, match=r"ImageList/0/ImageData/Data holds 12 bytes"):
        open_reader(path, formats=DM)


def test_only_a_thumbnail(tmp_path: Path):
    path = _write(tmp_path, "thumb.dm3", dm_file(3, [thumbnail()], [0]))
    with pytest.raises(FormatError, match="no image besides its thumbnail"):
        open_reader(path, formats=DM)


def test_recognizes():
    dm3 = dm_file(3, [thumbnail()])
    dm4 = dm_file(4, [thumbnail()])
    assert DigitalMicrographFormat.recognizes(dm3[:4096], ".dm3")
    assert DigitalMicrographFormat.recognizes(dm4[:4096], ".xyz")
    assert not DigitalMicrographFormat.recognizes(dm3[:10], ".dm3")
    assert not DigitalMicrographFormat.recognizes(b"\x00\x00\x00\x05" + dm3[4:4096], ".dm3")
    assert not DigitalMicrographFormat.recognizes(dm3[:8] + b"\x00\x00\x00\x02" + dm3[12:4096], ".dm3")
    assert not DigitalMicrographFormat.recognizes(bytes(1024), ".dm3")


# ---------------------------------------------------------------- bad files


def _nested(version: int, depth: int) -> bytes:
    """A file whose root holds a chain of `depth` groups "g", each the only tag of the one before."""
    if version == 3:
        body = b"\x01\x00\x00\x00\x00\x01\x14\x00\x01g" * depth + b"\x01\x00" + bytes(4)
        return b"\x00\x00\x00\x03" + len(body).to_bytes(4, "big") + (1).to_bytes(4, "big") + body
    body = b"\x01\x00" + bytes(8)
    for _ in range(depth):
        body = b"\x01\x00" + (1).to_bytes(8, "big") + b"\x14\x00\x01g" + len(body).to_bytes(8, "big") + body
    return b"\x00\x00\x00\x04" + len(body).to_bytes(8, "big") + (1).to_bytes(4, "big") + body


def test_deep_nesting(tmp_path: Path):
    path = _write(tmp_path, "deep.dm3", _nested(3, 100_000))
    with pytest.raises(FormatError, match=r"tag g/g/g.* nest deeper than 64") as caught:
        open_reader(path, formats=DM)
    assert str(path) in str(caught.value)


def test_deep_nesting_outside_the_images_is_skipped_in_dm4(tmp_path: Path):
    path = _write(tmp_path, "deep.dm4", _nested(4, 1000))
    with pytest.raises(FormatError, match=r"holds no image: its ImageList is empty or missing"):
        open_reader(path, formats=DM)


def test_group_declaring_itself_its_size(tmp_path: Path):
    content = bytearray(dm_file(4, [image_entry(np.zeros((2, 2), np.uint16), 10, [4])]))
    at = content.index(b"\x14\x00\x09ImageList") + 12
    at = content.index(b"\x14\x00\x00", at) + 3
    content[at : at + 8] = bytes(8)
    with pytest.raises(FormatError, match=r"tag ImageList/0 declares 0 bytes, its contents take \d+"):
        open_reader(_write(tmp_path, "self.dm4", bytes(content)), formats=DM)


def test_tag_count_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(dm, "_MAX_TAGS", 10)
    path = _write(tmp_path, "many.dm3", dm_file(3, [thumbnail(), thumbnail()], [0]))
    with pytest.raises(FormatError, match="more than 10 tags"):
        open_reader(path, formats=DM)


def _count_at(content: bytes, label: bytes, version: int) -> int:
    """Where the tag count of the group labelled `label` lies."""
    at = content.index(b"\x14" + len(label).to_bytes(2, "big") + label) + 3 + len(label)
    return at + 2 if version == 3 else at + 10


@pytest.mark.parametrize("name", ["2D-float32.dm3", "2D-float32.dm4"])
def test_huge_tag_count(samples: Path, tmp_path: Path, name: str):
    content = bytearray((samples / name).read_bytes())
    version = 3 if name.endswith("3") else 4
    at = _count_at(content, b"ImageList", version)
    width = 4 if version == 3 else 8
    content[at : at + width] = b"\xff" * width
    with pytest.raises(FormatError, match=r"tag ImageList declares \d+ tags") as caught:
        open_reader(_write(tmp_path, name, bytes(content)), formats=DM)
    assert name in str(caught.value)


@pytest.mark.parametrize("name", ["2D-float32.dm3", "2D-float32.dm4"])
def test_data_of_terabytes(samples: Path, tmp_path: Path, name: str):
    content = bytearray((samples / name).read_bytes())
    version = 3 if name.endswith("3") else 4
    width = 4 if version == 3 else 8
    marker = b"\x15\x00\x04Data"
    at = content.index(marker, content.index(marker) + 1) + len(marker)
    if version == 4:
        content[at : at + 8] = (1 << 42).to_bytes(8, "big")
        expected = r"tag ImageList/1/ImageData/Data declares 4398046511104 bytes"
    else:
        count_at = at + 4 + width + 2 * width
        content[count_at : count_at + width] = b"\xff" * width
        expected = r"tag ImageList/1/ImageData/Data declares 17179869180 bytes of data"
    with pytest.raises(FormatError, match=expected):
        open_reader(_write(tmp_path, name, bytes(content)), formats=DM)


@pytest.mark.parametrize("name", ["STEM-uint32.dm3", "3D-uint16.dm4"])
def test_truncated(samples: Path, tmp_path: Path, name: str):
    content = (samples / name).read_bytes()
    with open_reader(samples / name, formats=DM) as reader:
        data = reader.data_offset
    lengths = [0, 3, 11, 20, 100, 1000, len(content) // 3, data - 5, data + 3, len(content) - 20]
    for length in lengths:
        path = _write(tmp_path, f"cut-{length}-{name}", content[:length])
        with pytest.raises(FormatError) as caught:
            open_reader(path, formats=DM)
        assert str(path) in str(caught.value)
        if length >= 100:
            assert "truncated" in str(caught.value) or "past the end" in str(caught.value)


@pytest.mark.parametrize(("name", "seed"), [("STEM-uint32.dm3", 3), ("2D-complex64.dm4", 4)])
def test_byte_flips(samples: Path, tmp_path: Path, name: str, seed: int):
    content = (samples / name).read_bytes()
    with open_reader(samples / name, formats=DM) as reader:
        data = reader.data_offset
    rng = random.Random(seed)
    path = tmp_path / name
    outcomes = {"read": 0, "refused": 0}
    for _ in range(200):
        flipped = bytearray(content)
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(0, 4096) if rng.random() < 0.5 else rng.randrange(max(0, data - 400), data)
            flipped[at] = rng.choice([flipped[at] ^ (1 << rng.randrange(8)), 0, 0xFF, rng.randrange(256)])
        path.write_bytes(bytes(flipped))
        try:
            with open_reader(path, formats=DM) as reader:
                dtype = numpy_dtype(reader.descriptor.data_type)
                _read_all(reader, dtype)
                reader.read_region(0, (slice(0, 1), slice(0, 1)), np.empty((1, 1), dtype))
            outcomes["read"] += 1
        except CLEAN_ERRORS as error:
            assert str(path) in str(error)
            outcomes["refused"] += 1
    assert outcomes["read"] and outcomes["refused"]  # a hang is caught by the timeout of the module


def test_image_tags_named_like_image_data_are_not_taken_for_it(tmp_path: Path):
    # DM3 files are parsed whole: a tag ImageTags/Data, or a group under Meta Data, is no image nor kind
    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    label, groups = image_entry(values, units=["nm", "nm"], meta_data={"Format": "Image"})
    tags = dict(groups)["ImageTags"]
    tags.append(("Data", ([20, 6, 2], np.zeros(2, "<f4").tobytes())))
    dict(tags)["Meta Data"].append(("Format", [("Spectrum", ([20, 4, 8], "Spectrum".encode("utf-16-le")))]))
    path = _write(tmp_path, "image.dm3", dm_file(3, [(label, groups)]))
    with open_reader(path, formats=DM) as reader:
        np.testing.assert_array_equal(_read_all(reader, np.dtype(np.float32)), values)
        assert reader.voxel_size == pytest.approx((15.0, 5.0))
