"""`vitrio doctor`: what reading a dataset would cost, measured on a sample of it, and how to read it.

`diagnose(paths)` takes what a program would train on: a STAR or `.cs` file of
particles, a `.txt` list of stacks, image files, folders of them, or OME-Zarr
stores (local, or by URL). It counts the files and their bytes (`os.stat`,
opening none), then, until its time is up, samples a few files (one of each
kind first): for each, it drops the file's pages from the page cache
(`posix_fadvise` DONTNEED, which needs no privilege; each file opened as its
reader opens it, so a FIFO or a link in a store is passed over), reads up to
16 of the images the dataset reads on one thread (cold), reads them again
(warm), and opens the file alone. With one thread's memcpy rate, that splits the time of
an image into opening, disk, decoding and copying, and gives the images a
second to expect on 1, 2 and N threads. An OME-Zarr store's sample starts
with the process's chunk cache emptied, and the cache's misses are counted
in each pass: misses in the warm pass, over chunks the cold pass decoded,
say the cache (`zarr_cache_bytes`) is too small for even the sample. `advise`
turns the figures into the settings to read with, each with its reason. It
writes nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
import os
import shutil
import tempfile
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from time import perf_counter
from typing import Any

import numpy as np

import vitrio as vio
from vitrio._fs import open_beneath, open_readonly
from vitrio._locations import index_locations
from vitrio._providers import NO_LAYOUT
from vitrio._storage import is_url
from vitrio.formats.zarr import OmeZarrFormat

from .advice import advise, expected_rates
from .workloads import memcpy_rate

__all__ = ["Dataset", "Sample", "diagnose", "find_dataset", "available_memory"]

SAMPLED_IMAGES = 16
"""The most images read of one sampled file."""
SAMPLED_BYTES = 64 << 20
"""The most bytes of images read of one sampled file (a larger image is cropped around its centre)."""
SAMPLED_FILES = 8
"""The most files sampled."""
WALKED = 1_000_000
"""The most entries looked at under a folder given, or files of a store counted."""
_STORE_FILES = ("zarr.json", ".zgroup", ".zattrs")


@dataclasses.dataclass
class Dataset:
    """The files a dataset reads: for each key, the indices of the images read (None for all), and
    its bytes on disk (None for a URL)."""

    indices: dict[str, np.ndarray | None]
    sizes: dict[str, int | None]


@dataclasses.dataclass
class Sample:
    """What reading some images of one file took, on one thread: seconds to open it, and seconds an
    image cold (its pages evicted first) and warm, the opens left out; and the OME-Zarr chunks decoded
    (their bytes) in the cold pass and missed in the warm one (0 for other formats)."""

    key: str
    format: str
    compressed: bool
    images: int
    image_count: int
    image_bytes: int
    stored_bytes: int
    open_seconds: float
    cold_seconds: float
    warm_seconds: float
    chunk_bytes_cold: int = 0
    chunk_misses_warm: int = 0


def _is_store(path: Path) -> bool:
    return path.is_dir() and any((path / name).is_file() for name in _STORE_FILES)


def _files_under(path: str | os.PathLike[str]) -> list[str]:
    """The files under a store's folder, the first WALKED of them (links not followed)."""
    found = (os.path.join(folder, name) for folder, _, names in os.walk(path) for name in names)
    return list(itertools.islice(found, WALKED))


def _readable(extension: str) -> bool:
    return any(extension in form.read_extensions for form in vio.formats.registered_formats())


