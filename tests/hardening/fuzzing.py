"""A fuzzer of vitrio's readers: valid files, mutated, read in worker processes under a memory limit.

A case is a seed (a small file, valid or a known bad one, with the offsets
of its header fields) and a case number: its mutation is a pure function of
the two, so a failure is reproduced from its numbers alone (`mutate`); case
-1 is the seed itself. Mutations: bit
flips, bytes set to 0, 255 or anything, header fields set to 0, -1, huge or
nearby values, truncations, garbage appended, chunks copied, cut out or
doubled; one to three of them per case.

A seed of the `zarr` format is one file of an OME-Zarr store: a case
writes it, mutated, into a copy of its store and reads the store (`place`).

Workers are subprocesses that take cases one at a time and read each
mutated file through `vitrio.query_descriptor`, `vitrio.read` (whole file,
once more with the copy of a raw file split over threads, and image 0),
`read_batch_async` (twice: the second read of a raw file goes through the
native batch read, with the layout the first one kept; then, but for a
store, into 4 MiB, which that read streams into) and
`read_patches_async` (the native crop for raw files) (and, for EER,
`read_events` and a rendering format). Each runs under `RLIMIT_AS` of its
address space after start-up plus `memory` bytes, so an allocation that a
file of a few KiB does not justify raises `MemoryError`. Every call must
succeed or raise a clean error (`CLEAN_ERRORS`) naming the file, with no
`MemoryError` behind it. The parent (`Fuzzer`) notices a worker killed by
a signal (a crash) or one that does not answer in time (a hang), notes the
case, and starts a new worker.

This module needs only vitrio and numpy: the seeds are made by `corpus`.
"""

from __future__ import annotations

import json
import math
import os
import random
import selectors
import shutil
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

CLEAN_ERRORS = (ValueError, OSError, IndexError, KeyError)
"""What a malformed file may raise: subclasses of these, with a message naming the file."""

MEMORY = 256 << 20
STREAMED_BYTES = 4 << 20  # a destination this large is written with non-temporal stores
REPO_ROOT = Path(__file__).resolve().parents[2]
"""Where the workers start, so that they import this module as `tests.hardening.fuzzing`."""

_VALUES = (
    0,
    1,
    -1,
    2,
    3,
    255,
    256,
    0x7FFF,
    0xFFFF,
    0x10000,
    0x7FFFFFFF,
    -0x80000000,
    0xFFFFFFFF,
    1 << 32,
    1 << 40,
    (1 << 63) - 1,
)


@dataclass(frozen=True)
class Seed:
    """A valid file to mutate: its name (with the extension that matters), format, path and field offsets."""

    name: str
    format: str
    path: str
    fields: tuple[int, ...]


def save_seeds(seeds: Sequence[Seed], path: Path) -> None:
    """Write the manifest of `seeds` to `path`, for the workers."""
    path.write_text(json.dumps([asdict(seed) for seed in seeds]))


def load_seeds(path: Path | str) -> list[Seed]:
    """The seeds of a manifest `save_seeds` wrote."""
    return [
        Seed(s["name"], s["format"], s["path"], tuple(s["fields"]))
        for s in json.loads(Path(path).read_text())
    ]


def place(seed: Seed, content: bytes, path: str) -> str:
    """Write `content`, the mutated file of `seed`, at `path`; for a file of a Zarr store, into a copy
    of its store at `path`. Returns the key to read."""
    if seed.format != "zarr":
        with open(path, "wb") as file:
            file.write(content)
        return path
    store = seed.path[: seed.path.index(".zarr/") + len(".zarr")]
    shutil.copytree(store, path, symlinks=True, dirs_exist_ok=True)
    with open(os.path.join(path, os.path.relpath(seed.path, store)), "wb") as file:
        file.write(content)
    return path


