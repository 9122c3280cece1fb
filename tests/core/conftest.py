"""Fixtures of the tests of the core: a seeded generator, and warnings of vitrio's formats as errors.

A file vitrio writes must read back without a `FormatWarning`; tests that
expect one catch it with `pytest.warns`.
"""

from __future__ import annotations

import numpy as np
import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        if "/tests/core/" in str(item.path).replace("\\", "/"):
            item.add_marker(pytest.mark.filterwarnings("error::vitrio.FormatWarning"))


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20141)
