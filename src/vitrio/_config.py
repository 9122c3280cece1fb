"""Every pool, size and time limit vitrio chooses, named once.

`configuration()` is the value in force: the defaults below, each overridden
by the environment variable `VITRIO_<FIELD>` (`VITRIO_REMOTE_TIMEOUT=5`), read
once, at the first call. `configure(**changes)` changes it for the process
(or, in a `with` block, until the block ends). A loader or a storage given a
`Configuration` of its own uses that one instead.
"""

from __future__ import annotations

import dataclasses
import os
import resource
import threading
from collections.abc import Mapping
from typing import Any

__all__ = ["THREADS", "Configuration", "configuration", "configure", "open_files", "usable_memory"]


_CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")
"""Where a Linux control group (v2, then v1) says how much memory its processes may use."""


def usable_memory() -> int:
    """The bytes of memory the process may use: the machine's physical memory, or less where its control
    group's memory limit or its limit on address space (`ulimit -v`) is lower."""
    limits = [os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")]
    for path in _CGROUP_LIMITS:
        try:
            with open(path, "rb") as limit:
                text = limit.read(64).strip()
        except OSError:
            continue
        if text.isdigit():
            limits.append(int(text))
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        limits.append(soft)
    return min(limits)


@dataclasses.dataclass(frozen=True)
class Configuration:
    """What vitrio chooses where a caller does not say. Every field has a default and an environment
    variable, `VITRIO_` and the field's name in capitals.

    Attributes:
        remote_gap: Byte ranges of a file at a URL closer than this many bytes are fetched as one.
        remote_part: The most bytes one request for a file at a URL asks for.
        remote_in_flight: The most requests for ranges of files at URLs in flight at once.
        remote_connections: The connections an `s3://` filesystem keeps open at most.
        remote_attempts: How many times a request that fails for a passing reason is made in all.
        remote_backoff: The seconds waited before a request is made again; doubled at each attempt.
        remote_timeout: The seconds a request may wait for each piece of its answer.
        remote_connect_timeout: The seconds a request may take to connect.
        remote_readers_kept: How many readers of files at URLs a provider keeps, with their headers.
        open_files: The most files a loader made without `cache=` keeps open (and mapped), across
            batches and epochs; never more than a quarter of the process's limit on open files.
        layouts_kept: How many layouts of raw files a provider keeps, for the native batch path.
        tasks_per_worker: How many tasks a batch read through readers splits into, per thread.
        native_tasks_per_worker: How many tasks the native runs of a batch split into, per thread.
        open_ahead: How many files the tasks of a loader that reads ahead hold open at most, their
            images hinted, while they copy others' (a task holds its share, and at least 2).
        header_hint_bytes: The bytes at the start of a file of unknown layout that the kernel is told
            are read soon, where a loader reads ahead: its header.
        opening_threads: The threads that open many files at once: the files at URLs of a task, the
            micrographs of an extraction.
        split_threads: The threads that copy parts of one large run of a raw file, the process over.
        split_bytes: A run of a raw file of at least this many bytes is copied in parts, on the
            split threads.
        split_parts: The most parts such a run is copied in.
        scratch_hinted_ahead: How many files ahead of the one a prefetch into a scratch takes in the
            kernel is told will be read.
        zarr_cache_bytes: The most bytes of decoded OME-Zarr chunks kept, shared by a process's
            stores: the cache holds the chunks read last up to it. By default a quarter of the
            memory the process may use (`usable_memory`), at least 256 MiB.
        zarr_chunks_at_once: How many chunks of an OME-Zarr level one read fetches and holds at a time.
        zarr_levels_kept: How many opened OME-Zarr scale levels (their metadata) a process keeps, so
            that opening one again reads no metadata (a local one's stamp is still checked).
        chunk_bytes: About how many bytes a chunk of a dask array of images holds, and a part of a
            file `vitrio convert` reads and writes at once.
        dask_open_files: How many files each task of a dask array keeps open.
        dask_blocks_per_worker: How many blocks per worker `vitrio.dask.store` keeps in flight.
        extract_batch_bytes: About how many bytes of particles an extraction crops in one batch.
        extract_in_flight: How many batches an extraction reads (and writes) at once.
        cluster_threads: The threads a task on a Dask cluster reads and writes with, unless told.
        cluster_jobs_per_thread: How many bulk jobs (one file each) per thread of a Dask cluster are
            handed out at once, so that a thread that ends one has the next at hand.
        montage_read_bytes: The most bytes one read of 2-D images for `vitrio montage` holds.
        montage_open_files: The most files `vitrio montage` keeps open while it reads.
        eer_batch_bytes: About how many bytes of an EER file's frames are read, then decoded into
            events, at once (one frame at least).
        star_part_bytes: About how many bytes of a STAR file's plain rows are read into memory at once
            (whole lines, more where one is longer).
        cs_part_bytes: About how many bytes of a numpy `.cs` file's rows are read into memory at once
            (one row at least), each field asked for copied out of them.
    """

    remote_gap: int = 1 << 20
    remote_part: int = 16 << 20
    remote_in_flight: int = 32
    remote_connections: int = 64
    remote_attempts: int = 4
    remote_backoff: float = 0.05
    remote_timeout: float = 20.0
    remote_connect_timeout: float = 5.0
    remote_readers_kept: int = 1 << 12
    open_files: int = 1024
    layouts_kept: int = 1 << 16
    tasks_per_worker: int = 4
    native_tasks_per_worker: int = 2
    open_ahead: int = 64
    header_hint_bytes: int = 64 << 10
    opening_threads: int = 32
    split_threads: int = max(1, (os.cpu_count() or 1) - 1)
    split_bytes: int = 64 << 20
    split_parts: int = 8
    scratch_hinted_ahead: int = 4
    zarr_cache_bytes: int = max(256 << 20, usable_memory() // 4)
    zarr_chunks_at_once: int = 64
    zarr_levels_kept: int = 64
    chunk_bytes: int = 64 << 20
    dask_open_files: int = 16
    dask_blocks_per_worker: int = 2
    extract_batch_bytes: int = 16 << 20
    extract_in_flight: int = 2
    cluster_threads: int = 2
    cluster_jobs_per_thread: int = 2
    montage_read_bytes: int = 256 << 20
    montage_open_files: int = 256
    eer_batch_bytes: int = 64 << 20
    star_part_bytes: int = 64 << 20
    cs_part_bytes: int = 8 << 20

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            kind = _kind(field)
            if isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else int):
                noun = "an integer" if kind is int else "a number"
                raise TypeError(f"configuration {field.name} is {noun}, not {value!r}")
            if not value > 0:
                raise ValueError(f"configuration {field.name} is positive, not {value!r}")

    def replace(self, **changes: Any) -> Configuration:
        """This configuration with `changes`, checked.

        Raises:
            TypeError: If a change names no field, or gives a value of the wrong type.
            ValueError: If a value is not positive.
        """
        unknown = sorted(set(changes) - {field.name for field in dataclasses.fields(self)})
        if unknown:
            raise TypeError(f"no configuration is named {', '.join(unknown)}")
        return dataclasses.replace(self, **changes)


def _kind(field: dataclasses.Field) -> type:
    return int if field.type in ("int", int) else float


def _from_environment(environment: Mapping[str, str]) -> Configuration:
    changes: dict[str, Any] = {}
    for field in dataclasses.fields(Configuration):
        name = f"VITRIO_{field.name.upper()}"
        if name in environment:
            text = environment[name]
            kind = _kind(field)
            try:
                changes[field.name] = value = kind(text)
            except ValueError:
                value = None
            if value is None or not value > 0:
                noun = "a positive integer" if kind is int else "a positive number"
                raise ValueError(f"environment variable {name} is {noun}, not {text!r}")
    return Configuration(**changes)


_lock = threading.Lock()
_current: Configuration | None = None


def configuration() -> Configuration:
    """The configuration in force for the process."""
    global _current
    with _lock:
        if _current is None:
            _current = _from_environment(os.environ)
        return _current


class _Configured:
    """What `configure` returns: a `with` block over it restores the configuration before it."""

    def __init__(self, before: Configuration):
        self._before = before

    def __enter__(self) -> Configuration:
        return configuration()

    def __exit__(self, *exc: Any) -> None:
        global _current
        with _lock:
            _current = self._before


def configure(**changes: Any) -> _Configured:
    """Change the configuration in force for the process; in a `with` block, until the block ends.

    Raises:
        TypeError: If a change names no field, or gives a value of the wrong type.
        ValueError: If a value is not positive.
    """
    global _current
    before = configuration()
    changed = before.replace(**changes)
    with _lock:
        _current = changed
    return _Configured(before)


def open_files(chosen: Configuration | None = None) -> int:
    """How many files a loader made without `cache=` keeps open: `open_files` of `chosen` (the
    configuration in force if None), at most a quarter of the soft limit on the process's open files
    (`RLIMIT_NOFILE`), so that the files a program opens itself still open; at least 1."""
    wanted = (chosen or configuration()).open_files
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY:
        wanted = min(wanted, soft // 4)
    return max(1, wanted)


THREADS: dict[str, str] = {
    "loader": "a loader's pool: `workers=` threads (the machine's cores by default), or the executor given;"
    " `vitrio.data`'s shared loader has one per core",
    "opening": "`opening_threads`, made at the first open of many files at once (files at URLs of a task,"
    " micrographs' headers of an extraction), shared by the process",
    "split": "`split_threads`, made at the first copy of a run of `split_bytes` or more, shared by the"
    " process",
    "extract": "`extract_particles`' pool: `threads=` (the machine's cores, `cluster_threads` on a cluster)",
    "fsspec": "fsspec's event loop: one thread, started by the first read of a file at a URL",
    "star": "the STAR reader's and writer's: one thread of the C extension reads (or writes) the second"
    " half of a large loop, while the caller's does the first",
    "finisher": "`vitrio-finisher`: one per epoch under way of a DataLoader whose transforms run on the"
    " loader's threads; it waits for each batch's reads and submits its finishing to the loader's pool",
    "commands": "the pools of `vitrio montage` and `vitrio fractionate`: `--threads` (the machine's cores),"
    " in each task on a cluster for `fractionate`",
}
"""Every source of threads vitrio starts, and what sizes it (the loader's are the caller's choice)."""
