"""What the kernel counts while a benchmark's row runs: faults, context switches, processor time, cycles.

`Counters` takes `getrusage`'s counts of this process (minor and major
faults, voluntary and involuntary context switches, user and system time) around a
stretch of work, and the hardware's through `perf stat` attached to this
process where the machine has it and lets it count (cycles, dTLB load
misses); what it cannot count is reported "not supported", never an error.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
import subprocess
import time

__all__ = ["Counters", "PERF_EVENTS", "describe", "storage_bytes"]

PERF_EVENTS = ("cycles", "dTLB-load-misses", "page-faults", "context-switches", "task-clock")
"""The events asked of `perf stat`."""

_ATTACH_SECONDS = 0.3
"""How long `perf stat` is given to attach to the threads of this process before the work starts."""


class Counters:
    """Counts of this process over a `with` block, in `counts` after it ends.

    `counts` maps a name to a number, or to None where the machine does not count it:
    minor faults, major faults, voluntary and involuntary context switches, user and
    system seconds (getrusage, the whole process), and each of `PERF_EVENTS` ("perf " before the
    name; task-clock in milliseconds).

    Args:
        perf: Whether to run `perf stat`; without it (or where it is not installed) its events are None.
    """

    def __init__(self, perf: bool = True):
        self._perf = shutil.which("perf") if perf else None
        self.counts: dict[str, float | None] = {}

    def __enter__(self) -> Counters:
        self._process = None
        if self._perf is not None:
            events = ",".join(PERF_EVENTS)
            command = [self._perf, "stat", "-x", ",", "-e", events, "-p", str(os.getpid())]
            self._process = subprocess.Popen(
                command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
            )
            time.sleep(_ATTACH_SECONDS)
        self._before = resource.getrusage(resource.RUSAGE_SELF)
        return self

    def __exit__(self, *failure) -> None:
        after = resource.getrusage(resource.RUSAGE_SELF)
        before = self._before
        self.counts = {
            "minor faults": after.ru_minflt - before.ru_minflt,
            "major faults": after.ru_majflt - before.ru_majflt,
            "voluntary switches": after.ru_nvcsw - before.ru_nvcsw,
            "involuntary switches": after.ru_nivcsw - before.ru_nivcsw,
            "user seconds": after.ru_utime - before.ru_utime,
            "system seconds": after.ru_stime - before.ru_stime,
        }
        self.counts.update(dict.fromkeys((f"perf {event}" for event in PERF_EVENTS), None))
        if self._process is not None:
            self.counts.update(_perf_counts(self._process))


def storage_bytes() -> int | None:
    """The bytes this process has had read from storage (`read_bytes` of /proc/self/io), or None
    where the system does not say."""
    try:
        with open("/proc/self/io") as io:
            for line in io:
                name, _, value = line.partition(":")
                if name == "read_bytes":
                    return int(value)
    except OSError:
        return None
    return None


def _perf_counts(process: subprocess.Popen) -> dict[str, float | None]:
    """Stop `perf stat` and read what it counted: None for what it did not."""
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGINT)
    try:
        _, text = process.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        _, text = process.communicate()
    counts: dict[str, float | None] = {}
    for line in text.splitlines():
        fields = line.split(",")
        if len(fields) < 3 or fields[2] not in PERF_EVENTS:
            continue
        try:
            counts[f"perf {fields[2]}"] = float(fields[0])
        except ValueError:  # "<not supported>", "<not counted>"
            counts[f"perf {fields[2]}"] = None
    return counts


def describe(counts: dict[str, float | None], items: int, item_bytes: int) -> str:
    """A line of `counts` per item of `item_bytes` bytes, and cycles per byte, for `items` items."""
    per = max(items, 1)

    def rate(name: str, scale: float, unit: str, digits: int = 2) -> str:
        value = counts.get(name)
        return f"{unit} not supported" if value is None else f"{value / scale:,.{digits}f} {unit}"

    return "; ".join(
        [
            rate("minor faults", per, "minor faults/item"),
            rate("major faults", per, "major faults/item"),
            rate("voluntary switches", per, "voluntary switches/item", 3),
            rate("involuntary switches", per, "involuntary switches/item", 3),
            rate("user seconds", per / 1e6, "user us/item", 1),
            rate("system seconds", per / 1e6, "system us/item", 1),
            rate("perf task-clock", per / 1e3, "perf task-clock us/item", 1),
            rate("perf page-faults", per, "perf page-faults/item"),
            rate("perf context-switches", per, "perf switches/item", 3),
            rate("perf cycles", per * item_bytes, "cycles/byte"),
            rate("perf dTLB-load-misses", per, "dTLB misses/item"),
        ]
    )
