"""Faults in the middle of the work: files removed or truncated under a caching loader, readers that
raise, a disk that fills while files are written.

Each fault must surface at the batch or the write it belongs to (from
`Completion.get()` or the call), name the file, and leave the loader or the
saver working for what comes next; a failed write leaves nothing at its path
and no `.partial` file, and files finished before it are intact. Faults that
could kill the interpreter (SIGBUS, a full file-size limit) run in a
subprocess.
"""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import numpy as np
import pytest

import vitrio as vio
from vitrio.formats import ByteSource, Format, ImageReader, RawArrayReader, _registry

from .helpers import open_files, run_script

pytestmark = pytest.mark.timeout(120)

IMAGES, SHAPE = 8, (16, 16)
IMAGE_BYTES = SHAPE[0] * SHAPE[1] * 4


def _values(number: int) -> np.ndarray:
    return (np.arange(IMAGES * SHAPE[0] * SHAPE[1]).reshape(IMAGES, *SHAPE) + 10_000 * number).astype(
        np.float32
    )


@pytest.fixture
def stacks(tmp_path: Path) -> list[Path]:
    paths = [tmp_path / f"stack-{n}.mrcs" for n in range(12)]
    for number, path in enumerate(paths):
        vio.write_stack(_values(number), path)
    return paths


def _batches(paths: list[Path], size: int = 16, seed: int = 0) -> list[list[vio.ImageLocation]]:
    locations = [vio.ImageLocation(p, i) for p in paths for i in range(IMAGES)]
    order = np.random.default_rng(seed).permutation(len(locations))
    return [[locations[i] for i in order[a : a + size]] for a in range(0, len(order), size)]


def _expected(batch: list[vio.ImageLocation], paths: list[Path]) -> np.ndarray:
    numbers = {str(p): n for n, p in enumerate(paths)}
    return np.stack([_values(numbers[loc.key])[loc.index_in_stack] for loc in batch])


def _read(loader: vio.ImageLoader, batch: list[vio.ImageLocation]) -> np.ndarray:
    out = np.zeros((len(batch), *SHAPE), np.float32)
    vio.read_batch_async(loader, out, batch).get()
    return out


def test_files_removed_and_truncated_in_the_middle_of_an_epoch(stacks: list[Path]):
    loader = vio.loader(workers=2, cache=4)
    removed, cut = stacks[3], stacks[5]
    bad = {str(removed), str(cut)}
    threads, files = threading.active_count(), open_files()
    batches = _batches(stacks)
    failed = 0
    for number, batch in enumerate(batches):
        if number == len(batches) // 2:
            os.unlink(removed)
            os.truncate(cut, 1024 + 2 * IMAGE_BYTES)
        try:
            out = _read(loader, batch)
        except (OSError, ValueError) as error:
            assert number >= len(batches) // 2, error
            assert any(key in str(error) for key in bad & {loc.key for loc in batch}), error
            failed += 1
        else:
            # a cached reader of the removed file still reads what it held
            assert str(cut) not in {loc.key for loc in batch} or number < len(batches) // 2
            np.testing.assert_array_equal(out, _expected(batch, stacks))
    assert failed
    healthy = [p for p in stacks if str(p) not in bad]
    for batch in _batches(healthy, seed=1):
        np.testing.assert_array_equal(_read(loader, batch), _expected(batch, stacks))
    # the truncated file's reader was dropped: written again, the file reads
    vio.write_stack(_values(5), cut)
    batch = [vio.ImageLocation(cut, i) for i in range(IMAGES)]
    np.testing.assert_array_equal(_read(loader, batch), _values(5))
    assert loader.readers.reader_count <= loader.readers.capacity
    assert threading.active_count() <= threads + loader.worker_count
    assert open_files() <= files + loader.readers.capacity


def test_a_file_truncated_between_batches_is_opened_anew_and_refused(stacks: list[Path]):
    """The batch's check of the path finds the file changed: its kept reader is closed, and the file,
    opened anew, is refused by its format, naming it; written again, it reads."""
    loader = vio.loader(workers=1, cache=4)
    batch = [vio.ImageLocation(stacks[0], i) for i in range(IMAGES)]
    _read(loader, batch)
    os.truncate(stacks[0], 1024 + 3 * IMAGE_BYTES)
    for _ in range(2):
        with pytest.raises(ValueError, match=f"{stacks[0]}: the file is truncated"):
            _read(loader, batch)
        assert loader.readers.reader_count == 0
    vio.write_stack(_values(0), stacks[0])
    np.testing.assert_array_equal(_read(loader, batch), _values(0))


