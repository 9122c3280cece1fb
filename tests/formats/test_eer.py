"""The EER reader: synthetic movies encoded here, checked against imagecodecs' decoding of each frame."""

from __future__ import annotations

import gc
import os
import struct
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import imagecodecs
import mrcfile
import numpy as np
import pytest
import tifffile
from hypothesis import given, settings
from hypothesis import strategies as st

import vitrio as vio
from vitrio import _native as decoder
from vitrio.formats import FormatError, open_reader
from vitrio.formats.eer import (
    DetectorEventTimeline,
    EerFormat,
    read_events,
)
from vitrio.testing import eer as encoding
from vitrio.testing.eer import encode_frame, encode_stream, patch_compression, random_events

pytestmark = pytest.mark.timeout(120)

SHAPE = (256, 256)
FRAMES = 20
CODES = {65000: (8, 2, 2), 65001: (7, 2, 2)}
EER = [EerFormat]


def write_eer(path: Path, frames: list[list[bytes]], shape: tuple = SHAPE, *more, **options) -> Path:
    """`vitrio.testing.eer.write_eer`, of frames of the tests' size unless told otherwise."""
    return encoding.write_eer(path, frames, shape, *more, **options)


def oracle(strips: list[bytes], shape: tuple, code: tuple, rows: int, superres: int = 0) -> np.ndarray:
    """imagecodecs' decoding of one frame of strips of `rows`, as uint16 counts."""
    parts = []
    for index, strip in enumerate(strips):
        strip_rows = min(rows, shape[0] - index * rows)
        strip_shape = (strip_rows << superres, shape[1] << superres)
        parts.append(imagecodecs.eer_decode(strip, strip_shape, *code, superres=superres))
    return np.concatenate(parts).astype(np.uint16)


class Movie:
    """A synthetic EER movie: its file, the events and strips of its frames, and its code."""

    def __init__(self, path, events, strips, code, shape, rows_per_strip):
        self.path, self.events, self.strips, self.code = path, events, strips, code
        self.shape, self.rows_per_strip = shape, rows_per_strip

    def frames(self, superres: int = 0) -> np.ndarray:
        """imagecodecs' decoding of the frames, on the grid of `superres` sub-pixel bits."""
        return np.stack(
            [oracle(s, self.shape, self.code, self.rows_per_strip, superres) for s in self.strips]
        )


def make_movie(
    directory: Path,
    compression: int = 65001,
    code: tuple | None = None,
    rows_per_strip: int | None = None,
    frames: int = FRAMES,
    shape: tuple = SHAPE,
    density: float = 0.05,
    seed: int = 0,
    name: str = "movie.eer",
) -> Movie:
    code = code or CODES[compression]
    rng = np.random.default_rng(seed)
    events = [random_events(rng, shape, code, density) for _ in range(frames)]
    rows_per_strip = rows_per_strip or shape[0]
    strips = [encode_frame(e, shape, code, rows_per_strip) for e in events]
    path = write_eer(
        directory / name, strips, shape, compression, code if compression == 65002 else None, rows_per_strip
    )
    return Movie(path, events, strips, code, shape, rows_per_strip)


@pytest.fixture(scope="module")
def movie(tmp_path_factory) -> Movie:
    return make_movie(tmp_path_factory.mktemp("eer"))


def read_all(path, formats, dtype=None) -> np.ndarray:
    with open_reader(path, formats=formats) as reader:
        dtype = dtype or reader.descriptor.data_type.value
        images = np.zeros(reader.descriptor.extents, dtype=dtype)
        reader.read_run(0, list(images) if reader.descriptor.is_stack else [images])
    return images