def find_dataset(paths: Sequence[str | os.PathLike[str]]) -> Dataset:
    """The files `paths` name: STAR, `.cs` and `.txt` lists read, folders walked (links not followed).

    Raises:
        ValueError: If a URL is not of an OME-Zarr store, a list names nothing, or nothing is found.
        FileNotFoundError: If a path does not exist.
    """
    indices: dict[str, np.ndarray | None] = {}
    for given in paths:
        text = os.fspath(given)
        if is_url(text):
            if not text.partition("#")[0].rstrip("/").endswith(".zarr"):
                raise ValueError(
                    f"{text}: URLs of OME-Zarr stores (.zarr) are read; other URLs are not supported yet"
                )
            indices[text] = None
            continue
        path = Path(text)
        if not path.exists():
            raise FileNotFoundError(f"{path}: no such file or folder")
        if path.suffix in (".star", ".cs"):
            locations = vio.data.particle_locations(vio.data.read_particles(path), path)
            keys, key_ids, numbers = index_locations(locations)
            for number, key in enumerate(keys):
                indices[key] = np.unique(numbers[key_ids == number])
        elif path.suffix == ".txt":
            indices.update(dict.fromkeys(vio.data.read_stack_list(path)))
        elif path.is_dir() and not _is_store(path):
            indices.update(dict.fromkeys(_walk(path)))
        else:
            indices[text] = None
    if not indices:
        raise ValueError(f"no image files in {', '.join(map(os.fspath, paths))}")
    sizes = {
        key: None
        if is_url(key)
        else sum(os.lstat(name).st_size for name in _files_under(key))
        if os.path.isdir(key)
        else os.stat(key).st_size
        for key in indices
    }
    return Dataset(indices, sizes)


def _walk(root: Path) -> list[str]:
    found, seen = [], 0
    for folder, folders, names in os.walk(root):
        seen += len(folders) + len(names)
        if seen > WALKED:
            raise ValueError(f"{root}: holds more than {WALKED:,} entries; name its image folders")
        stores = [name for name in folders if _is_store(Path(folder, name))]
        folders[:] = sorted(set(folders) - set(stores))
        found += [os.path.join(folder, name) for name in stores]
        found += [
            os.path.join(folder, name) for name in sorted(names) if _readable(Path(name).suffix.lower())
        ]
    return found


def _kind(key: str) -> str:
    """What stands for a file's format before it is opened: its extension, or "store"."""
    return "store" if is_url(key) or os.path.isdir(key) else Path(key).suffix.lower()


def _chosen(dataset: Dataset) -> list[str]:
    """The files to sample: one of each kind first, then others spread over the dataset."""
    keys = list(dataset.indices)
    firsts = list({_kind(key): key for key in reversed(keys)}.values())
    spread = [keys[i] for i in np.linspace(0, len(keys) - 1, SAMPLED_FILES).astype(int).tolist()]
    return list(dict.fromkeys(firsts + spread))[:SAMPLED_FILES]


def _evict(key: str) -> None:
    """Drop the pages of a local file, or of a store's files, from the page cache, where it may.

    Each is opened as its reader opens it (a store's files beneath it through no link): a FIFO, a
    device or a link is passed over, never waited on or followed.
    """
    if is_url(key) or not hasattr(os, "posix_fadvise"):
        return
    if not os.path.isdir(key):
        _drop_pages(lambda: open_readonly(key))
        return
    for name in _files_under(key):
        _drop_pages(lambda name=name: open_beneath(key, os.path.relpath(name, key)))


