"""Runs `vitrio.bench.core`; see its docstring, or `--help`."""

from vitrio.bench.core import main

if __name__ == "__main__":
    main()
