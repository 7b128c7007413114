"""Checks that a received message could have come from a correct peer.

``RaftNode.step`` refuses (``INVALID_REQUEST``) what fails them before any handler runs, so
the handlers may trust field types, ranges and the shape of a fetch answer. Messages arrive
from the network: nothing here assumes the sender is well behaved.
"""

from __future__ import annotations

from controller.raft.messages import (
    BeginQuorumEpochResponse,
    Entry,
    EntryKind,
    ErrorCode,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Message,
    Snapshot,
    SnapshotId,
    VoteRequest,
    VoteResponse,
)

__all__ = ["malformed"]


def _is_int(value: object, minimum: int = 0) -> bool:
    return type(value) is int and value >= minimum


def malformed(m: Message, node_id: int) -> str | None:
    """Why ``m`` cannot be a message from a correct peer, or ``None``."""
    if not (_is_int(m.src) and _is_int(m.dst) and _is_int(m.epoch)):
        return "src, dst and epoch must be integers >= 0"
    if m.dst != node_id:
        return f"addressed to node {m.dst}, this is node {node_id}"
    if m.src == node_id:
        return "message from itself"
    if isinstance(m, VoteRequest):
        if not (_is_int(m.last_epoch) and _is_int(m.log_end_offset) and type(m.pre_vote) is bool):
            return "bad VoteRequest fields"
        if m.last_epoch >= m.epoch:
            return "candidate's last epoch is not below its epoch"
    elif isinstance(m, BeginQuorumEpochResponse):
        if not isinstance(m.error, ErrorCode) or not (m.leader_id is None or _is_int(m.leader_id)):
            return "bad BeginQuorumEpochResponse fields"
    elif isinstance(m, VoteResponse):
        if type(m.granted) is not bool or type(m.pre_vote) is not bool:
            return "bad VoteResponse fields"
    elif isinstance(m, FetchRequest):
        if not (
            _is_int(m.fetch_offset)
            and _is_int(m.last_fetched_epoch)
            and _is_int(m.high_watermark)
            and _is_int(m.max_wait_ticks)
        ):
            return "bad FetchRequest fields"
        if m.high_watermark > m.fetch_offset:
            return "high watermark is above the fetcher's log end offset"
        if m.last_fetched_epoch > m.epoch:
            return "last fetched epoch is above the fetcher's epoch"
    elif isinstance(m, FetchResponse):
        return _malformed_fetch_response(m)
    elif isinstance(m, FetchSnapshotRequest):
        sid = m.snapshot_id
        if not (isinstance(sid, SnapshotId) and _is_int(sid.end_offset, 1) and _is_int(sid.epoch)):
            return "bad snapshot id"
    elif isinstance(m, FetchSnapshotResponse):
        if not isinstance(m.error, ErrorCode):
            return "bad error code"
        if m.leader_id is not None and not _is_int(m.leader_id):
            return "bad leader id"
        snap = m.snapshot
        if snap is not None and not (
            isinstance(snap, Snapshot)
            and _is_int(snap.end_offset, 1)
            and _is_int(snap.epoch)
            and snap.epoch <= m.epoch
            and isinstance(snap.image, bytes)
        ):
            return "bad snapshot"
        if m.error is ErrorCode.NONE and (snap is None or m.leader_id != m.src):
            return "a successful snapshot answer comes from the leader with a snapshot"
    return None


def _malformed_fetch_response(m: FetchResponse) -> str | None:
    if not isinstance(m.error, ErrorCode):
        return "bad error code"
    if m.leader_id is not None and not _is_int(m.leader_id):
        return "bad leader id"
    if not (
        _is_int(m.fetch_offset) and _is_int(m.last_fetched_epoch) and _is_int(m.high_watermark)
    ):
        return "bad FetchResponse offsets"
    if not isinstance(m.entries, tuple):
        return "entries must be a tuple"
    if m.error is not ErrorCode.NONE:
        if m.entries or m.diverging_end_offset is not None or m.snapshot_id is not None:
            return "an error answer carries no data"
        return None
    if m.leader_id != m.src:
        return "a successful fetch answer comes from the leader"
    outcomes = (bool(m.entries), m.diverging_end_offset is not None, m.snapshot_id is not None)
    if sum(outcomes) > 1:
        return "entries, diverging epoch and snapshot id are exclusive"
    if (m.diverging_epoch is None) != (m.diverging_end_offset is None):
        return "diverging epoch and end offset come together"
    if m.diverging_end_offset is not None:
        if not (_is_int(m.diverging_end_offset) and _is_int(m.diverging_epoch)):
            return "bad diverging epoch"
        if (
            m.diverging_end_offset > m.fetch_offset
            or (m.diverging_epoch or 0) > m.last_fetched_epoch
        ):
            return "diverging point is past the fetch position"
    if m.snapshot_id is not None:
        sid = m.snapshot_id
        if not (isinstance(sid, SnapshotId) and _is_int(sid.end_offset, 1) and _is_int(sid.epoch)):
            return "bad snapshot id"
    expected_offset, previous_epoch = m.fetch_offset, m.last_fetched_epoch
    for entry in m.entries:
        if not (
            isinstance(entry, Entry)
            and type(entry.offset) is int
            and entry.offset == expected_offset
            and _is_int(entry.epoch)
            and previous_epoch <= entry.epoch <= m.epoch
            and isinstance(entry.data, bytes)
            and isinstance(entry.kind, EntryKind)
        ):
            return f"entry at {expected_offset} is not contiguous or has a bad epoch"
        expected_offset += 1
        previous_epoch = entry.epoch
    return None