def test_a_file_truncated_while_its_reader_is_served_raises_from_it_and_is_opened_anew(
    stacks: list[Path], monkeypatch: pytest.MonkeyPatch
):
    """Truncated after the batch's check of the path found it unchanged, the file is read through the
    reader kept open, whose own check raises; the stale reader is closed, and the next batch opens the
    file anew. Into float64, so that the reader converts the values (no native read); one thread, so
    that the first failure of the batch is the kept reader's (the other tasks open the file anew)."""
    loader = vio.loader(workers=1, cache=4)
    batch = [vio.ImageLocation(stacks[0], i) for i in range(IMAGES)]
    vio.read_batch_async(loader, np.zeros((IMAGES, *SHAPE)), batch).get()
    check = RawArrayReader.check_unchanged

    def truncated_then_checked(reader: RawArrayReader) -> None:
        os.truncate(stacks[0], 1024 + 3 * IMAGE_BYTES)
        monkeypatch.setattr(RawArrayReader, "check_unchanged", check)
        check(reader)

    monkeypatch.setattr(RawArrayReader, "check_unchanged", truncated_then_checked)
    with pytest.raises(OSError, match=f"{stacks[0]}: the file was truncated"):
        vio.read_batch_async(loader, np.zeros((IMAGES, *SHAPE)), batch).get()
    assert loader.readers.reader_count == 0  # the stale reader is closed
    with pytest.raises(ValueError, match=f"{stacks[0]}: the file is truncated"):
        vio.read_batch_async(loader, np.zeros((IMAGES, *SHAPE)), batch).get()


def test_a_truncation_racing_a_copy_raises_instead_of_killing(stacks: list[Path]):
    """The reader checks the file's size before it copies; a truncation after that check would make
    the copy out of the memory map raise SIGBUS. A check that truncates the file instead makes that
    happen every time, within the batch whose check of the path found the file unchanged, so that the
    reader kept open serves it. One thread, so that the first failure of a batch is the first task's
    (the others open the file anew, and find it truncated); the float32 destination is not one block,
    so that the reader copies it, not a native read."""
    result = run_script(
        f"""
        import json, os, numpy as np, vitrio as vio
        from vitrio.formats import RawArrayReader
        path = {str(stacks[0])!r}
        cut = []
        RawArrayReader.check_unchanged = lambda self: cut and os.truncate(cut.pop(), 1024)
        loader = vio.loader(workers=1, cache=4)
        locations = [vio.ImageLocation(path, i) for i in range(8)]
        patches = np.zeros((2, 4, 4))
        reads = {{
            "float32": lambda: vio.read_batch_async(
                loader, np.zeros((8, 16, 17), np.float32)[..., :16], locations
            ),
            "float64": lambda: vio.read_batch_async(loader, np.zeros((8, 16, 16)), locations),
            "patches": lambda: vio.read_patches_async(loader, patches, locations[7], [[1, 1], [8, 8]]),
        }}
        errors = []
        for read in reads.values():
            vio.write_stack(np.ones((8, 16, 16), np.float32), path)
            read().get()
            cut.append(path)
            try:
                read().get()
            except OSError as error:
                errors.append(str(error))
        print(json.dumps(errors))
        """
    )
    assert len(result) == 3, result
    assert all(f"{stacks[0]}: " in error and "could not be read" in error for error in result), result


def test_a_handler_of_sigbus_installed_since_the_maps_leaves_them_guarded(stacks: list[Path]):
    """faulthandler.enable() (as a test runner's worker may call it) takes SIGBUS from the guard of the
    maps; the next map takes it back, so that a truncation under an open reader still raises. The file
    is truncated by the reader's check, as above; read into float64, converted by the reader."""
    result = run_script(
        f"""
        import faulthandler, json, os, numpy as np, vitrio as vio
        from vitrio.formats import RawArrayReader
        first, second = {str(stacks[0])!r}, {str(stacks[1])!r}
        cut = []
        RawArrayReader.check_unchanged = lambda self: cut and os.truncate(cut.pop(), 1024)
        loader = vio.loader(workers=1, cache=4)
        out = np.zeros((8, 16, 16))
        for path in (first, second):
            vio.write_stack(np.ones((8, 16, 16), np.float32), path)
        vio.read_batch_async(loader, out, [vio.ImageLocation(first, i) for i in range(8)]).get()
        faulthandler.enable()
        vio.read_batch_async(loader, out, [vio.ImageLocation(second, i) for i in range(8)]).get()
        cut.append(first)
        try:
            vio.read_batch_async(loader, out, [vio.ImageLocation(first, i) for i in range(8)]).get()
        except OSError as error:
            print(json.dumps(str(error)))
        """
    )
    assert f"{stacks[0]}: " in result and "could not be read" in result, result


