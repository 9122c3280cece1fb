"""Programs of the repository, run from its root as modules: `python -m scripts.NAME`."""
