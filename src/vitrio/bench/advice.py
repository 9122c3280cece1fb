"""What `vitrio doctor`'s figures mean: where an image's time goes, the rates to expect, the settings to use.

The model of an image's time, on one thread: opening its file (once a batch
per file, so a share of an open when files are many and no reader is kept
open), reading it from disk (cold less warm), decoding and converting it
(warm less copying), and copying it (its bytes at one thread's memcpy rate).
Threads share the disk and split the rest, up to the cores. An OME-Zarr
store decodes each chunk it reads: the chunk cache holds the chunks an
epoch reads again only if it is as large as the stores' decoded bytes.
"""

from __future__ import annotations

from typing import Any

__all__ = ["advise", "expected_rates", "time_shares", "size"]

BATCH = 256
"""The batch size the model assumes: a shuffled batch opens up to this many files."""
CACHE = 1024
"""The most readers recommended to keep open."""
MIB = 1 << 20
ZARR_SPARE = 1.25
"""The chunk cache recommended, as a multiple of the stores' decoded bytes: room for chunks that reach
past a volume's edges."""


def size(count: float) -> str:
    """Bytes in words: "1.5 GB"."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(count) < 1000 or unit == "TB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1000
    raise AssertionError


def _parts(figures: dict[str, Any]) -> dict[str, float]:
    """An image's time on one thread, by part, in seconds: open, disk, decode, copy."""
    image = figures["per_image"]
    files = figures["dataset"]["files"]
    copy = image["image_bytes"] / figures["machine"]["memcpy_bytes_per_second"]
    return {
        "open": image["open_seconds"] * min(1.0, files / BATCH) / max(1.0, min(image["image_count"], BATCH)),
        "disk": max(image["cold_seconds"] - image["warm_seconds"], 0.0),
        "decode": max(image["warm_seconds"] - copy, 0.0),
        "copy": copy,
    }


def time_shares(figures: dict[str, Any]) -> dict[str, float]:
    """Where an image's time goes in a first epoch on one thread: shares of open, disk, decode and copy."""
    parts = _parts(figures)
    total = sum(parts.values()) or 1.0
    return {name: seconds / total for name, seconds in parts.items()}


def _rate(parts: dict[str, float], threads: int, most: int, cold: bool, scratch: bool = False) -> float:
    working = min(threads, most)
    each = parts["copy"] if scratch else parts["decode"] + parts["copy"] + (parts["open"] if cold else 0.0)
    rate = working / max(each, 1e-9)
    return min(rate, 1 / parts["disk"]) if cold and parts["disk"] > 0 else rate


