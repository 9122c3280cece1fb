"""Runs `vitrio.bench.growth`; see its docstring, or `--help`."""

from vitrio.bench.growth import main

if __name__ == "__main__":
    main()
