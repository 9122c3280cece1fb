"""The layers of docs/architecture.md, kept: every module of `src/` imports alone in a fresh interpreter,
no module imports one of a higher floor, no module imports inside a function (but an optional heavy
dependency), and cryovit uses vitrio's public modules only.

The floors are written once, in `FLOORS`; a module belongs to the floor of
the longest name there that is it or a package holding it (`vitrio`, the
package face, holds nothing but itself). Modules of one floor may import
each other. Imports are read with `ast`, wherever they stand: at the top,
under `if TYPE_CHECKING`, or inside a function.
"""

from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import textwrap
from functools import cache
from pathlib import Path

import pytest

SOURCES = Path(__file__).resolve().parents[2] / "src"

FLOORS = (
    (
        "vitrio._types",
        "vitrio._config",
        "vitrio._errors",
        "vitrio._numerical",
        "vitrio._locations",
        "vitrio._grouping",
        "vitrio._arrays",
        "vitrio._array",
        "vitrio._fs",
        "vitrio._partial",
        "vitrio._native",
        "vitrio._concurrency",
        "vitrio._counters",
        "vitrio._remote",
        "vitrio._storage",
    ),
    ("vitrio.formats",),
    ("vitrio._providers", "vitrio._writers", "vitrio._event_images"),
    ("vitrio.scratch",),
    ("vitrio._loading", "vitrio._saving", "vitrio._executor_io"),
    ("vitrio._functions",),
    ("vitrio.data", "vitrio.extract", "vitrio.dask"),
    ("vitrio.testing", "vitrio.bench", "vitrio.cli", "vitrio.__main__", "vitrio"),
    ("cryovit",),
)
"""The floors, bottom up: a module may import modules of its own floor and of those below."""

FACES = ("vitrio",)
"""Names in `FLOORS` that stand for a package's `__init__` alone, not for the modules it holds."""

OPTIONAL = (
    "copick",
    "torch",
    "jax",
    "h5py",
    "tensordict",
    "starfile",
    "pandas",
    "pyarrow",
    "matplotlib",
    "PIL",
    "tqdm",
    "mrcfile",
    "dask",
    "distributed",
    "zarr",
    "numcodecs",
    "google_crc32c",
    "fsspec",
    "aiohttp",
    "ml_dtypes",
)
"""Optional heavy dependencies: the only imports that may stand inside a function, where they are used."""

CRYOVIT_MAY_USE = ("vitrio.data", "vitrio.formats", "vitrio.testing")
"""The packages whose public modules cryovit may import, besides the package face `vitrio`."""


# ---------------------------------------------------------------- the modules and their imports


@cache
def modules() -> dict[str, Path]:
    """Every module of `src/` by name, with its file: Python sources and built extensions."""
    found = {}
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    for package in sorted(p.parent for p in SOURCES.glob("*/__init__.py")):
        for path in sorted(package.rglob("*")):
            if "__pycache__" in path.parts or not path.is_file():
                continue
            parts = path.relative_to(SOURCES).parts
            if path.suffix == ".py":
                names = parts[:-1] if path.name == "__init__.py" else (*parts[:-1], path.stem)
            elif path.name.endswith(suffixes):
                names = (*parts[:-1], path.name.split(".")[0])
            else:
                continue
            found[".".join(names)] = path
    return found


def floor(name: str) -> int | None:
    """The floor of module `name`, or None if `FLOORS` places it nowhere."""
    best, length = None, -1
    for number, entries in enumerate(FLOORS):
        for entry in entries:
            holds = name == entry or (entry not in FACES and name.startswith(entry + "."))
            if holds and len(entry) > length:
                best, length = number, len(entry)
    return best


def _package(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def imports(name: str, source: str, path: Path, known) -> list[tuple[int, str, bool]]:
    """What module `name` (of file `path`, text `source`) imports.

    Args:
        known: The names of the modules a `from X import y` may name as `X.y`.

    Returns:
        For each module imported: the line, its full name, and whether the import stands inside a
        function.
    """
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name, in_function) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = _package(name, path).split(".")
                anchor = ".".join(package[: len(package) - node.level + 1])
                base = f"{anchor}.{base}" if node.module else anchor
            for alias in node.names:
                target = f"{base}.{alias.name}"
                found.append((node.lineno, target if target in known else base, in_function))
        inside = in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        for child in ast.iter_child_nodes(node):
            visit(child, inside)

    visit(ast.parse(source, str(path)), False)
    return found


def _ours(target: str) -> bool:
    return target.split(".")[0] in {name.split(".")[0] for name in modules()}


