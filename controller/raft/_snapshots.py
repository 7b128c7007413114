"""Snapshot transfer: ``FetchSnapshot`` from both sides (KIP-630).

A fetcher whose fetch offset lies below the leader's log start is told the leader's
snapshot id and asks for it; the leader answers with the whole snapshot (one message: the
metadata image is small). The fetcher replaces its log with it and hands the image to the
application through the next ``Ready``. Taking a local snapshot is
:meth:`RaftNode.create_snapshot <controller.raft.node.RaftNode.create_snapshot>`.
"""

from __future__ import annotations

from controller.raft._leader import Progress
from controller.raft._node_state import NodeState
from controller.raft.messages import (
    ErrorCode,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
)
from controller.raft.quorum_state import Role
from controller.raft.ready import Rejection

__all__ = ["SnapshotTransfer"]


class SnapshotTransfer(NodeState):
    """Serving the snapshot (leader) and installing it (fetcher)."""

    def _on_fetch_snapshot_request(self, m: FetchSnapshotRequest) -> Rejection | None:
        if m.epoch > self.epoch:
            self._become_unattached(m.epoch)
        cid, me = self._cfg.cluster_id, self.node_id
        if self.role is not Role.LEADER:
            self._send(
                FetchSnapshotResponse(
                    cid,
                    me,
                    m.src,
                    self.epoch,
                    ErrorCode.NOT_LEADER_OR_FOLLOWER,
                    self.leader_id,
                    None,
                )
            )
            return None
        if m.epoch < self.epoch:
            self._send(
                FetchSnapshotResponse(
                    cid, me, m.src, self.epoch, ErrorCode.FENCED_LEADER_EPOCH, me, None
                )
            )
            return self._reject(ErrorCode.FENCED_LEADER_EPOCH, f"stale epoch {m.epoch}")
        if self._leader is not None:
            progress = self._leader.progress.setdefault(m.src, Progress())
            progress.last_fetch_tick = self._leader.ticks
        snapshot = self._log.snapshot()
        error = ErrorCode.NONE if snapshot is not None else ErrorCode.SNAPSHOT_NOT_FOUND
        self._send(FetchSnapshotResponse(cid, me, m.src, self.epoch, error, me, snapshot))
        return None

    def _on_fetch_snapshot_response(self, m: FetchSnapshotResponse) -> Rejection | None:
        if m.epoch < self.epoch:
            return self._reject(ErrorCode.FENCED_LEADER_EPOCH, f"stale epoch {m.epoch}")
        if m.error is not ErrorCode.NONE or m.snapshot is None:
            self._want_snapshot = None
            self._on_leader_hint(m.epoch, m.leader_id)
            return None
        self._observe_leader(m.epoch, m.src)
        snapshot = m.snapshot
        self._want_snapshot = None
        self._fetch_pending = False
        self._want_fetch = True
        if snapshot.end_offset <= self._high_watermark:
            return None  # we already have (committed) all of it
        self._log.install_snapshot(snapshot)
        self._snapshot_to_apply = snapshot
        self._high_watermark = snapshot.end_offset
        self._applied_end = max(self._applied_end, snapshot.end_offset)
        return None
