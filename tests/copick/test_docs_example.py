"""The example of docs/cryoet.md that needs copick runs here, where copick is, as tests/docs runs the rest."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ..docs.test_examples_run import ROOT, blocks

# As long as tests/docs gives one block: it makes a project, writes its tomograms, and reads two epochs.
_SECONDS = 600


def test_the_copick_example_of_the_cryoet_page_runs_as_written(tmp_path: Path) -> None:
    marked = [b for b in blocks(ROOT / "docs" / "cryoet.md") if b.needs and b.needs.startswith("copick")]
    assert len(marked) == 1, [b.line for b in marked]
    ran = subprocess.run(
        [sys.executable, "-"],
        input=marked[0].source,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=_SECONDS,
    )
    assert ran.returncode == 0, f"docs/cryoet.md, the block of line {marked[0].line}:\n{ran.stderr[-5000:]}"
    assert "TomogramPicks(" in ran.stdout, ran.stdout