def block_sum(images: np.ndarray, factor: int) -> np.ndarray:
    *lead, h, w = images.shape
    return images.reshape(*lead, h // factor, factor, w // factor, factor).sum(axis=(-3, -1))


def cuts(frames: int, fractions: int) -> list[tuple[int, int]]:
    return [(k * frames // fractions, (k + 1) * frames // fractions) for k in range(fractions)]


# --- the encoder against imagecodecs -------------------------------------------------------------------


def test_the_encoder_agrees_with_imagecodecs(movie):
    for events, frame in zip(movie.events, movie.frames(superres=2)):
        assert np.array_equal(np.argwhere(frame), events[np.lexsort((events[:, 1], events[:, 0]))])


# --- recognizing and plain reading ---------------------------------------------------------------------


def test_recognizes_tiff_named_eer_or_with_eer_compression(movie, tmp_path):
    head = movie.path.read_bytes()[:4096]
    assert EerFormat.recognizes(head, ".eer")
    assert EerFormat.recognizes(head, ".tif")
    assert not EerFormat.recognizes(b"\0" * 64, ".eer")
    plain = tmp_path / "plain.tif"
    tifffile.imwrite(plain, np.zeros((8, 8), np.uint8))
    assert EerFormat.recognizes(plain.read_bytes()[:4096], ".eer")
    assert not EerFormat.recognizes(plain.read_bytes()[:4096], ".tif")
    for bigtiff in (False, True):
        path = write_eer(tmp_path / "frames.tif", movie.strips[:2], bigtiff=bigtiff)
        with tifffile.TiffFile(path) as tif:
            assert tif.is_bigtiff == bigtiff
            assert tif.pages[0].compression == 65001
        assert EerFormat.recognizes(path.read_bytes()[:4096], ".tif")
        assert np.array_equal(read_all(path, EER), movie.frames()[:2])


@pytest.mark.parametrize(
    ("compression", "code", "rows_per_strip"),
    [
        (65000, None, None),
        (65001, None, None),
        (65001, None, 100),
        (65002, (7, 2, 2), None),
        (65002, (5, 1, 3), 64),
    ],
)
def test_frames_equal_imagecodecs_frames(tmp_path, compression, code, rows_per_strip):
    movie = make_movie(tmp_path, compression, code, rows_per_strip, frames=6)
    with open_reader(movie.path, formats=EER) as reader:
        assert reader.descriptor.extents == (6, *SHAPE)
        assert reader.descriptor.core_rank == 2
        assert reader.descriptor.data_type.value == "uint8"
    expected = movie.frames()
    assert np.array_equal(read_all(movie.path, EER), expected)
    assert np.array_equal(read_all(movie.path, EER, np.float64), expected)


def test_an_integrated_image_before_the_frames_is_skipped(movie, tmp_path):
    path = write_eer(tmp_path / "integrated.eer", movie.strips[:3], integrated=np.ones(SHAPE, np.uint16))
    assert np.array_equal(read_all(path, EER), movie.frames()[:3])


def test_reads_into_strided_and_other_typed_outs(movie):
    expected = movie.frames()
    with open_reader(movie.path, formats=[EerFormat.configured(4)]) as reader:
        sums = [expected[a:b].sum(axis=0) for a, b in cuts(FRAMES, 4)]
        wide = np.zeros((4, SHAPE[0], SHAPE[1] * 2), np.int64)
        reader.read_run(0, [image[:, ::2] for image in wide])
        assert np.array_equal(wide[:, :, ::2], sums)
        swapped = np.zeros((2, *SHAPE), np.dtype(">u2"))
        reader.read_run(2, list(swapped))
        assert np.array_equal(swapped, sums[2:])
        with pytest.raises(IndexError, match=r"movie\.eer: index (\d+) is past the end of a stack of \1"):
            reader.read_run(3, list(swapped))


# --- fractions, binning, super-resolution --------------------------------------------------------------


@pytest.mark.parametrize("fractions", [1, 3, 6, 20])
def test_fractions_are_sums_of_frames(movie, fractions):
    expected = movie.frames()
    configured = EerFormat.configured(fractions)
    with open_reader(movie.path, formats=[configured]) as reader:  # one fraction is a single image
        assert reader.descriptor.extents == ((fractions,) if fractions > 1 else ()) + SHAPE
        assert reader.descriptor.data_type.value == "uint16"
    images = read_all(movie.path, [configured]).reshape(fractions, *SHAPE)
    for image, (a, b) in zip(images, cuts(FRAMES, fractions)):
        assert np.array_equal(image, expected[a:b].sum(axis=0))


@pytest.mark.parametrize("binning", [2, 4])
def test_binning_sums_blocks(movie, binning):
    images = read_all(movie.path, [EerFormat.configured(5, binning=binning)])
    assert images.shape == (5, SHAPE[0] // binning, SHAPE[1] // binning)
    sums = np.stack([movie.frames()[a:b].sum(axis=0) for a, b in cuts(FRAMES, 5)])
    assert np.array_equal(images, block_sum(sums, binning))


@pytest.mark.parametrize("superres", [2, 4])
def test_superres_equals_imagecodecs_superres(movie, superres):
    level = superres.bit_length() - 1
    images = read_all(movie.path, [EerFormat.configured(4, superres=superres)])
    assert images.shape == (4, SHAPE[0] * superres, SHAPE[1] * superres)
    frames = movie.frames(superres=level)
    for image, (a, b) in zip(images, cuts(FRAMES, 4)):
        assert np.array_equal(image, frames[a:b].sum(axis=0))


def test_superres_of_a_multi_strip_file(tmp_path):
    movie = make_movie(tmp_path, rows_per_strip=48, frames=3)
    images = read_all(movie.path, [EerFormat.configured(3, superres=4)])
    assert np.array_equal(images, movie.frames(superres=2))


def test_counts_widen_when_a_fraction_could_overflow_uint16(tmp_path):
    movie = make_movie(tmp_path, frames=17, shape=(64, 64), density=0.5)
    with open_reader(movie.path, formats=[EerFormat.configured(1, binning=64)]) as reader:
        assert reader.descriptor.data_type.value == "uint32"
        image = np.zeros((1, 1), np.uint32)
        reader.read_run(0, [image])
    assert image[0, 0] == sum(len(e) for e in movie.events)


def test_fractions_render_in_parallel(movie):
    expected = [movie.frames()[a:b].sum(axis=0) for a, b in cuts(FRAMES, 10)]
    with open_reader(movie.path, formats=[EerFormat.configured(10, superres=2)]) as reader:
        outs = np.zeros((10, SHAPE[0] * 2, SHAPE[1] * 2), np.uint16)
        with ThreadPoolExecutor(4) as pool:
            for _ in range(5):
                outs[:] = 0
                list(pool.map(lambda k: reader.read_run(k, [outs[k]]), range(10)))
                assert np.array_equal(block_sum(outs, 2), expected)


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"fractions": 0}, ValueError),
        ({"fractions": 2, "binning": 3}, ValueError),
        ({"fractions": 2, "superres": 3}, ValueError),
        ({"fractions": 2, "binning": 2, "superres": 2}, ValueError),
        ({"fractions": 2, "binning": 1.5}, TypeError),
        ({"fractions": 2, "gain": np.ones(5)}, ValueError),
    ],
)
def test_configured_checks_its_arguments(arguments, error):
    with pytest.raises(error):
        EerFormat.configured(**arguments)


