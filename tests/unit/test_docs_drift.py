"""The checked-in docs/reference pages must be exactly what `make docs` generates now."""

from __future__ import annotations

import difflib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference"


def _load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_generate", ROOT / "docs" / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["docs_generate"] = module
    spec.loader.exec_module(module)
    return module


def test_generated_reference_matches_code(tmp_path: Path) -> None:
    written: list[Path] = _load_generator().generate(tmp_path)
    assert written, "the generator wrote nothing"
    checked_in = {p.name for p in REFERENCE.glob("*.md")}
    assert checked_in == {p.name for p in written}, "run `make docs`: reference pages differ"
    for fresh in written:
        current = (REFERENCE / fresh.name).read_text(encoding="utf-8")
        expected = fresh.read_text(encoding="utf-8")
        if current != expected:
            diff = "".join(
                list(
                    difflib.unified_diff(
                        current.splitlines(keepends=True),
                        expected.splitlines(keepends=True),
                        f"docs/reference/{fresh.name} (checked in)",
                        f"docs/reference/{fresh.name} (generated now)",
                    )
                )[:60]
            )
            raise AssertionError(f"docs/reference/{fresh.name} drifted: run `make docs`\n{diff}")


def test_generator_is_deterministic() -> None:
    generator = _load_generator()
    assert generator.render() == generator.render()
