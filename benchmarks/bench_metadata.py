"""Reading particle metadata: vitrio's STAR reader against starfile, cryoSPARC `.cs` files against
cryosparc-tools, and a STAR file of particles to the first batch of a shuffled DataLoader.

STAR files of RELION 3.1 (a data_optics block, then data_particles of 14
columns: rlnImageName, rlnMicrographName, coordinates, angles, origins,
defocus, optics group, class; 200 particles a micrograph, each micrograph's
stack a hard link to one MRC stack of 200 images of 16x16 pixels) and `.cs`
files of the same particles (36 fields, as cryoSPARC's particles have them,
saved with numpy and, where cryosparc-tools is importable, in its compressed
stream format) are written into a temporary folder, of the sizes `--rows`
names, by a process of their own. Each case runs in a fresh process, which
reports its CPU and wall time (`time.process_time`, `time.perf_counter`)
and its peak resident memory above what it held after importing: the peak
of its own address space (`VmHWM`), since `ru_maxrss` starts at what the
process it was forked from held; wall time counts other processes on a busy
machine, CPU time does not.

Cases: `read_particles` of the STAR file, then `particle_locations` of its
table; `to first batch`, a STAR file read, its locations found, made a
Dataset with its defocus, and the first batch of a shuffled DataLoader read
(`, 3 columns`: the same reading only the columns it uses, `columns=`);
`starfile.read` (up to `--starfile-rows`, as it takes ten times longer);
`read_cs` of each `.cs` file against cryosparc-tools' `Dataset.load` (where
`cryosparc.dataset` imports) and `numpy.load`. With `--repeat N` each case
runs N times and the median of each figure is shown; `--cases` names the
cases to run; with `--keep FOLDER` the files are written into FOLDER and
kept, and those already there are read again instead of written.

Usage:
    .venv/bin/python benchmarks/bench_metadata.py [--quick] [--rows 1000000 10000000]
        [--starfile-rows 1000000] [--repeat 3] [--cases read_particles "to first batch"] [--keep FOLDER]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
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
CS_FIELDS = [
    ("uid", "<u8"),
    ("blob/path", "S64"),
    ("blob/idx", "<u4"),
    ("blob/shape", "<u4", (2,)),
    ("blob/psize_A", "<f4"),
    ("blob/sign", "<f4"),
    ("blob/import_sig", "<u8"),
    ("ctf/type", "S8"),
    ("ctf/exp_group_id", "<u4"),
    ("ctf/accel_kv", "<f4"),
    ("ctf/cs_mm", "<f4"),
    ("ctf/amp_contrast", "<f4"),
    ("ctf/df1_A", "<f4"),
    ("ctf/df2_A", "<f4"),
    ("ctf/df_angle_rad", "<f4"),
    ("ctf/phase_shift_rad", "<f4"),
    ("ctf/scale", "<f4"),
    ("ctf/scale_const", "<f4"),
    ("ctf/shift_A", "<f4", (2,)),
    ("ctf/tilt_A", "<f4", (2,)),
    ("ctf/trefoil_A", "<f4", (2,)),
    ("ctf/tetra_A", "<f4", (4,)),
    ("ctf/anisomag", "<f4", (4,)),
    ("ctf/bfactor", "<f4"),
    ("alignments3D/split", "<u4"),
    ("alignments3D/shift", "<f4", (2,)),
    ("alignments3D/pose", "<f4", (3,)),
    ("alignments3D/psize_A", "<f4"),
    ("alignments3D/error", "<f4"),
    ("alignments3D/cross_cor", "<f4"),
    ("alignments3D/class_posterior", "<f4"),
    ("alignments3D/class", "<u4"),
    ("location/micrograph_uid", "<u8"),
    ("location/micrograph_path", "S64"),
    ("location/center_x_frac", "<f4"),
    ("location/center_y_frac", "<f4"),
]


def write_star(path: Path, rows: int) -> None:
    """A RELION 3.1 particles file of `rows` particles, each micrograph's stack a link to one real stack."""
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
    stack = path.parent / "stack.mrcs"
    if not stack.exists():
        import vitrio as vio

        vio.write_stack(rng.normal(size=(PER_MICROGRAPH, 16, 16)).astype(np.float32), stack)
    for micrograph in range(-(-rows // PER_MICROGRAPH)):
        linked = stacks / f"FoilHole_{micrograph:08d}_fractions.mrcs"
        if not linked.exists():
            os.link(stack, linked)
    partial = path.with_name(path.name + ".partial")  # renamed once whole, so that --keep never reuses a part
    with open(partial, "w") as file:
        file.write(OPTICS + "".join(f"_{name} #{n + 1}\n" for n, name in enumerate(COLUMNS)))
        for start in range(0, rows, BLOCK):
            names = [
                f"{r % PER_MICROGRAPH + 1:06d}@Extract/job007/Movies/FoilHole_{r // PER_MICROGRAPH:08d}"
                f"_fractions.mrcs Movies/FoilHole_{r // PER_MICROGRAPH:08d}_fractions.mrc "
                for r in range(start, min(start + BLOCK, rows))
            ]
            file.write("".join(name + tail for name, tail in zip(names, tails)))
    partial.replace(path)


def write_cs(path: Path, stream: Path, rows: int) -> None:
    """A cryoSPARC particles file of `rows` particles, of the fields and types cryoSPARC writes, saved
    with numpy at `path` and, where cryosparc-tools imports, in its compressed stream format at `stream`."""
    rng = np.random.default_rng(0)
    table = np.zeros(rows, dtype=CS_FIELDS)
    for name in table.dtype.names:
        if table.dtype[name].base.kind == "f":
            table[name] = rng.uniform(0, 1, table[name].shape)
    table["uid"] = np.arange(rows)
    micrographs = np.char.zfill((np.arange(rows) // PER_MICROGRAPH).astype("S8"), 8)
    table["blob/path"] = np.char.add(
        b">Extract/job007/Movies/FoilHole_", np.char.add(micrographs, b"_fractions.mrcs")
    )
    table["location/micrograph_path"] = np.char.add(b">Movies/FoilHole_", np.char.add(micrographs, b".mrc"))
    table["ctf/type"] = b"spline"
    table["blob/idx"] = np.arange(rows) % PER_MICROGRAPH
    table["blob/shape"] = 16
    partial = path.with_name(path.name + ".partial")
    with open(partial, "wb") as file:
        np.save(file, table)
    partial.replace(path)
    if importable("cryosparc.dataset"):
        from cryosparc.dataset import CSDAT_FORMAT, Dataset

        Dataset(table).save(stream, format=CSDAT_FORMAT)


def importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


FIRST_BATCH = """
from vitrio.data import DataLoader, Dataset, ImageSource, particle_locations, read_particles

def first_batch(path, columns=None):
    particles = read_particles(path, columns=columns)
    dataset = Dataset({
        "image": ImageSource(particle_locations(particles, path)),
        "defocus": particles[["rlnDefocusU", "rlnDefocusV"]].to_numpy(),
    })
    next(iter(DataLoader(dataset, 64, shuffle=True, seed=0)))
    return dataset
"""
# Each case, run in its own process: the statement timed, after the imports it needs, and the file it reads.
CASES = {
    "read_particles": (
        "import pandas\nfrom vitrio.data import read_particles",
        "read_particles(path)",
        "star",
    ),
    "+ particle_locations": (
        "from vitrio.data import read_particles, particle_locations\ntable = read_particles(path)",
        "particle_locations(table, path)",
        "star",
    ),
    "to first batch": (FIRST_BATCH, "first_batch(path)", "star"),
    "to first batch, 3 columns": (
        FIRST_BATCH,
        'first_batch(path, ["rlnImageName", "rlnDefocusU", "rlnDefocusV"])',
        "star",
    ),
    "starfile.read": ("import starfile", 'starfile.read(path, always_dict=True)["particles"]', "star"),
    "read_cs .cs": ("import pandas\nfrom vitrio.data import read_cs", "read_cs(path)", "cs"),
    "cryosparc-tools .cs": ("from cryosparc.dataset import Dataset", "Dataset.load(path)", "cs"),
    "numpy.load .cs": ("import numpy", "numpy.load(path)", "cs"),
    "read_cs stream": ("import pandas\nfrom vitrio.data import read_cs", "read_cs(path)", "stream"),
    "cryosparc-tools stream": ("from cryosparc.dataset import Dataset", "Dataset.load(path)", "stream"),
}
CHILD = """
import json, resource, sys, time

def peak():
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) * 1024
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

path = sys.argv[1]
{setup}
held = peak()
cpu, wall = time.process_time(), time.perf_counter()
result = {statement}
cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
print(json.dumps({{"cpu": cpu, "wall": wall, "memory": peak() - held, "rows": len(result)}}))
"""


def measure(case: str, path: Path) -> dict[str, float]:
    setup, statement, _ = CASES[case]
    script = CHILD.format(setup=setup, statement=statement)
    command = [sys.executable, "-c", script, str(path)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{case} failed:\n{done.stderr}")
    return json.loads(done.stdout.splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--rows", type=int, nargs="+", default=[10**4, 10**5, 10**6], help="the sizes of the files, in rows"
    )
    parser.add_argument("--starfile-rows", type=int, default=1_000_000, help="the largest starfile reads")
    parser.add_argument("--quick", action="store_true", help="a smoke run: files of 10^4 rows")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each case, the median shown")
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES), help="the cases")
    parser.add_argument(
        "--keep",
        metavar="FOLDER",
        help="write the files into FOLDER and keep them there, reusing those found",
    )
    parser.add_argument("--write", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.write:  # the files of one size, written by a process of their own
        kind, path = args.write[0], Path(args.write[1])
        if kind == "star":
            write_star(path, args.rows[0])
        else:
            write_cs(path, path.with_name(path.stem + "_stream.cs"), args.rows[0])
        return
    sizes = [10_000] if args.quick else args.rows
    cases = [
        c for c in args.cases if "cryosparc" not in c and "stream" not in c or importable("cryosparc.dataset")
    ]
    print(f"{'rows':>10} {'case':<24} {'file MB':>8} {'CPU s':>7} {'wall s':>7} {'memory MB':>10} x file")
    with contextlib.nullcontext(args.keep) if args.keep else tempfile.TemporaryDirectory() as folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        for rows in sizes:
            paths = {"star": Path(folder) / f"{rows}.star", "cs": Path(folder) / f"{rows}.cs"}
            paths["stream"] = Path(folder) / f"{rows}_stream.cs"
            for kind in ("star", "cs"):
                kept = args.keep and paths[kind].exists()
                if not kept and any((CASES[case][2] == "star") == (kind == "star") for case in cases):
                    write = [__file__, "--rows", str(rows), "--write", kind, str(paths[kind])]
                    subprocess.run([sys.executable, *write], check=True)
            for case in cases:
                if case == "starfile.read" and rows > args.starfile_rows:
                    continue
                path = paths[CASES[case][2]]
                runs = [measure(case, path) for _ in range(args.repeat)]
                assert all(run["rows"] == rows for run in runs), (case, runs)
                figures = {name: float(np.median([run[name] for run in runs])) for name in runs[0]}
                size = path.stat().st_size
                cpu, wall, memory = figures["cpu"], figures["wall"], figures["memory"]
                print(
                    f"{rows:>10} {case:<24} {size / 1e6:>8.1f} {cpu:>7.2f} {wall:>7.2f} "
                    f"{memory / 1e6:>10.0f} {memory / size:>6.2f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
