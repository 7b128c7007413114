"""The checked-in stubs in proto/lograft/protocol/wire must be exactly what `make proto`
generates."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _load_generator() -> object:
    spec = importlib.util.spec_from_file_location("proto_generate", ROOT / "proto" / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["proto_generate"] = module
    spec.loader.exec_module(module)
    return module


def test_generated_stubs_match_proto_files(tmp_path: Path) -> None:
    generator = _load_generator()
    written = generator.generate(tmp_path)  # type: ignore[attr-defined]
    assert written, "no .proto files were compiled"
    checked_in = {
        p.name for p in (ROOT / "proto" / "lograft" / "protocol" / "wire").glob("*_pb2*.py*")
    }
    assert checked_in == {p.name for p in written}, "run `make proto`: stub files differ"
    for fresh in written:
        current = (ROOT / "proto" / "lograft" / "protocol" / "wire" / fresh.name).read_text()
        assert current == fresh.read_text(), f"{fresh.name} drifted: run `make proto`"
