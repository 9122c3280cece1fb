"""Reading particle metadata: vitrio's STAR reader against starfile, and cryoSPARC `.cs` files against numpy.

STAR files of RELION 3.1 (a data_optics block, then data_particles of 14
columns: rlnImageName, rlnMicrographName, coordinates, angles, origins,
defocus, optics group, class; 200 particles a micrograph, each micrograph's
stack an empty file so that paths resolve) and `.cs` files of the same
particles are written into a temporary folder, 10^4 rows up to
`--max-rows`. Each case runs in a fresh process, which reports its CPU and
wall time and its peak resident memory (`ru_maxrss`) above what it held
after importing; wall time counts other processes on a busy machine, CPU
time does not.

Cases: `read_particles` of the STAR file, then `particle_locations` of its
table; `starfile.read` (up to `--starfile-rows`, as it takes ten times
longer); `read_particles` of the `.cs` file against `numpy.load`. With
`--repeat N` each case runs N times and the median of each figure is shown;
`--cases` names the cases to run.

Usage:
    .venv/bin/python benchmarks/bench_metadata.py [--quick] [--max-rows 1000000] [--starfile-rows 1000000]
        [--repeat 3] [--cases read_particles "+ particle_locations"]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

COLUMNS = [
    *("rlnImageName", "rlnMicrographName", "rlnCoordinateX", "rlnCoordinateY"),
    *("rlnAngleRot", "rlnAngleTilt", "rlnAnglePsi", "rlnOriginXAngst", "rlnOriginYAngst"),
    *("rlnDefocusU", "rlnDefocusV", "rlnDefocusAngle", "rlnOpticsGroup", "rlnClassNumber"),
]
OPTICS = """
# version 30001

data_optics

loop_
_rlnOpticsGroupName #1
_rlnOpticsGroup #2
_rlnVoltage #3
_rlnSphericalAberration #4
_rlnAmplitudeContrast #5
_rlnImagePixelSize #6
_rlnImageSize #7
_rlnImageDimensionality #8
opticsGroup1            1   300.000000     2.700000     0.100000     1.062000          256            2
opticsGroup2            2   300.000000     2.700000     0.100000     1.062000          256            2


# version 30001

data_particles

