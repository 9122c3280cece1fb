"""Detector events through the published objects: descriptors, readers, providers, fractions, renderers."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

import vitrio as vio
from vitrio.testing.eer import FIXED_CODES, frame_events, write_movie

SHAPE = (6, 8)  # an 8 x 6 pixel detector: 6 rows of 8 columns


def _movie(path, rng, frames=4, shape=SHAPE, empty=(), compression=65001):
    code = FIXED_CODES[compression]
    events = []
    for frame in range(frames):
        hits = rng.random(shape) < 0.4 if frame not in empty else np.zeros(shape, bool)
        events.append(frame_events(hits, code, rng))
    return write_movie(path, events, shape, compression)


@pytest.fixture
def movie(tmp_path, rng):
    return _movie(tmp_path / "movie.eer", rng)


# ---------------------------------------------------------------- the timeline


def test_timeline_takes_its_rank():
    assert vio.DetectorEventTimeline(3).rank == 3 and vio.DetectorEventTimeline(rank=1).rank == 1
    with pytest.raises(ValueError):
        vio.DetectorEventTimeline(0)
    timeline = vio.DetectorEventTimeline(3)
    timeline.add_group(5, [[1, 2, 3]])
    with pytest.raises(ValueError):
        timeline.add_group(5, [[1, 2, 3]])  # not later than the last
    with pytest.raises(ValueError):
        timeline.add_group(6, [[1, 2]])  # of another width
    with pytest.raises(IndexError):
        timeline.get_positions(1)
    view = timeline.get_positions(0)
    assert timeline.view_count == 1 and not view.flags.writeable
    for change in (timeline.clear, lambda: timeline.add_group(7, [[0, 0, 0]])):
        with pytest.raises(BufferError):
            change()


# ---------------------------------------------------------------- descriptor, fractionation, binning


def test_descriptor_members_equality_and_repr():
    descriptor = vio.DetectorEventTimelineDescriptor((16, 32), (4, 4), 10, 0.5)
    assert (descriptor.rank, descriptor.extents, descriptor.subdivisions) == (2, (16, 32), (4, 4))
    assert (descriptor.time_extent, descriptor.time_quantum) == (10, 0.5)
    assert descriptor == vio.DetectorEventTimelineDescriptor([16, 32], [4, 4], 10, 0.5)
    assert descriptor != vio.DetectorEventTimelineDescriptor((16, 32), (4, 4), 10, 0.0)
    assert repr(descriptor) == (
        "DetectorEventTimelineDescriptor(extents=(16, 32), subdivisions=(4, 4), "
        "time_extent=10, time_quantum=0.5)"
    )


@pytest.mark.parametrize(
    "arguments",
    [
        ((), (), 1, 0.0),
        ((16, 32), (4,), 1, 0.0),
        ((0, 32), (4, 4), 1, 0.0),
        ((16, 32), (0, 4), 1, 0.0),
        ((2**32 + 4, 32), (4, 4), 1, 0.0),
        ((16, 30), (4, 4), 1, 0.0),
        ((16, 32), (4, 4), 0, 0.0),
        ((16, 32), (4, 4), 1, -1.0),
        ((16, 32), (4, 4), 1, float("inf")),
        ((16, 32), (4, 4), 1, float("nan")),
    ],
)
def test_descriptor_refuses_what_describes_no_acquisition(arguments):
    with pytest.raises(ValueError):
        vio.DetectorEventTimelineDescriptor(*arguments)


def test_fractionation_cuts_time_evenly():
    four = vio.DetectorEventFractionation(4)
    assert [four.get_fraction_begin(i, 14) for i in range(5)] == [0, 3, 7, 10, 14]
    three = vio.DetectorEventFractionation(3)
    assert [three.get_fraction_begin(i, 4) for i in range(4)] == [0, 1, 2, 4]
    huge = vio.DetectorEventFractionation(vio.DetectorEventFractionation.max_fraction_count)
    assert huge.get_fraction_begin(2**32 - 2, 2**40) == (2**32 - 2) * 2**40 // (2**32 - 1)
    assert vio.DetectorEventFractionation.max_fraction_count == 2**32 - 1
    assert four == vio.DetectorEventFractionation(4) and four != three
    assert hash(four) == hash(vio.DetectorEventFractionation(4)) and four.fraction_count == 4
    assert repr(four) == "DetectorEventFractionation(fraction_count=4)"
    with pytest.raises(IndexError):
        four.get_fraction_begin(5, 14)
    for bad in (0, 2**32):
        with pytest.raises(ValueError):
            vio.DetectorEventFractionation(bad)


def test_binning_resolves_to_blocks_of_position_quanta():
    descriptor = vio.DetectorEventTimelineDescriptor((16, 32), (4, 4), 10, 0.0)
    one, two = vio.DetectorEventBinning(1), vio.DetectorEventBinning(2)
    assert one.resolve(descriptor) == (4, 4) and two.resolve(descriptor) == (8, 8)
    assert (
        two == vio.DetectorEventBinning(2) and hash(two) == hash(vio.DetectorEventBinning(2)) and one != two
    )
    assert repr(two) == "DetectorEventBinning(factor=2)" and two.factor == 2
    with pytest.raises(ValueError):
        vio.DetectorEventBinning(3).resolve(descriptor)
    with pytest.raises(ValueError):
        vio.DetectorEventBinning(0)


# ---------------------------------------------------------------- the counting renderer


def test_counting_renderer_extents_and_type():
    descriptor = vio.DetectorEventTimelineDescriptor((16, 32), (4, 4), 10, 0.0)
    renderer = vio.CountingDetectorEventRenderer(vio.DetectorEventBinning(2))
    assert isinstance(renderer, vio.DetectorEventRenderer)
    assert renderer.binning == vio.DetectorEventBinning(2) and renderer.data_type is vio.NumericalType.uint32
    assert renderer.get_image_extents(descriptor) == (2, 4)
    with pytest.raises(ValueError):
        vio.CountingDetectorEventRenderer(vio.DetectorEventBinning(3)).get_image_extents(descriptor)


def test_counting_renderer_overwrites_any_writable_destination(movie):
    reader = vio.detector_event_timeline_reader_provider().acquire(movie.path)
    events = vio.DetectorEventTimeline(2)
    reader.read(0, reader.descriptor.time_extent, events)
    expected = movie.counts().sum(axis=0).reshape(3, 2, 4, 2).sum(axis=(1, 3))
    renderer = vio.CountingDetectorEventRenderer(vio.DetectorEventBinning(2))
    held = np.full((3, 4), 7.5)
    view = events.get_positions()  # rendering is allowed while views are alive
    renderer.render(reader.descriptor, events, held)
    np.testing.assert_array_equal(held, expected)
    strided = np.zeros((3, 8), np.uint32)[:, ::2]
    renderer.render(reader.descriptor, events, strided)
    tensor = torch.zeros((3, 4), dtype=torch.int64)
    renderer.render(reader.descriptor, events, tensor)
    np.testing.assert_array_equal(strided, expected)
    np.testing.assert_array_equal(tensor.numpy(), expected)
    with pytest.raises(TypeError):
        renderer.render(reader.descriptor, events, [[0] * 4] * 3)
    with pytest.raises(ValueError):
        renderer.render(reader.descriptor, events, np.zeros((4, 3)))
    outside = vio.DetectorEventTimeline(2)
    outside.add_group(0, [[24, 0]])
    with pytest.raises(IndexError):
        renderer.render(reader.descriptor, outside, np.zeros((3, 4)))
    del view
    reader.close()


# ---------------------------------------------------------------- readers and providers


def test_eer_reader_describes_the_subpixel_grid_and_reads_stretches(tmp_path, rng):
    movie = _movie(tmp_path / "gaps.eer", rng, frames=3, empty=(1,))
    provider = vio.detector_event_timeline_reader_provider()
    assert isinstance(provider, vio.FileDetectorEventTimelineReaderProvider)
    reader = provider.acquire(movie.path)
    assert isinstance(reader, vio.DetectorEventTimelineReader)
    assert reader.descriptor == vio.DetectorEventTimelineDescriptor((6 << 2, 8 << 2), (4, 4), 3, 0.0)
    timeline = vio.DetectorEventTimeline(2)
    timeline.add_group(99, [[0, 0]])
    reader.read(0, 3, timeline)  # clears first
    assert timeline.timestamps.tolist() == [0, 2]  # the empty frame adds no group
    np.testing.assert_array_equal(timeline.get_positions(1), movie.events[2])
    reader.read(1, 1, timeline)
    assert timeline.group_count == 0
    with pytest.raises(ValueError):
        reader.read(2, 1, timeline)
    with pytest.raises(ValueError):
        reader.read(0, 1, vio.DetectorEventTimeline(3))
    with pytest.raises(IndexError):
        reader.read(0, 4, timeline)
    view = timeline.timestamps
    with pytest.raises(BufferError):
        reader.read(0, 1, timeline)
    del view
    reader.close()


def test_read_events_takes_a_provider_or_a_timeline(tmp_path, rng):
    movie = _movie(tmp_path / "gaps.eer", rng, frames=3, empty=(1,))
    assert vio.read_events(movie.path).timestamps.tolist() == [0, 2]
    assert vio.read_events(movie.path, 2, 3).timestamps.tolist() == [2]
    provider = vio.FileDetectorEventTimelineReaderProvider(
        vio.DetectorEventTimelineFileReadFormatSelector.get_shared()
    )
    assert vio.read_events(movie.path, events=provider).timestamps.tolist() == [0, 2]
    timeline = vio.read_events(movie.path, 0, 1, events=vio.DetectorEventTimeline())
    assert vio.read_events(movie.path, 2, 3, events=timeline) is timeline
    assert timeline.timestamps.tolist() == [0, 2]


def test_event_providers_raise_runtime_errors_for_files(tmp_path):
    provider = vio.detector_event_timeline_reader_provider()
    with pytest.raises(RuntimeError):
        provider.acquire(tmp_path / "missing.eer")
    vio.write_single(np.zeros((2, 2), np.float32), tmp_path / "image.mrc")
    with pytest.raises(RuntimeError):
        provider.acquire(tmp_path / "image.mrc")
    with pytest.raises(TypeError):
        vio.FileDetectorEventTimelineReaderProvider(None)


# ---------------------------------------------------------------- events as movies


def _movie_provider(fractions, binning=1):
    return vio.DetectorEventImageReaderProvider(
        vio.detector_event_timeline_reader_provider(),
        vio.DetectorEventFractionation(fractions),
        vio.CountingDetectorEventRenderer(vio.DetectorEventBinning(binning)),
    )


@pytest.mark.parametrize("compression", [65000, 65001])
def test_event_image_provider_reads_fractions_at_the_detectors_resolution(tmp_path, rng, compression):
    movie = _movie(tmp_path / "m.eer", rng, compression=compression)
    provider = _movie_provider(4)
    assert isinstance(provider, vio.ImageReaderProvider)
    assert vio.query_descriptor(movie.path, provider) == vio.ImageDescriptor((4, 6, 8), 2, "uint32")
    movie_frames = vio.read(movie.path, readers=provider)
    assert movie_frames.shape == (4, 6, 8) and movie_frames.dtype == np.uint32
    np.testing.assert_array_equal(movie_frames, movie.counts())
    # the published helper reads the same values through the format's native renderer, as uint16
    native = vio.read(movie.path, readers=vio.detector_event_image_reader_provider(4))
    assert native.shape == (4, 6, 8) and native.dtype == np.uint16
    np.testing.assert_array_equal(native, movie_frames)


def test_three_fractions_of_four_frames_and_batches_of_them(movie):
    provider = _movie_provider(3)
    counts = movie.counts()
    expected = np.stack([counts[0], counts[1], counts[2] + counts[3]])
    out = np.zeros((3, 6, 8), np.float32)
    loader = vio.ExecutorImageLoader(provider, vio.ThreadPoolExecutor(2))
    vio.read_batch_async(loader, out, [vio.ImageLocation(movie.path, i) for i in (2, 0, 1)]).get()
    np.testing.assert_array_equal(out, expected[[2, 0, 1]])
    patches = np.zeros((2, 2, 2), np.uint32)
    vio.read_patches_async(loader, patches, vio.ImageLocation(movie.path, 2), [[1, 1], [3, 5]]).get()
    np.testing.assert_array_equal(patches, [expected[2, 0:2, 0:2], expected[2, 2:4, 4:6]])


def test_one_fraction_is_a_single_image_and_binning_must_divide(tmp_path, rng):
    movie = _movie(tmp_path / "big.eer", rng, shape=(8, 16))
    image = vio.read(movie.path, readers=_movie_provider(1, binning=2), data_type="float32")
    assert image.shape == (4, 8) and image.dtype == np.float32
    np.testing.assert_array_equal(image, movie.counts().sum(axis=0).reshape(4, 2, 8, 2).sum(axis=(1, 3)))
    native = vio.read(movie.path, readers=vio.detector_event_image_reader_provider(1, binning=2))
    np.testing.assert_array_equal(native, image)
    small = _movie(tmp_path / "small.eer", rng)
    for readers in (_movie_provider(2, binning=4), vio.detector_event_image_reader_provider(2, binning=4)):
        with pytest.raises(ValueError):
            vio.read(small.path, readers=readers)
    with pytest.raises(ValueError):
        vio.read(small.path, readers=_movie_provider(5))  # more fractions than frames


def test_cached_event_image_provider(movie):
    provider = vio.detector_event_image_reader_provider(2, cache=1)
    assert isinstance(provider, vio.CachingImageReaderProvider)
    assert vio.query_descriptor(movie.path, provider).extents == (2, 6, 8)


def test_event_image_provider_refuses_wrong_arguments():
    events = vio.detector_event_timeline_reader_provider()
    fractions = vio.DetectorEventFractionation(2)
    renderer = vio.CountingDetectorEventRenderer(vio.DetectorEventBinning(1))
    for arguments in [
        (None, fractions, renderer),
        (events, 2, renderer),
        (events, fractions, None),
        (events,),
    ]:
        with pytest.raises(TypeError):
            vio.DetectorEventImageReaderProvider(*arguments)


def test_event_image_providers_describe_what_decides_their_images():
    """Providers that render alike describe themselves alike, so a scratch kept across programs keeps
    their images; any setting that changes the images changes the description."""
    described = _movie_provider(4).configuration()
    assert described is not None and described == _movie_provider(4).configuration()
    assert described == vio.CachingImageReaderProvider(_movie_provider(4), 2).configuration()
    assert _movie_provider(2).configuration() != described
    assert _movie_provider(4, binning=2).configuration() != described
    elsewhere = vio.DetectorEventImageReaderProvider(
        vio.detector_event_timeline_reader_provider(storage_options={"anon": True}),
        vio.DetectorEventFractionation(4),
        vio.CountingDetectorEventRenderer(vio.DetectorEventBinning(1)),
    )
    assert elsewhere.configuration() != described and "anon" not in elsewhere.configuration()


def test_an_event_image_provider_whose_renderer_cannot_tell_describes_nothing():
    class Unknown:
        data_type = vio.NumericalType.float64

        def get_image_extents(self, events):
            return (1, 1)

        def render(self, descriptor, events, destination):
            np.asarray(destination)[...] = 0

    provider = vio.DetectorEventImageReaderProvider(
        vio.detector_event_timeline_reader_provider(), vio.DetectorEventFractionation(2), Unknown()
    )
    assert provider.configuration() is None


def test_a_renderer_written_in_python(movie):
    class Total(vio.DetectorEventRenderer):
        data_type = vio.NumericalType.float64

        def get_image_extents(self, events):
            return (1, 1)

        def render(self, descriptor, events, destination):
            np.asarray(destination)[...] = events.event_count

    provider = vio.DetectorEventImageReaderProvider(
        vio.detector_event_timeline_reader_provider(), vio.DetectorEventFractionation(2), Total()
    )
    totals = vio.read(movie.path, readers=provider)
    assert totals.shape == (2, 1, 1) and totals.dtype == np.float64
    assert totals[:, 0, 0].tolist() == [sum(len(e) for e in movie.events[a:b]) for a, b in ((0, 2), (2, 4))]


def test_a_timeline_being_read_refuses_every_other_use(movie, monkeypatch):
    """While a read fills a timeline, another thread's use of it raises BufferError; the read is whole."""
    from vitrio.formats.eer import _timeline

    decoding, release = threading.Event(), threading.Event()
    decode = _timeline.decode_frames

    def paused(*args):  # the read holds the timeline here until the other thread has tried it
        decoding.set()
        assert release.wait(30)
        decode(*args)

    monkeypatch.setattr(_timeline, "decode_frames", paused)
    reader = vio.detector_event_timeline_reader_provider().acquire(movie.path)
    timeline = vio.DetectorEventTimeline(2)
    reading = threading.Thread(target=reader.read, args=(0, 4, timeline))
    reading.start()
    try:
        assert decoding.wait(30)
        for use in (
            timeline.clear,
            lambda: timeline.add_group(9, [[0, 0]]),
            lambda: timeline.timestamps,
            timeline.get_positions,
            lambda: reader.read(0, 1, timeline),
        ):
            with pytest.raises(BufferError, match="being read or changed by another call"):
                use()
    finally:
        release.set()
        reading.join(30)
    assert timeline.group_count == 4 and timeline.timestamps.tolist() == [0, 1, 2, 3]
    np.testing.assert_array_equal(timeline.get_positions(0), movie.events[0])