def test_files_truncated_and_restored_while_batches_are_read(stacks: list[Path]):
    """A thread truncates a file and writes it back, over and over, while batches are read from it,
    until both have happened a few times (or a minute has passed, which fails)."""
    result = run_script(
        f"""
        import json, os, threading, time, numpy as np, vitrio as vio
        path = {str(stacks[0])!r}
        content = open(path, "rb").read()
        stop = threading.Event()

        def churn():
            fd = os.open(path, os.O_WRONLY)
            while not stop.is_set():
                os.ftruncate(fd, 1024 + {IMAGE_BYTES})
                os.pwrite(fd, content, 0)
            os.close(fd)

        thread = threading.Thread(target=churn)
        thread.start()
        loader = vio.loader(workers=2, cache=2)
        locations = [vio.ImageLocation(path, i) for i in range(8)]
        outcomes = {{"read": 0, "refused": 0}}
        deadline = time.monotonic() + 60
        while min(outcomes.values()) < 5 and time.monotonic() < deadline:
            for out, where in ((np.zeros((8, 16, 16), np.float32), locations), (np.zeros((3, 5, 5)), None)):
                try:
                    if where is None:
                        vio.read_patches_async(loader, out, locations[7], [[2, 2], [8, 8], [15, 15]]).get()
                    else:
                        vio.read_batch_async(loader, out, where).get()
                    outcomes["read"] += 1
                except (OSError, ValueError) as error:
                    assert path in str(error), error
                    outcomes["refused"] += 1
        stop.set()
        thread.join()
        print(json.dumps(outcomes))
        """
    )
    assert result["read"] and result["refused"], result


# ---------------------------------------------------------------- a reader that raises

BROKEN_INDEX = 3


class _FlakyReader(ImageReader):
    """Ten images of 16 x 16 whose values are their index, but image 3 cannot be read."""

    def __init__(self, key: str, source: ByteSource):
        super().__init__(key, vio.ImageDescriptor((10, *SHAPE), 2, "float32"))
        self._source = source

    def read_run(self, start: int, outs) -> None:
        self.check_run(start, len(outs))
        for index, out in enumerate(outs, start):
            if index == BROKEN_INDEX:
                raise OSError(errno.EIO, f"{self.key}: image {index}: input/output error")
            out[...] = index

    def close(self) -> None:
        self._source.close()


class _FlakyFormat(Format):
    name = "flaky"
    read_extensions = (".flaky",)

    @classmethod
    def open(cls, key: str, source: ByteSource, head: bytes) -> ImageReader:
        return _FlakyReader(key, source)