def violations(name: str, source: str, path: Path, known) -> list[str]:
    """What module `name` imports against the rules of this file, one line each."""
    where = f"{path.relative_to(SOURCES) if path.is_relative_to(SOURCES) else path}"
    own = floor(name)
    found = []
    for line, target, in_function in imports(name, source, path, known):
        if in_function and target.split(".")[0] not in OPTIONAL:
            found.append(f"{where}:{line}: {name} imports {target} inside a function")
        if not _ours(target):
            continue
        theirs = floor(target)
        if name.split(".")[0] == "cryovit" and target.split(".")[0] == "vitrio":
            public = not any(part.startswith("_") for part in target.split("."))
            allowed = target == "vitrio" or (
                public and any(target == p or target.startswith(p + ".") for p in CRYOVIT_MAY_USE)
            )
            if not allowed:
                found.append(f"{where}:{line}: {name} imports {target}, not the public face of vitrio")
        elif own is not None and theirs is not None and theirs > own:
            found.append(f"{where}:{line}: {name} (floor {own}) imports {target} (floor {theirs})")
    return found


# ---------------------------------------------------------------- the rules


def test_every_module_has_a_floor():
    assert {"vitrio", "vitrio.formats", "vitrio._native", "cryovit"} <= set(modules())
    assert not [name for name in modules() if floor(name) is None], "add them to FLOORS"


def test_no_module_imports_a_higher_floor_or_inside_a_function():
    known = set(modules())
    found = [
        line
        for name, path in modules().items()
        if path.suffix == ".py"
        for line in violations(name, path.read_text(), path, known)
    ]
    assert not found, "\n".join(found)


def test_the_rules_catch_what_they_forbid():
    known = {"vitrio", "vitrio.formats", "vitrio.formats.mrc", "vitrio._types", "vitrio._functions"}
    formats = SOURCES / "vitrio" / "formats" / "mrc.py"
    source = textwrap.dedent(
        """
        import numpy
        from .. import _types
        from . import mrc
        from .._functions import read
        import vitrio
        def f():
            import torch
            import json
            from .. import _types
        """
    )
    assert violations("vitrio.formats.mrc", source, formats, known) == [
        "vitrio/formats/mrc.py:5: vitrio.formats.mrc (floor 1) imports vitrio._functions (floor 5)",
        "vitrio/formats/mrc.py:6: vitrio.formats.mrc (floor 1) imports vitrio (floor 7)",
        "vitrio/formats/mrc.py:9: vitrio.formats.mrc imports json inside a function",
        "vitrio/formats/mrc.py:10: vitrio.formats.mrc imports vitrio._types inside a function",
    ]
    cryovit = SOURCES / "cryovit" / "data.py"
    source = "import vitrio\nfrom vitrio.formats import mrc\nfrom vitrio.data._shared import x\n"
    source += "import vitrio._types\n"
    assert violations("cryovit.data", source, cryovit, known) == [
        "cryovit/data.py:3: cryovit.data imports vitrio.data._shared, not the public face of vitrio",
        "cryovit/data.py:4: cryovit.data imports vitrio._types, not the public face of vitrio",
    ]
    assert floor("vitrio._unlisted") is None and floor("vitrio.scratch.store") == floor("vitrio.scratch") == 3
    assert floor("vitrio.formats.eer.decode") == floor("vitrio.formats.eer") == 1


# ---------------------------------------------------------------- imports alone


def _run(*arguments: str) -> subprocess.CompletedProcess:
    """Run a fresh interpreter that imports the modules this file reads, from `src/` first."""
    path = os.pathsep.join(filter(None, [str(SOURCES), os.environ.get("PYTHONPATH")]))
    environment = {**os.environ, "PYTHONPATH": path}
    return subprocess.run(
        [sys.executable, *arguments], capture_output=True, text=True, timeout=300, env=environment
    )


@pytest.mark.parametrize("name", sorted(modules()))
def test_imports_alone_in_a_fresh_interpreter(name: str):
    """A module runs as the first import of a program; a `__main__` runs with `--help`."""
    if name.endswith(".__main__"):
        result = _run("-m", name.rpartition(".")[0], "--help")
    else:
        result = _run("-c", "import importlib, sys; importlib.import_module(sys.argv[1])", name)
    missing = [
        dependency
        for dependency in OPTIONAL
        if f"No module named '{dependency}'" in result.stderr and importlib.util.find_spec(dependency) is None
    ]
    if missing:
        pytest.skip(f"{name} needs {', '.join(missing)}, which is not installed")
    assert result.returncode == 0, result.stderr[-3000:]


def test_the_builders_of_the_test_kit_need_no_pytest():
    kit = [
        name
        for name in modules()
        if name.startswith("vitrio.testing")
        and name not in ("vitrio.testing.conformance", "vitrio.testing.wrapping")
    ]
    assert "vitrio.testing.eer" in kit
    script = "import sys\nsys.modules['pytest'] = None\n" + "".join(f"import {name}\n" for name in kit)
    result = _run("-c", script)
    assert result.returncode == 0, result.stderr[-3000:]
