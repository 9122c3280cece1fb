"""Executors, Completion, reader providers (the LRU cache), and many threads over many files at once."""

from __future__ import annotations

import gc
import os
import re
import signal
import sys
import threading
import time
import weakref

import numpy as np
import pytest

import vitrio as vio
from vitrio.formats import ImageReader

pytestmark = pytest.mark.timeout(60)


class GatedReader(ImageReader):
    """A fake stack of (2, 3) images whose image `i` is full of `i`; reads wait for a gate."""

    def __init__(self, key: str, gate: threading.Event | None, log: list):
        super().__init__(key, vio.ImageDescriptor((10, 2, 3), 2, "float32"))
        self._gate = gate
        self._log = log

    def read_run(self, start, outs):
        self.check_run(start, len(outs))
        if self._gate is not None:
            assert self._gate.wait(20), "the gate never opened"
        for i, out in enumerate(outs):
            out[...] = start + i
        self._log.append((self.key, start, len(outs), threading.get_ident()))


class GatedProvider(vio.ImageReaderProvider):
    """Serves `GatedReader`s; a key starting with "fail" raises once its gate (if any) opens."""

    def __init__(self, gates: dict[str, threading.Event] | None = None):
        self.gates = gates or {}
        self.log: list = []

    def acquire(self, key):
        key = os.fspath(key)
        gate = self.gates.get(key)
        if key.startswith("fail"):
            if gate is not None:
                assert gate.wait(20)
            raise OSError(f"{key}: cannot be read")
        return GatedReader(key, gate, self.log)

    def release(self, reader):
        pass


def _loader(provider, executor):
    return vio.ImageLoader(executor, provider)


# ---------------------------------------------------------------- executors


def test_thread_pool_executor_worker_count():
    assert vio.ThreadPoolExecutor(3).worker_count == 3
    assert vio.ThreadPoolExecutor(1).worker_count == 1
    with pytest.raises(ValueError, match="worker_count must be positive: 0"):
        vio.ThreadPoolExecutor(0)
    assert vio.loader(workers=5).worker_count == 5
    assert vio.loader().worker_count == (os.cpu_count() or 1)


def test_synchronous_executor_runs_on_the_calling_thread():
    provider = GatedProvider()
    loader = _loader(provider, vio.SynchronousExecutor())
    assert loader.worker_count == 1
    destination = np.zeros((3, 2, 3), np.float32)
    completion = vio.read_batch_async(loader, destination, [vio.ImageLocation("k", i) for i in (5, 0, 7)])
    assert completion.is_ready  # done before the call returned
    assert {entry[3] for entry in provider.log} == {threading.get_ident()}
    np.testing.assert_array_equal(destination[:, 0, 0], [5, 0, 7])


def test_thread_pool_runs_elsewhere():
    provider = GatedProvider()
    loader = _loader(provider, vio.ThreadPoolExecutor(2))
    destination = np.zeros((8, 2, 3), np.float32)
    vio.read_batch_async(loader, destination, [vio.ImageLocation("k", i) for i in range(8)]).get()
    assert threading.get_ident() not in {entry[3] for entry in provider.log}
    np.testing.assert_array_equal(destination[:, 1, 2], np.arange(8))


def test_loaders_and_savers_share_an_executor(tmp_path, rng):
    executor = vio.ThreadPoolExecutor(2)
    first, second = vio.loader(executor=executor), vio.loader(executor=executor, cache=2)
    writers = vio.writer_provider()
    saver = vio.saver(writers, executor=executor)
    assert first.executor is executor and second.executor is executor and saver.executor is executor
    data = rng.normal(size=(6, 4, 4)).astype(np.float32)
    writers.declare(tmp_path / "s.mrcs", vio.ImageDescriptor(data.shape, 2, "float32"))
    writers.declare(tmp_path / "s.tif", vio.ImageDescriptor(data.shape, 2, "float32"))
    locations = [vio.ImageLocation(tmp_path / name, i) for name in ("s.mrcs", "s.tif") for i in range(6)]
    vio.write_batch_async(saver, np.concatenate([data, data]), locations).get()
    writers.close(tmp_path / "s.mrcs")
    writers.close(tmp_path / "s.tif")
    a, b = np.zeros((12, 4, 4), np.float32), np.zeros((12, 4, 4), np.float64)
    completions = [
        vio.read_batch_async(first, a, locations),
        vio.read_batch_async(second, b, locations[::-1]),
    ]
    for completion in completions:
        completion.get()
    np.testing.assert_array_equal(a, np.concatenate([data, data]))
    np.testing.assert_array_equal(b, np.concatenate([data, data])[::-1])
    with pytest.raises(ValueError, match="give workers or executor, not both"):
        vio.loader(workers=2, executor=executor)
    with pytest.raises(ValueError, match="give workers or executor, not both"):
        vio.saver(writers, workers=2, executor=executor)