def test_a_reader_that_raises_fails_its_batches_only(stacks: list[Path], monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(_registry, "_REGISTRY", list(_registry._REGISTRY))
    vio.register_format(_FlakyFormat)
    flaky = stacks[0].parent / "images.flaky"
    flaky.write_bytes(b"flaky")
    loader = vio.loader(workers=2, cache=3)
    threads, files = threading.active_count(), open_files()
    for start in range(0, 10, 2):
        batch = [vio.ImageLocation(stacks[1], i) for i in range(3)]
        batch += [vio.ImageLocation(flaky, start), vio.ImageLocation(flaky, start + 1)]
        batch += [vio.ImageLocation(stacks[2], i) for i in range(3)]
        if BROKEN_INDEX in (start, start + 1):
            with pytest.raises(OSError, match=f"{flaky}: image {BROKEN_INDEX}: input/output error"):
                _read(loader, batch)
        else:
            out = _read(loader, batch)
            np.testing.assert_array_equal(out[[0, 1, 2, 5, 6, 7]], _expected(batch[:3] + batch[5:], stacks))
            assert (out[3] == start).all() and (out[4] == start + 1).all()
    assert threading.active_count() <= threads + loader.worker_count
    assert open_files() <= files + loader.readers.capacity


# ---------------------------------------------------------------- a disk that fills

_FILE_SIZE_LIMIT = """
import errno, json, os, resource, signal, numpy as np, vitrio as vio
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
directory = {directory!r}
before = os.path.join(directory, "before.mrc")
vio.write_single(np.full((8, 8), 7, np.float32), before)
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
"""


def _before_is_intact(directory: Path) -> None:
    np.testing.assert_array_equal(vio.read(directory / "before.mrc"), np.full((8, 8), 7, np.float32))


def test_whole_file_writes_beyond_the_file_size_limit(tmp_path: Path):
    result = run_script(
        _FILE_SIZE_LIMIT.format(directory=str(tmp_path))
        + """
big = np.ones((4, 300, 300), np.float32)
errors = {}
for name, write, values in (
    ("big.mrc", vio.write_single, np.ones((600, 600), np.float32)),
    ("big.mrcs", vio.write_stack, big),
    ("big.tif", vio.write_stack, big),
    ("fits.mrc", vio.write_single, big[0]),
):
    try:
        write(values, os.path.join(directory, name))
    except OSError as error:
        errors[name] = [error.errno, str(error)]
print(json.dumps(errors))
"""
    )
    assert sorted(result) == ["big.mrc", "big.mrcs", "big.tif"], result
    for name, (number, message) in result.items():
        assert number == errno.EFBIG and str(tmp_path / name) in message, result
    assert sorted(os.listdir(tmp_path)) == ["before.mrc", "fits.mrc"]  # no .partial file either
    _before_is_intact(tmp_path)


def test_batches_written_beyond_the_file_size_limit(tmp_path: Path):
    result = run_script(
        _FILE_SIZE_LIMIT.format(directory=str(tmp_path))
        + """
writers = vio.writer_provider()
saver = vio.saver(writers, workers=2)
small, big = os.path.join(directory, "small.mrcs"), os.path.join(directory, "big.mrcs")
writers.declare(small, vio.ImageDescriptor((4, 16, 16), 2, "float32"))
writers.declare(big, vio.ImageDescriptor((4, 512, 512), 2, "float32"))
values = np.arange(4 * 16 * 16, dtype=np.float32).reshape(4, 16, 16)
outcome = {}
source = np.zeros((4, 512, 512), np.float32)
try:
    vio.write_batch_async(saver, source, [vio.ImageLocation(big, i) for i in range(4)]).get()
except OSError as error:
    outcome["big"] = [error.errno, str(error)]
vio.write_batch_async(saver, values[:2], [vio.ImageLocation(small, i) for i in range(2)]).get()
writers.discard(big)
vio.write_batch_async(saver, values[2:], [vio.ImageLocation(small, i) for i in (2, 3)]).get()
writers.close(small)
outcome["small"] = bool((vio.read(small) == values).all())
print(json.dumps(outcome))
"""
    )
    number, message = result["big"]
    assert number == errno.EFBIG and str(tmp_path / "big.mrcs") in message, result
    assert result["small"] is True
    assert sorted(os.listdir(tmp_path)) == ["before.mrc", "small.mrcs"]
    _before_is_intact(tmp_path)


def test_a_disk_that_fills_in_the_middle_of_a_file(tmp_path: Path):
    """`os.pwrite` runs out of room after a budget of bytes, as on a full disk (which RLIMIT_FSIZE cannot
    imitate: files are made at their full size first)."""
    result = run_script(
        f"""
        import errno, json, os, numpy as np, vitrio as vio
        directory = {str(tmp_path)!r}
        room = {{"bytes": 0}}
        pwrite = os.pwrite

        def full_disk(fd, data, offset):
            if room["bytes"] < len(data):
                raise OSError(errno.ENOSPC, "No space left on device")
            room["bytes"] -= len(data)
            return pwrite(fd, data, offset)

        os.pwrite = full_disk
        room["bytes"] = 1 << 20
        vio.write_single(np.full((8, 8), 7, np.float32), os.path.join(directory, "before.mrc"))
        values = np.arange(8 * 64 * 64, dtype=np.float32).reshape(8, 64, 64)
        outcome = {{}}
        room["bytes"] = 3 * values[0].nbytes
        try:
            vio.write_stack(values, os.path.join(directory, "whole.mrcs"))
        except OSError as error:
            outcome["whole"] = [error.errno, str(error)]
        writers = vio.writer_provider()
        saver = vio.saver(writers, workers=2)
        path = os.path.join(directory, "batches.mrcs")
        writers.declare(path, vio.ImageDescriptor(values.shape, 2, "float32"))
        room["bytes"] = 2 * values[0].nbytes
        try:
            vio.write_batch_async(saver, values[:4], [vio.ImageLocation(path, i) for i in range(4)]).get()
        except OSError as error:
            outcome["batch"] = [error.errno, str(error)]
        room["bytes"] = 1 << 30  # room is made
        vio.write_batch_async(saver, values, [vio.ImageLocation(path, i) for i in range(8)]).get()
        room["bytes"] = 0  # and taken again before the header is finished
        try:
            writers.close(path)
        except OSError as error:
            outcome["close"] = [error.errno, str(error)]
        room["bytes"] = 1 << 30
        vio.write_stack(values, path)
        outcome["after"] = bool((vio.read(path) == values).all())
        print(json.dumps(outcome))
        """
    )
    for what, name in (("whole", "whole.mrcs"), ("batch", "batches.mrcs"), ("close", "batches.mrcs")):
        number, message = result[what]
        assert number == errno.ENOSPC and str(tmp_path / name) in message, result
    assert result["after"] is True
    assert sorted(os.listdir(tmp_path)) == ["batches.mrcs", "before.mrc"]
    _before_is_intact(tmp_path)
