"""The Raft core stays pure, and its public names are pinned.

DESIGN.md, "Pure cores, thin shells": the core reads no clock, opens no socket, starts no
thread, touches no disk and uses only the ``random.Random`` it is given. This test parses
every module of ``controller/raft`` and refuses imports that would let it do otherwise.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import controller.raft

RAFT_DIR = Path(controller.raft.__file__).parent
MODULES = sorted(RAFT_DIR.glob("*.py"))

FORBIDDEN_MODULES = {
    "asyncio",
    "concurrent",
    "grpc",
    "io",
    "multiprocessing",
    "os",
    "pathlib",
    "random",
    "selectors",
    "shutil",
    "signal",
    "socket",
    "subprocess",
    "sys",
    "tempfile",
    "threading",
    "time",
}
ALLOWED_FIRST_PARTY = ("controller.raft", "cluster.errors")
FORBIDDEN_CALLS = {"open", "print", "input", "eval", "exec", "__import__"}


def _runtime_nodes(tree: ast.Module) -> list[ast.AST]:
    """Every node except those under ``if TYPE_CHECKING:`` (type-only imports are fine)."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.If)
            and isinstance(node.test, ast.Name)
            and node.test.id == "TYPE_CHECKING"
        ):
            for child in node.body:
                skipped.update(id(n) for n in ast.walk(child))
    return [node for node in ast.walk(tree) if id(node) not in skipped]


def _imports(path: Path) -> list[str]:
    names: list[str] = []
    for node in _runtime_nodes(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            names.append(node.module)
    return names


def test_the_core_has_modules_to_check() -> None:
    """Guard against the glob silently matching nothing."""
    assert {p.name for p in MODULES} >= {"node.py", "quorum_state.py", "messages.py", "storage.py"}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_core_imports_nothing_that_does_io_or_reads_time(path: Path) -> None:
    """No asyncio, grpc, time, os, socket, threading or the global random at runtime."""
    for name in _imports(path):
        top = name.split(".")[0]
        assert top not in FORBIDDEN_MODULES, f"{path.name} imports {name}"
        if top in {"controller", "cluster", "replica", "spark", "chaos"}:
            assert name.startswith(ALLOWED_FIRST_PARTY), f"{path.name} imports {name}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_core_calls_no_io_builtins(path: Path) -> None:
    """No ``open``/``print``/``eval``: output goes through Ready, logging through ``logging``."""
    for node in _runtime_nodes(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            assert node.func.id not in FORBIDDEN_CALLS, (
                f"{path.name}:{node.lineno} calls {node.func.id}"
            )


def test_import_rule_catches_a_violation(tmp_path: Path) -> None:
    """The checker itself works: a module importing time is caught."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import os\nimport time\n"
    )
    assert _imports(bad) == ["typing", "time"]


def test_public_names_are_pinned() -> None:
    """The package's public API; change this list deliberately."""
    assert sorted(controller.raft.__all__) == sorted(
        [
            "TRANSITIONS",
            "BeginQuorumEpoch",
            "BeginQuorumEpochResponse",
            "Entry",
            "EntryKind",
            "ErrorCode",
            "FetchRequest",
            "FetchResponse",
            "FetchSnapshotRequest",
            "FetchSnapshotResponse",
            "HardState",
            "IllegalTransitionError",
            "InvalidSnapshotError",
            "MemoryStorage",
            "Message",
            "NotLeaderError",
            "RaftConfig",
            "RaftInvariantError",
            "RaftMessage",
            "RaftNode",
            "RaftStatus",
            "RaftUsageError",
            "Ready",
            "Rejection",
            "ReplicaStatus",
            "Role",
            "Snapshot",
            "SnapshotId",
            "Storage",
            "VoteRequest",
            "VoteResponse",
        ]
    )
    for name in controller.raft.__all__:
        assert getattr(controller.raft, name) is not None


def test_messages_are_frozen_and_slotted() -> None:
    """Messages are values: frozen dataclasses with slots, each carrying a cluster id."""
    import dataclasses

    from controller.raft import messages

    for name in messages.__all__:
        cls = getattr(messages, name)
        if isinstance(cls, type) and dataclasses.is_dataclass(cls):
            assert cls.__dataclass_params__.frozen, name  # type: ignore[attr-defined]
            assert "__slots__" in cls.__dict__, name
    for cls in (messages.VoteRequest, messages.FetchResponse, messages.BeginQuorumEpochResponse):
        assert "cluster_id" in {f.name for f in dataclasses.fields(cls)}
