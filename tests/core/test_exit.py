"""A program that ends with reads in flight exits promptly, whatever it did with its completions."""

import subprocess
import sys
import textwrap

import pytest

# Big enough that the reads are still under way when the script's last line runs.
SETUP = """
import numpy as np, vitrio as vio
from vitrio.data import DataLoader, Dataset, ImageSource
folder = {folder!r}
paths = [f"{{folder}}/stack{{i}}.mrc" for i in range(8)]
for path in paths:
    vio.write_stack(np.random.default_rng(0).random((64, 128, 128), dtype=np.float32), path)
locations = [vio.ImageLocation(p, i) for p in paths for i in range(64)]
destination = np.zeros((4 * len(locations), 128, 128), np.float32)
"""

LOADERS = {
    "default": "loader = vio.loader()",
    "explicit": "loader = vio.loader(workers=2, cache=2)",
    "scratch": "loader = vio.loader(workers=2, scratch=vio.create_host_image_scratch(locations, 8))",
}

ENDINGS = {
    "left": "completion = vio.read_batch_async(loader, destination, locations * 4)",
    "dropped": "completion = vio.read_batch_async(loader, destination, locations * 4)\ndel completion",
    "waited": "vio.read_batch_async(loader, destination, locations * 4).get()\n"
    "completion = vio.read_batch_async(loader, destination, locations * 4)",
    "raised": "completion = vio.read_batch_async(loader, destination, locations * 4)\n"
    "raise SystemExit('stopped with reads in flight')",
}


def run_script(tmp_path, body: str) -> subprocess.CompletedProcess:
    script = textwrap.dedent(SETUP.format(folder=str(tmp_path))) + body + "\n"
    return subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("loader", sorted(LOADERS))
@pytest.mark.parametrize("ending", sorted(ENDINGS))
def test_exit_with_reads_in_flight(tmp_path, loader, ending):
    # A hang shows as subprocess.TimeoutExpired, which fails the test.
    result = run_script(tmp_path, LOADERS[loader] + "\n" + ENDINGS[ending])
    expected = 1 if ending == "raised" else 0
    assert result.returncode == expected, result.stderr
    if ending == "raised":
        assert "stopped with reads in flight" in result.stderr


def test_exit_with_a_data_loader_abandoned_mid_epoch(tmp_path):
    body = (
        "dataset = Dataset({'image': ImageSource(locations * 4)})\n"
        "batches = iter(DataLoader(dataset, 64, shuffle=True, seed=1, prefetch=8))\n"
        "first = next(batches)\n"
        "print(first['image'].shape)\n"
    )
    result = run_script(tmp_path, body)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "(64, 128, 128)"


def test_reads_under_way_are_finished_before_shutdown(tmp_path):
    """The exit hook waits for the reads: a hook that runs after it sees the batch complete and right."""
    script = textwrap.dedent(
        f"""
        import atexit
        state = {{}}
        # Registered before vitrio is imported, so it runs after vitrio's own exit hook.
        atexit.register(lambda: print(state["completion"].is_ready, bool((state["out"] == 7).all())))
        import numpy as np, vitrio as vio
        path = "{tmp_path}/sevens.mrc"
        vio.write_stack(np.full((256, 128, 128), 7, np.float32), path)
        out = np.zeros((4096, 128, 128), np.float32)
        loader = vio.loader(workers=2)
        state["out"] = out
        locations = [vio.ImageLocation(path, i % 256) for i in range(4096)]
        state["completion"] = vio.read_batch_async(loader, out, locations)
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "True"]