def _drop_pages(opening: Callable[[], int]) -> None:
    """Drop the pages of the file `opening` opens from the page cache; nothing if it does not open."""
    with contextlib.suppress(OSError, ValueError):
        fd = opening()
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _sample(key: str, wanted: np.ndarray | None) -> Sample:
    """Open one file alone (warm), then read up to SAMPLED_IMAGES of the images wanted cold and warm, on one
    thread; an image larger than SAMPLED_BYTES is cropped around its centre, its time scaled up."""
    files = vio.reader_provider()
    files.release(files.acquire(key))  # the format's modules imported, the header's pages read
    started = perf_counter()
    reader = files.acquire(key)
    open_seconds = perf_counter() - started
    try:
        descriptor, format_name = reader.descriptor, reader.format_name or "?"
    finally:
        files.release(reader)
    core = descriptor.core_extents
    side = max(1, int((SAMPLED_BYTES // 4) ** (1 / len(core))))
    patch = tuple(min(extent, side) for extent in core)
    scale = math.prod(core) / math.prod(patch)
    indices = np.arange(descriptor.image_count) if wanted is None else wanted
    count = min(SAMPLED_IMAGES, len(indices), max(1, SAMPLED_BYTES // (math.prod(patch) * 4)))
    indices = indices[np.linspace(0, len(indices) - 1, count).astype(int)]
    locations = [vio.ImageLocation(key, i) if descriptor.is_stack else key for i in indices.tolist()]
    loader = vio.loader(workers=1)
    out = np.empty((count, *patch), np.float32)

    def read() -> float:
        """Seconds per image read, less the opens of the file."""
        begun = perf_counter()
        if patch == core:
            vio.read_batch_async(loader, out, locations).get()
            opens = 1
        else:
            centre = [[extent // 2 for extent in core]]
            for slot, location in enumerate(locations):
                vio.read_patches_async(loader, out[slot : slot + 1], location, centre).get()
            opens = count
        return max(perf_counter() - begun - opens * open_seconds, 1e-9) * scale / count

    _evict(key)
    if _kind(key) == "store":
        OmeZarrFormat.chunk_cache.clear()
    loader.counters.reset()
    cold = read()
    decoded = loader.counters.stats(reset=True).zarr_decoded_bytes
    warm = read()
    return Sample(
        key=key,
        format=format_name,
        compressed=files.layout(key) in (None, NO_LAYOUT) and format_name in ("tiff", "eer"),
        images=count,
        image_count=descriptor.image_count,
        image_bytes=math.prod(core) * 4,
        stored_bytes=math.prod(core) * descriptor.data_type.dtype.itemsize,
        open_seconds=open_seconds,
        cold_seconds=cold,
        warm_seconds=warm,
        chunk_bytes_cold=decoded,
        chunk_misses_warm=loader.counters.stats().zarr_chunk_misses,
    )


def available_memory() -> int:
    """The bytes of memory the system says are available (MemAvailable, else the free pages)."""
    try:
        with open("/proc/meminfo", "rb") as info:
            for line in info:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def diagnose(
    paths: Sequence[str | os.PathLike[str]],
    seconds: float = 3.0,
    memory: int | None = None,
    scratch_directory: str | os.PathLike[str] | None = None,
    threads: int | None = None,
) -> dict[str, Any]:
    """Measure what reading the dataset `paths` name would cost, and advise how to read it.

    Args:
        paths: STAR or `.cs` files of particles, `.txt` lists of stacks, image files, folders of
            them, OME-Zarr stores or their URLs.
        seconds: How long to spend sampling files; one file at least is read.
        memory: The memory to plan for, in bytes. Defaults to what the system says is available.
        scratch_directory: Where a directory scratch would go. Defaults to the temporary directory.
        threads: The most threads to plan for. Defaults to the machine's cores.

    Returns:
        Plain values, which JSON takes: `dataset` (files, images, bytes on disk and as images, by
        kind of file), `machine` (memcpy rate, memory, the scratch directory's free space,
        threads), `formats` (what the sample took, by format), `time_shares` (where an image's time
        goes), `expected` (images a second for 1, 2 and N threads, cold and warm), `zarr` (for
        OME-Zarr stores: the chunk cache's bytes, the stores' decoded bytes, the sample's chunk
        misses in its warm pass) and `recommendations` (setting, value, reason).

    Raises:
        ValueError, FileNotFoundError: As `find_dataset` raises them, or a sampled file is malformed.
    """
    dataset = find_dataset(paths)
    deadline = perf_counter() + seconds
    samples: list[Sample] = []
    for key in _chosen(dataset):
        if samples and perf_counter() > deadline:
            break
        samples.append(_sample(key, dataset.indices[key]))
    directory = os.fspath(scratch_directory or tempfile.gettempdir())
    machine = {
        "memcpy_bytes_per_second": memcpy_rate(32 << 20),
        "memory": available_memory() if memory is None else int(memory),
        "scratch_directory": directory,
        "scratch_free": shutil.disk_usage(directory).free,
        "threads": threads or os.cpu_count() or 1,
    }
    figures = _figures(dataset, samples, machine)
    figures["expected"] = expected_rates(figures)
    figures["recommendations"] = advise(figures)
    return figures


def _images(key: str, wanted: np.ndarray | None, size: int | None, known: list[Sample], sizes: dict) -> float:
    """How many images of the file at `key` the dataset reads: those a list names, those a sampled
    file holds, or as many as its bytes hold at the rate of the sampled files of its kind."""
    if wanted is not None:
        return len(wanted)
    sampled = next((sample for sample in known if sample.key == key), None)
    if sampled is not None or size is None:
        return sampled.image_count if sampled else 1
    return size * sum(s.image_count for s in known) / max(1, sum(sizes[s.key] or 0 for s in known))


_COSTS = ("open_seconds", "cold_seconds", "warm_seconds", "image_bytes", "stored_bytes", "image_count")


def _mean(samples: list[Sample], weights: list[float]) -> dict[str, float]:
    """The costs of an image (and of opening a file), averaged over samples weighed by what they stand for."""
    total = sum(weights)
    per_image = {"cold_seconds", "warm_seconds"}
    return {
        name: sum(
            w * getattr(s, name) / (s.images if name in per_image else 1) for s, w in zip(samples, weights)
        )
        / total
        for name in _COSTS
    }


def _figures(dataset: Dataset, samples: list[Sample], machine: dict[str, Any]) -> dict[str, Any]:
    """The dataset's files, images and bytes by kind of file, and the sample's costs by format and for
    the whole, each sampled file weighed by the images of its kind it stands for."""
    by_kind: dict[str, list[Sample]] = defaultdict(list)
    for sample in samples:
        by_kind[_kind(sample.key)].append(sample)
    kinds: dict[str, dict[str, Any]] = {}
    for key, wanted in dataset.indices.items():
        kind = _kind(key) if _kind(key) in by_kind else next(iter(by_kind))
        part = kinds.setdefault(kind, {"files": 0, "images": 0.0, "bytes_on_disk": 0})
        part["files"] += 1
        part["bytes_on_disk"] += dataset.sizes[key] or 0
        part["images"] += _images(key, wanted, dataset.sizes[key], by_kind[kind], dataset.sizes)
    weights = [kinds[_kind(s.key)]["images"] / len(by_kind[_kind(s.key)]) for s in samples]
    formats = {}
    for name in dict.fromkeys(s.format for s in samples):
        chosen = [(s, w) for s, w in zip(samples, weights) if s.format == name]
        formats[name] = {
            **_mean([s for s, _ in chosen], [w for _, w in chosen]),
            "compressed": any(s.compressed for s, _ in chosen),
            "share": sum(w for _, w in chosen) / sum(weights),
        }
    per_image = _mean(samples, weights)
    images = sum(part["images"] for part in kinds.values())
    stores = [s for s in samples if _kind(s.key) == "store"]
    zarr = {}
    if stores:
        sampled = max(s.chunk_bytes_cold for s in stores)
        each = sum(s.stored_bytes for s in stores) / len(stores)
        zarr = {
            "cache_bytes": OmeZarrFormat.chunk_cache.capacity,
            "working_set": max(round(kinds["store"]["images"] * each), sampled),
            "sample_decoded_bytes": sampled,
            "warm_misses": sum(s.chunk_misses_warm for s in stores),
        }
    return {
        "dataset": {
            "files": len(dataset.indices),
            "images": round(images),
            "bytes_on_disk": sum(size or 0 for size in dataset.sizes.values()),
            "bytes_as_images": round(images * per_image["stored_bytes"]),
            "kinds": {kind: {**part, "images": round(part["images"])} for kind, part in kinds.items()},
        },
        "machine": machine,
        "sample": {"files": len(samples), "images": sum(s.images for s in samples)},
        "formats": formats,
        "per_image": per_image,
        "zarr": zarr,
    }
