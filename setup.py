"""The extension module, built against the stable ABI of CPython 3.11: one abi3 wheel for every CPython
from 3.11 on. The rest of the metadata is in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "vitrio._native",
            ["src/vitrio/_native.c"],
            py_limited_api=True,  # _native.c defines Py_LIMITED_API
        )
    ],
    options={"bdist_wheel": {"py_limited_api": "cp311"}},
)
