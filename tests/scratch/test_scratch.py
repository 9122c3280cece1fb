"""Scratches: epochs after the first read no file, resuming across processes, budgets, faults."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

import vitrio as vio
from vitrio.formats import ImageReader

STACKS, IMAGES, SIDE = 4, 50, 16


@pytest.fixture
def stacks(tmp_path: Path) -> tuple[list[vio.ImageLocation], np.ndarray]:
    """Four MRC stacks of 50 images, their locations and values."""
    rng = np.random.default_rng(7)
    values = rng.standard_normal((STACKS, IMAGES, SIDE, SIDE), dtype=np.float32)
    (tmp_path / "data").mkdir()
    for i in range(STACKS):
        vio.write_stack(values[i], tmp_path / "data" / f"stack{i}.mrcs")
    locations = [
        vio.ImageLocation(tmp_path / "data" / f"stack{i}.mrcs", j)
        for i in range(STACKS)
        for j in range(IMAGES)
    ]
    return locations, values.reshape(-1, SIDE, SIDE)


def make(kind: str, locations, tmp_path: Path, **options) -> vio.ImageScratch:
    if kind == "host":
        return vio.create_host_image_scratch(locations, 8, **options)
    if kind == "mapped":
        return vio.create_mapped_file_image_scratch(locations, tmp_path / "images.scratch", 8, **options)
    return vio.create_directory_image_scratch(locations, tmp_path / "scratches", 8, budget=1 << 30, **options)


def epoch(loader, locations, order) -> np.ndarray:
    out = np.empty((len(order), SIDE, SIDE), np.float32)
    for first in range(0, len(order), 64):
        rows = order[first : first + 64]
        vio.read_batch_async(loader, out[first : first + 64], [locations[i] for i in rows]).get()
    return out


def move_away(tmp_path: Path) -> None:
    shutil.move(tmp_path / "data", tmp_path / "elsewhere")


@pytest.mark.parametrize("kind", ["host", "mapped", "directory"])
def test_second_epoch_reads_no_file(kind, stacks, tmp_path):
    locations, values = stacks
    scratch = make(kind, locations, tmp_path)
    loader = vio.loader(workers=2, scratch=scratch)
    order = np.random.default_rng(1).permutation(len(locations))
    first = epoch(loader, locations, order)
    np.testing.assert_array_equal(first, values[order])
    assert scratch.held_count == len(locations)
    move_away(tmp_path)
    np.testing.assert_array_equal(epoch(loader, locations, order[::-1]), values[order[::-1]])
    patches = np.zeros((1, 8, 8), np.float32)
    vio.read_patches_async(loader, patches, locations[3], [[8, 8]]).get()
    np.testing.assert_array_equal(patches[0], values[3][4:12, 4:12])


@pytest.mark.parametrize("kind", ["host", "mapped", "directory"])
def test_prefetch_takes_everything_in(kind, stacks, tmp_path):
    locations, values = stacks
    scratch = make(kind, locations, tmp_path)
    loader = vio.loader(workers=2, scratch=scratch)
    vio.prefetch_scratch_async(scratch, locations, loader.executor).get()
    assert scratch.held_count == len(locations)
    move_away(tmp_path)
    order = np.random.default_rng(2).permutation(len(locations))
    np.testing.assert_array_equal(epoch(loader, locations, order), values[order])


def test_a_grouping_of_locations_is_taken_as_the_locations(stacks):
    locations, values = stacks
    grouping = vio.ImageLocationGrouping(locations[::-1])
    scratch = vio.create_host_image_scratch(grouping, 8)
    assert len(scratch.keys) == STACKS and scratch.size == values.nbytes
    vio.prefetch_scratch_async(scratch, grouping, vio.SynchronousExecutor()).get()
    assert scratch.held_count == len(locations)


def test_images_are_taken_in_a_run_at_a_time(stacks, tmp_path):
    locations, _ = stacks
    scratch = vio.create_host_image_scratch(locations, 8)
    loader = vio.loader(workers=1, scratch=scratch)
    vio.read_batch_async(loader, np.empty((1, SIDE, SIDE), np.float32), [locations[9]]).get()
    assert scratch.held_count == 8


def test_max_size_holds_whole_files_in_key_order(stacks, tmp_path):
    locations, values = stacks
    image_bytes = SIDE * SIDE * 4
    scratch = vio.create_host_image_scratch(locations, 10, max_size=2 * IMAGES * image_bytes + 100)
    assert [Path(key).name for key in scratch.keys] == ["stack0.mrcs", "stack1.mrcs"]
    loader = vio.loader(workers=2, scratch=scratch)
    order = np.arange(len(locations))
    np.testing.assert_array_equal(epoch(loader, locations, order), values)
    assert scratch.held_count == 2 * IMAGES


def test_bad_arguments(stacks, tmp_path):
    locations, _ = stacks
    with pytest.raises(ValueError, match="run_length"):
        vio.create_host_image_scratch(locations, 0)
    with pytest.raises(ValueError, match="nothing"):
        vio.create_host_image_scratch([], 4)
    with pytest.raises(ValueError, match="nothing to hold"):
        vio.create_host_image_scratch(locations, 4, max_size=10)
    with pytest.raises(IndexError, match="stack0.mrcs.*index 50"):
        vio.create_host_image_scratch([vio.ImageLocation(locations[0].key, IMAGES)], 4)


def run_python(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stdout


RESUME = """
    import numpy as np, vitrio as vio
    keys = ["{data}/stack%d.mrcs" % i for i in range({stacks})]
    locations = [vio.ImageLocation(key, j) for key in keys for j in range({images})]
    scratch = vio.create_mapped_file_image_scratch(locations, "{path}", 8)
    print(scratch.held_count)
    if {read}:
        loader = vio.loader(workers=2, scratch=scratch)
        out = np.empty((len(locations), {side}, {side}), np.float32)
        vio.read_batch_async(loader, out, locations).get()
        np.save("{out}", out)
