"""Where the repository is, for tests that read its files (docs, protos, sources)."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
"""The repository's top level (the directory holding ``pyproject.toml``)."""
