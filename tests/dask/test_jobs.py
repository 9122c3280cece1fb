"""Bulk jobs on a LocalCluster: extraction, conversion and fractionation write what one machine writes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import distributed
import mrcfile
import numpy as np
import pytest
import starfile

import vitrio as vio
import vitrio.dask as vd
from vitrio._partial import partial_of
from vitrio.cli import main
from vitrio.extract import extract_particles
from vitrio.testing.eer import random_movie

from .conftest import Project, local_cluster, make_project


def files_of(folder: Path) -> dict[str, bytes]:
    """The bytes of every file under `folder`, hidden ones included, by their path in it."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# Where an MRC header's first label, "vitrio YYYY-MM-DD HH:MM:SS", tells when the file was written.
LABEL = slice(224, 224 + len("vitrio 2026-01-01 00:00:00"))


def undated(data: bytes) -> bytes:
    """The bytes of an MRC file, the time of its label left out."""
    assert data[LABEL].startswith(b"vitrio ")
    return data[: LABEL.start] + data[LABEL.stop :]


def uncommented(data: bytes) -> bytes:
    """The lines of a STAR file but its comments (the first says when it was written)."""
    return b"\n".join(line for line in data.split(b"\n") if not line.startswith(b"#"))


def same_extraction(one: Path, other: Path) -> None:
    """Two extractions, into folders `one` and `other`, wrote the same stacks and STAR files byte for byte.

    But for the time of day in the label of each stack's header and the STAR file's first comment.
    """
    ones, others = files_of(one), files_of(other)
    assert sorted(ones) == sorted(others)
    for name, data in ones.items():
        if name.endswith(".star"):
            renamed = data.replace(f"{one.name}/".encode(), f"{other.name}/".encode())
            assert uncommented(renamed) == uncommented(others[name])
        else:
            assert undated(data) == undated(others[name]), name