# ---------------------------------------------------------------- Completion


def test_completion_is_ready_wait_and_get():
    gate = threading.Event()
    provider = GatedProvider({"k": gate})
    destination = np.zeros((2, 2, 3), np.float32)
    completion = vio.read_batch_async(
        _loader(provider, vio.ThreadPoolExecutor(2)), destination, [vio.ImageLocation("k", 3)] * 2
    )
    assert completion.is_ready is False
    gate.set()
    assert completion.wait() is None
    assert completion.is_ready is True
    assert completion.get() is None
    assert (destination == 3).all()


class CountingExecutor(vio.ThreadPoolExecutor):
    """A thread pool that counts the tasks it has finished, so a test can wait for the n-th."""

    def __init__(self, worker_count: int):
        super().__init__(worker_count)
        self._finished = 0
        self._changed = threading.Condition()

    def submit(self, function, *args):
        def counted():
            try:
                function(*args)
            finally:
                with self._changed:
                    self._finished += 1
                    self._changed.notify_all()

        super().submit(counted)

    def wait_finished(self, count: int, timeout: float = 20) -> None:
        with self._changed:
            assert self._changed.wait_for(lambda: self._finished >= count, timeout), "tasks never finished"


def wait_until_waiting(thread: threading.Thread, timeout: float = 20) -> None:
    """Return once `thread` blocks in a wait of `threading` (an Event's or a Condition's)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        frame = sys._current_frames().get(thread.ident)
        while frame is not None:
            if frame.f_code.co_name == "wait" and frame.f_code.co_filename == threading.__file__:
                return
            frame = frame.f_back
        time.sleep(0.001)
    raise AssertionError(f"{thread.name} never waited")


def test_get_raises_the_first_failure_and_wait_nothing():
    slow, fast = threading.Event(), threading.Event()
    provider = GatedProvider({"fail-slow": slow, "fail-fast": fast})
    executor = CountingExecutor(2)
    loader = _loader(provider, executor)
    locations = [vio.ImageLocation("fail-slow", 0), vio.ImageLocation("fail-fast", 0)]
    completion = vio.read_batch_async(loader, np.zeros((2, 2, 3), np.float32), locations)
    fast.set()
    executor.wait_finished(1)  # the fast failure is recorded before the slow one happens
    slow.set()
    assert completion.wait() is None
    with pytest.raises(OSError, match="fail-fast"):
        completion.get()
    with pytest.raises(OSError, match="fail-fast"):
        completion.get()  # again, the same


def test_dropping_a_pending_completion_waits_for_its_work():
    gate = threading.Event()
    provider = GatedProvider({"k": gate})
    destination = np.zeros((4, 2, 3), np.float32)
    completion = vio.read_batch_async(
        _loader(provider, vio.ThreadPoolExecutor(2)),
        destination,
        [vio.ImageLocation("k", i) for i in range(4)],
    )
    opener = threading.Timer(0.3, gate.set)  # needs the GIL while the main thread waits
    opener.start()
    started = time.monotonic()
    del completion
    gc.collect()
    waited = time.monotonic() - started
    opener.join()
    assert waited >= 0.25
    np.testing.assert_array_equal(destination[:, 0, 0], np.arange(4))


def test_completion_keeps_the_destination_alive():
    gate = threading.Event()
    provider = GatedProvider({"k": gate})
    destination = np.zeros((3, 2, 3), np.float32)
    alive = weakref.ref(destination)
    completion = vio.read_batch_async(
        _loader(provider, vio.ThreadPoolExecutor(2)), destination, [vio.ImageLocation("k", 1)] * 3
    )
    del destination
    gc.collect()
    assert alive() is not None
    gate.set()
    completion.get()
    assert alive() is not None
    del completion
    gc.collect()
    assert alive() is None


def test_a_completion_keeps_its_arrays_until_get_returns_even_when_done_first(tmp_path, rng):
    path = str(tmp_path / "s.mrcs")
    vio.write_stack(rng.standard_normal((3, 4, 4)).astype(np.float32), path)
    loader = vio.loader(workers=2)
    destination = np.zeros((3, 4, 4), np.float32)
    patches = np.zeros((2, 2, 2), np.float32)
    read = weakref.ref(destination), weakref.ref(patches)
    completions = [
        vio.read_batch_async(loader, destination, [vio.ImageLocation(path, i) for i in range(3)]),
        vio.read_patches_async(loader, patches, vio.ImageLocation(path, 0), [[1, 1], [2, 2]]),
    ]
    writers = vio.writer_provider()
    writers.declare(str(tmp_path / "o.mrcs"), vio.ImageDescriptor((3, 4, 4), 2, "float32"))
    source = np.ones((3, 4, 4), np.float32)
    written = weakref.ref(source)
    locations = [vio.ImageLocation(str(tmp_path / "o.mrcs"), i) for i in range(3)]
    completions.append(vio.write_batch_async(vio.saver(writers, workers=2), source, locations))
    for completion in completions:
        completion.wait()  # the work is done before its arrays are dropped
    del destination, patches, source
    gc.collect()
    for completion in completions:
        completion.get()
    assert all(alive() is not None for alive in (*read, written))
    np.testing.assert_array_equal(read[0]()[0], vio.read(vio.ImageLocation(path, 0)))
    del completions, completion
    gc.collect()
    assert all(alive() is None for alive in (*read, written))
    writers.close(str(tmp_path / "o.mrcs"))


# ---------------------------------------------------------------- providers


class CountingProvider(vio.FileImageReaderProvider):
    """Opens files like the default provider, and notes what it opens and closes."""

    def __init__(self, delay: float = 0.0):
        super().__init__()
        self.opened: list[str] = []
        self.closed: list[str] = []
        self.delay = delay
        self._lock = threading.Lock()

    def acquire(self, key):
        time.sleep(self.delay)
        reader = super().acquire(key)
        with self._lock:
            self.opened.append(os.path.basename(reader.key))
        return reader

    def release(self, reader):
        with self._lock:
            self.closed.append(os.path.basename(reader.key))
        super().release(reader)


@pytest.fixture(scope="module")
def many_files(tmp_path_factory):
    """40 stacks of 6 int16 images: pixel (y, x) of image i of file f is f * 700 + i * 100 + y * 8 + x."""
    directory = tmp_path_factory.mktemp("many")
    pattern = np.arange(64, dtype=np.int16).reshape(8, 8)
    keys = []
    for f in range(40):
        stack = np.stack([f * 700 + i * 100 + pattern for i in range(6)]).astype(np.int16)
        key = str(directory / f"f{f:02d}.{'mrcs' if f % 3 else 'tif'}")
        vio.write_stack(stack, key)
        keys.append(key)
    return keys


def _image(f: int, i: int) -> np.ndarray:
    return f * 700 + i * 100 + np.arange(64).reshape(8, 8)


def test_reader_provider_defaults():
    assert isinstance(vio.reader_provider(), vio.FileImageReaderProvider)
    cached = vio.reader_provider(cache=4)
    assert isinstance(cached, vio.CachingImageReaderProvider) and cached.capacity == 4
    assert cached.reader_count == 0
    assert vio.loader(workers=1, cache=3).readers.capacity == 3
    with pytest.raises(ValueError, match="capacity must be positive: 0"):
        vio.reader_provider(cache=0)
    with pytest.raises(ValueError, match="capacity must be positive: 0"):
        vio.CachingImageReaderProvider(vio.FileImageReaderProvider(), 0)


def test_cache_closes_the_least_recently_used_first(many_files):
    backing = CountingProvider()
    cache = vio.CachingImageReaderProvider(backing, 3)
    assert cache.capacity == 3

    def use(f):
        reader = cache.acquire(many_files[f])
        cache.release(reader)
        return reader

    first = use(0)
    use(1)
    use(2)
    assert cache.reader_count == 3 and backing.closed == []
    assert use(0) is first  # served from the cache, and now the most recently used
    assert backing.opened.count("f00.tif") == 1
    use(3)
    assert backing.closed == ["f01.mrcs"]
    use(4)
    assert backing.closed == ["f01.mrcs", "f02.mrcs"]
    use(0)
    use(5)
    assert backing.closed == ["f01.mrcs", "f02.mrcs", "f03.tif"]
    assert cache.reader_count == 3


def test_cache_never_closes_a_reader_in_use(many_files):
    backing = CountingProvider()
    cache = vio.CachingImageReaderProvider(backing, 2)
    held = cache.acquire(many_files[7])
    for f in range(10, 20):
        cache.release(cache.acquire(many_files[f]))
        assert cache.reader_count <= 3
    assert "f07.mrcs" not in backing.closed
    out = [np.zeros((8, 8), np.int16) for _ in range(6)]
    held.read_run(0, out)
    for i in range(6):
        np.testing.assert_array_equal(out[i], _image(7, i))
    cache.release(held)
    assert cache.reader_count <= 2
    cache.release(cache.acquire(many_files[30]))
    cache.release(cache.acquire(many_files[31]))
    assert "f07.mrcs" in backing.closed
    assert cache.reader_count == 2


def test_cache_errors(many_files, tmp_path):
    cache = vio.CachingImageReaderProvider(vio.FileImageReaderProvider(), 2)
    for _ in range(2):
        with pytest.raises(FileNotFoundError, match="absent.mrc"):
            cache.acquire(tmp_path / "absent.mrc")
    assert cache.reader_count == 0
    stranger = vio.FileImageReaderProvider().acquire(many_files[0])
    try:
        with pytest.raises(ValueError, match="f00.tif: this reader was not acquired from this provider"):
            cache.release(stranger)
    finally:
        stranger.close()


def test_cache_over_a_provider_whose_readers_have_other_keys(many_files, tmp_path):
    """A backing provider may name its readers otherwise than the key asked for (here: resolving links)."""

    class Resolving(vio.FileImageReaderProvider):
        def acquire(self, key):
            return super().acquire(os.path.realpath(key))

    link = tmp_path / "link.mrcs"
    link.symlink_to(many_files[1])
    cache = vio.CachingImageReaderProvider(Resolving(), 1)
    for _ in range(2):
        reader = cache.acquire(link)
        assert reader.key == many_files[1]
        out = np.zeros((8, 8), np.int16)
        reader.read_run(4, [out])
        np.testing.assert_array_equal(out, _image(1, 4))
        cache.release(reader)
    assert cache.reader_count == 1
    cache.release(cache.acquire(many_files[2]))  # the link's reader is closed to make room
    assert cache.reader_count == 1
    destination = np.zeros((2, 8, 8), np.int16)
    loader = vio.ImageLoader(vio.ThreadPoolExecutor(2), cache)
    vio.read_batch_async(loader, destination, [vio.ImageLocation(link, 0), vio.ImageLocation(link, 5)]).get()
    np.testing.assert_array_equal(destination, [_image(1, 0), _image(1, 5)])


def test_cache_opens_a_file_once_for_many_threads(many_files):
    backing = CountingProvider(delay=0.05)
    cache = vio.CachingImageReaderProvider(backing, 4)
    readers = []
    barrier = threading.Barrier(8)

    def grab():
        barrier.wait()
        readers.append(cache.acquire(many_files[5]))

    threads = [threading.Thread(target=grab) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert backing.opened == ["f05.mrcs"]
    assert len({id(reader) for reader in readers}) == 1
    for reader in readers:
        cache.release(reader)
    assert cache.reader_count == 1


def test_many_threads_many_batches_more_files_than_the_cache(many_files):
    backing = CountingProvider()
    cache = vio.CachingImageReaderProvider(backing, 8)
    loader = vio.ImageLoader(vio.ThreadPoolExecutor(8), cache)
    errors = []

    def client(seed):
        rng = np.random.default_rng(seed)
        try:
            for _ in range(10):
                files = rng.integers(0, 40, size=40)
                indices = rng.integers(0, 6, size=40)
                locations = [vio.ImageLocation(many_files[f], int(i)) for f, i in zip(files, indices)]
                destination = np.zeros((40, 8, 8), np.float32 if seed % 2 else np.int16)
                vio.read_batch_async(loader, destination, locations).get()
                for slot, (f, i) in enumerate(zip(files, indices)):
                    if not np.array_equal(destination[slot], _image(int(f), int(i))):
                        errors.append((seed, slot, int(f), int(i)))
                        return
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=client, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert cache.reader_count <= 8
    assert len(backing.opened) - len(backing.closed) == cache.reader_count


def test_threads_waiting_on_a_failed_open_of_the_same_file_get_its_error(tmp_path):
    """Many threads ask a cache for one file whose open fails: the file is opened once, and every
    thread, the one that opened it and those that waited on it, raises the error."""
    gate = threading.Event()
    backing = GatedProvider({"fail-shared": gate})
    cache = vio.CachingImageReaderProvider(backing, 4)
    outcomes: dict[int, object] = {}

    def grab(number):
        try:
            outcomes[number] = cache.acquire("fail-shared")
        except OSError as error:
            outcomes[number] = error

    threads = [threading.Thread(target=grab, args=(n,), name=f"grab-{n}") for n in range(6)]
    for thread in threads:
        thread.start()
        wait_until_waiting(thread)  # the first in the provider's gate, the others on its open
    gate.set()
    for thread in threads:
        thread.join(20)
    assert sorted(outcomes) == list(range(6))
    for number, outcome in outcomes.items():
        assert isinstance(outcome, OSError), f"thread {number} got {outcome!r} instead of the error"
        assert "fail-shared: cannot be read" in str(outcome)
    assert cache.reader_count == 0
    with pytest.raises(OSError, match="fail-shared: cannot be read"):
        cache.acquire("fail-shared")  # a later open tries again, and fails again


def test_a_cached_reader_whose_file_changed_is_dropped_for_every_thread(tmp_path):
    """A file truncated under a cache's reader fails the reads of many threads; written anew, it is
    opened anew and every thread reads what it now holds."""
    path = tmp_path / "changing.mrcs"
    vio.write_stack(np.zeros((6, 8, 8), np.int16), path)
    loader = vio.ImageLoader(vio.ThreadPoolExecutor(4), vio.CachingImageReaderProvider(CountingProvider(), 2))
    locations = [vio.ImageLocation(path, i) for i in range(6)]

    def read_all(count):
        outcomes = [None] * count
        barrier = threading.Barrier(count)

        def client(number):
            barrier.wait()
            out = np.full((6, 8, 8), -7, np.int16)
            try:
                vio.read_batch_async(loader, out, locations).get()
                outcomes[number] = out
            except (OSError, ValueError) as error:  # the cached reader's, or a new one's
                outcomes[number] = error

        threads = [threading.Thread(target=client, args=(n,)) for n in range(count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(20)
        return outcomes

    assert all(isinstance(out, np.ndarray) and (out == 0).all() for out in read_all(4))
    os.truncate(path, 1024 + 8 * 8 * 2)
    for outcome in read_all(4):
        assert isinstance(outcome, Exception) and re.search(
            f"{re.escape(str(path))}: the file (was|is) truncated", str(outcome)
        )
    values = np.stack([_image(3, i) for i in range(6)]).astype(np.int16)
    vio.write_stack(values, path)
    for out in read_all(4):
        assert isinstance(out, np.ndarray), f"a reader of the changed file was kept: {out!r}"
        np.testing.assert_array_equal(out, values)
    assert loader.readers.reader_count == 1


def test_an_interrupt_during_get_comes_out_and_the_work_goes_on():
    """Ctrl-C (SIGINT) while the main thread waits in Completion.get: KeyboardInterrupt comes out of
    get, the reads go on, and the completion is waited for and read right afterwards.

    A signal that lands just before the wait blocks is seen only once the wait ends, so SIGINT is
    sent again until it has been handled; only the first raises."""
    gate = threading.Event()
    destination = np.zeros((3, 2, 3), np.float32)
    completion = vio.read_batch_async(
        _loader(GatedProvider({"k": gate}), vio.ThreadPoolExecutor(2)),
        destination,
        [vio.ImageLocation("k", i) for i in (4, 5, 6)],
    )
    main = threading.current_thread()
    assert main is threading.main_thread()
    armed, handled = threading.Event(), threading.Event()

    def once(signum, frame):
        if not handled.is_set():
            handled.set()
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, once)

    def interrupt():
        assert armed.wait(20)
        wait_until_waiting(main)  # the only wait after `armed` is get's
        while not handled.wait(0.01):
            signal.pthread_kill(main.ident, signal.SIGINT)

    interrupter = threading.Thread(target=interrupt)
    interrupter.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            armed.set()
            completion.get()
        interrupter.join()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert not completion.is_ready
    gate.set()
    assert completion.get() is None
    np.testing.assert_array_equal(destination[:, 0, 0], [4, 5, 6])
