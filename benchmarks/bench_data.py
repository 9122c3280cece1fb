"""Runs `vitrio.bench.data`; see its docstring, or `--help`."""

from vitrio.bench.data import main

if __name__ == "__main__":
    main()