def test_cluster_extraction_is_the_single_machine_one(client, project: Project, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    extract_particles(project.micrographs, project.coordinates, 48, "single/particles.star")
    written = []
    done = extract_particles(
        project.micrographs,
        project.coordinates,
        48,
        "cluster/particles.star",
        client=client,
        progress=written.append,
    )
    assert len(done.stacks) == 8 and sum(written) == project.count == 1000
    same_extraction(tmp_path / "single", tmp_path / "cluster")


def worker_pid(cluster: distributed.LocalCluster, address: str) -> int:
    """The process id of the worker at `address`."""
    for nanny in cluster.workers.values():
        if nanny.worker_address == address:
            return nanny.process.process.pid
    raise LookupError(address)


def test_a_worker_killed_mid_job_costs_only_its_tasks(tmp_path, monkeypatch):
    project = make_project(tmp_path / "project", micrographs=8, per_micrograph=150, size=1024)
    monkeypatch.chdir(tmp_path)
    extract_particles(project.micrographs, project.coordinates, 96, "single/particles.star")
    killed = []
    with local_cluster() as cluster, distributed.Client(cluster) as client:

        def kill_a_busy_worker(_: int) -> None:
            busy = [address for address, keys in client.processing().items() if keys]
            if not killed and busy:
                killed.append(worker_pid(cluster, busy[0]))
                os.kill(killed[0], signal.SIGKILL)

        extract_particles(
            project.micrographs,
            project.coordinates,
            96,
            "cluster/particles.star",
            client=client,
            progress=kill_a_busy_worker,
        )
    assert killed, "no worker was busy to kill"
    particles = starfile.read(tmp_path / "cluster/particles.star", always_dict=True)["particles"]
    assert len(particles) == project.count and particles["rlnImageName"].is_unique
    same_extraction(tmp_path / "single", tmp_path / "cluster")


def test_vitrio_extract_on_a_scheduler(scheduler, project: Project, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    files = ["--micrographs", project.micrographs, "--coordinates", project.coordinates, "--box-size", 32]
    assert main([str(a) for a in ["extract", *files, "-o", "single/particles.star"]]) == 0
    where = ["--scheduler", scheduler]
    assert scheduler.startswith("tls://127.0.0.1:")
    assert main([str(a) for a in ["extract", *files, "-o", "cluster/particles.star", *where]]) == 0
    captured = capsys.readouterr()
    assert "extracted 1000 particles" in captured.out and "warning" not in captured.err
    same_extraction(tmp_path / "single", tmp_path / "cluster")
    assert main([str(a) for a in ["extract", *files, "-o", "cluster/particles.star", *where]]) == 1
    assert "exists already" in capsys.readouterr().err


def test_vitrio_convert_many_files_on_a_local_cluster(tmp_path, capsys):
    rng = np.random.default_rng(4)
    inputs = []
    for i in range(3):
        inputs.append(tmp_path / f"in{i}.mrcs")
        vio.write_stack(rng.integers(-100, 100, (4 + i, 10, 8)).astype(np.int16), inputs[-1])
    command = ["convert", *inputs]
    assert main([str(a) for a in [*command, tmp_path / "single", "--suffix", "tif"]]) == 0
    local = ["--local", 2, "--dashboard"]
    assert main([str(a) for a in [*command, tmp_path / "cluster", "--suffix", "tif", *local]]) == 0
    captured = capsys.readouterr()
    assert "wrote" in captured.out and "vitrio: Dask dashboard at http://127.0.0.1:" in captured.err
    assert files_of(tmp_path / "single") == files_of(tmp_path / "cluster")
    assert sorted(files_of(tmp_path / "cluster")) == ["in0.tif", "in1.tif", "in2.tif"]
    for source in inputs:
        np.testing.assert_array_equal(vio.read(tmp_path / "cluster" / f"{source.stem}.tif"), vio.read(source))


def test_vitrio_convert_fails_naming_the_file(scheduler, tmp_path, capsys):
    vio.write_stack(np.zeros((2, 4, 4), np.float32), tmp_path / "good.mrcs")
    (tmp_path / "bad.mrcs").write_bytes(b"not an image file at all" * 100)
    where = ["--scheduler", scheduler]
    command = ["convert", tmp_path / "good.mrcs", tmp_path / "bad.mrcs", tmp_path / "out", *where]
    assert main([str(a) for a in command]) == 1
    err = capsys.readouterr().err
    assert "bad.mrcs" in err and "Traceback" not in err
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]
    assert (
        main([str(a) for a in ["convert", tmp_path / "good.mrcs", tmp_path / "good.mrcs", tmp_path / "out"]])
        == 1
    )
    assert "would both be written" in capsys.readouterr().err


def test_vitrio_fractionate_many_movies_on_a_scheduler(scheduler, tmp_path, capsys):
    movies = [random_movie(tmp_path / f"movie{i}.eer", frames=6, shape=(32, 32)) for i in range(3)]
    command = ["fractionate", *(m.path for m in movies), "--fractions", 2]
    assert main([str(a) for a in [*command, "-o", tmp_path / "single"]]) == 0
    where = ["--scheduler", scheduler]
    assert main([str(a) for a in [*command, "-o", tmp_path / "cluster", *where]]) == 0
    singles, clusters = files_of(tmp_path / "single"), files_of(tmp_path / "cluster")
    assert {name: undated(data) for name, data in singles.items()} == {
        name: undated(data) for name, data in clusters.items()
    }
    for movie in movies:
        with mrcfile.open(tmp_path / "cluster" / f"{movie.path.stem}.mrc", permissive=False) as mrc:
            counts = movie.counts()
            np.testing.assert_array_equal(mrc.data, np.stack([counts[:3].sum(0), counts[3:].sum(0)]))
    capsys.readouterr()


@pytest.mark.parametrize("command", ["extract", "convert", "fractionate"])
def test_scheduler_and_local_are_one_or_the_other(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "x", "--scheduler", "tcp://127.0.0.1:1", "--local", "2"])
    assert "not allowed with" in capsys.readouterr().err


def fails_on_two(value: int) -> int:
    if value == 2:
        raise ValueError(f"job {value} fails")
    return value


def test_run_jobs_results_in_order_and_failures(client):
    done = []
    assert vd.run_jobs(client, abs, [-3, -1, -2], "same", lambda n, r: done.append((n, r))) == [3, 1, 2]
    assert sorted(done) == [(0, 3), (1, 1), (2, 2)]
    # the same name again: the tasks of each run are its own, not the results of the last
    assert vd.run_jobs(client, str, [-3, -1, -2], "same") == ["-3", "-1", "-2"]
    with pytest.raises(ValueError, match="job 2 fails"):
        vd.run_jobs(client, fails_on_two, [1, 2, 3], "failing", retries=0)


class _CountingClient:
    """A client that counts the jobs submitted through it."""

    def __init__(self, client: distributed.Client):
        self.client = client
        self.submitted = 0

    def nthreads(self) -> dict[str, int]:
        return self.client.nthreads()

    def submit(self, *args, **kwargs) -> distributed.Future:
        self.submitted += 1
        return self.client.submit(*args, **kwargs)

    def cancel(self, futures) -> None:
        self.client.cancel(futures)