def test_configuration_must_fit_the_file(movie, tmp_path):
    with pytest.raises(ValueError, match=f"{movie.path}.*21 fractions of 20 frames"):
        open_reader(movie.path, formats=[EerFormat.configured(21)])
    with pytest.raises(ValueError, match="binning 512"):
        open_reader(movie.path, formats=[EerFormat.configured(2, binning=512)])
    with pytest.raises(ValueError, match="super-resolution 8"):
        open_reader(movie.path, formats=[EerFormat.configured(2, superres=8)])
    with pytest.raises(ValueError, match="gain reference of 100 x 100"):
        open_reader(movie.path, formats=[EerFormat.configured(2, gain=np.ones((100, 100)))])


# --- gain ---------------------------------------------------------------------------------------------


def test_gain_at_detector_size_multiplies_counts(movie, tmp_path):
    gain = np.random.default_rng(1).uniform(0.5, 2, SHAPE).astype(np.float32)
    sums = np.stack([movie.frames()[a:b].sum(axis=0) for a, b in cuts(FRAMES, 4)])
    configured = EerFormat.configured(4, gain=gain)
    with open_reader(movie.path, formats=[configured]) as reader:
        assert reader.descriptor.data_type.value == "float32"
    images = read_all(movie.path, [configured])
    np.testing.assert_allclose(images, sums * gain, rtol=1e-6)
    binned = read_all(movie.path, [EerFormat.configured(4, binning=2, gain=gain)])
    np.testing.assert_allclose(binned, block_sum(sums * gain, 2), rtol=1e-5)
    superres = read_all(movie.path, [EerFormat.configured(4, superres=2, gain=gain)])
    fine = np.stack([movie.frames(1)[a:b].sum(axis=0) for a, b in cuts(FRAMES, 4)])
    np.testing.assert_allclose(superres, fine * np.repeat(np.repeat(gain, 2, 0), 2, 1), rtol=1e-6)

    key = tmp_path / "gain.mrc"
    with mrcfile.new(key) as mrc:
        mrc.set_data(gain)
    np.testing.assert_allclose(
        read_all(movie.path, [EerFormat.configured(4, gain=key)]), sums * gain, rtol=1e-6
    )


