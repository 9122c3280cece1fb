"""Runs `vitrio.bench.scratch`; see its docstring, or `--help`."""

from vitrio.bench.scratch import main

if __name__ == "__main__":
    main()