@pytest.mark.parametrize("per_thread", [1, 3])
def test_cluster_jobs_per_thread_bounds_the_jobs_handed_out_at_once(client, per_thread):
    counting = _CountingClient(client)
    in_flight = []  # as each job ends: those handed out and not yet ended, itself included
    ended = []

    def done(n: int, result: object) -> None:
        in_flight.append(counting.submitted - len(ended))
        ended.append(n)

    with vio.configure(cluster_jobs_per_thread=per_thread):
        assert vd.run_jobs(counting, abs, list(range(-12, 0)), "counted", done) == list(range(12, 0, -1))
    at_once = per_thread * sum(client.nthreads().values())  # the cluster's two threads
    assert in_flight[0] == at_once and max(in_flight) == at_once


def _fails_first_or_writes_late(job: tuple[str, str]) -> str:
    kind, path = job
    if kind == "fail":
        raise ValueError(f"{path}: this job fails")
    import time

    time.sleep(1.5)  # still running when the other job has failed
    Path(path).write_text("written")
    return path


def test_when_a_job_fails_run_jobs_returns_only_once_the_running_ones_ended(client, tmp_path):
    late = tmp_path / "late.txt"
    never = tmp_path / "never.txt"
    # two threads: the first four jobs are handed out at once, the last ones only as those end
    jobs = [("write", str(late)), ("fail", "first"), ("write", str(late)), ("write", str(late))]
    jobs += [("write", str(never))] * 3
    with pytest.raises(ValueError, match="this job fails"):
        vd.run_jobs(client, _fails_first_or_writes_late, jobs, "late", retries=0)
    assert late.read_text() == "written"  # the job running beside the failed one finished before the raise
    assert not never.exists()  # the jobs after the failure were never handed out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["late.txt"]


def test_remove_leftovers_removes_what_a_killed_writer_left(tmp_path):
    target, other = tmp_path / "particles.mrcs", tmp_path / "other.mrcs"
    script = (
        "import os, sys\nfrom vitrio._partial import PartialFile\n"
        "for path in sys.argv[1:]:\n    PartialFile(path)\nos._exit(0)\n"
    )
    vio.write_single(np.zeros((4, 4), np.float32), target)
    subprocess.run([sys.executable, "-c", script, str(target), str(target), str(other)], check=True)
    assert len([p for p in tmp_path.iterdir() if p.name.endswith(".partial")]) == 3
    vd.remove_leftovers([target])
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left[0].startswith(".other.mrcs.") and left[1:] == ["particles.mrcs"], left


def test_remove_leftovers_leaves_what_is_not_this_users_regular_file(tmp_path, monkeypatch):
    target = tmp_path / "particles.mrcs"
    script = "import os, sys\nfrom vitrio._partial import PartialFile\nPartialFile(sys.argv[1])\nos._exit(0)"
    subprocess.run([sys.executable, "-c", script, str(target)], check=True)
    (left,) = [p for p in tmp_path.iterdir() if p.name.endswith(".partial")]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("kept")
    token = "0" * 16 if not left.name.endswith("0" * 16 + ".partial") else "1" * 16
    link = tmp_path / (left.name[: -len(".partial") - 16] + token + ".partial")
    link.symlink_to(elsewhere)
    assert partial_of(link.name) is not None  # a link named as a write's hidden file
    monkeypatch.setattr(os, "getuid", lambda: os.stat(left).st_uid + 1)  # as another user sees it
    vd.remove_leftovers([target])
    assert left.exists() and link.is_symlink()  # another user's file, and a link, are left
    monkeypatch.undo()
    vd.remove_leftovers([target])
    assert not left.exists() and link.is_symlink() and elsewhere.read_text() == "kept"


def test_remove_leftovers_names_what_it_could_not_remove(tmp_path, monkeypatch):
    target = tmp_path / "particles.mrcs"
    script = "import os, sys\nfrom vitrio._partial import PartialFile\nPartialFile(sys.argv[1])\n"
    subprocess.run([sys.executable, "-c", script * 2 + "os._exit(0)", str(target)], check=True)
    first, second = sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".partial"))
    unlink = os.unlink

    def refused(name, *args, **kwargs):  # a folder not writable, as root never sees one
        if name == first:
            raise PermissionError(13, "Permission denied")
        return unlink(name, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", refused)
    with pytest.warns(ResourceWarning, match=f"{first}: left by a write, not removed: Permission denied"):
        vd.remove_leftovers([target])
    assert sorted(p.name for p in tmp_path.iterdir()) == [first]  # the other one removed
