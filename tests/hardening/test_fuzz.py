"""Every reader fed mutated files: each case reads, or raises a clean error that names the file.

A bounded run of the fuzzer of `fuzzing.py` with fixed case numbers, in
worker processes under a memory limit, so that a crash, a hang or an
allocation the file does not justify is a failure of the test, not of
pytest. `scripts/fuzz.py` runs the same for hours; a failure here is
reproduced with `python -m scripts.fuzz --replay SEED CASE`.
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import tifffile

import vitrio as vio

from .. import need_dm_samples
from .corpus import FORMATS, REAL_DM, make_seeds, regression_seeds
from .fuzzing import Fuzzer, Result, Seed, mutate

pytestmark = pytest.mark.timeout(300)

CASES_PER_SEED = 130
FIRST_CASE = 20141


def seed_cases(seed: Seed) -> range:
    """The case numbers a seed is mutated with: chosen by its name alone, so that they stay the same
    whichever other seeds there are."""
    first = FIRST_CASE + zlib.crc32(seed.name.encode()) % 10_000 * 1000
    return range(first, first + CASES_PER_SEED)


@pytest.fixture(scope="module")
def seeds(tmp_path_factory: pytest.TempPathFactory) -> list[Seed]:
    return make_seeds(tmp_path_factory.mktemp("seeds"))


def _run(seeds: Sequence[Seed], cases: Sequence[tuple[int, int]], workdir: Path) -> list[Result]:
    return list(Fuzzer(seeds, workdir, workers=2, timeout=60).run(cases))


def _report(failures: list[Result]) -> str:
    return "\n".join(
        f"{r.outcome} {r.seed} case {r.case} ({r.seconds:.1f} s): {r.problems}"
        f"\n  reproduce: python -m scripts.fuzz --replay {r.seed} {r.case}"
        for r in failures[:10]
    )


def test_every_seed_reads(seeds: list[Seed], tmp_path: Path):
    assert {seed.format for seed in seeds} == set(FORMATS)
    results = _run(seeds, [(index, -1) for index in range(len(seeds))], tmp_path)
    failures = [r for r in results if r.outcome != "read"]
    assert not failures, _report(failures)


def test_known_bad_files_are_refused_cleanly(tmp_path: Path):
    """The files the fuzzer found, each read 20 times: the LZW one crashed only now and then."""
    bad = regression_seeds()
    assert len(bad) >= 8
    results = _run(bad, [(index, -1) for index in range(len(bad)) for _ in range(20)], tmp_path)
    failures = [r for r in results if r.outcome != "refused"]
    assert not failures, _report(failures)


@pytest.mark.parametrize("file_format", FORMATS)
def test_mutated_files(seeds: list[Seed], tmp_path: Path, file_format: str):
    chosen = [seed for seed in seeds if seed.format == file_format]
    cases = [(index, case) for index, seed in enumerate(chosen) for case in seed_cases(seed)]
    results = _run(chosen, cases, tmp_path)
    outcomes = Counter(r.outcome for r in results)
    failures = [r for r in results if r.outcome not in ("read", "refused")]
    assert not failures, f"{outcomes}\n{_report(failures)}"
    assert sum(outcomes.values()) == len(cases)
    assert outcomes["read"] > len(cases) // 10 and outcomes["refused"] > len(cases) // 10, outcomes


def test_the_real_dm_files_are_seeds(seeds: list[Seed]):
    need_dm_samples()
    assert {f"dm-{name}" for name in REAL_DM} <= {seed.name for seed in seeds}


def test_the_tiff_seeds_decode_as_tifffile_reads_them(seeds: list[Seed]):
    """The seeds read (test_every_seed_reads) and read right: LZW with and without a predictor,
    tiles, PackBits and Deflate decode to what tifffile decodes."""
    tiffs = [seed for seed in seeds if seed.format == "tiff"]
    assert {"tiff-tiled-lzw.tif", "tiff-lzw-predictor.tif", "tiff-packbits.tif", "tiff-zlib.tif"} <= {
        seed.name for seed in tiffs
    }
    for seed in tiffs:
        expected = tifffile.imread(seed.path)
        assert expected.any(), seed.name
        np.testing.assert_array_equal(vio.read(seed.path), expected, err_msg=seed.name)


def test_mutated_scratch_files_are_resumed_or_rebuilt(tmp_path: Path):
    """A mapped-file scratch whose file was damaged (by the mutations of the fuzzer) is resumed where
    its checks pass and rebuilt or taken in again where they fail: every image reads right."""
    images = np.arange(3 * 4 * 16 * 16, dtype=np.float32).reshape(3, 4, 16, 16)
    paths = [tmp_path / f"{n}.mrcs" for n in range(3)]
    for path, values in zip(paths, images):
        vio.write_stack(values, path)
    locations = [vio.ImageLocation(p, i) for p in paths for i in range(4)]
    scratch_path = tmp_path / "scratch.bin"
    loader = vio.loader(workers=2)
    vio.prefetch_scratch_async(
        vio.create_mapped_file_image_scratch(locations, scratch_path, 2), locations, loader.executor
    ).get()
    content = scratch_path.read_bytes()
    fields = list(range(0, 4096, 8))
    for case in range(300):
        mutated, _ = mutate(content, fields, FIRST_CASE + case)
        scratch_path.write_bytes(mutated)
        scratch = vio.create_mapped_file_image_scratch(locations, scratch_path, 2)
        out = np.zeros((len(locations), 16, 16), np.float32)
        vio.read_batch_async(vio.loader(executor=loader.executor, scratch=scratch), out, locations).get()
        np.testing.assert_array_equal(out, images.reshape(-1, 16, 16), err_msg=f"case {FIRST_CASE + case}")
