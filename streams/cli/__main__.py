"""`python -m streams.cli`: the `seine` command."""

from streams.cli import main

raise SystemExit(main())
