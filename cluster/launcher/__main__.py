"""``python -m cluster.launcher ACTION ...``: the same actions as ``lograft cluster``."""

from cluster.launcher.commands import main

if __name__ == "__main__":
    raise SystemExit(main())
