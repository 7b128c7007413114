"""``python -m cluster.cli``: the ``lograft`` command."""

from cluster.cli import main

raise SystemExit(main())
