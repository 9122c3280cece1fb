"""`python -m vitrio`: the `vitrio` command, where the console script is not on the path."""

from .cli import main

raise SystemExit(main())
