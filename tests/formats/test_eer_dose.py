"""DetectorEventFractionation by dose: whole frames grouped as near the dose asked for as frames allow,
the last fraction taking the frames left, read through the native renderer and through one built by hand."""

from __future__ import annotations

import numpy as np
import pytest

import vitrio as vio
from vitrio.testing.eer import random_movie


@pytest.fixture(scope="module")
def movie(tmp_path_factory: pytest.TempPathFactory):
    """An EER movie of 11 frames of 32 x 32."""
    return random_movie(tmp_path_factory.mktemp("eer") / "movie.eer", frames=11, shape=(32, 32))


@pytest.mark.parametrize(
    ("frames", "total", "per_fraction", "lengths"),
    [
        (11, 22.0, 4.0, [2, 2, 2, 2, 3]),  # 2 e/A^2 a frame: two frames a fraction, the last three
        (11, 22.0, 5.2, [3, 3, 5]),  # 2.6 frames round to 3
        (11, 22.0, 0.5, [1] * 11),  # a fraction holds one frame at least
        (11, 22.0, 100.0, [11]),  # one fraction of all
        (40, 50.0, 1.0, [1] * 40),  # 1.25 e/A^2 a frame: one frame is nearest
        (1000, 40.0, 1.0, [25] * 40),  # 0.04 a frame
        (1003, 40.0, 1.0, [25] * 39 + [28]),
    ],
)
def test_fractions_by_dose_group_whole_frames(frames, total, per_fraction, lengths):
    by_total = vio.DetectorEventFractionation(dose_per_fraction=per_fraction, total_dose=total)
    by_rate = vio.DetectorEventFractionation(dose_per_fraction=per_fraction, dose_per_frame=total / frames)
    for fractionation in (by_total, by_rate):
        count = fractionation.count_for(frames)
        begins = [fractionation.get_fraction_begin(i, frames) for i in range(count + 1)]
        assert np.diff(begins).tolist() == lengths and begins[-1] == frames
    assert by_total.fraction_count is None and by_total != by_rate
    assert (
        repr(by_total) == f"DetectorEventFractionation(dose_per_fraction={per_fraction}, total_dose={total})"
    )


def test_the_published_fractionation_by_count_is_unchanged():
    four = vio.DetectorEventFractionation(4)
    assert [four.get_fraction_begin(i, 14) for i in range(5)] == [0, 3, 7, 10, 14]
    assert (
        four.count_for(14) == four.fraction_count == 4
        and repr(four) == "DetectorEventFractionation(fraction_count=4)"
    )
    with pytest.raises(ValueError, match="not both"):
        vio.DetectorEventFractionation(4, dose_per_fraction=1.0, total_dose=2.0)
    with pytest.raises(ValueError, match="one of them"):
        vio.DetectorEventFractionation(dose_per_fraction=1.0)
    with pytest.raises(ValueError, match="positive"):
        vio.DetectorEventFractionation(dose_per_fraction=-1.0, total_dose=2.0)
    with pytest.raises(TypeError):
        vio.DetectorEventFractionation()


def test_the_library_reads_a_movie_by_dose(movie):
    fractionation = vio.DetectorEventFractionation(dose_per_fraction=1.0, dose_per_frame=0.4)
    read = vio.read(movie.path, readers=vio.detector_event_image_reader_provider(fractionation))
    counts = movie.counts()  # 2.5 frames round to 2: five fractions of 2, the last of 3
    expected = [counts[i : i + 2].sum(0) for i in range(0, 8, 2)] + [counts[8:].sum(0)]
    np.testing.assert_array_equal(read, np.stack(expected))


def test_events_rendered_by_hand_are_cut_by_dose_as_the_native_renderer_cuts_them(movie):
    fractionation = vio.DetectorEventFractionation(dose_per_fraction=3.0, total_dose=11.0)
    by_hand = vio.DetectorEventImageReaderProvider(
        vio.detector_event_timeline_reader_provider(),
        fractionation,
        vio.CountingDetectorEventRenderer(vio.DetectorEventBinning(1)),
    )
    counts = movie.counts()  # 1 e/A^2 a frame: three fractions of 3 frames, the last of 5
    expected = np.stack([counts[0:3].sum(0), counts[3:6].sum(0), counts[6:11].sum(0)])
    np.testing.assert_array_equal(vio.read(movie.path, readers=by_hand), expected)
    native = vio.detector_event_image_reader_provider(fractionation)
    np.testing.assert_array_equal(vio.read(movie.path, readers=native), expected)