def test_gain_at_superres_size_weighs_each_event_where_it_fell(movie):
    gain = np.random.default_rng(2).uniform(0.5, 2, (SHAPE[0] * 4, SHAPE[1] * 4)).astype(np.float32)
    fine = np.stack([movie.frames(2)[a:b].sum(axis=0) for a, b in cuts(FRAMES, 2)])
    images = read_all(movie.path, [EerFormat.configured(2, gain=gain)])
    np.testing.assert_allclose(images, block_sum(fine * gain, 4), rtol=1e-5)


# --- events -------------------------------------------------------------------------------------------


def test_read_events_gives_the_encoded_positions(movie):
    timeline = read_events(movie.path)
    assert timeline.group_count == FRAMES
    assert timeline.event_count == sum(len(e) for e in movie.events)
    assert np.array_equal(timeline.timestamps, np.arange(FRAMES))
    for frame in range(FRAMES):
        positions = timeline.get_positions(frame)
        assert positions.dtype == np.uint32
        assert np.array_equal(positions, movie.events[frame])
    assert np.array_equal(timeline.get_positions(), np.concatenate(movie.events))


def test_events_are_decoded_eer_batch_bytes_of_frames_at_a_time(movie, monkeypatch):
    batches = []
    events = decoder.events
    monkeypatch.setattr(
        decoder, "events", lambda data, *rest: batches.append(len(data)) or events(data, *rest)
    )
    with vio.configure(eer_batch_bytes=1):  # less than a frame: a frame at a time
        timeline = read_events(movie.path)
    assert len(batches) == FRAMES
    assert np.array_equal(timeline.get_positions(), np.concatenate(movie.events))
    batches.clear()
    assert np.array_equal(read_events(movie.path).get_positions(), np.concatenate(movie.events))
    assert len(batches) == 1  # the movie's few kilobytes at once


def test_read_events_appends_a_range_into_a_timeline(movie):
    timeline = read_events(movie.path, 3, 7)
    assert np.array_equal(timeline.timestamps, [3, 4, 5, 6])
    timeline = read_events(movie.path, 18, events=timeline)
    assert np.array_equal(timeline.timestamps, [3, 4, 5, 6, 18, 19])
    assert np.array_equal(timeline.get_positions(-1), movie.events[19])
    assert np.array_equal(timeline.get_positions(3), movie.events[6])
    timeline.clear()
    assert read_events(movie.path, 5, 5, events=timeline).group_count == 0
    with pytest.raises(IndexError, match="movie.eer"):
        read_events(movie.path, 5, 21)


def test_read_events_of_a_multi_strip_65002_file(tmp_path):
    movie = make_movie(tmp_path, 65002, (5, 1, 3), rows_per_strip=60, frames=4)
    timeline = read_events(movie.path)
    for frame in range(4):
        assert np.array_equal(timeline.get_positions(frame), movie.events[frame])


