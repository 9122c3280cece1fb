"""One configuration: every field documented, set by the environment (a bad value names its variable),
by `configure` for the process or a block, and per loader, which reaches what the loader reads."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import vitrio as vio
from vitrio._config import THREADS

from ..remote.http import RangeServer

ROOT = Path(__file__).resolve().parents[2]
FIELDS = [field.name for field in dataclasses.fields(vio.Configuration)]


def _run(code: str, **environment: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VITRIO_")} | environment
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)


def test_every_field_is_documented_in_the_docstring_and_the_page():
    page = (ROOT / "docs" / "configuration.md").read_text("utf8")
    described = set(re.findall(r"^ {8}(\w+): ", vio.Configuration.__doc__, flags=re.MULTILINE))
    for name in FIELDS:
        assert name in described, f"{name} is not in the docstring of Configuration"
        assert re.search(rf"^\| `{name}` \| .+ \| `VITRIO_{name.upper()}` \| .+ \|$", page, re.MULTILINE), (
            f"{name}: docs/configuration.md gives no row of its default, variable and meaning"
        )
    for threads in THREADS:
        assert f"| `{threads}` |" in page, f"the threads {threads} are not on docs/configuration.md"


# Where each file of src that starts threads is listed in THREADS; `_concurrency.py` defines the pool
# class and `shared_pool`, and the conformance kit of `vitrio.testing` runs only under a plugin's tests.
THREAD_SOURCES = {
    "cryovit/dataset.py": "loader",
    "vitrio/_functions.py": "loader",
    "vitrio/_loading/_images.py": "opening",
    "vitrio/extract/_picks.py": "opening",
    "vitrio/formats/_raw.py": "split",
    "vitrio/extract/_cropping.py": "extract",
    "vitrio/native_src/star.c": "star",
    "vitrio/data/_flights.py": "finisher",
    "vitrio/cli/_montage.py": "commands",
    "vitrio/cli/_fractionate.py": "commands",
}
NOT_SOURCES = {"vitrio/_concurrency.py", "vitrio/testing/conformance.py"}


def test_every_file_that_starts_threads_is_listed():
    starts = re.compile(r"threading\.Thread\(|ThreadPoolExecutor\(|shared_pool\(|pthread_create\(")
    found = {
        str(path.relative_to(ROOT / "src"))
        for path in (ROOT / "src").rglob("*")
        if path.suffix in (".py", ".c", ".cpp", ".h") and starts.search(path.read_text("utf8"))
    }
    assert found - NOT_SOURCES == set(THREAD_SOURCES), "a file starts threads THREADS does not list"
    assert set(THREAD_SOURCES.values()) <= set(THREADS)


def test_an_environment_variable_sets_a_field():
    code = "import vitrio; c = vitrio.configuration(); print(c.open_ahead, c.remote_timeout)"
    ran = _run(code, VITRIO_OPEN_AHEAD="7", VITRIO_REMOTE_TIMEOUT="2.5")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["7", "2.5"]


@pytest.mark.parametrize(
    "name, value, noun",
    [
        ("VITRIO_OPEN_AHEAD", "many", "a positive integer"),
        ("VITRIO_OPEN_AHEAD", "1.5", "a positive integer"),
        ("VITRIO_OPEN_AHEAD", "0", "a positive integer"),
        ("VITRIO_REMOTE_TIMEOUT", "-2", "a positive number"),
        ("VITRIO_REMOTE_TIMEOUT", "nan", "a positive number"),
    ],
)
def test_a_bad_environment_value_names_its_variable(name, value, noun):
    ran = _run("import vitrio; vitrio.configuration()", **{name: value})
    assert ran.returncode != 0
    said = ran.stderr.splitlines()[-1]
    assert said == f"ValueError: environment variable {name} is {noun}, not {value!r}", ran.stderr


def test_configure_in_a_block_restores_the_configuration_before():
    before = vio.configuration()
    with vio.configure(tasks_per_worker=9, remote_attempts=2) as during:
        assert during.tasks_per_worker == 9 and vio.configuration().remote_attempts == 2
    assert vio.configuration() == before


def test_an_unknown_name_raises_type_error():
    with pytest.raises(TypeError, match="no configuration is named open_ahaed"):
        vio.configure(open_ahaed=3)
    with pytest.raises(TypeError, match="no configuration is named open_ahaed"):
        vio.configuration().replace(open_ahaed=3)
    with pytest.raises(TypeError, match="configuration is a vitrio Configuration"):
        vio.loader(workers=1, configuration={"remote_attempts": 1})


def test_a_loader_plans_with_its_configuration(tmp_path):
    values = np.arange(8 * 4 * 4, dtype=np.float32).reshape(8, 4, 4)
    vio.write_stack(values, tmp_path / "stack.mrcs")
    chosen = vio.configuration().replace(tasks_per_worker=1, open_ahead=5)
    loader = vio.loader(workers=2, configuration=chosen)
    assert loader.configuration is chosen and loader.readers.backing.storage.configuration is chosen
    out = np.empty_like(values)
    vio.read_batch_async(loader, out, [vio.ImageLocation(tmp_path / "stack.mrcs", i) for i in range(8)]).get()
    np.testing.assert_array_equal(out, values)
    assert vio.loader(workers=2).configuration == vio.configuration()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    path = tmp_path_factory.mktemp("served") / "stack.mrcs"
    values = np.random.default_rng(3).normal(size=(4, 10, 12)).astype(np.float32)
    vio.write_stack(values, path)
    server = RangeServer({"stack.mrcs": path.read_bytes()})
    yield server, f"{server.url}/stack.mrcs", values
    server.stop()


def test_a_loader_reads_with_its_configuration(served):
    """A loader allowed one attempt fails where one failure is met; the default loader retries and reads."""
    server, url, values = served
    out = np.empty((1, *values.shape[1:]), np.float32)
    with vio.configure(remote_backoff=0.001):
        once = vio.loader(workers=1, configuration=vio.configuration().replace(remote_attempts=1))
        retrying = vio.loader(workers=1)
    for loader in (once, retrying):  # the header, with no fault
        vio.read_batch_async(loader, out, [vio.ImageLocation(url, 0)]).get()
    server.fail("503")
    with pytest.raises(OSError, match="503"):
        vio.read_batch_async(once, out, [vio.ImageLocation(url, 2)]).get()
    server.fail("503")
    vio.read_batch_async(retrying, out, [vio.ImageLocation(url, 2)]).get()
    np.testing.assert_array_equal(out[0], values[2])
