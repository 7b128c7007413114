"""The Raft core's public names are pinned and its messages are values.

Its purity (no clock, socket, thread, disk or global random; only ``controller.raft`` and
``cluster.errors`` imported) is checked with every other layer rule in
``tests/unit/test_layers.py``.
"""

from __future__ import annotations

import controller.raft


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
