"""Safety: keys from metadata files never make a scratch or an output land outside its directory, and
no code path unpickles what it reads."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import numpy as np
import pytest

import vitrio as vio

SOURCES = Path(__file__).resolve().parents[2] / "src"
SCRATCH_NAME = re.compile(r"[0-9a-f]{32}\.vitrio-scratch")


def _tree(root: Path) -> set[str]:
    return {str(path.relative_to(root)) for path in root.rglob("*")}


@pytest.fixture
def stack(tmp_path: Path) -> Path:
    path = tmp_path / "data" / "x.mrcs"
    path.parent.mkdir()
    vio.write_stack(np.arange(4 * 8 * 8, dtype=np.float32).reshape(4, 8, 8), path)
    return path


def test_a_directory_scratch_is_named_by_a_hash_of_its_keys_only(tmp_path: Path, stack: Path):
    scratch = tmp_path / "scratch"
    keys = [
        os.path.join(stack.parent, "..", "data", "x.mrcs"),
        os.path.join(stack.parent, "..", "..", tmp_path.name, "data", ".", "x.mrcs"),
        str(stack),
    ]
    before = _tree(tmp_path)
    for key in keys:
        held = vio.create_directory_image_scratch(
            [vio.ImageLocation(key, i) for i in range(4)], scratch, 2, 1 << 20
        )
        loader = vio.loader(workers=1, scratch=held)
        out = np.empty((4, 8, 8), np.float32)
        vio.read_batch_async(loader, out, [vio.ImageLocation(key, i) for i in range(4)]).get()
        np.testing.assert_array_equal(out, vio.read(stack))
    made = _tree(tmp_path) - before
    assert all(name.startswith("scratch") for name in made), made
    folder = scratch / f"vitrio-{os.geteuid()}"
    assert os.listdir(scratch) == [folder.name]
    assert all(SCRATCH_NAME.fullmatch(name) for name in os.listdir(folder)), os.listdir(folder)


@pytest.mark.parametrize(
    "key", ["../../etc/passwd", "../../../../../../../../etc/passwd", "/etc/passwd", "a/../../b"]
)
def test_keys_that_are_not_images_make_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    (tmp_path / "a" / "b").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "a" / "b")
    scratch = tmp_path / "scratch"
    before = _tree(tmp_path)
    for location in (key, vio.ImageLocation(key, 0)):
        with pytest.raises((OSError, ValueError)) as caught:
            vio.create_directory_image_scratch([location], scratch, 1, 1 << 20)
        assert key in str(caught.value)
    assert _tree(tmp_path) - before <= {"scratch"}


def test_eviction_removes_only_the_scratch_files_of_its_directory(tmp_path: Path, stack: Path):
    directory = tmp_path / "scratch"
    old = vio.create_directory_image_scratch([str(stack)], directory, 1, 1 << 20)
    scratch = Path(old.path).parent
    (old_name,) = os.listdir(scratch)
    outside = tmp_path / "precious.vitrio-scratch"
    outside.write_bytes(b"not a scratch")
    (scratch / "link.vitrio-scratch").symlink_to(outside)
    (scratch / "folder.vitrio-scratch").mkdir()
    (scratch / "folder.vitrio-scratch" / "inside").write_bytes(b"kept")
    (scratch / "notes.txt").write_bytes(b"kept")
    del old
    vio.create_directory_image_scratch([vio.ImageLocation(stack, 0)], directory, 1, 8192)
    left = set(os.listdir(scratch))
    assert old_name not in left  # evicted to make room
    assert {"link.vitrio-scratch", "folder.vitrio-scratch", "notes.txt"} <= left
    assert outside.read_bytes() == b"not a scratch"
    assert (scratch / "folder.vitrio-scratch" / "inside").read_bytes() == b"kept"


def test_an_output_key_with_parent_steps_writes_beside_where_it_lands(tmp_path: Path):
    (tmp_path / "a").mkdir()
    vio.write_single(np.ones((4, 4), np.float32), tmp_path / "a" / ".." / "b.mrc")
    assert _tree(tmp_path) == {"a", "b.mrc"}


_UNPICKLING_CALLS = {
    ("pickle", "load"),
    ("pickle", "loads"),
    ("pickle", "Unpickler"),
    ("marshal", "load"),
    ("marshal", "loads"),
    ("shelve", "open"),
    ("dill", "load"),
    ("dill", "loads"),
    ("joblib", "load"),
    ("torch", "load"),
    ("np", "load"),
    ("numpy", "load"),
    ("yaml", "load"),
    ("yaml", "unsafe_load"),
}
_UNPICKLING_MODULES = {"pickle", "cPickle", "_pickle", "marshal", "shelve", "dill", "joblib", "cloudpickle"}


def _numpy_load_without_pickles(module: str, name: str, call: ast.Call) -> bool:
    """Whether `call` is numpy's `load` told `allow_pickle=False` in so many words (a `.npy` file, such as
    cryoSPARC's `.cs`, read as data only)."""
    return (
        module in ("np", "numpy")
        and name == "load"
        and any(
            k.arg == "allow_pickle" and isinstance(k.value, ast.Constant) and k.value.value is False
            for k in call.keywords
        )
    )


def _unpickling(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if a.name.split(".")[0] in _UNPICKLING_MODULES]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in _UNPICKLING_MODULES:
            found.append(f"from {node.module} import ...")
        elif isinstance(node, ast.Call):
            function = node.func
            if isinstance(function, ast.Name) and function.id in ("eval", "exec"):
                found.append(f"{function.id}()")
            elif (
                isinstance(function, ast.Attribute)
                and isinstance(function.value, ast.Name)
                and (function.value.id, function.attr) in _UNPICKLING_CALLS
                and not _numpy_load_without_pickles(function.value.id, function.attr, node)
            ):
                found.append(f"{function.value.id}.{function.attr}()")
            found += [
                "allow_pickle=True"
                for keyword in node.keywords
                if keyword.arg == "allow_pickle"
                and not (isinstance(keyword.value, ast.Constant) and keyword.value.value is False)
            ]
    return found


def test_the_scan_finds_unpickling():
    source = (
        "import pickle\nnp.load(f, allow_pickle=True)\ntorch.load(f)\neval(x)\nmodel.eval()\n"
        "np.load(f, allow_pickle=False)\nnumpy.load(f)\n"
    )
    assert _unpickling(ast.parse(source)) == [
        "import pickle",
        "np.load()",
        "allow_pickle=True",
        "torch.load()",
        "eval()",
        "numpy.load()",
    ]


def test_no_code_path_unpickles_data():
    files = sorted(SOURCES.rglob("*.py"))
    assert any(path.parts[-2:] == ("vitrio", "__init__.py") for path in files)
    found = {
        str(path.relative_to(SOURCES)): uses
        for path in files
        if (uses := _unpickling(ast.parse(path.read_text(), str(path))))
    }
    assert not found, found
