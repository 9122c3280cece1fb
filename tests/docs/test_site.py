"""The documentation site builds with `mkdocs build --strict`; its API reference lists every public name."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The modules of the API reference, and the page of each.
REFERENCE = {
    "vitrio": "api/vitrio",
    "vitrio.data": "api/vitrio-data",
    "vitrio.formats": "api/vitrio-formats",
    "cryovit.types": "api/cryovit-types",
    "cryovit.data": "api/cryovit-data",
}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built strictly (a broken link, a missing page, a docstring it cannot read: no site)."""
    out = tmp_path_factory.mktemp("site")
    command = [
        sys.executable,
        "-m",
        "mkdocs",
        "build",
        "--strict",
        "-f",
        str(ROOT / "mkdocs.yml"),
        "-d",
        str(out),
    ]
    environment = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-10000:]
    return out


def anchors(site: Path, page: str) -> set[str]:
    return set(re.findall(r'id="([^"]+)"', (site / page / "index.html").read_text("utf8")))


@pytest.mark.parametrize("module", REFERENCE)
def test_the_reference_lists_every_public_name(site: Path, module: str) -> None:
    names = importlib.import_module(module).__all__
    found = anchors(site, REFERENCE[module])
    # a submodule of vitrio is listed by a page of its own
    missing = [n for n in names if f"{module}.{n}" not in found and f"{module}.{n}" not in REFERENCE]
    assert not missing, f"{module}: not in the reference: {missing}"


def test_every_page_of_docs_is_built_and_reached(site: Path) -> None:
    pages = sorted(p.relative_to(ROOT / "docs").with_suffix("") for p in (ROOT / "docs").rglob("*.md"))
    for page in pages:
        built = site / ("index.html" if page.name == "index" else page / "index.html")
        assert built.is_file(), page
    navigation = (site / "index.html").read_text("utf8")
    for page in pages:
        if page.name != "index":
            assert f'href="{page.as_posix()}/"' in navigation, f"{page} is not in the navigation"


def test_the_montage_picture_of_the_docs_is_small() -> None:
    picture = ROOT / "docs" / "images" / "montage.png"
    assert picture.stat().st_size < 200_000
    assert "images/montage.png" in (ROOT / "README.md").read_text("utf8")


def test_every_code_block_of_the_pages_is_rendered_as_code(site: Path) -> None:
    """A fence whose options the site's Markdown cannot read is rendered as text: none is."""
    for page in (ROOT / "docs").rglob("*.md"):
        fences = len(re.findall(r"^ *```+ *\S", page.read_text("utf8"), flags=re.MULTILINE))
        name = page.relative_to(ROOT / "docs").with_suffix("")
        built = site / ("index.html" if name.name == "index" else name / "index.html")
        blocks = built.read_text("utf8").count('<div class="highlight">')
        assert blocks >= fences, f"{name}: {fences} code blocks, {blocks} rendered as code"


def test_the_speed_page_has_the_readme_table() -> None:
    def table(text: str) -> list[str]:
        return [line for line in text.splitlines() if line.startswith("| ")]

    readme = table((ROOT / "README.md").read_text("utf8"))
    speed = table((ROOT / "docs" / "speed.md").read_text("utf8"))
    assert speed and all(row in readme for row in speed)
