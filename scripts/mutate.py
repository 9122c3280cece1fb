"""Plant plausible bugs in vitrio and cryovit, one at a time, and see whether the tests catch them.

    python -m scripts.mutate [--list] [--only NAME ...] [--repeat N] [--timeout S] [--no-baseline]

Each mutant is a text substitution in one source file: a bug a reviewer
could plausibly miss (a check dropped, a bound off by one, a wait left out).
For each, the script copies the repository once into a temporary folder
(the test data beside it linked in), plants the mutant in the copy, runs the
test files that should catch it (`--repeat` times, each under `--timeout`
seconds), and puts the file back. A mutant is killed when every run fails;
it survives when every run passes; it is flaky when only some fail (a test
that catches it by chance). Timing out counts as failing. A mutant whose text
is no longer in its file is reported as not planted: the code changed, and
the mutant must be brought up to date.

The tests are first run once without any mutant (skip with `--no-baseline`):
a test that fails then says nothing about a mutant.

The exit status is 1 when a mutant survives or is flaky, or a baseline run fails.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Mutant:
    """A bug planted by replacing the first `old` in `path` (relative to the repository) by `new`."""

    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]


MUTANTS = (
    # the read path
    Mutant(
        "tiff-never-bigtiff",
        "src/vitrio/formats/tiff.py",
        "bigtiff = nbytes >= _BIGTIFF_BYTES",
        "bigtiff = False",
        ("tests/core/test_writers.py",),
    ),
    Mutant(
        "raw-truncation-unchecked",
        "src/vitrio/formats/_raw.py",
        "if size < self._end:",
        "if size < 0:",
        ("tests/hardening/test_faults.py",),
    ),
    Mutant(
        "lzw-expansion-unbounded",
        "src/vitrio/formats/tiff.py",
        "_EXPANSION = {1: 8, 5: 4096,",
        "_EXPANSION = {1: 8, 5: 1 << 40,",
        ("tests/formats/test_bombs.py",),
    ),
    Mutant(
        "index-error-names-index-0",
        "src/vitrio/formats/_contract.py",
        "raise past_the_end(self.key, int(low) if low < 0 else int(high), self.image_count)",
        "raise past_the_end(self.key, 0, self.image_count)",
        ("tests/core/test_indexed.py", "tests/core/test_batches.py"),
    ),
    # threads, completions and the reader cache
    Mutant(
        "cache-waiter-gets-none",
        "src/vitrio/_providers.py",
        "entry.error = error",
        "pass",
        ("tests/core/test_concurrency.py",),
    ),
    Mutant(
        "cache-keeps-stale-reader",
        "src/vitrio/_providers.py",
        "dropped = (reader.stale or replaced) and entry.users == 0",
        "dropped = replaced and entry.users == 0",
        ("tests/core/test_concurrency.py", "tests/hardening/test_faults.py"),
    ),
    Mutant(
        "cache-evicts-reader-in-use",
        "src/vitrio/_providers.py",
        "                    if entry.users == 0 and entry.reader is not None:\n"
        "                        del self._entries[key]\n"
        "                        closing.append(entry.reader)\n"
        "                        excess -= 1",
        "                    if entry.reader is not None:\n"
        "                        del self._entries[key]\n"
        "                        closing.append(entry.reader)\n"
        "                        excess -= 1",
        ("tests/core/test_concurrency.py",),
    ),
    Mutant(
        "cache-not-least-recently-used",
        "src/vitrio/_providers.py",
        "self._entries.move_to_end(key)",
        "pass",
        ("tests/core/test_concurrency.py",),
    ),
    Mutant(
        "completion-keeps-last-failure",
        "src/vitrio/_concurrency.py",
        "if error is not None and self.error is None:",
        "if error is not None:",
        ("tests/core/test_concurrency.py",),
    ),
    Mutant(
        "completion-get-does-not-wait",
        "src/vitrio/_concurrency.py",
        '"""Block until every task is done, then raise the first failure, if any."""\n        self.wait()',
        '"""Block until every task is done, then raise the first failure, if any."""',
        ("tests/core/test_concurrency.py",),
    ),
    Mutant(
        "pending-batch-raises-before-waiting",
        "src/vitrio/_concurrency.py",
        "        self.wait()\n        try:\n            for work in self._works:",
        "        try:\n            for work in self._works:",
        ("tests/data/test_dataset.py",),
    ),
    Mutant(
        "writer-close-race-key-error",
        "src/vitrio/_writers.py",
        "                with self._lock:\n"
        "                    descriptor = self._declared.get(key)\n"
        "                    voxel_size = self._voxel_sizes.get(key)\n"
        "                if descriptor is None:  # closed or discarded meanwhile\n"
        '                    raise IndexError(f"{key}: is not declared")\n',
        "                descriptor, voxel_size = self._declared[key], self._voxel_sizes[key]\n",
        ("tests/core/test_writers.py",),
    ),
    # the data loader
    Mutant(
        "rows-past-the-end-by-one",
        "src/vitrio/data/_dataset.py",
        "if low < -count or high >= count:",
        "if low < -count or high > count:",
        ("tests/data/test_dataset.py",),
    ),
    Mutant(
        "sampler-same-order-every-epoch",
        "src/vitrio/data/_sampler.py",
        "_Shuffle(self._size, self._seed, epoch)",
        "_Shuffle(self._size, self._seed, 0)",
        ("tests/data/test_sampler.py",),
    ),
    Mutant(
        "shuffle-lands-past-the-end",
        "src/vitrio/data/_sampler.py",
        "        while len(past):",
        "        while False:",
        ("tests/data/test_sampler.py",),
    ),
    Mutant(
        "description-that-warned-kept-for-files-alike",
        "src/vitrio/formats/_registry.py",
        "        if not warned:",
        "        if True:",
        ("tests/formats/test_describe.py",),
    ),
    Mutant(
        "loader-pad-last-all-valid",
        "src/vitrio/data/_loader.py",
        "valid[...] = np.arange(size) < len(rows)",
        "valid[...] = True",
        ("tests/data/test_loader.py",),
    ),
    # the scratch
    Mutant(
        "scratch-run-taken-in-twice",
        "src/vitrio/scratch/store.py",
        "            if self._states[number] == PRESENT:\n                return\n",
        "",
        ("tests/scratch/test_scratch.py",),
    ),
    Mutant(
        "scratch-checksum-ignored",
        "src/vitrio/scratch/store.py",
        "if self._checksum(file, number - file.first_run) == int(self._checksums[number]):",
        "if True:",
        ("tests/scratch/test_scratch.py",),
    ),
    # cryovit
    Mutant(
        "collate-data-padding-unwritten",
        "src/cryovit/collate.py",
        "batch[i, size:] = 0",
        "pass",
        ("tests/cryovit/test_padding.py", "tests/cryovit/test_data.py"),
    ),
    Mutant(
        "collate-label-padding-zero",
        "src/cryovit/collate.py",
        "labels[i, size:] = LABEL_PADDING",
        "labels[i, size:] = 0",
        ("tests/cryovit/test_padding.py", "tests/cryovit/test_data.py"),
    ),
    Mutant(
        "dataset-data-padding-unwritten",
        "src/cryovit/_boxes.py",
        "data[j, :, depth:] = 0",
        "pass",
        ("tests/cryovit/test_padding.py", "tests/cryovit/test_data.py"),
    ),
    Mutant(
        "dataset-label-value-ignored",
        "src/cryovit/_boxes.py",
        "np.equal(stored, value, out=labels)",
        "np.not_equal(stored, 0, out=labels)",
        ("tests/cryovit/test_data.py",),
    ),
)

_IGNORED = shutil.ignore_patterns(
    ".git", ".venv", "__pycache__", ".hypothesis", ".pytest_cache", ".ruff_cache", "build", "*.egg-info"
)


def copy_tree(into: Path) -> Path:
    """Copy the repository into `into`/repo, with the shared test data beside it as it is here."""
    copy = into / "repo"
    shutil.copytree(ROOT, copy, ignore=_IGNORED, symlinks=True)
    shared = ROOT.parent / "shared"
    if shared.exists():
        (into / "shared").symlink_to(shared.resolve())
    return copy


def run_tests(copy: Path, tests: tuple[str, ...], timeout: float) -> tuple[str, float]:
    """Run `tests` in the copy: 'passed', 'failed', 'timeout', or 'error' (pytest could not run them)."""
    env = dict(os.environ, PYTHONPATH=str(copy / "src"), PYTHONDONTWRITEBYTECODE="1")
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-o", "addopts=", *tests]
    started = time.monotonic()
    try:
        result = subprocess.run(command, cwd=copy, env=env, capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return "timeout", time.monotonic() - started
    took = time.monotonic() - started
    if result.returncode == 0:
        return "passed", took
    if result.returncode in (1, 2):  # tests failed, or a module failed to import
        return "failed", took
    tail = result.stdout.decode(errors="replace")[-2000:] + result.stderr.decode(errors="replace")[-2000:]
    print(tail, file=sys.stderr)
    return "error", took


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="plant only these mutants")
    parser.add_argument("--repeat", type=int, default=1, help="runs of the tests for each mutant")
    parser.add_argument("--timeout", type=float, default=300, help="seconds a run of the tests may take")
    parser.add_argument("--no-baseline", action="store_true", help="skip the runs without a mutant")
    args = parser.parse_args(argv)
    mutants = [m for m in MUTANTS if not args.only or m.name in args.only]
    unknown = set(args.only or ()) - {m.name for m in MUTANTS}
    if unknown:
        parser.error(f"no mutants named {sorted(unknown)}")
    if args.list:
        for mutant in mutants:
            print(f"{mutant.name:36} {mutant.path}  ->  {' '.join(mutant.tests)}")
        return 0
    with tempfile.TemporaryDirectory(prefix="vitrio-mutants-") as folder:
        copy = copy_tree(Path(folder))
        broken = set()
        if not args.no_baseline:
            for tests in dict.fromkeys(m.tests for m in mutants):
                outcome, took = run_tests(copy, tests, args.timeout)
                print(f"baseline {' '.join(tests)}: {outcome} ({took:.0f} s)", flush=True)
                if outcome != "passed":
                    broken.add(tests)
        verdicts: dict[str, list[str]] = {}
        for mutant in mutants:
            path = copy / mutant.path
            original = path.read_text()
            if mutant.old not in original:
                verdicts.setdefault("not planted", []).append(mutant.name)
                print(f"{mutant.name}: not planted, its text is not in {mutant.path}", flush=True)
                continue
            if mutant.tests in broken:
                verdicts.setdefault("not run", []).append(mutant.name)
                print(f"{mutant.name}: not run, its tests fail without it", flush=True)
                continue
            path.write_text(original.replace(mutant.old, mutant.new, 1))
            try:
                outcomes = [run_tests(copy, mutant.tests, args.timeout) for _ in range(args.repeat)]
            finally:
                path.write_text(original)
            caught = sum(outcome in ("failed", "timeout") for outcome, _ in outcomes)
            errors = sum(outcome == "error" for outcome, _ in outcomes)
            verdict = (
                "error"
                if errors
                else "killed"
                if caught == args.repeat
                else "survived"
                if caught == 0
                else "flaky"
            )
            verdicts.setdefault(verdict, []).append(mutant.name)
            runs = ", ".join(f"{outcome} {took:.0f} s" for outcome, took in outcomes)
            print(f"{mutant.name}: {verdict} ({caught}/{args.repeat} runs failed: {runs})", flush=True)
    planted = len(mutants) - len(verdicts.get("not planted", [])) - len(verdicts.get("not run", []))
    print(
        f"\n{planted} mutants planted, {len(verdicts.get('killed', []))} killed, "
        f"{len(verdicts.get('survived', []))} surviving, {len(verdicts.get('flaky', []))} flaky, "
        f"{len(verdicts.get('error', []))} errors"
    )
    for verdict in ("survived", "flaky", "error", "not planted", "not run"):
        if verdicts.get(verdict):
            print(f"{verdict}: {', '.join(verdicts[verdict])}")
    failing = verdicts.get("survived") or verdicts.get("flaky") or verdicts.get("error") or broken
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
