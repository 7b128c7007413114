"""Regenerate the gRPC stubs in proto/lograft/protocol/wire from the .proto files in proto/.

Usage: python proto/generate.py [OUTPUT_DIR]   (default: proto/lograft/protocol/wire)

protoc writes absolute imports between generated modules (``import broker_pb2``); they are
rewritten to package-relative ones so the stubs live inside the ``lograft.protocol.wire``
package.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from grpc_tools import protoc

PROTO_DIR = Path(__file__).resolve().parent
DEFAULT_OUT = PROTO_DIR / "lograft" / "protocol" / "wire"
_IMPORT = re.compile(r"^import (\w+_pb2) as (\w+)$", re.MULTILINE)


def generate(out_dir: Path) -> list[Path]:
    """Run protoc on every .proto file and return the files written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    protos = sorted(PROTO_DIR.glob("*.proto"))
    args = [
        "protoc",
        f"-I{PROTO_DIR}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *(str(p) for p in protos),
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    written = []
    for path in sorted(out_dir.glob("*_pb2*.py*")):
        text = path.read_text()
        path.write_text(_IMPORT.sub(r"from . import \1 as \2", text))
        written.append(path)
    return written


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUT
    for p in generate(target):
        print(p)
