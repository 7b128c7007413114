"""Generate docs/reference/configuration.md and docs/reference/api.md from the code.

Usage: python docs/generate.py [OUTPUT_DIR]   (default: docs/reference; ``make docs``)

* ``configuration.md`` comes from the config definitions: the clients' ``ConfigDef`` tables
  (``COMMON_CONFIGS``, ``PRODUCER_CONFIGS``, ``CONSUMER_CONFIGS``, ``ADMIN_CONFIGS``), the
  topic configs (``TOPIC_CONFIGS`` with the defaults of ``LogConfig``), the broker settings
  (``BROKER_TO_TOPIC_CONFIG``, ``NODE_CONFIGS``) and the argument parsers of ``lograft node``
  and ``lograft``.
* ``api.md`` comes from the docstrings and signatures of ``cluster.client.__all__`` and the
  typed errors of ``lograft.protocol.errors``.
* ``grpc-api.md`` comes from the public gRPC API's .proto files (``lograft.v1``,
  ``proto/broker.proto``) and their comments, compiled by protoc with source info.

The output is deterministic (definition order, no memory addresses), so
``tests/unit/test_docs_drift.py`` can fail when the checked-in files drift from the code.
Nothing here starts a server or touches the network.

The generator lives in the :mod:`refgen` package next to this file (one module per page);
this script is its entry point.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The repository root for the first-party packages, this directory for refgen: the drift
# test loads this file by path, so the script's own directory is not on sys.path then.
for _path in (ROOT, Path(__file__).resolve().parent):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))
# proto/ for api_compat (the public API's files and how protoc compiles them), last.
if str(ROOT / "proto") not in sys.path:
    sys.path.append(str(ROOT / "proto"))

from refgen.api import render_api  # noqa: E402
from refgen.configuration import render_configuration  # noqa: E402
from refgen.grpc_api import render_grpc_api  # noqa: E402
from refgen.markdown import GENERATED_NOTE  # noqa: E402

DEFAULT_OUT = ROOT / "docs" / "reference"

__all__ = [
    "DEFAULT_OUT",
    "GENERATED_NOTE",
    "generate",
    "render",
    "render_api",
    "render_configuration",
    "render_grpc_api",
]


def render() -> dict[str, str]:
    """File name → text of every generated reference page."""
    return {
        "api.md": render_api(),
        "configuration.md": render_configuration(),
        "grpc-api.md": render_grpc_api(),
    }


def generate(out_dir: Path) -> list[Path]:
    """Write every reference page into ``out_dir``; returns the files written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in render().items():
        path = out_dir / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def main(argv: Sequence[str]) -> int:
    target = Path(argv[0]) if argv else DEFAULT_OUT
    for path in generate(target):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