def test_read_events_leaves_the_timeline_as_it_was_on_error(movie, tmp_path):
    strips = [list(s) for s in movie.strips[:4]]
    strips[2][0] = strips[2][0][: len(strips[2][0]) // 2]
    path = write_eer(tmp_path / "bad.eer", strips)
    timeline = read_events(movie.path, 0, 1)
    with pytest.raises(FormatError, match=f"{path}: frame 2"):
        read_events(path, events=timeline)
    assert timeline.group_count == 1
    assert np.array_equal(timeline.get_positions(), movie.events[0])


# --- the timeline -------------------------------------------------------------------------------------


def test_timeline_groups():
    timeline = DetectorEventTimeline()
    assert (timeline.group_count, timeline.event_count, timeline.view_count) == (0, 0, 0)
    timeline.reserve(2, 10)
    timeline.add_group(7, [[1, 2], [3, 4]])
    timeline.add_group(9, np.zeros((0, 2), np.int64))
    timeline.add_group(11, np.array([[5, 6]], np.uint64))
    assert (timeline.group_count, timeline.event_count) == (3, 3)
    assert timeline.timestamps.tolist() == [7, 9, 11]
    assert timeline.get_positions(0).tolist() == [[1, 2], [3, 4]]
    assert timeline.get_positions(1).shape == (0, 2)
    assert timeline.get_positions().tolist() == [[1, 2], [3, 4], [5, 6]]
    with pytest.raises(IndexError, match="group 3 of a timeline of 3"):
        timeline.get_positions(3)
    with pytest.raises(ValueError, match=r"positions are rows of 2 coordinates, not of shape \(1, 3\)"):
        timeline.add_group(1, [[1, 2, 3]])
    with pytest.raises(ValueError, match=r"positions must be within 0 and 2\*\*32 - 1"):
        timeline.add_group(1, [[-1, 2]])
    with pytest.raises(TypeError, match="positions are integers, not float64"):
        timeline.add_group(1, [[0.5, 2]])
    for count in range(100):  # growing past the reserve keeps what was there
        timeline.add_group(100 + count, [[count, count]] * count)
    assert timeline.get_positions(0).tolist() == [[1, 2], [3, 4]]
    assert timeline.get_positions(-1).tolist() == [[99, 99]] * 99
    timeline.clear()
    assert (timeline.group_count, timeline.event_count) == (0, 0)


def test_timeline_views_are_read_only_and_lock_it():
    timeline = DetectorEventTimeline()
    timeline.add_group(0, [[1, 2]])
    positions = timeline.get_positions()
    stamps = timeline.timestamps
    assert timeline.view_count == 2
    assert not positions.flags.writeable
    with pytest.raises(ValueError):
        positions[0, 0] = 5
    with pytest.raises(ValueError):
        positions.flags.writeable = True
    for change in (lambda: timeline.add_group(1, [[3, 4]]), timeline.clear, lambda: timeline.reserve(10, 10)):
        with pytest.raises(BufferError, match="the timeline has 2 live views"):
            change()
    del stamps
    derived = positions[:, ::-1]
    del positions
    gc.collect()
    assert timeline.view_count == 1  # the view lives on in what was made from it
    with pytest.raises(BufferError, match="the timeline has 1 live views"):
        timeline.clear()
    with pytest.raises(BufferError, match="the timeline has 1 live views"):
        read_events("unused.eer", events=timeline)
    assert derived.tolist() == [[2, 1]]
    del derived
    assert timeline.view_count == 0
    timeline.add_group(1, [[3, 4]])
    assert timeline.get_positions().tolist() == [[1, 2], [3, 4]]


# --- bad files ----------------------------------------------------------------------------------------


def bad_stream(movie: Movie, frame: int, stream: bytes, tmp_path: Path) -> Path:
    strips = [list(s) for s in movie.strips[:5]]
    strips[frame] = [stream]
    return write_eer(tmp_path / "bad.eer", strips)


def expect_frame_error(path: Path, frame: int, match: str = "") -> None:
    pattern = f"{path}: frame {frame}: .*{match}"
    with pytest.raises(FormatError, match=pattern):
        read_all(path, [EerFormat.configured(5)])
    with pytest.raises(FormatError, match=pattern):
        read_events(path)


def test_truncated_strip(movie, tmp_path):
    stream = movie.strips[3][0]
    expect_frame_error(bad_stream(movie, 3, stream[: len(stream) // 2], tmp_path), 3, "ends before")


def test_strip_without_its_end(movie, tmp_path):
    y, x = movie.events[1][:, 0] >> 2, movie.events[1][:, 1] >> 2
    pixels = y.astype(np.int64) * SHAPE[1] + x
    # the frame's events, but the stream ends after the last one
    cut = encode_stream(
        pixels[:-1], np.zeros(len(pixels) - 1), np.zeros(len(pixels) - 1), pixels[-1], (7, 2, 2)
    )
    expect_frame_error(bad_stream(movie, 1, cut, tmp_path), 1, "ends before")


def test_codes_running_past_the_image(movie, tmp_path):
    npix = SHAPE[0] * SHAPE[1]
    past = encode_stream(np.array([5, npix + 3]), np.zeros(2), np.zeros(2), npix + 10, (7, 2, 2))
    expect_frame_error(bad_stream(movie, 4, past, tmp_path), 4, "past the end of the image")
    skips = encode_stream(np.array([npix + 300]), np.zeros(1), np.zeros(1), npix + 400, (7, 2, 2))
    expect_frame_error(bad_stream(movie, 0, skips, tmp_path), 0, "past the end of the image")


def test_unknown_compression(movie, tmp_path):
    path = write_eer(tmp_path / "bad.eer", movie.strips[:5])
    patch_compression(path, [2], 12345)
    with pytest.raises(FormatError, match=f"{path}: frame 2: compression 12345"):
        open_reader(path, formats=EER)
    with pytest.raises(FormatError, match=f"{path}: frame 2: compression 12345"):
        read_events(path)


def test_strip_offset_past_the_file(movie, tmp_path):
    path = write_eer(tmp_path / "bad.eer", movie.strips[:5])
    with tifffile.TiffFile(path) as tif:
        offset = tif.pages[3].tags[273].valueoffset
    with open(path, "r+b") as handle:
        handle.seek(offset)
        handle.write(struct.pack("<Q", 1 << 40))
    with pytest.raises(FormatError, match=f"{path}: frame 3: .*past the end of the file"):
        open_reader(path, formats=EER)


def test_truncated_file(movie, tmp_path):
    path = write_eer(tmp_path / "bad.eer", movie.strips[:5])
    with tifffile.TiffFile(path) as tif:
        last = tif.pages[4].dataoffsets[0]
    os.truncate(path, last + 10)
    with pytest.raises(FormatError, match=f"{path}: frame 4: .*truncated"):
        open_reader(path, formats=EER)
    os.truncate(path, 100)
    with pytest.raises(FormatError, match=str(path)):
        open_reader(path, formats=EER)


def test_file_truncated_while_open(movie, tmp_path):
    path = write_eer(tmp_path / "shrinking.eer", movie.strips[:5])
    with tifffile.TiffFile(path) as tif:
        last = tif.pages[4].dataoffsets[0]
    with open_reader(path, formats=[EerFormat.configured(5)]) as reader:
        reader.check_unchanged()
        os.truncate(path, last + 10)
        with pytest.raises(OSError, match="shrank"):
            reader.check_unchanged()
        with pytest.raises(FormatError, match=f"{path}: frame 4: the file is truncated"):
            reader.read_run(4, [np.zeros(SHAPE, np.uint16)])


def test_size_that_the_strip_cannot_code(tmp_path):
    stream = encode_stream(np.array([1]), np.zeros(1), np.zeros(1), 50, (7, 2, 2))
    path = write_eer(tmp_path / "huge.eer", [[stream]], shape=(60000, 60000))
    with pytest.raises(FormatError, match="cannot code"):
        open_reader(path, formats=EER)


def test_not_a_tiff_file(tmp_path):
    path = tmp_path / "junk.eer"
    path.write_bytes(b"II*\0" + bytes(range(256)) * 4)
    with pytest.raises(FormatError, match=str(path)):
        open_reader(path, formats=EER)


@settings(max_examples=300, deadline=None)
@given(
    data=st.binary(max_size=64),
    rows=st.integers(0, 6),
    width=st.integers(1, 9),
    code=st.sampled_from([(7, 2, 2), (8, 2, 2), (1, 0, 0), (3, 1, 2), (16, 8, 8)]),
    superres=st.booleans(),
)
def test_decoder_survives_any_bytes(data, rows, width, code, superres):
    strips = np.array([[0, len(data), 0, rows]], np.int64)
    rlebits, hbits, vbits = code
    level = min(hbits, vbits) if superres else 0
    out = np.zeros((rows << level, width << level), np.uint16)
    shifts = (vbits - level, hbits - level)
    geometry = (rows, width, *code)
    status = decoder.render(
        data, strips, out, decoder.RENDER_U16, True, geometry, shifts, out.shape, None, (0, 0), (0, 0)
    )
    positions = np.zeros((len(data) * 8 + 1, 2), np.uint32)
    counts = np.zeros(1, np.int64)
    assert decoder.events(data, strips, positions, counts, geometry) == status
    if status is None:
        assert out.sum() == counts[0]
        assert (positions[: counts[0], 0] >> vbits < rows).all()
        assert (positions[: counts[0], 1] >> hbits < width).all()
    else:
        assert status[0] == 0 and status[1] in (decoder.EER_TRUNCATED, decoder.EER_PAST_END)


def test_decoder_checks_its_arguments():
    strips = np.array([[0, 4, 0, 2]], np.int64)
    out = np.zeros((2, 2), np.uint16)
    code, u16, f32 = (2, 2, 7, 2, 2), decoder.RENDER_U16, decoder.RENDER_F32
    with pytest.raises(ValueError, match="strip 0"):
        decoder.render(b"\0\0", strips, out, u16, True, code, (2, 2), (2, 2), None, (0, 0), (0, 0))
    with pytest.raises(ValueError, match="out"):
        decoder.render(b"\0" * 4, strips, out, u16, True, code, (1, 1), (2, 2), None, (0, 0), (0, 0))
    with pytest.raises(ValueError, match="gain"):
        decoder.render(
            b"\0" * 4, strips, out.astype(np.float32), f32, True, code, (2, 2), (2, 2), b"", (1, 1), (2, 2)
        )
    with pytest.raises(ValueError, match="kind"):
        decoder.render(b"\0" * 4, strips, out, f32 + 1, True, code, (2, 2), (2, 2), None, (0, 0), (0, 0))
    with pytest.raises(ValueError, match="positions"):
        decoder.events(b"\0" * 4, strips, np.zeros(4, np.uint32), np.zeros(0, np.int64), code)


# --- the provider -------------------------------------------------------------------------------------


def test_provider_reads_eer_files_as_fractions(movie, tmp_path):
    other = tmp_path / "other.mrc"
    with mrcfile.new(other) as mrc:
        mrc.set_data(np.ones((4, 4), np.float32))
    provider = vio.detector_event_image_reader_provider(4, binning=2)
    reader = provider.acquire(str(movie.path))
    try:
        assert reader.descriptor.extents == (4, SHAPE[0] // 2, SHAPE[1] // 2)
        image = np.zeros(reader.core_extents, np.uint16)
        reader.read_run(1, [image])
        assert np.array_equal(image, block_sum(movie.frames()[5:10].sum(axis=0), 2))
    finally:
        provider.release(reader)
    reader = provider.acquire(str(other))
    try:
        assert reader.descriptor.core_extents == (4, 4)
    finally:
        provider.release(reader)


def test_eer_movies_read_through_the_batched_path_like_any_format(movie, tmp_path):
    import vitrio as vio

    provider = vio.detector_event_image_reader_provider(4, binning=2, cache=2)
    assert vio.query_descriptor(movie.path, readers=provider).extents == (4, SHAPE[0] // 2, SHAPE[1] // 2)
    loader = vio.ImageLoader(vio.SynchronousExecutor(), provider)
    out = np.zeros((3, SHAPE[0] // 2, SHAPE[1] // 2), np.float32)
    locations = [vio.ImageLocation(movie.path, i) for i in (3, 0, 1)]
    vio.read_batch_async(loader, out, locations).get()
    frames = movie.frames()
    for slot, fraction in enumerate((3, 0, 1)):
        first, last = fraction * len(frames) // 4, (fraction + 1) * len(frames) // 4
        assert np.array_equal(out[slot], block_sum(frames[first:last].sum(axis=0), 2))
