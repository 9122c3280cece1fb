"""Run by test_resume.py: a training run that goes through a numbered stack and is killed, or resumes.

    python resume_worker.py STACK ROWS RECORD [--resume RECORD] [--epochs N]
        [--die-at K | --hold-after K] [--pause SECONDS]

Image i of STACK holds the value i everywhere. After each batch it hands out,
the process writes the rows of every epoch it has gone through and the
state of its DataLoader to RECORD, both at once, by writing beside it and
renaming. --resume loads the state of another RECORD first. --die-at kills
the process with SIGKILL once it is handed its Kth batch, before recording
it; --hold-after sleeps a minute once it has recorded its Kth, to be killed
meanwhile.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from pathlib import Path

import numpy as np

import vitrio as vio
from vitrio.data import DataLoader, Dataset, ImageSource


def record(path: Path, epochs: list[list[int]], state: dict) -> None:
    """Write the rows and the state to path at once."""
    beside = path.with_name(path.name + ".partial")
    beside.write_text(json.dumps({"epochs": epochs, "state": state}))
    os.replace(beside, path)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("stack")
    parser.add_argument("rows", type=int)
    parser.add_argument("record", type=Path)
    parser.add_argument("--resume", type=Path)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--die-at", type=int)
    parser.add_argument("--hold-after", type=int)
    parser.add_argument("--pause", type=float, default=0.0)
    arguments = parser.parse_args()

    dataset = Dataset(
        {"image": ImageSource([vio.ImageLocation(arguments.stack, i) for i in range(arguments.rows)])}
    )
    loader = DataLoader(dataset, 3, shuffle=True, loader=vio.loader(workers=1))
    if arguments.resume is not None:
        loader.load_state_dict(json.loads(arguments.resume.read_text())["state"])
    epochs: list[list[int]] = []
    handed = 0
    for _ in range(arguments.epochs):
        epochs.append([])
        for batch in loader:
            handed += 1
            if handed == arguments.die_at:
                os.kill(os.getpid(), signal.SIGKILL)
            assert np.array_equal(batch["image"][:, 0, 0], batch["index"]), batch["index"]
            epochs[-1].extend(int(row) for row in batch["index"])
            record(arguments.record, epochs, loader.state_dict())
            time.sleep(arguments.pause)
            if handed == arguments.hold_after:
                time.sleep(60)
    record(arguments.record, epochs, loader.state_dict())


if __name__ == "__main__":
    main()