def unplace(seed: Seed, key: str) -> None:
    """Remove what `place` wrote at `key`, and what the readers of a store keep of it."""
    if seed.format != "zarr":
        os.unlink(key)
        return
    from vitrio.formats.zarr import OmeZarrFormat

    shutil.rmtree(key)
    OmeZarrFormat.clear_cache()


# ---------------------------------------------------------------- mutations

Mutation = Callable[[bytearray, Sequence[int], random.Random], tuple[bytearray, str]]


def _position(data: bytearray, fields: Sequence[int], rng: random.Random) -> int:
    """A position in `data`: most often a field or the first KiB, where headers are."""
    draw = rng.random()
    if fields and draw < 0.5:
        at = rng.choice(fields) + rng.choice((0, 0, 0, 1, 2, 3))
    elif draw < 0.75:
        at = rng.randrange(min(len(data), 1024))
    else:
        at = rng.randrange(len(data))
    return min(at, len(data) - 1)


def _set_field(data: bytearray, fields: Sequence[int], rng: random.Random) -> tuple[bytearray, str]:
    at = rng.choice(fields) if fields and rng.random() < 0.85 else rng.randrange(len(data))
    width = rng.choice((2, 4, 4, 4, 8)) if rng.random() < 0.9 else 1
    order = rng.choice(("little", "big"))
    current = int.from_bytes(data[at : at + width].ljust(width, b"\0"), order)
    draw = rng.random()
    if draw < 0.6:
        value = rng.choice(_VALUES)
    elif draw < 0.85:
        value = current + rng.choice((-2, -1, 1, 2, 8, -8, 4096))
    else:
        value = rng.getrandbits(8 * width)
    value &= (1 << (8 * width)) - 1
    data[at : at + width] = value.to_bytes(width, order)[: max(0, len(data) - at)]
    return data, f"field {at}:{width} {order} = {value:#x}"


def _flip_bits(data: bytearray, fields: Sequence[int], rng: random.Random) -> tuple[bytearray, str]:
    flips = [(_position(data, fields, rng), rng.randrange(8)) for _ in range(rng.randint(1, 8))]
    for at, bit in flips:
        data[at] ^= 1 << bit
    return data, "flip " + " ".join(f"{at}.{bit}" for at, bit in flips)


def _set_bytes(data: bytearray, fields: Sequence[int], rng: random.Random) -> tuple[bytearray, str]:
    at = _position(data, fields, rng)
    count = min(rng.choice((1, 1, 2, 4, 16, 64)), len(data) - at)
    value = rng.choice((0, 0xFF, rng.randrange(256)))
    data[at : at + count] = bytes([value]) * count
    return data, f"bytes {at}:{count} = {value:#x}"


def _truncate(data: bytearray, fields: Sequence[int], rng: random.Random) -> tuple[bytearray, str]:
    draw = rng.random()
    if draw < 0.3:
        length = rng.randrange(min(len(data), 1100))
    elif draw < 0.6:
        length = max(0, len(data) - rng.randint(1, 64))
    else:
        length = rng.randrange(len(data))
    return data[:length], f"truncate to {length}"


def _append(data: bytearray, fields: Sequence[int], rng: random.Random) -> tuple[bytearray, str]:
    count = rng.choice((1, 7, 64, 1000, 4096))
    garbage = bytes(count) if rng.random() < 0.3 else rng.randbytes(count)
    return data + garbage, f"append {count}"


def _splice(data: bytearray, fields: Sequence[int], rng: random.Random) -> tuple[bytearray, str]:
    source, target = rng.randrange(len(data)), _position(data, fields, rng)
    count = rng.choice((1, 4, 16, 64, 256))
    chunk = data[source : source + count]
    kind = rng.choice(("copy", "cut", "double"))
    if kind == "copy":
        data[target : target + len(chunk)] = chunk
    elif kind == "cut":
        del data[target : target + count]
    else:
        data[target:target] = chunk
    return data, f"{kind} {count} {source}->{target}"


