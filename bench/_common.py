"""Shared by the benchmark scripts: run a client command that prints JSON, write a report."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def run_json(args: list[str]) -> dict[str, Any]:
    """Run ``args`` in the repository root; its last stdout line is one JSON object."""
    done = subprocess.run(args, check=True, capture_output=True, text=True, cwd=ROOT)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def write_report(report: dict[str, Any], output: Path) -> None:
    """Write the report to ``output`` (bench/results/ is not committed) and print it."""
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
