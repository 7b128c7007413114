"""Snapshot transfer: ``FetchSnapshot`` from both sides (KIP-630).

A fetcher whose fetch offset lies below the leader's log start is told the leader's
snapshot id and asks for it; the leader answers with the whole snapshot (one message: the
metadata image is small). The fetcher replaces its log with it and hands the image to the
application through the next ``Ready``. Taking a local snapshot is
:meth:`RaftNode.create_snapshot <controller.raft.node.RaftNode.create_snapshot>`.
"""

from __future__ import annotations

from controller.raft._core import Core
from controller.raft._state import Progress
from controller.raft.messages import (
    ErrorCode,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
)
from controller.raft.ready import Rejection

__all__ = ["on_fetch_snapshot_response", "refuse_fetch_snapshot", "serve_fetch_snapshot"]


def refuse_fetch_snapshot(core: Core, m: FetchSnapshotRequest) -> Rejection | None:
    """A snapshot asked of a node that does not lead (after learning a higher epoch)."""
    if m.epoch > core.epoch:
        core.become_unattached(m.epoch)
    core.send(
        FetchSnapshotResponse(
            core.cfg.cluster_id, core.node_id, m.src, core.epoch,
            ErrorCode.NOT_LEADER_OR_FOLLOWER, core.leader_id, None,
        )
    )  # fmt: skip
    return None


def serve_fetch_snapshot(core: Core, m: FetchSnapshotRequest) -> Rejection | None:
    """The leader sends its whole snapshot (the metadata image is small)."""
    if m.epoch > core.epoch:
        return refuse_fetch_snapshot(core, m)
    cid, me = core.cfg.cluster_id, core.node_id
    if m.epoch < core.epoch:
        core.send(
            FetchSnapshotResponse(
                cid, me, m.src, core.epoch, ErrorCode.FENCED_LEADER_EPOCH, me, None
            )
        )
        return core.reject(ErrorCode.FENCED_LEADER_EPOCH, f"stale epoch {m.epoch}")
    if core.leader is not None:
        progress = core.leader.progress.setdefault(m.src, Progress())
        progress.last_fetch_tick = core.leader.ticks
    snapshot = core.log.snapshot()
    error = ErrorCode.NONE if snapshot is not None else ErrorCode.SNAPSHOT_NOT_FOUND
    core.send(FetchSnapshotResponse(cid, me, m.src, core.epoch, error, me, snapshot))
    return None


def on_fetch_snapshot_response(core: Core, m: FetchSnapshotResponse) -> Rejection | None:
    """The leader's snapshot arrived: replace the log with it (unless already covered)."""
    if m.epoch < core.epoch:
        return core.reject(ErrorCode.FENCED_LEADER_EPOCH, f"stale epoch {m.epoch}")
    fetch = core.fetch
    if m.error is not ErrorCode.NONE or m.snapshot is None:
        fetch.want_snapshot = None
        core.on_leader_hint(m.epoch, m.leader_id)
        return None
    core.observe_leader(m.epoch, m.src)
    snapshot = m.snapshot
    fetch.want_snapshot = None
    fetch.pending = False
    fetch.want_fetch = True
    if snapshot.end_offset <= core.high_watermark:
        return None  # we already have (committed) all of it
    core.log.install_snapshot(snapshot)
    core.snapshot_to_apply = snapshot
    core.high_watermark = snapshot.end_offset
    core.applied_end = max(core.applied_end, snapshot.end_offset)
    return None
