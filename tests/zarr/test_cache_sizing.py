"""The OME-Zarr chunk cache: sized from the machine by default, changed by one setting, its hits and misses
counted in a DataLoader's stats."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import numpy as np
import pytest

import vitrio as vio
from vitrio import configuration, configure
from vitrio._config import usable_memory
from vitrio.formats.zarr import OmeZarrFormat

from .conftest import CHUNKS, SHAPE


def _epochs(path, values, epochs: int, progress: bool = False) -> list[vio.data.LoaderStats]:
    """The stats of each epoch of a DataLoader over patches of the store's whole volume."""
    centres = [[z, y, x] for z in (8, 24) for y in (8, 40, 72) for x in (8, 40, 72)]
    source = vio.data.PatchSource([str(path)] * len(centres), centres, (16, 16, 16), "float32")
    loader = vio.data.DataLoader(
        vio.data.Dataset({"image": source}), batch_size=6, loader=vio.loader(workers=2), progress=progress
    )
    found = []
    for _ in range(epochs):
        for batch in loader:
            assert batch["image"].shape[1:] == (16, 16, 16)
            z, y, x = centres[int(batch["index"][0])]
            assert np.array_equal(batch["image"][0], values[z - 8 : z + 8, y - 8 : y + 8, x - 8 : x + 8])
        found.append(loader.stats)
    return found


def test_the_default_cache_is_a_quarter_of_the_memory_and_at_least_256_mib():
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert 0 < usable_memory() <= memory
    assert vio.Configuration().zarr_cache_bytes == max(256 << 20, usable_memory() // 4)


@pytest.mark.parametrize(("limit", "expected"), [(8 << 30, 2 << 30), (6 << 29, 3 << 28)])
def test_a_limit_on_address_space_bounds_the_default_cache(limit, expected):
    """`ulimit -v` of 8 GiB gives a cache of 2 GiB; of 3 GiB, 768 MiB (on a machine of more memory)."""
    if usable_memory() < limit:
        expected = max(256 << 20, usable_memory() // 4)
    shown = "import vitrio; print(vitrio.Configuration().zarr_cache_bytes)"
    limited = f"import resource; resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit})); {shown}"
    result = subprocess.run([sys.executable, "-c", limited], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) == expected


def test_a_second_epoch_finds_its_chunks_in_the_cache_and_the_stats_say_so(tomogram):
    path, values = tomogram
    OmeZarrFormat.clear_cache()
    first, second = _epochs(path, values, 2)
    chunks = np.prod([-(-extent // CHUNKS) for extent in SHAPE])
    assert 0 < first.reads.zarr_chunk_misses <= chunks
    assert first.reads.zarr_decoded_bytes == first.reads.zarr_chunk_misses * CHUNKS**3 * 4
    assert second.reads.zarr_chunk_misses == 0
    assert second.reads.zarr_chunk_hits > 0
    figures = second.as_dict()
    assert figures["reads/zarr_chunk_misses"] == 0
    assert figures["reads/zarr_chunk_hits"] == second.reads.zarr_chunk_hits


def test_the_progress_line_shows_the_share_of_chunks_decoded(tomogram, monkeypatch):
    path, values = tomogram
    OmeZarrFormat.clear_cache()
    monkeypatch.setitem(sys.modules, "tqdm", None)
    lines = []
    for _ in range(2):
        monkeypatch.setattr(sys, "stderr", io.StringIO())
        _epochs(path, values, 1, progress=True)
        lines.append(sys.stderr.getvalue().rstrip("\n").split("\r")[-1])
    assert "chunks decoded 100%" in lines[0]
    assert lines[1].endswith("chunks decoded 0%")


def test_a_cache_too_small_misses_in_every_epoch_and_configure_changes_it_at_once(tomogram):
    path, values = tomogram
    OmeZarrFormat.clear_cache()
    _epochs(path, values, 1)  # the shared cache in use before the configuration changes
    with configure(zarr_cache_bytes=CHUNKS**3 * 4):
        assert OmeZarrFormat.chunk_cache.capacity == CHUNKS**3 * 4
        OmeZarrFormat.clear_cache()
        first, second = _epochs(path, values, 2)
        assert second.reads.zarr_chunk_misses > 0
        assert OmeZarrFormat.chunk_cache.nbytes <= CHUNKS**3 * 4
    assert OmeZarrFormat.chunk_cache.capacity == configuration().zarr_cache_bytes
    OmeZarrFormat.clear_cache()
