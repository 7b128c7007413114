"""The fetcher side of replication: followers and observers pulling from the leader.

A follower (voter) or observer (non-voter) sends ``FetchRequest(fetch_offset = log end
offset, last_fetched_epoch, high_watermark, max_wait_ticks)``, one at a time (and so does
a pre-candidate, to the leader it followed: KIP-996); it is built at
``ready()`` time so that its offset describes the log that Ready persists. The answer brings
entries and the high watermark, a diverging epoch to truncate at (KIP-320), or a snapshot id
to fetch instead (KIP-630). After an answer that brought something the next fetch goes at
once, and so does the next after an empty answer to a fetch sent before the last tick (the
leader held it: an idle follower wakes once per long poll, not again for a tick); after an
empty answer within the tick its fetch went out (a leader that does not hold fetches) or
an error, on the next tick -- so a leader that answers at once is fetched from at most
twice a tick, never in a loop. A fetch unanswered ``fetch_timeout_ticks`` after its
wait is sent again. An observer that does not know the leader asks a voter chosen with the
injected random generator.
"""

from __future__ import annotations

from controller.raft._node_state import NodeState
from controller.raft.errors import RaftInvariantError
from controller.raft.messages import (
    BeginQuorumEpoch,
    BeginQuorumEpochResponse,
    ErrorCode,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
)
from controller.raft.quorum_state import Role
from controller.raft.ready import Rejection

__all__ = ["Fetcher"]


