"""`python -m vitrio.cli`: the `vitrio` command, where the console script is not on the path."""

from . import main

raise SystemExit(main())
