"""Load: many loaders at once over many files under a small limit of open files, and loaders abandoned
with work pending, over and over; nothing deadlocks, every value is right, nothing is left behind.

Both run in a subprocess: one under `RLIMIT_NOFILE`, the other counting the
threads and open files of a process that runs nothing else.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import vitrio as vio

from .helpers import run_script

FILES, IMAGES, SIDE = 2000, 4, 8


@pytest.fixture(scope="module")
def many_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2,000 stacks of 4 images of 8 x 8, each value telling its file, image and place."""
    directory = tmp_path_factory.mktemp("many")
    place = np.arange(IMAGES * SIDE * SIDE, dtype=np.float32).reshape(IMAGES, SIDE, SIDE)
    for number in range(FILES):
        vio.write_stack(place + 1000 * number, directory / f"{number:04d}.mrcs")
    return directory


@pytest.mark.timeout(300)
def test_sixteen_loaders_of_eight_threads_over_two_thousand_files(many_files: Path):
    """One reader cache of 64 shared by 16 loaders of 8 threads, 128 threads on 2 cores, 256 open files
    at most: open files stay within what the cache and the readers in use hold."""
    result = run_script(
        f"""
        import json, os, resource, threading, time
        import numpy as np, vitrio as vio

        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
        directory, files, images, side = {str(many_files)!r}, {FILES}, {IMAGES}, {SIDE}
        place = np.arange(images * side * side, dtype=np.float32).reshape(images, side, side)

        def memory():
            with open("/proc/self/status") as status:
                return {{line.split(":")[0]: int(line.split()[1]) for line in status if line[:2] == "Vm"}}

        readers = vio.CachingImageReaderProvider(vio.FileImageReaderProvider(), 64)
        loaders = [vio.ImageLoader(vio.ThreadPoolExecutor(8), readers) for _ in range(16)]
        baseline_files, baseline_memory = len(os.listdir("/proc/self/fd")), memory()["VmRSS"]
        most_files, stop, errors, batches = 0, threading.Event(), [], [0]

        def watch():
            global most_files
            while not stop.is_set():
                most_files = max(most_files, len(os.listdir("/proc/self/fd")))
                time.sleep(0.002)

        def drive(number, loader):
            rng = np.random.default_rng(number)
            pending = []
            for _ in range(30):
                chosen = rng.integers(0, files, 64)
                indices = rng.integers(0, images, 64)
                locations = [vio.ImageLocation(os.path.join(directory, f"{{f:04d}}.mrcs"), int(i))
                             for f, i in zip(chosen.tolist(), indices.tolist())]
                out = np.empty((64, side, side), np.float64 if number % 2 else np.float32)
                pending.append((vio.read_batch_async(loader, out, locations), out, chosen, indices))
                if len(pending) > 3:
                    completion, out, chosen, indices = pending.pop(0)
                    try:
                        completion.get()
                        expected = place[indices] + 1000 * chosen[:, None, None]
                        if not np.array_equal(out, expected):
                            errors.append("wrong values")
                        batches[0] += 1
                    except Exception as error:
                        errors.append(repr(error))
            for completion, *_ in pending:
                completion.get()
                batches[0] += 1

        watcher = threading.Thread(target=watch)
        watcher.start()
        drivers = [threading.Thread(target=drive, args=(n, loader)) for n, loader in enumerate(loaders)]
        started = time.monotonic()
        for thread in drivers:
            thread.start()
        for thread in drivers:
            thread.join(240)
        stop.set()
        watcher.join()
        print(json.dumps({{
            "alive": sum(thread.is_alive() for thread in drivers),
            "errors": errors[:5],
            "batches": batches[0],
            "seconds": time.monotonic() - started,
            "threads": threading.active_count(),
            "baseline_files": baseline_files,
            "most_files": most_files,
            "readers": readers.reader_count,
            "files_after": len(os.listdir("/proc/self/fd")),
            "memory_growth_kib": memory()["VmRSS"] - baseline_memory,
        }}))
        """,
        timeout=280,
    )
    assert result["alive"] == 0, result  # no deadlock
    assert result["errors"] == [], result
    assert result["batches"] == 16 * 30, result
    assert result["threads"] == 1 + 16 * 8, result
    # the cache's 64 readers, and one in use by each of the 128 threads at most
    assert result["most_files"] <= result["baseline_files"] + 64 + 128, result
    assert result["readers"] <= 64 and result["files_after"] <= result["baseline_files"] + 64, result
    assert result["memory_growth_kib"] < 256 * 1024, result


