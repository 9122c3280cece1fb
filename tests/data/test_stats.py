"""`DataLoader.stats`, `ImageLoader.stats()` and the progress bar, on loads whose figures are known."""

from __future__ import annotations

import io
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tifffile

import vitrio as vio
from vitrio._concurrency import run_tasks
from vitrio.data import ArraySource, DataLoader, Dataset, ImageSource, ReadStats

from .conftest import write_stacks

SLEEP = 0.02


class SlowSource(ArraySource):
    """Values in memory whose every read takes SLEEP seconds on the loader's threads."""

    def read_async(self, loader, rows, out):
        def read() -> None:
            time.sleep(SLEEP)
            out[...] = self.array[rows]

        return [run_tasks(loader.executor, [read])]


def test_a_transform_that_sleeps_on_the_thread_that_iterates_is_the_programs_time():
    dataset = Dataset({"x": np.arange(40)})
    batches = DataLoader(
        dataset, 8, transform=lambda batch: time.sleep(SLEEP) or batch, transform_threads=False
    )
    for _ in batches:
        pass
    stats = batches.stats
    assert stats.batches == 5 and stats.rows == 40
    assert stats.working_seconds >= 5 * SLEEP
    assert stats.waiting_share < 0.5
    assert stats.seconds == pytest.approx(stats.waiting_seconds + stats.working_seconds)


def test_a_slow_source_is_time_waited_for():
    dataset = Dataset({"x": SlowSource(np.arange(40))})
    batches = DataLoader(dataset, 8, prefetch=1, loader=vio.loader(workers=1))
    assert [int(batch["x"].sum()) for batch in batches] == [28, 92, 156, 220, 284]
    stats = batches.stats
    assert stats.batches == 5
    assert stats.waiting_seconds >= 4 * SLEEP
    assert stats.waiting_share > 0.6


def test_scratch_hits_are_counted_exactly(tmp_path: Path):
    stacks = write_stacks(tmp_path, (20, 12))
    locations = stacks.locations
    first_file = 20 * 12 * 10 * 4
    scratch = vio.create_host_image_scratch(locations, run_length=1, max_size=first_file)
    loader = vio.loader(workers=2, cache=4, scratch=scratch)
    dataset = Dataset({"image": ImageSource(locations, data_type="float32")})
    batches = DataLoader(dataset, 4, loader=loader)
    np.testing.assert_array_equal(np.concatenate([b["image"] for b in batches]), stacks.images)
    first = batches.stats.reads
    assert (first.images, first.scratch_images, first.bytes) == (32, 0, 32 * 12 * 10 * 4)
    np.testing.assert_array_equal(np.concatenate([b["image"] for b in batches]), stacks.images)
    second = batches.stats.reads
    assert (second.images, second.scratch_images) == (32, 20)
    assert second.scratch_share == pytest.approx(20 / 32)
    assert second.formats["scratch"].images == 20
    assert second.remote_requests == 0


def test_set_epoch_and_reset_start_from_zero(stacks):
    dataset = Dataset({"image": ImageSource(stacks.locations)})
    batches = DataLoader(dataset, 5, shuffle=True, seed=1)
    for _ in batches:
        pass
    assert batches.stats.reads.images == 21 and batches.stats.batches == 5
    batches.set_epoch(1)
    assert batches.stats.batches == 0 and batches.stats.reads.images == 0
    for number, _ in enumerate(batches):
        if number == 1:
            batches.reset_stats()
    assert batches.stats.batches == 3
    assert batches.stats.reads.images < 21


def test_reads_uncounted_still_count_the_time(stacks):
    dataset = Dataset({"image": ImageSource(stacks.locations)})
    batches = DataLoader(dataset, 5, count_reads=False)
    for _ in batches:
        pass
    assert batches.stats.batches == 5 and batches.stats.seconds > 0
    assert batches.stats.reads == ReadStats()


def test_as_dict_is_plain_numbers(stacks, loader):
    dataset = Dataset({"image": ImageSource(stacks.locations)})
    batches = DataLoader(dataset, 7, loader=loader)
    for _ in batches:
        pass
    figures = batches.stats.as_dict()
    assert all(isinstance(value, (int, float)) for value in figures.values())
    assert figures["rows"] == 21 and figures["reads/images"] == 21
    assert 0 <= figures["waiting_share"] <= 1
    assert figures["reads/files_opened"] + figures["reads/readers_reused"] >= 3


def test_the_cores_loader_counts_formats_conversions_and_patches(tmp_path: Path):
    raw = tmp_path / "raw.mrcs"
    vio.write_stack(np.arange(6 * 8 * 8, dtype=np.int16).reshape(6, 8, 8), raw)
    packed = tmp_path / "packed.tif"
    tifffile.imwrite(packed, np.ones((4, 8, 8), np.float32), compression="zlib", photometric="minisblack")
    loader = vio.loader(workers=2)
    locations = [vio.ImageLocation(raw, i) for i in range(6)] + [
        vio.ImageLocation(packed, i) for i in range(4)
    ]
    out = np.empty((10, 8, 8), np.float32)
    vio.read_batch_async(loader, out, locations).get()
    stats = loader.stats()
    assert (stats.images, stats.bytes, stats.conversions) == (10, out.nbytes, 6)
    assert stats.formats["tiff"].images == 4
    assert stats.formats["tiff"].bytes == 4 * 8 * 8 * 4
    assert stats.files_opened >= 2
    assert {read.key for read in stats.slowest} == {str(raw), str(packed)}
    patches = np.zeros((3, 4, 4), np.float32)
    vio.read_patches_async(loader, patches, vio.ImageLocation(raw, 2), [[4, 4], [0, 0], [7, 7]]).get()
    after = loader.stats(reset=True)
    assert (after.images, after.patches) == (13, 3)
    assert loader.stats().images == 0


def test_the_progress_bar_shows_batches_rate_and_waiting(stacks, capsys):
    dataset = Dataset({"image": ImageSource(stacks.locations)})
    for _ in DataLoader(dataset, 5, progress=True):
        pass
    shown = capsys.readouterr().err
    assert "5/5" in shown and "images/s" in shown and "waiting for data" in shown


def test_without_tqdm_the_progress_is_a_line(stacks, monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    dataset = Dataset({"image": ImageSource(stacks.locations)})
    for _ in DataLoader(dataset, 5, progress=True):
        pass
    last = sys.stderr.getvalue().rstrip("\n").split("\r")[-1]
    assert last.startswith("batches 5/5, ") and "waiting for data" in last
