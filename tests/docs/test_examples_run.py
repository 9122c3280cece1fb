"""Every Python block of README.md and docs/*.md runs as written, in the folder `vitrio examples` makes.

As a user would: the folder is made once by the command (`python -m vitrio examples DIR`), and each
block runs in a fresh interpreter, its working directory a fresh copy of that folder (each block stands
alone: none builds on an earlier one). A block that cannot run here (it needs a GPU, a network, a
cluster) has a mark on the line before it, `<!-- needs: WHAT AND WHY -->`; such marks stay few.
What a block should give is checked, where its own lines do not check it, by the code of `CHECKS`,
run after it in the same interpreter.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# A block of Python: ```python, ```py, or the site's ```{.python ...}, at the start of a line.
_OPENING = re.compile(r"^```+ *\{?\.?(python3?|py)\b([^\n]*)$")
_NEEDS = re.compile(r"^<!-- needs: (.*) -->$")
# How long one block may take: the slowest trains a few epochs on 24 images, or starts JAX; the
# machines the suite runs on may be loaded many times over.
_SECONDS = 600
# Blocks that cannot run here (a GPU, a network, a cluster): few, each saying why.
_MOST_MARKED = 5


class Block(NamedTuple):
    page: str
    line: int
    source: str
    needs: str | None  # what the mark before it says, if any
    options: str  # what follows the language on the opening line


def blocks(page: Path) -> list[Block]:
    """The Python blocks of `page`, each with the mark on the line before it."""
    lines = page.read_text("utf8").splitlines()
    found, number = [], 0
    while number < len(lines):
        opening = _OPENING.match(lines[number])
        if not opening:
            number += 1
            continue
        end = next(i for i in range(number + 1, len(lines)) if lines[i].startswith("```"))
        mark = _NEEDS.match(lines[number - 1]) if number else None
        source = "\n".join(lines[number + 1 : end]) + "\n"
        name = str(page.relative_to(ROOT))
        found.append(Block(name, number + 1, source, mark and mark.group(1), opening.group(2)))
        number = end + 1
    return found


BLOCKS = [block for page in PAGES for block in blocks(page)]


def _first_line(block: Block) -> str:
    """The block's first line that is not an import: what tells it from the others of its page."""
    return next(line for line in block.source.splitlines() if line.strip() and not line.startswith("import"))


# Checks of what a block gives, by the page and a line the block holds: code run after the block.
CHECKS = {
    ("docs/data.md", "locations = vio.data.stack_locations(stacks)"): (
        "assert len(locations) == 24 and named == indexed and set(blocks) == {'optics', 'particles'}"
    ),
    ("docs/data.md", 'star = "demo-output/particles.star"'): (
        "assert set(batch) == {'image', 'defocus', 'pixel_size', 'index'}\n"
        "assert tuple(images.shape[1:]) == (64, 64) and len(dataset) == len(particles)"
    ),
    ("docs/index.md", 'locations = [vio.ImageLocation("particles.mrcs", i) for i in range(0, 100, 2)]'): (
        "np.testing.assert_array_equal(batch, vio.read('particles.mrcs')[::2])"
    ),
    ("docs/index.md", 'star = "demo-output/particles.star"'): (
        "assert tuple(images.shape[1:]) == (64, 64) and str(images.dtype) == 'torch.float32'"
    ),
    ("README.md", 'star = "demo-output/particles.star"'): (
        "assert set(batch) == {'image', 'defocus', 'pixel_size', 'index'}"
    ),
    ("docs/cli.md", 'star = "demo-output/particles.star"'): (
        "from PIL import Image\n"
        "from pathlib import Path\n"
        "assert done == 0 and failed == 1 and not Path('nothing.png').exists()\n"
        "assert len(Image.open('classes.png').text['Description'].split('\\n')) == 12\n"
        "assert len(Image.open('more.png').text['Description'].split('\\n')) == 5  # 3 sections, 2 sums"
    ),
    (
        "docs/data.md",
        "batches = vio.data.DataLoader(dataset, 32, shuffle=True, seed=0, loader=loader, pad_last=True)",
    ): ("assert [len(batch['image']) for batch in epoch] == [32, 32, 32, 32] and real == 4"),
    ("docs/scratch.md", 'second = np.concatenate([batch["image"] for batch in batches])'): (
        "np.testing.assert_array_equal(np.sort(first, axis=0), np.sort(second, axis=0))\n"
        "assert first.shape == (100, 64, 64)"
    ),
    ("docs/formats.md", 'fractions = vio.read("movie.eer", readers=readers)'): (
        "assert frames == (40, 64, 64) and fractions.shape == (4, 32, 32)"
    ),
    ("docs/formats.md", 'with vio.formats.open_reader("tomogram.mrc") as reader:'): (
        "assert (format_name, voxel_size, source, rank) == ('mrc', (2.5, 2.5, 2.5), 'MRC cell', 3)"
    ),
    ("docs/formats.md", "box = (slice(8, 24), slice(16, 48), slice(0, 32))"): (
        "np.testing.assert_array_equal(values, vio.read('tomogram.mrc')[box])"
    ),
}


def _checks_of(block: Block) -> list[str]:
    return [code for (page, line), code in CHECKS.items() if page == block.page and line in block.source]


@pytest.fixture(scope="module")
def examples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder the documented command makes, made as a user makes it."""
    folder = tmp_path_factory.mktemp("made") / "examples"
    command = [sys.executable, "-m", "vitrio", "examples", str(folder)]
    made = subprocess.run(command, capture_output=True, text=True, timeout=_SECONDS)
    assert made.returncode == 0, made.stderr
    return folder


RUN = [block for block in BLOCKS if block.needs is None]


@pytest.mark.parametrize("block", RUN, ids=[f"{b.page}:{b.line}" for b in RUN])
def test_block_runs_as_written(block: Block, examples: Path, tmp_path: Path) -> None:
    here = tmp_path / "examples"
    shutil.copytree(examples, here)
    source = "\n".join([block.source, *_checks_of(block)])
    ran = subprocess.run(
        [sys.executable, "-"], input=source, cwd=here, capture_output=True, text=True, timeout=_SECONDS
    )
    assert ran.returncode == 0, (
        f"{block.page}, the block of line {block.line} ({_first_line(block)!r}), fails in the folder "
        f"`vitrio examples` makes:\n{ran.stderr[-5000:]}"
    )


def test_blocks_that_do_not_run_are_few_and_say_why() -> None:
    marked = [block for block in BLOCKS if block.needs is not None]
    assert len(marked) <= _MOST_MARKED, [(b.page, b.line, b.needs) for b in marked]
    for block in marked:
        assert len(block.needs.split()) >= 3, f"{block.page}:{block.line}: say why it does not run here"
    unmarked = [(b.page, b.line) for b in BLOCKS if "notest" in b.options and b.needs is None]
    assert not unmarked, f"blocks marked notest without <!-- needs: WHAT AND WHY --> before them: {unmarked}"


def test_every_check_checks_a_block() -> None:
    checked = {
        (b.page, line) for b in BLOCKS for (page, line) in CHECKS if page == b.page and line in b.source
    }
    assert set(CHECKS) <= checked, sorted(set(CHECKS) - checked)


def test_every_page_with_examples_says_how_to_make_their_files() -> None:
    for page in {block.page for block in RUN}:
        first = min(block.line for block in RUN if block.page == page)
        top = "\n".join((ROOT / page).read_text("utf8").splitlines()[:first])
        assert "vitrio examples" in top, (
            f"{page}: say before its first example that `vitrio examples DIR` makes its files"
        )