MUTATIONS: tuple[Mutation, ...] = (
    _set_field,
    _set_field,
    _set_field,
    _flip_bits,
    _flip_bits,
    _set_bytes,
    _truncate,
    _append,
    _splice,
)


def mutate(content: bytes, fields: Sequence[int], case: int) -> tuple[bytes, list[str]]:
    """The mutation of `content` that case number `case` makes, and the steps it took.

    A negative case number leaves `content` as it is.
    """
    if case < 0:
        return content, []
    rng = random.Random(case)
    data, steps = bytearray(content), []
    for _ in range(rng.choice((1, 1, 1, 2, 2, 3))):
        if not data:
            break
        data, step = rng.choice(MUTATIONS)(data, fields, rng)
        steps.append(step)
    return bytes(data), steps


# ---------------------------------------------------------------- what a worker does with a case


def _chain(error: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _where(error: BaseException) -> str:
    frames = traceback.extract_tb(error.__traceback__)
    return f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""


def attempt(what: str, call: Callable[[], Any], key: str, problems: list[str]) -> tuple[bool, Any]:
    """Run `call`; note in `problems` an error that is not clean or does not name `key`.

    Returns:
        Whether it succeeded, and what it returned.
    """
    try:
        return True, call()
    except BaseException as error:  # noqa: BLE001 - judged below
        name = type(error).__name__
        if not isinstance(error, CLEAN_ERRORS):
            problems.append(f"{what}: {name}{_where(error)}: {error}")
        elif any(isinstance(link, MemoryError) for link in _chain(error)):
            problems.append(f"{what}: {name} caused by MemoryError{_where(error)}: {error}")
        elif key not in str(error):
            problems.append(f"{what}: {name} does not name the file{_where(error)}: {error}")
        return False, None


def _read_split(key: str) -> Any:
    """`vitrio.read` of the whole file with a raw file's copy split over threads whatever its size."""
    import vitrio as vio

    with vio.configure(split_bytes=1):
        return vio.read(key)


def check_file(key: str, file_format: str, loader: Any, variant: int = 0) -> tuple[bool, list[str]]:
    """Read the file at `key` every way a program would; return whether all of it read, and the problems."""
    import numpy as np

    import vitrio as vio
    from vitrio._types import numpy_dtype

    problems: list[str] = []
    results = []
    read_ok, descriptor = attempt("query_descriptor", lambda: vio.query_descriptor(key), key, problems)
    results.append(read_ok)
    results.append(attempt("read", lambda: vio.read(key), key, problems)[0])
    results.append(attempt("read on threads", lambda: _read_split(key), key, problems)[0])
    results.append(attempt("read image 0", lambda: vio.read(vio.ImageLocation(key, 0)), key, problems)[0])
    if descriptor is not None:
        core = descriptor.core_extents
        count = descriptor.image_count
        dtype = numpy_dtype(descriptor.data_type)
        if variant % 2 and dtype.kind != "c":
            dtype = np.dtype(np.float32)
        if count:
            # an index into a single volume names a 2-D section of it: such a file is read by its key
            first_last = (
                [vio.ImageLocation(key, 0), vio.ImageLocation(key, count - 1)]
                if descriptor.is_stack or descriptor.core_rank == 2
                else [key, key]
            )

            def batch() -> None:
                out = np.empty((2, *core), dtype)
                vio.read_batch_async(loader, out, first_last).get()

            def patches() -> None:
                out = np.zeros((3, *(3 for _ in core)), dtype)
                centres = [[0] * len(core), [e // 2 for e in core], [e + 1 for e in core]]
                vio.read_patches_async(loader, out, first_last[1], centres).get()

            def large_batch() -> None:  # 4 MiB or more: the native read streams into it
                slots = min(max(2, -(-STREAMED_BYTES // max(1, math.prod(core) * dtype.itemsize))), 1 << 16)
                out = np.empty((slots, *core), dtype)
                index = first_last[1].index_in_stack if isinstance(first_last[1], vio.ImageLocation) else -1
                indices = np.where(np.arange(slots) % 2, index, 0 if index >= 0 else -1)
                vio.read_indexed_async(loader, out, [key], np.zeros(slots, np.int64), indices).get()

            results.append(attempt("read_batch_async", batch, key, problems)[0])
            results.append(attempt("read_batch_async again", batch, key, problems)[0])
            if file_format != "zarr":  # the native path's streaming; a store would read thousands of copies
                results.append(attempt("read_batch_async into 4 MiB", large_batch, key, problems)[0])
            results.append(attempt("read_patches_async", patches, key, problems)[0])
    if file_format == "eer":
        results.append(attempt("read_events", lambda: vio.read_events(key), key, problems)[0])
        options = ({"fractions": 2}, {"fractions": 2, "binning": 2}, {"fractions": 3, "superres": 2})
        configured = options[variant % len(options)]

        def render() -> None:
            readers = vio.detector_event_image_reader_provider(**configured)
            vio.read(vio.ImageLocation(key, 0), readers=readers)

        results.append(attempt(f"render {configured}", render, key, problems)[0])
    return all(results), problems


def _address_space() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise OSError("no VmSize in /proc/self/status")


def limit_memory(memory: int) -> int:
    """Limit this process's address space to what it has now plus `memory` bytes; return the limit."""
    import resource

    limit = _address_space() + memory
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return limit


def serve(manifest: str, workdir: str, memory: int = MEMORY) -> None:
    """The worker: read `index case` lines from stdin, answer each with a JSON line on stdout.

    It reads a file of its own first (which also starts the loader's
    threads), then limits its address space to what it has plus `memory`.
    """
    import faulthandler
    import logging
    import warnings

    import numpy as np

    import vitrio as vio

    faulthandler.enable()
    warnings.simplefilter("ignore")
    logging.getLogger("tifffile").setLevel(logging.CRITICAL)
    seeds = load_seeds(manifest)
    if any(seed.format == "hdf5" for seed in seeds):
        import cryovit.hdf5  # noqa: F401 - registers the HDF5 format with vitrio
    contents = [Path(seed.path).read_bytes() for seed in seeds]
    loader = vio.loader(workers=2)
    warm = os.path.join(workdir, f"{os.getpid()}-warm.mrcs")
    vio.write_stack(np.zeros((2, 4, 4), np.float32), warm)
    check_file(warm, "mrc", loader)
    os.unlink(warm)
    print(json.dumps({"ready": limit_memory(memory)}), flush=True)
    for line in sys.stdin:
        index, case = (int(word) for word in line.split())
        seed = seeds[index]
        content, _ = mutate(contents[index], seed.fields, case)
        path = place(seed, content, os.path.join(workdir, f"{os.getpid()}-{case}-{seed.name}"))
        started = time.monotonic()
        read, problems = check_file(path, seed.format, loader, case)
        unplace(seed, path)
        answer = {"read": read, "problems": problems, "seconds": time.monotonic() - started}
        print(json.dumps(answer), flush=True)


# ---------------------------------------------------------------- the parent


@dataclass
class Result:
    """What became of one case: `outcome` is read, refused, problem, crash or hang."""

    seed: str
    case: int
    outcome: str
    seconds: float
    problems: list[str] = field(default_factory=list)


class _Worker:
    def __init__(self, manifest: Path, workdir: Path, memory: int, number: int, timeout: float):
        command = (
            f"from tests.hardening.fuzzing import serve; serve({str(manifest)!r}, {str(workdir)!r}, {memory})"
        )
        path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))  # for `tests`
        environment = dict(
            os.environ, PYTHONPATH=path, MALLOC_ARENA_MAX="2", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1"
        )
        self.log = workdir / f"worker-{number}.log"
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-c", command],
                cwd=workdir,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env=environment,
                text=True,
                bufsize=1,
            )
        self.case: tuple[int, int] | None = None
        self.started = 0.0
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            ready = self.process.stdout.readline() if selector.select(timeout) else ""
        if not ready.startswith('{"ready"'):
            self.process.kill()
            self.process.wait()
            raise RuntimeError(f"a fuzz worker did not start: {ready!r}; see {self.log}")

    def send(self, index: int, case: int) -> None:
        self.case, self.started = (index, case), time.monotonic()
        self.process.stdin.write(f"{index} {case}\n")
        self.process.stdin.flush()

    def stop(self) -> int:
        """End the worker; return its exit status (negative: the signal that ended it)."""
        if self.process.poll() is None:
            self.process.kill()
        status = self.process.wait()
        self.process.stdin.close()
        self.process.stdout.close()
        return status


class Fuzzer:
    """Runs cases on `workers` worker processes, starting a new one after each crash or hang.

    Args:
        seeds: The files to mutate, as `corpus.make_seeds` makes them.
        workdir: Where the manifest, the mutated files and the workers' logs go.
        workers: How many worker processes.
        timeout: Seconds a case may take before it counts as a hang.
        memory: Bytes of address space a worker may add to what it had after start-up.
    """

    def __init__(
        self,
        seeds: Sequence[Seed],
        workdir: Path,
        workers: int = 2,
        timeout: float = 30.0,
        memory: int = MEMORY,
    ):
        self.seeds = list(seeds)
        self.workdir = Path(workdir)
        self.manifest = self.workdir / "seeds.json"
        save_seeds(self.seeds, self.manifest)
        self.workers = workers
        self.timeout = timeout
        self.memory = memory
        self._started = 0

    def _worker(self) -> _Worker:
        self._started += 1
        return _Worker(self.manifest, self.workdir, self.memory, self._started, self.timeout)

    def run(self, cases: Iterable[tuple[int, int]]) -> Iterator[Result]:
        """Run `(seed index, case number)` pairs; yield the result of each as it comes."""
        pending = iter(cases)
        selector = selectors.DefaultSelector()
        idle = [self._worker() for _ in range(self.workers)]
        busy: dict[int, _Worker] = {}
        try:
            while True:
                while idle:
                    case = next(pending, None)
                    if case is None:
                        break
                    worker = idle.pop()
                    worker.send(*case)
                    selector.register(worker.process.stdout, selectors.EVENT_READ, worker)
                    busy[id(worker)] = worker
                if not busy:
                    return
                deadline = min(w.started for w in busy.values()) + self.timeout
                events = selector.select(max(0.0, deadline - time.monotonic()))
                now = time.monotonic()
                for key, _ in events:
                    worker = key.data
                    line = worker.process.stdout.readline()
                    selector.unregister(worker.process.stdout)
                    del busy[id(worker)]
                    yield self._result(worker, line, now)
                    idle.append(worker if line else self._worker())
                for worker in [w for w in busy.values() if now - w.started > self.timeout]:
                    selector.unregister(worker.process.stdout)
                    del busy[id(worker)]
                    worker.stop()
                    index, case = worker.case
                    yield Result(self.seeds[index].name, case, "hang", now - worker.started)
                    idle.append(self._worker())
        finally:
            for worker in [*idle, *busy.values()]:
                worker.stop()
            selector.close()

    def _result(self, worker: _Worker, line: str, now: float) -> Result:
        index, case = worker.case
        name = self.seeds[index].name
        if not line:
            status = worker.stop()
            try:
                cause = f"killed by {signal.Signals(-status).name}" if status < 0 else f"exit status {status}"
            except ValueError:
                cause = f"exit status {status}"
            tail = worker.log.read_text(errors="replace")[-2000:]
            return Result(name, case, "crash", now - worker.started, [f"the worker died, {cause}", tail])
        answer = json.loads(line)
        outcome = "problem" if answer["problems"] else "read" if answer["read"] else "refused"
        return Result(name, case, outcome, answer["seconds"], answer["problems"])
