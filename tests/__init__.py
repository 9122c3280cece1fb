"""The tests of vitrio and cryovit: a package of packages, one for each part (`tests.core`,
`tests.formats`, ...), whose modules import what they share by package name.

`DM_SAMPLES` is the archive of real DigitalMicrograph files, with the arrays
another reader read from them, that the tests of the DM reader and the
fuzzer's seeds use. It lies beside the repository (`../shared/testdata`).
Where it is absent, the tests that need it are skipped, saying so; in CI
(the environment variable `CI` set) they fail instead, so that a run
without the archive cannot pass.
"""

import os
from pathlib import Path

import pytest

DM_SAMPLES = Path(__file__).resolve().parents[2] / "shared" / "testdata" / "dm-samples.tar.xz"


def in_ci() -> bool:
    """Whether the tests run in CI: the environment variable `CI` is set and not empty or false."""
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


def need_dm_samples() -> None:
    """Skip the calling test where `DM_SAMPLES` is absent, or fail it in CI; return if it is there."""
    if DM_SAMPLES.is_file():
        return
    message = f"no DM samples at {DM_SAMPLES}"
    if in_ci():
        pytest.fail(f"{message}: CI runs every test of the real DM files", pytrace=False)
    pytest.skip(message)
