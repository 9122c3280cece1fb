"""The extension module, built against the stable ABI of CPython 3.11: one abi3 wheel for every CPython
from 3.11 on. The rest of the metadata is in pyproject.toml."""

from pathlib import Path

from setuptools import Extension, setup

NATIVE = Path("src/vitrio/native_src")

setup(
    ext_modules=[
        Extension(
            "vitrio._native",
            sorted(str(path) for path in NATIVE.glob("*.c")),
            depends=[str(NATIVE / "native.h")],
            py_limited_api=True,  # native.h defines Py_LIMITED_API
        )
    ],
    options={"bdist_wheel": {"py_limited_api": "cp311"}},
)
