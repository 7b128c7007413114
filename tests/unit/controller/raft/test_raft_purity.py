"""The Raft core's messages are values. (Every public name is checked in
``tests/unit/test_public_names.py``.)

Its purity (no clock, socket, thread, disk or global random; only ``controller.raft`` and
``lograft.protocol.errors`` imported) is checked with every other layer rule in
``tests/unit/test_layers.py``.
"""

from __future__ import annotations


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
