"""The tests of this folder check vitrio against copick-torch, and run only where it can be imported.

copick pins zarr < 3, so they run in an environment of their own: `make test-copick-torch` makes it
(.venv-bench-cryoet) and runs them there. Elsewhere pytest leaves the folder out.
"""

try:
    import copick_torch  # noqa: F401
except ImportError:
    collect_ignore_glob = ["test_*.py"]