class Fetcher(NodeState):
    """Fetch scheduling and the handling of the leader's announcements and answers."""

    def _tick_observer(self) -> None:
        self._election_elapsed += 1
        if self._election_elapsed >= self._cfg.election_timeout_ticks:
            self._election_elapsed = 0
            if self.leader_id is not None:
                self._quorum.transition_to_observer(self.epoch, None)
            self._observer_target = None
            self._fetch_pending = False
        self._tick_fetch()

    def _tick_fetch(self) -> None:
        self._fetch_age += 1
        patience = self._cfg.fetch_max_wait_ticks + self._cfg.fetch_timeout_ticks
        if self._fetch_pending and self._fetch_age < patience:
            return
        if self._fetch_pending and self.leader_id is None:
            self._observer_target = None  # that voter did not answer: an observer asks another
        self._fetch_pending = False
        self._want_fetch = True

    def _fetch_ticks_until_due(self) -> int:
        """The first of the coming ticks at which :meth:`_tick_fetch` may act (>= 1).

        Only a pending fetch waits: it is sent again once its patience runs out.
        """
        if not self._fetch_pending:
            return 1
        patience = self._cfg.fetch_max_wait_ticks + self._cfg.fetch_timeout_ticks
        return max(1, patience - self._fetch_age)

    def _prospective_target(self) -> int | None:
        """KIP-996: the leader a pre-candidate that timed out under it keeps fetching from.

        Otherwise one slow answer would cost that leader a voter, and with one voter down
        its quorum (check-quorum), while a majority still follows it. ``None`` unless this
        node is a pre-candidate in the epoch it followed that leader in.
        """
        prospective = self._prospective_leader
        if self.role is Role.PRE_CANDIDATE and prospective is not None:
            epoch, leader = prospective
            if epoch == self.epoch:
                return leader
        return None

    def _fetches_as_prospective(self) -> bool:
        return self._prospective_target() is not None

    def _fetch_due(self) -> bool:
        return self._want_fetch and (
            self.role in (Role.FOLLOWER, Role.OBSERVER) or self._fetches_as_prospective()
        )

    def _fetch_target(self) -> int:
        if self.leader_id is not None:
            return self.leader_id
        prospective = self._prospective_target()
        if prospective is not None:
            return prospective
        if self._observer_target is None:
            self._observer_target = self._rng.choice(sorted(self._cfg.voters))
        return self._observer_target

    def _emit_fetch(self) -> None:
        # Fetches are built here, at ready() time, so their fetch offset describes exactly
        # the log this Ready persists: the leader counts it as an acknowledgement.
        if not self._fetch_due():
            self._want_fetch = False
            return
        target = self._fetch_target()
        cid, me, epoch = self._cfg.cluster_id, self.node_id, self.epoch
        if self._want_snapshot is not None:
            self._send(FetchSnapshotRequest(cid, me, target, epoch, self._want_snapshot))
        else:
            leo, last_epoch, hw = (
                self._log.log_end_offset,
                self._log.last_epoch,
                self._high_watermark,
            )
            wait = self._cfg.fetch_max_wait_ticks
            self._send(FetchRequest(cid, me, target, epoch, leo, last_epoch, hw, wait))
        self._want_fetch = False
        self._fetch_pending = True
        self._fetch_age = 0

    def _on_begin_quorum_epoch(self, m: BeginQuorumEpoch) -> Rejection | None:
        if m.src not in self._cfg.voters or m.src == self.node_id:
            return self._reject(ErrorCode.INVALID_REQUEST, f"BeginQuorumEpoch from {m.src}")
        if m.epoch < self.epoch:
            # Tell the stale leader: a voter stuck in a later epoch (it campaigned and lost)
            # refuses every pre-vote of ours and could otherwise never rejoin.
            self._send(
                BeginQuorumEpochResponse(
                    self._cfg.cluster_id, self.node_id, m.src, self.epoch,
                    ErrorCode.FENCED_LEADER_EPOCH, self.leader_id,
                )
            )  # fmt: skip
            return self._reject(ErrorCode.FENCED_LEADER_EPOCH, f"stale epoch {m.epoch}")
        self._observe_leader(m.epoch, m.src)
        return None

    def _on_fetch_response(self, m: FetchResponse) -> Rejection | None:
        if m.error is not ErrorCode.NONE:
            if m.epoch < self.epoch:
                return self._reject(ErrorCode.FENCED_LEADER_EPOCH, f"stale epoch {m.epoch}")
            self._on_leader_hint(m.epoch, m.leader_id)
            return None
        if m.epoch < self.epoch:
            return self._reject(ErrorCode.FENCED_LEADER_EPOCH, f"stale epoch {m.epoch}")
        self._observe_leader(m.epoch, m.src)
        log = self._log
        if m.fetch_offset != log.log_end_offset or m.last_fetched_epoch != log.last_epoch:
            return None  # answers a fetch our log has moved past (duplicate or late)
        self._fetch_pending = False
        if m.snapshot_id is not None:
            self._want_snapshot = m.snapshot_id  # fetched (and retried) instead of entries
            self._want_fetch = True
            return None
        if m.diverging_end_offset is not None and m.diverging_epoch is not None:
            self._truncate_diverging(m.diverging_epoch, m.diverging_end_offset)
            return None
        if m.entries:
            log.append(m.entries)
            self._want_fetch = True  # there may be more: keep pulling
        elif self._fetch_age > 0:
            self._want_fetch = True  # held across a tick: the long poll ended, poll again
        matched_end = m.fetch_offset + len(m.entries)
        high_watermark = max(self._high_watermark, min(m.high_watermark, matched_end))
        if high_watermark > self._high_watermark:
            self._high_watermark = high_watermark
            self._want_fetch = True  # the next fetch waits for news past this one
        return None

    def _truncate_diverging(self, epoch: int, end_offset: int) -> None:
        """KIP-320: cut our log where it stops agreeing with the leader's."""
        log = self._log
        ours = log.end_offset_for_epoch(epoch)
        own_end = ours[1] if ours is not None else log.log_start_offset
        target = min(end_offset, own_end)
        if target < self._high_watermark:
            raise RaftInvariantError(
                f"node={self.node_id} asked to truncate to {target} below high watermark "
                f"{self._high_watermark}: committed entries would be lost"
            )
        if target >= log.log_end_offset:
            raise RaftInvariantError(
                f"node={self.node_id} diverging epoch={epoch} end={end_offset} does not shorten "
                f"the log (end {log.log_end_offset}): fetching would never converge"
            )
        log.truncate_to(target)
        self._want_fetch = True