loop_
"""
PER_MICROGRAPH = 200
BLOCK = 100_000  # rows formatted at once; their numbers repeat from one block to the next


def write_star(path: Path, rows: int) -> None:
    """A RELION 3.1 particles file of `rows` particles, each micrograph's stack an empty file beside it."""
    rng = np.random.default_rng(0)
    count = min(rows, BLOCK)
    numbers = [
        rng.uniform(0, 4096, count),
        rng.uniform(0, 4096, count),
        rng.uniform(-180, 180, count),
        rng.uniform(0, 180, count),
        rng.uniform(-180, 180, count),
        rng.normal(0, 3, count),
        rng.normal(0, 3, count),
        rng.uniform(5000, 30000, count),
        rng.uniform(5000, 30000, count),
        rng.uniform(-180, 180, count),
    ]
    groups, classes = rng.integers(1, 3, count), rng.integers(1, 51, count)
    tails = [
        " ".join(f"{value:12.6f}" for value in values) + f" {group} {number:4d}\n"
        for *values, group, number in zip(*(n.tolist() for n in numbers), groups.tolist(), classes.tolist())
    ]
    stacks = path.parent / "Extract" / "job007" / "Movies"
    stacks.mkdir(parents=True, exist_ok=True)
    for micrograph in range(-(-rows // PER_MICROGRAPH)):
        (stacks / f"FoilHole_{micrograph:08d}_fractions.mrcs").touch()
    with open(path, "w") as file:
        file.write(OPTICS + "".join(f"_{name} #{n + 1}\n" for n, name in enumerate(COLUMNS)))
        for start in range(0, rows, BLOCK):
            names = [
                f"{r % PER_MICROGRAPH + 1:06d}@Extract/job007/Movies/FoilHole_{r // PER_MICROGRAPH:08d}"
                f"_fractions.mrcs Movies/FoilHole_{r // PER_MICROGRAPH:08d}_fractions.mrc "
                for r in range(start, min(start + BLOCK, rows))
            ]
            file.write("".join(name + tail for name, tail in zip(names, tails)))


def write_cs(path: Path, rows: int) -> None:
    """A cryoSPARC particles file of `rows` particles, with the fields and types cryoSPARC writes."""
    table = np.zeros(
        rows,
        dtype=[
            ("uid", "<u8"),
            ("blob/path", "S64"),
            ("blob/idx", "<u4"),
            ("blob/shape", "<u4", (2,)),
            ("blob/psize_A", "<f4"),
            ("ctf/df1_A", "<f4"),
            ("ctf/df2_A", "<f4"),
            ("ctf/df_angle_rad", "<f4"),
            ("alignments2D/class", "<u4"),
            ("alignments3D/pose", "<f4", (3,)),
            ("alignments3D/shift", "<f4", (2,)),
        ],
    )
    table["uid"] = np.arange(rows)
    table["blob/path"] = np.char.add(
        b">Extract/job007/Movies/FoilHole_",
        np.char.add(np.char.zfill((np.arange(rows) // PER_MICROGRAPH).astype("S8"), 8), b"_fractions.mrcs"),
    )
    table["blob/idx"] = np.arange(rows) % PER_MICROGRAPH
    with open(path, "wb") as file:
        np.save(file, table)


# Each case, run in its own process: the statement timed, after the imports it needs.
CASES = {
    "read_particles": ("import pandas\nfrom vitrio.data import read_particles", "read_particles(path)"),
    "+ particle_locations": (
        "from vitrio.data import read_particles, particle_locations\ntable = read_particles(path)",
        "particle_locations(table, path)",
    ),
    "starfile.read": ("import starfile", 'starfile.read(path, always_dict=True)["particles"]'),
    "read_particles .cs": ("import pandas\nfrom vitrio.data import read_particles", "read_particles(path)"),
    "numpy.load .cs": ("import numpy", "numpy.load(path)"),
}
CHILD = """
import json, resource, sys, time
path = sys.argv[1]
{setup}
held = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
cpu, wall = time.process_time(), time.perf_counter()
result = {statement}
cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({{"cpu": cpu, "wall": wall, "memory": (peak - held) * 1024, "rows": len(result)}}))
"""


def measure(case: str, path: Path) -> dict[str, float]:
    setup, statement = CASES[case]
    script = CHILD.format(setup=setup, statement=statement)
    command = [sys.executable, "-c", script, str(path)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--max-rows", type=int, default=1_000_000, help="the largest file, in rows")
    parser.add_argument("--starfile-rows", type=int, default=1_000_000, help="the largest starfile reads")
    parser.add_argument("--quick", action="store_true", help="a smoke run: files of 10^4 rows")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each case, the median shown")
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES), help="the cases")
    args = parser.parse_args(argv)
    largest = 10_000 if args.quick else args.max_rows
    sizes = [10**power for power in range(4, 8) if 10**power <= largest]
    print(f"{'rows':>10} {'case':<22} {'file MB':>8} {'CPU s':>7} {'wall s':>7} {'memory MB':>10} x file")
    with tempfile.TemporaryDirectory() as folder:
        for rows in sizes:
            star, cs = Path(folder) / f"{rows}.star", Path(folder) / f"{rows}.cs"
            write_star(star, rows)
            write_cs(cs, rows)
            for case in args.cases:
                if case == "starfile.read" and rows > args.starfile_rows:
                    continue
                path = cs if case.endswith(".cs") else star
                runs = [measure(case, path) for _ in range(args.repeat)]
                assert all(run["rows"] == rows for run in runs), (case, runs)
                figures = {name: float(np.median([run[name] for run in runs])) for name in runs[0]}
                size = path.stat().st_size
                cpu, wall, memory = figures["cpu"], figures["wall"], figures["memory"]
                print(
                    f"{rows:>10} {case:<22} {size / 1e6:>8.1f} {cpu:>7.2f} {wall:>7.2f} "
                    f"{memory / 1e6:>10.0f} {memory / size:>6.2f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