"""


def resume(tmp_path: Path, read: bool) -> int:
    code = RESUME.format(
        data=tmp_path / "data",
        stacks=STACKS,
        images=IMAGES,
        path=tmp_path / "images.scratch",
        read=read,
        side=SIDE,
        out=tmp_path / "out.npy",
    )
    return int(run_python(code).split()[0])


def test_mapped_scratch_resumes_in_another_process_except_changed_files(stacks, tmp_path):
    locations, values = stacks
    assert resume(tmp_path, read=True) == 0
    assert resume(tmp_path, read=False) == len(locations)
    stat = os.stat(locations[IMAGES].key)
    os.utime(locations[IMAGES].key, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert resume(tmp_path, read=True) == len(locations) - IMAGES
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), values)


def test_changed_file_is_read_again_not_served_stale(stacks, tmp_path):
    locations, values = stacks
    scratch = vio.create_mapped_file_image_scratch(locations, tmp_path / "images.scratch", 8)
    epoch(vio.loader(workers=2, scratch=scratch), locations, np.arange(len(locations)))
    del scratch
    changed = values[:IMAGES] + 1
    vio.write_stack(changed, locations[0].key)
    os.utime(locations[0].key, ns=(1, 10**18))
    scratch = vio.create_mapped_file_image_scratch(locations, tmp_path / "images.scratch", 8)
    out = epoch(vio.loader(workers=2, scratch=scratch), locations, np.arange(IMAGES))
    np.testing.assert_array_equal(out, changed)


@pytest.mark.parametrize("damage", ["truncate", "foreign", "header", "pixels"])
def test_damaged_scratch_file_is_rebuilt_or_retaken(damage, stacks, tmp_path):
    locations, values = stacks
    path = tmp_path / "images.scratch"
    scratch = vio.create_mapped_file_image_scratch(locations, path, 8)
    epoch(vio.loader(workers=2, scratch=scratch), locations, np.arange(len(locations)))
    del scratch
    size = path.stat().st_size
    with open(path, "r+b") as file:
        if damage == "truncate":
            file.truncate(size // 2)
        elif damage == "foreign":
            file.write(b"not a scratch at all" * 10)
        elif damage == "header":
            file.seek(40)
            file.write(b"\xff\xff\xff\xff")
        else:
            file.seek(size - 100)
            file.write(b"\x7f" * 50)
    scratch = vio.create_mapped_file_image_scratch(locations, path, 8)
    order = np.arange(len(locations))
    np.testing.assert_array_equal(epoch(vio.loader(workers=2, scratch=scratch), locations, order), values)


def test_directory_scratch_evicts_least_recently_used_scratch_files_only(stacks, tmp_path):
    locations, _ = stacks
    directory = tmp_path / "scratches"
    folder = directory / f"vitrio-{os.geteuid()}"
    folder.mkdir(mode=0o700, parents=True)
    keep = folder / "notes.txt"
    keep.write_text("not a scratch")
    old = folder / ("0" * 32 + ".vitrio-scratch")
    old.write_bytes(b"\0" * 300_000)
    os.utime(old, ns=(1, 1))
    newer = folder / ("1" * 32 + ".vitrio-scratch")
    newer.write_bytes(b"\0" * 100_000)
    scratch = vio.create_directory_image_scratch(locations, directory, 8, budget=350_000)
    assert not old.exists() and newer.exists() and keep.read_text() == "not a scratch"
    assert Path(scratch.path).parent == folder and scratch.path.endswith(".vitrio-scratch")
    assert sum(p.stat().st_size for p in folder.glob("*.vitrio-scratch")) <= 350_000 + 8192
    again = vio.create_directory_image_scratch(locations, directory, 8, budget=350_000)
    assert again.path == scratch.path


def test_full_disk_raises_a_clear_os_error(stacks, tmp_path):
    locations, _ = stacks
    code = f"""
        import resource, signal, vitrio as vio
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))
        locations = [vio.ImageLocation("{tmp_path / "data"}/stack%d.mrcs" % i, j) for i in range({STACKS})
                     for j in range({IMAGES})]
        try:
            vio.create_mapped_file_image_scratch(locations, "{tmp_path / "full.scratch"}", 8)
        except OSError as error:
            print("OSError", error)
    """
    output = run_python(code)
    assert output.startswith("OSError") and "full.scratch" in output and "no room" in output
    assert not list(tmp_path.glob(".full.scratch*partial"))
    assert resource.getrlimit(resource.RLIMIT_FSIZE)[0] != 20000


def test_a_failed_mapped_scratch_leaves_no_file(stacks, tmp_path):
    locations, _ = stacks
    missing = [*locations[:3], vio.ImageLocation(tmp_path / "missing.mrcs", 0)]
    with pytest.raises(FileNotFoundError, match="missing.mrcs"):
        vio.create_mapped_file_image_scratch(missing, tmp_path / "failed.scratch", 8)
    assert not [p.name for p in tmp_path.iterdir() if "failed.scratch" in p.name]


def test_two_processes_taking_in_the_same_images_both_read_right(stacks, tmp_path):
    locations, values = stacks
    code = RESUME.format(
        data=tmp_path / "data",
        stacks=STACKS,
        images=IMAGES,
        path=tmp_path / "images.scratch",
        read=True,
        side=SIDE,
        out="{out}",
    )
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code.replace("{out}", str(tmp_path / f"o{i}.npy")))]
        )
        for i in range(2)
    ]
    assert [p.wait(timeout=120) for p in processes] == [0, 0]
    for i in range(2):
        np.testing.assert_array_equal(np.load(tmp_path / f"o{i}.npy"), values)
    assert resume(tmp_path, read=False) == len(locations)


class _CountingReader(ImageReader):
    """A stack of 10 images of 4 x 4 whose image i is full of i; reads wait for a gate and are counted."""

    def __init__(self, key: str, provider: _GatedFiles):
        super().__init__(key, vio.ImageDescriptor((10, 4, 4), 2, "float32"))
        self._provider = provider

    def read_run(self, start, outs):
        self.check_run(start, len(outs))
        assert self._provider.gate.wait(20), "the gate never opened"
        with self._provider.lock:
            self._provider.reads.append((start, len(outs)))
        for i, out in enumerate(outs):
            out[...] = start + i


class _GatedFiles(vio.ImageReaderProvider):
    """Serves `_CountingReader`s, counting the readers asked for (once the gate is open, any number)."""

    def __init__(self):
        self.gate = threading.Event()
        self.lock = threading.Condition()
        self.acquired = 0
        self.reads: list[tuple[int, int]] = []

    def acquire(self, key):
        with self.lock:
            self.acquired += 1
            self.lock.notify_all()
        return _CountingReader(os.fspath(key), self)

    def release(self, reader):
        pass

    def wait_acquired(self, count: int) -> None:
        with self.lock:
            assert self.lock.wait_for(lambda: self.acquired >= count, 20), f"{self.acquired} of {count} came"


@pytest.mark.parametrize("kind", ["host", "mapped", "directory"])
def test_threads_taking_in_the_same_run_read_it_once(kind, tmp_path):
    """Six threads ask for one run of a scratch at once: all of them find it missing and ask for the
    file before any has read it; the run is read once, and each gets its images."""
    files = _GatedFiles()
    locations = [vio.ImageLocation("stack", i) for i in range(10)]
    scratch = make(kind, locations, tmp_path, files=files)
    wanted = [vio.ImageLocation("stack", 2)]  # in the first run, images 0 to 7
    executor = vio.ThreadPoolExecutor(6)
    before = files.acquired
    completions = [vio.prefetch_scratch_async(scratch, wanted, executor, files) for _ in range(6)]
    files.wait_acquired(before + 6)  # every thread found the run missing
    files.gate.set()
    for completion in completions:
        completion.get()
    assert files.reads == [(0, 8)]
    out = np.full((3, 4, 4), -7, np.float32)
    vio.read_batch_async(vio.loader(workers=2, scratch=scratch), out, [locations[i] for i in (7, 0, 2)]).get()
    np.testing.assert_array_equal(out[:, 0, 0], [7, 0, 2])
    assert files.reads == [(0, 8)]


@pytest.mark.parametrize("ahead", [4, 2], ids=["4 ahead (the default)", "2 ahead"])
@pytest.mark.parametrize("whole", [False, True], ids=["images", "whole files"])
def test_prefetch_tells_the_kernel_what_it_will_read_files_ahead(
    tmp_path: Path, monkeypatch, whole: bool, ahead: int
):
    from vitrio.scratch import provider

    paths = [tmp_path / f"stack{i}.mrcs" for i in range(7)]
    for i, path in enumerate(paths):
        vio.write_stack(np.full((5, SIDE, SIDE), i, np.float32), path)
    wanted = [1, 2, 4]
    locations = [str(p) for p in paths] if whole else [vio.ImageLocation(p, j) for p in paths for j in wanted]
    scratch = vio.create_host_image_scratch(locations, 8)
    events = []
    advise, fadvise, take_in = provider.advise, os.posix_fadvise, scratch.take_in

    def hinted_runs(paths_, checks, runs):
        events.append(("hint", paths_[0].decode(), runs[:, 1:3].tolist()))
        advise(paths_, checks, runs)

    def hinted_file(fd, offset, length, advice):
        events.append(("hint", os.readlink(f"/proc/self/fd/{fd}"), [[offset, length]]))
        fadvise(fd, offset, length, advice)

    def taken_in(key, indices, files):
        events.append(("take", key))
        take_in(key, indices, files)

    monkeypatch.setattr(provider, "advise", hinted_runs)
    monkeypatch.setattr(os, "posix_fadvise", hinted_file)
    monkeypatch.setattr(scratch, "take_in", taken_in)
    assert vio.configuration().scratch_hinted_ahead == 4
    with vio.configure(scratch_hinted_ahead=ahead):
        vio.prefetch_scratch_async(scratch, locations, vio.SynchronousExecutor()).get()

    expected = [("hint", str(paths[i])) for i in range(ahead)]
    for i in range(len(paths)):
        if i + ahead < len(paths):
            expected.append(("hint", str(paths[i + ahead])))
        expected.append(("take", str(paths[i])))
    assert [e[:2] for e in events] == expected
    for event in events:
        if event[0] == "hint":
            image = SIDE * SIDE * 4
            assert event[2] == ([[0, 0]] if whole else [[1024 + j * image, image] for j in wanted])
    assert scratch.held_count == len(paths) * (5 if whole else len(wanted))