@pytest.mark.timeout(300)
def test_loaders_abandoned_with_work_pending_leave_nothing_behind(many_files: Path):
    """100 times: a loader with a cache, three batches under way, then everything dropped unwaited.

    Dropping a pending `Completion` waits for its work; the dropped thread pool
    stops its threads; the dropped cache closes its readers. Then a loader is
    dropped while its completions are kept: they still complete.
    """
    result = run_script(
        f"""
        import gc, json, os, threading, time
        import numpy as np, vitrio as vio

        directory = {str(many_files)!r}
        paths = [os.path.join(directory, f"{{n:04d}}.mrcs") for n in range(200)]
        locations = [vio.ImageLocation(p, i) for p in paths for i in range({IMAGES})]
        threads, files = threading.active_count(), len(os.listdir("/proc/self/fd"))

        def settle():
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                gc.collect()
                if threading.active_count() == threads and len(os.listdir("/proc/self/fd")) == files:
                    break
                time.sleep(0.01)
            return threading.active_count() - threads, len(os.listdir("/proc/self/fd")) - files

        rng = np.random.default_rng(0)
        for _ in range(100):
            loader = vio.loader(workers=4, cache=16)
            completions = [
                vio.read_batch_async(loader, np.empty((128, 8, 8), np.float32),
                                     [locations[i] for i in rng.integers(0, len(locations), 128)])
                for _ in range(3)
            ]
            del loader, completions
        dropped = settle()

        kept = []
        for _ in range(20):
            loader = vio.loader(workers=2, cache=8)
            out = np.empty((64, 8, 8), np.float32)
            chosen = rng.integers(0, len(locations), 64)
            kept.append((vio.read_batch_async(loader, out, [locations[i] for i in chosen]), out, chosen))
            del loader
        right = 0
        for completion, out, chosen in kept:
            completion.get()
            expected = np.stack([vio.read(locations[i]) for i in chosen])
            right += bool(np.array_equal(out, expected))
        del kept, completion
        print(json.dumps({{"dropped": dropped, "right": right, "kept": settle()}}))
        """,
        timeout=280,
    )
    assert result["dropped"] == [0, 0], result  # threads and open files left behind
    assert result["right"] == 20, result
    assert result["kept"] == [0, 0], result


def test_data_loaders_abandoned_mid_epoch_leave_nothing_behind(many_files: Path):
    """100 times: a DataLoader with a loader of its own, two batches taken, the epoch abandoned."""
    result = run_script(
        f"""
        import gc, json, os, threading, time
        import numpy as np, vitrio as vio
        from vitrio.data import DataLoader, Dataset, ImageSource

        directory = {str(many_files)!r}
        paths = [os.path.join(directory, f"{{n:04d}}.mrcs") for n in range(100)]
        locations = [vio.ImageLocation(p, i) for p in paths for i in range({IMAGES})]
        dataset = Dataset({{"image": ImageSource(locations)}})
        threads, files = threading.active_count(), len(os.listdir("/proc/self/fd"))
        right = 0
        for epoch in range(100):
            loader = DataLoader(dataset, 32, shuffle=True, seed=epoch, loader=vio.loader(workers=2, cache=8))
            for taken, batch in enumerate(loader):
                expected = np.stack([vio.read(dataset.fields["image"].locations[i]) for i in batch["index"]])
                right += bool(np.array_equal(batch["image"], expected))
                if taken == 1:
                    break
            del loader, batch
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            gc.collect()
            if threading.active_count() == threads and len(os.listdir("/proc/self/fd")) == files:
                break
            time.sleep(0.01)
        left = [threading.active_count() - threads, len(os.listdir("/proc/self/fd")) - files]
        print(json.dumps({{"left": left, "right": right}}))
        """,
        timeout=280,
    )
    assert result["left"] == [0, 0], result  # threads and open files left behind
    assert result["right"] == 200, result