def expected_rates(figures: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Images a second to expect on 1, 2 and N threads: a first epoch (files cold), later epochs with
    the files in the page cache and readers kept open, and later epochs from a scratch."""
    parts, most = _parts(figures), figures["machine"]["threads"]
    counts = sorted({1, 2, most})
    return {
        f"{threads}": {
            "cold": _rate(parts, threads, most, cold=True),
            "warm": _rate(parts, threads, most, cold=False),
            "scratch": _rate(parts, threads, most, cold=False, scratch=True),
        }
        for threads in counts
    }


def _workers(figures: dict[str, Any], parts: dict[str, float], fits: bool) -> dict[str, Any]:
    most = figures["machine"]["threads"]
    cold = not fits
    best = _rate(parts, most, most, cold)
    workers = next(n for n in range(1, most + 1) if _rate(parts, n, most, cold) >= 0.9 * best)
    epochs = "a first epoch" if cold else "the epochs after the first"
    if cold and parts["disk"] > 0 and best >= 0.99 / parts["disk"]:
        why = f"{workers} reach the disk's {best:,.0f} images/s in {epochs}; more would wait for it"
    else:
        each = _rate(parts, 1, most, cold)
        why = f"each thread makes {each:,.0f} images/s in {epochs}; {workers} make {best:,.0f}"
    return {"setting": "workers", "value": workers, "reason": why}


def _cache(figures: dict[str, Any], parts: dict[str, float]) -> dict[str, Any]:
    files = figures["dataset"]["files"]
    opening = figures["per_image"]["open_seconds"]
    image = parts["decode"] + parts["copy"]
    if files > CACHE and parts["open"] < 0.1 * image:
        return {
            "setting": "cache",
            "value": None,
            "reason": f"opening a file ({opening * 1e3:.2f} ms) is little beside reading its images",
        }
    value = min(files, CACHE)
    every = "the file" if files == 1 else f"all {files} files"
    kept = every if value == files else f"the {value} files read last"
    return {
        "setting": "cache",
        "value": value,
        "reason": f"keep {kept} open: opening one costs {opening * 1e3:.2f} ms, "
        f"{opening / max(image, 1e-9):,.1f} times the read of one of its images",
    }


def _scratch(figures: dict[str, Any]) -> dict[str, Any]:
    images = figures["dataset"]["bytes_as_images"]
    machine = figures["machine"]
    memory, free, where = machine["memory"], machine["scratch_free"], machine["scratch_directory"]
    sizes = f"the images ({size(images)}) "
    if images <= memory / 2:
        kind, budget = "ram", images
        why = sizes + f"fit in half the memory available ({size(memory)}): create_host_image_scratch"
    elif images <= memory:
        kind, budget = "mapped", images
        why = (
            sizes + f"fit in the memory available ({size(memory)}) but not twice: "
            "create_mapped_file_image_scratch, which the page cache holds as memory allows"
        )
    elif images <= 0.9 * free:
        kind, budget = "directory", images
        why = (
            sizes + f"are larger than the memory available ({size(memory)}); {where} has {size(free)} "
            "free: create_directory_image_scratch on a local disk"
        )
    else:
        kind, budget = "none", 0
        why = sizes + f"fit neither in memory ({size(memory)}) nor in {where} ({size(free)} free)"
    return {"setting": "scratch", "value": kind, "budget": budget, "reason": why}


def _read_ahead(parts: dict[str, float]) -> dict[str, Any]:
    work = parts["decode"] + parts["copy"]
    if parts["disk"] > 0.25 * work:
        why = (
            f"the disk takes {parts['disk'] * 1e6:,.0f} µs of an image cold, beside {work * 1e6:,.0f} µs of "
            "work: telling the kernel ahead keeps it busy (the DataLoader does; "
            "ImageLoader(read_ahead=True) for the core's batches)"
        )
        return {"setting": "read_ahead", "value": True, "reason": why}
    why = "cold reads took about as long as warm ones: the files were cached, or the disk keeps up"
    return {"setting": "read_ahead", "value": False, "reason": why}


def _convert(figures: dict[str, Any], parts: dict[str, float]) -> dict[str, Any]:
    packed = {name: row for name, row in figures["formats"].items() if row["compressed"]}
    if not packed:
        return {"setting": "convert", "value": False, "reason": "the files are read without decoding"}
    name, row = max(packed.items(), key=lambda item: item[1]["warm_seconds"])
    times = row["warm_seconds"] / max(parts["copy"], 1e-9)
    rate = f"{name} decodes at {1 / row['warm_seconds']:,.0f} images/s a thread, {times:,.1f} times"
    if times < 2:
        why = f"{rate} the time of copying a raw image: little to gain"
        return {"setting": "convert", "value": False, "reason": why}
    command = "vitrio fractionate" if name == "eer" else "vitrio convert"
    why = f"{rate} the time of copying a raw image: convert once to an MRC stack ({command}) and read that"
    return {"setting": "convert", "value": True, "reason": why}


def _zarr_cache(figures: dict[str, Any]) -> dict[str, Any]:
    zarr, memory = figures["zarr"], figures["machine"]["memory"]
    now, needed, misses = zarr["cache_bytes"], zarr["working_set"], zarr["warm_misses"]
    value = -(-int(needed * ZARR_SPARE) // MIB) * MIB
    thrashing = misses > 0 or needed > now
    if misses:
        state = f"the chunk cache ({size(now)}) thrashes: the sample read again decoded {misses:,} chunks"
    elif needed > now:
        state = f"the chunk cache ({size(now)}) thrashes: it holds less than the stores' decoded chunks"
    else:
        state = f"the chunk cache ({size(now)}) holds the stores' decoded chunks"
    if not thrashing:
        value = now
        why = f"{state} ({size(needed)}): the epochs after the first decode nothing"
    elif value > memory / 2:
        why = (
            f"{state} ({size(needed)}), more than half the memory available ({size(memory)}): read the "
            "subvolumes of one store (or one region) together, so that an epoch reads each chunk once"
        )
        value = now
    else:
        why = (
            f"{state} ({size(needed)}): set zarr_cache_bytes={value} (vio.configure, or the environment "
            f"variable VITRIO_ZARR_CACHE_BYTES={value}) so that later epochs decode nothing"
        )
    return {"setting": "zarr_cache_bytes", "value": value, "thrashing": thrashing, "reason": why}


def advise(figures: dict[str, Any]) -> list[dict[str, Any]]:
    """The settings to read the dataset with, each a dict of setting, value and reason (and the
    scratch's budget in bytes); the OME-Zarr chunk cache's last, where the dataset has stores."""
    parts = _parts(figures)
    scratch = _scratch(figures)
    fits = scratch["value"] != "none"
    settings = [
        _workers(figures, parts, fits),
        _cache(figures, parts),
        scratch,
        _read_ahead(parts),
        _convert(figures, parts),
    ]
    if figures.get("zarr"):
        settings.append(_zarr_cache(figures))
    return settings
