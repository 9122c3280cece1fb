"""read_star where it once read otherwise than starfile, or slower than the size of the file: each case
against starfile's own reading, by the C extension's reader and by the general one."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from vitrio.data import read_star

MIB = 1 << 20


def _seconds_to_read(path: Path, runs: int) -> float:
    """The median of `runs` readings of `path`, in seconds."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        read_star(path)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def test_a_long_line_of_a_loop_left_to_pandas_reads_in_time_linear_in_its_length(tmp_path: Path):
    # a quoted value (which the C extension leaves to pandas) of `data_` over and over, none of which
    # starts a line: each must not cost a look back to the start of the line
    def file(size: int) -> Path:
        path = tmp_path / f"long{size}.star"
        path.write_bytes(b'data_x\nloop_\n_rlnA\n"' + b"data_" * (size // 5) + b'"\n')
        return path

    small, large = file(1 * MIB), file(8 * MIB)
    assert len(read_star(large)["x"]["rlnA"][0]) == 8 * MIB // 5 * 5
    # 8 times the text: linear takes about 8 times as long, quadratic 64; 16 leaves room for a loaded machine
    assert _seconds_to_read(large, 3) < 16 * _seconds_to_read(small, 5)
