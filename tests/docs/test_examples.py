"""Every Python example of README.md and docs/ runs, by pytest-markdown-docs, in a directory of small files.

The examples run in a pytest of their own (`tests/docs/examples.py` sets up their files), so that
a failing example is reported by its file and line, and its setup touches no other test.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def python_blocks(page: Path) -> tuple[int, int]:
    """How many Python blocks `page` has, and how many of them are marked `notest`.

    A block's options follow its language (```python) or, as the site's Markdown reads them, sit in
    braces (```{.python notest}).
    """
    infos = re.findall(r"^ *```+ *(\S.*)$", page.read_text("utf8"), flags=re.MULTILINE)
    words = [info.strip("{}").replace(".python", "python").split() for info in infos]
    python = [w for w in words if w and w[0] in ("py", "python", "python3")]
    return len(python), sum("notest" in w for w in python)


def test_every_example_runs() -> None:
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--markdown-docs"]
    command += ["--markdown-docs-syntax", "superfences"]
    command += ["-p", "tests.docs.examples", "-o", "addopts=", *map(str, PAGES)]
    result = subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-20000:] + result.stderr[-5000:]
    counts = [python_blocks(page) for page in PAGES]
    expected = sum(total - skipped for total, skipped in counts)
    assert re.search(rf"\b{expected} passed\b", result.stdout), result.stdout[-3000:]
    # Examples that need a GPU or several processes are not run; they stay few.
    assert sum(skipped for _, skipped in counts) <= 4
