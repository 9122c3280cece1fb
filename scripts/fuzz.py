"""Fuzz vitrio's readers for hours: mutated MRC, TIFF, EER, DM and HDF5 files and OME-Zarr stores, in worker
processes.

    python -m scripts.fuzz [--hours H] [--seed S] [--format mrc tiff eer dm zarr hdf5] [--workers N]
                           [--out DIR]
    python -m scripts.fuzz --replay SEED CASE

Run it from the repository's root, as a module: it imports the fuzzer and
its seeds as the package `tests.hardening`.

Each case reads or raises a clean error naming the file; a crash, a hang,
an unclean error or an allocation beyond the workers' memory limit is a
finding: its mutated file and what went wrong go to `--out` (findings.jsonl),
and the run goes on. `--replay` rebuilds one case (from a finding, or from
the test suite's report), saves its file and reads it here, in this process,
under the same memory limit. The cases, the mutations and the seeds are those of
`tests/hardening` (fuzzing.py, corpus.py); the seeds include the files of
`tests/hardening/regressions`. The exit status is 1 if anything was found.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

try:
    from tests.hardening.corpus import FORMATS, make_seeds, regression_seeds
    from tests.hardening.fuzzing import MEMORY, Fuzzer, Result, Seed, check_file, limit_memory, mutate, place
except ModuleNotFoundError as error:
    if error.name != "tests":
        raise
    raise SystemExit(
        "scripts/fuzz.py imports the package tests.hardening: run it from the repository's root "
        "as `python -m scripts.fuzz`"
    ) from error


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hours", type=float, default=1.0, help="how long to run (default 1)")
    parser.add_argument("--seed", type=int, default=0, help="the seed of the case numbers (default 0)")
    parser.add_argument("--format", nargs="+", choices=FORMATS, default=list(FORMATS), help="formats to fuzz")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds a case may take (default 60)")
    parser.add_argument("--memory", type=int, default=MEMORY >> 20, help="MiB a worker may allocate (256)")
    parser.add_argument(
        "--out", type=Path, default=Path(tempfile.gettempdir()) / "vitrio-fuzz", help="where findings go"
    )
    parser.add_argument("--replay", nargs=2, metavar=("SEED", "CASE"), help="rebuild and read one case")
    return parser.parse_args()


def _replay(seeds: list[Seed], name: str, case: int, out: Path, memory: int) -> int:
    seed = next((s for s in seeds if s.name == name), None)
    if seed is None:
        raise SystemExit(f"no seed {name!r}; the seeds are: {', '.join(s.name for s in seeds)}")
    content, steps = mutate(Path(seed.path).read_bytes(), seed.fields, case)
    path = out / f"{case}-{seed.name}"
    place(seed, content, str(path))
    print(f"{path}: {len(content)} bytes, {steps or 'the seed as it is'}")
    import vitrio as vio

    if seed.format == "hdf5":
        import cryovit.hdf5  # noqa: F401 - registers the HDF5 format with vitrio
    loader = vio.loader(workers=2)
    check_file(seeds[0].path, seeds[0].format, loader)  # starts the threads before the limit
    limit_memory(memory)
    read, problems = check_file(str(path), seed.format, loader, case)
    print("read" if read else "refused", *problems, sep="\n  ")
    return 1 if problems else 0


def _note(result: Result, seeds: dict[str, Seed], out: Path) -> None:
    seed = seeds[result.seed]
    content, steps = mutate(Path(seed.path).read_bytes(), seed.fields, result.case)
    place(seed, content, str(out / f"{result.outcome}-{result.case}-{seed.name}"))
    with open(out / "findings.jsonl", "a") as findings:
        record = {"outcome": result.outcome, "seed": result.seed, "case": result.case, "steps": steps}
        findings.write(json.dumps({**record, "problems": result.problems}) + "\n")
    print(f"  {result.outcome}: {result.seed} case {result.case}: {result.problems[:1]}", flush=True)


def main() -> int:
    arguments = _arguments()
    formats = tuple(arguments.format)
    arguments.out.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="vitrio-fuzz-"))
    seeds = make_seeds(workdir, formats) + regression_seeds(formats)
    if arguments.replay:
        return _replay(
            seeds, arguments.replay[0], int(arguments.replay[1]), arguments.out, arguments.memory << 20
        )
    rng = random.Random(arguments.seed)
    deadline = time.monotonic() + arguments.hours * 3600
    started = time.monotonic()

    def cases():
        while time.monotonic() < deadline:
            yield rng.randrange(len(seeds)), rng.getrandbits(48)

    fuzzer = Fuzzer(seeds, workdir, arguments.workers, arguments.timeout, arguments.memory << 20)
    by_name = {seed.name: seed for seed in seeds}
    outcomes: Counter[str] = Counter()
    slowest = 0.0
    reported = started
    what = f"{len(seeds)} seeds of {', '.join(formats)}"
    print(f"fuzzing {what} for {arguments.hours} h; findings go to {arguments.out}", flush=True)
    try:
        for result in fuzzer.run(cases()):
            outcomes[result.outcome] += 1
            slowest = max(slowest, result.seconds)
            if result.outcome not in ("read", "refused"):
                _note(result, by_name, arguments.out)
            if time.monotonic() - reported > 60:
                reported = time.monotonic()
                rate = sum(outcomes.values()) / (reported - started)
                print(f"{reported - started:7.0f} s  {dict(outcomes)}  {rate:.0f} cases/s", flush=True)
    except KeyboardInterrupt:
        traceback.print_exc(limit=0)
    elapsed = time.monotonic() - started
    total = sum(outcomes.values())
    print(
        f"{total} cases in {elapsed:.0f} s ({total / max(elapsed, 1e-9):.0f}/s), seed {arguments.seed}: "
        f"{dict(outcomes)}; slowest case {slowest:.2f} s"
    )
    return 1 if total - outcomes["read"] - outcomes["refused"] else 0


if __name__ == "__main__":
    sys.exit(main())
