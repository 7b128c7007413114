"""The checked-in docs/reference pages must be exactly what `make docs` generates now."""

from __future__ import annotations

import difflib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from api_compat import compile_protos

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


def test_the_grpc_reference_follows_the_protos_comments(tmp_path: Path) -> None:
    """A comment changed in broker.proto changes grpc-api.md, so the drift test above fails
    until `make docs` is run."""
    generator = _load_generator()
    proto = (ROOT / "proto" / "broker.proto").read_text()
    comment = "// Appends record batches to partitions this broker leads."
    assert proto.count(comment) == 1
    (tmp_path / "broker.proto").write_text(proto.replace(comment, "// Appends XYZZY batches."))
    page = generator.render_grpc_api(tmp_path)
    assert "Appends XYZZY batches." in page
    assert page != (REFERENCE / "grpc-api.md").read_text(encoding="utf-8")


def test_the_grpc_reference_lists_every_method_message_and_field() -> None:
    generator = _load_generator()
    page = (REFERENCE / "grpc-api.md").read_text(encoding="utf-8")
    (file,) = compile_protos().file
    assert file.package == "lograft.v1" and page.startswith("# gRPC API reference (`lograft.v1`)")
    for method in file.service[0].method:
        assert f"| `{method.name}` | [`{method.input_type.rsplit('.', 1)[-1]}`]" in page
    for message in file.message_type:
        assert f"\n#### {message.name}\n" in page, message.name
        for field in message.field:
            assert f"| {field.number} | `{field.name}` |" in page, f"{message.name}.{field.name}"
    assert "`WriteTxnMarkers` |" in page and "brokers only" in page
    assert generator.render_grpc_api() == page
