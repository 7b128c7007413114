"""The leader side of replication: fetch answers, the high watermark, check-quorum.

A voter's fetch offset, once validated against the leader's log, is its acknowledgement;
the high watermark is the largest offset a majority of voters reached that also covers an
entry of the leader's epoch (Raft section 5.4.2). A fetch that does not match the log is
answered with the diverging epoch (KIP-320) or, below the log start, with the snapshot id
(KIP-630). The leader repeats ``BeginQuorumEpoch`` to silent voters and resigns when a
majority stops fetching (check-quorum). :class:`LeaderState` lives only for one epoch.

Long poll (KRaft's fetch purgatory): a fetch that finds nothing new -- no entry past its
offset, no high watermark above the fetcher's -- is held for up to its ``max_wait_ticks``
(capped by ours) and answered, at ``ready()`` time, as soon as the log or the high
watermark moves, when the wait runs out, or with an error when leadership is lost. A held
fetch is a fetcher waiting on us: it counts as heard from every tick it is held.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from controller.raft._node_state import NodeState
from controller.raft.errors import RaftInvariantError
from controller.raft.messages import (
    BeginQuorumEpoch,
    BeginQuorumEpochResponse,
    ErrorCode,
    FetchRequest,
    FetchResponse,
)
from controller.raft.quorum_state import Role
from controller.raft.ready import Rejection

__all__ = ["HeldFetch", "Leader", "LeaderState", "Progress"]


@dataclass(slots=True)
class Progress:
    """The leader's knowledge of one fetcher in the current epoch."""

    end_offset: int = 0
    #: The last tick the fetcher was heard from: it fetched, or a fetch of it was held.
    last_fetch_tick: int = -1


@dataclass(slots=True)
class HeldFetch:
    """A fetch the leader holds until there is something new for it (long poll)."""

    request: FetchRequest
    #: Ticks left before it is answered anyway (empty).
    ticks_left: int


@dataclass(slots=True)
class LeaderState:
    """State a leader keeps for its epoch only (Kafka's ``LeaderState``)."""

    epoch_start_offset: int
    progress: dict[int, Progress] = field(default_factory=dict)
    #: Ticks since this node became leader (the clock of ``last_fetch_tick``).
    ticks: int = 0


class Leader(NodeState):
    """What a leader does each tick and for each fetch (Kafka's ``LeaderState`` handling)."""

    def _tick_leader(self) -> None:
        leader = self._leader
        if leader is None:
            raise RaftInvariantError(f"node={self.node_id} is Leader without leader state")
        leader.ticks += 1
        for src, held in self._held_fetches.items():
            held.ticks_left -= 1
            if held.request.epoch == self.epoch:
                leader.progress.setdefault(src, Progress()).last_fetch_tick = leader.ticks
        if leader.ticks % self._cfg.fetch_timeout_ticks == 0:
            # Voters that have not fetched lately may not know us (lost BeginQuorumEpoch,
            # restarted): tell them again. Cheap, and it is what lets them stop campaigning.
            stale_after = leader.ticks - self._cfg.fetch_timeout_ticks
            for voter in sorted(self._cfg.voters):
                if voter == self.node_id:
                    continue
                progress = leader.progress.get(voter)
                if progress is None or progress.last_fetch_tick < stale_after:
                    self._send(
                        BeginQuorumEpoch(self._cfg.cluster_id, self.node_id, voter, self.epoch)
                    )
        if not self._cfg.check_quorum:
            return
        # Check-quorum: without a majority fetching from us within the last election
        # timeout we may be cut off while another leader commits; step down so clients go
        # elsewhere (and our lease-based refusal of pre-votes ends).
        heard_after = leader.ticks - self._cfg.election_timeout_ticks
        if heard_after < 0:
            return
        active = 1 + sum(
            1
            for voter, progress in leader.progress.items()
            if voter in self._cfg.voters and progress.last_fetch_tick > heard_after
        )
        if active < self._majority:
            self._leader = None
            self._quorum.transition_to_unattached(self.epoch)
            self._reset_election_timer()

    def _leader_ticks_until_due(self) -> int:
        """The first of the coming ticks at which :meth:`_tick_leader` may act (>= 1).

        The ticks before it only count: no held fetch runs out, no voter turns stale (for
        ``BeginQuorumEpoch``) or silent (for check-quorum). A held fetch keeps its fetcher
        heard from while it is held, and it runs out first.
        """
        leader = self._leader
        if leader is None:
            raise RaftInvariantError(f"node={self.node_id} is Leader without leader state")
        now = leader.ticks
        due = [max(1, held.ticks_left) for held in self._held_fetches.values()]
        held_now = {
            src for src, held in self._held_fetches.items() if held.request.epoch == self.epoch
        }
        period = self._cfg.fetch_timeout_ticks
        silent_at: list[int] = []
        for voter in self._cfg.voters:
            if voter == self.node_id or voter in held_now:
                continue
            progress = leader.progress.get(voter)
            last = progress.last_fetch_tick if progress is not None else None
            # BeginQuorumEpoch goes at ticks that are multiples of the period, to a voter
            # whose last fetch is more than a period old by then.
            first = 1 if last is None else max(1, last + period - now + 1)
            due.append(first + (-(now + first)) % period)
            if last is not None:
                silent_at.append(max(1, last + self._cfg.election_timeout_ticks - now))
        if self._cfg.check_quorum:
            held_voters = len(held_now & (self._cfg.voters - {self.node_id}))
            due.append(self._check_quorum_due(now, held_voters, silent_at))
        return min(due)

    def _check_quorum_due(self, now: int, held: int, silent_at: list[int]) -> int:
        """The first coming tick at which check-quorum may find fewer than a majority.

        ``silent_at`` holds, per voter not held, the tick from which it no longer counts as
        heard from; held voters (and this node) count until their hold runs out.
        """
        first = max(1, self._cfg.election_timeout_ticks - now)
        for tick in sorted({first, *(t for t in silent_at if t > first)}):
            active = 1 + held + sum(1 for t in silent_at if t > tick)
            if active < self._majority:
                return tick
        return first + self._cfg.election_timeout_ticks  # re-examined well before then

    def _on_begin_quorum_epoch_response(self, m: BeginQuorumEpochResponse) -> Rejection | None:
        if m.src not in self._cfg.voters:
            return self._reject(ErrorCode.INVALID_REQUEST, f"BeginQuorumEpoch answer from {m.src}")
        if m.epoch <= self.epoch:
            return None  # nothing new: a late answer
        self._on_leader_hint(m.epoch, m.leader_id)
        return None

    def _on_fetch_request(self, m: FetchRequest) -> Rejection | None:
        if m.epoch > self.epoch:
            self._become_unattached(m.epoch)
        if self.role is not Role.LEADER:
            self._send(self._fetch_error(m, ErrorCode.NOT_LEADER_OR_FOLLOWER))
            return None
        if m.epoch < self.epoch:
            self._send(self._fetch_error(m, ErrorCode.FENCED_LEADER_EPOCH))
            return self._reject(ErrorCode.FENCED_LEADER_EPOCH, f"fetch at stale epoch {m.epoch}")
        leader = self._leader
        if leader is None:
            raise RaftInvariantError(f"node={self.node_id} is Leader without leader state")
        # A newer fetch supersedes a held one: its sender stopped waiting for that answer.
        self._held_fetches.pop(m.src, None)
        progress = leader.progress.setdefault(m.src, Progress())
        progress.last_fetch_tick = leader.ticks
        log = self._log
        offset, last_epoch = m.fetch_offset, m.last_fetched_epoch
        cid, me, epoch, hw = self._cfg.cluster_id, self.node_id, self.epoch, self._high_watermark
        if offset < log.log_start_offset:
            self._send(self._snapshot_pointer(m))
            return None
        if offset > log.log_end_offset or log.epoch_at(offset - 1) != last_epoch:
            found = log.end_offset_for_epoch(last_epoch)
            if found is None:
                self._send(self._snapshot_pointer(m))
                return None
            div_epoch, div_end = found
            self._send(
                FetchResponse(
                    cid, me, m.src, epoch, ErrorCode.NONE, me, offset, last_epoch, (), hw,
                    div_epoch, min(div_end, offset), None,
                )
            )  # fmt: skip
            return None
        # The fetcher's log matches ours up to ``offset``: that is its acknowledgement.
        progress.end_offset = max(progress.end_offset, offset)
        self._maybe_advance_high_watermark()
        wait = min(m.max_wait_ticks, self._cfg.fetch_max_wait_ticks)
        if wait > 0 and not self._has_news_for(m):
            self._held_fetches[m.src] = HeldFetch(m, wait)
            return None
        self._send(self._entries_answer(m))
        return None

    def _has_news_for(self, m: FetchRequest) -> bool:
        """Whether a (validated) fetch has entries or a higher high watermark to get."""
        return m.fetch_offset < self._log.log_end_offset or m.high_watermark < self._high_watermark

    def _entries_answer(self, m: FetchRequest) -> FetchResponse:
        """The answer to a fetch validated against our log: entries from its offset."""
        offset = m.fetch_offset
        entries = tuple(self._log.entries(offset, offset + self._cfg.max_fetch_entries))
        return FetchResponse(
            self._cfg.cluster_id, self.node_id, m.src, self.epoch, ErrorCode.NONE, self.node_id,
            offset, m.last_fetched_epoch, entries, self._high_watermark, None, None, None,
        )  # fmt: skip

    def _held_fetch_due(self) -> bool:
        """Whether a held fetch is to be answered now (see :meth:`_answer_held_fetches`)."""
        return any(self._held_fetch_is_due(held) for held in self._held_fetches.values())

    def _held_fetch_is_due(self, held: HeldFetch) -> bool:
        return (
            self.role is not Role.LEADER
            or held.request.epoch != self.epoch
            or held.ticks_left <= 0
            or self._has_news_for(held.request)
        )

    def _answer_held_fetches(self) -> None:
        """Answer the held fetches that are due: at ``ready()`` time, like fetches are sent.

        Entries appended since (ours, not yet durable) go out only after this Ready persists
        them. A fetch held in an epoch we no longer lead is answered with the error a fetch
        to a non-leader gets, which names the new leader when we know it.
        """
        for src in sorted(self._held_fetches):
            held = self._held_fetches[src]
            if not self._held_fetch_is_due(held):
                continue
            del self._held_fetches[src]
            if self.role is Role.LEADER and held.request.epoch == self.epoch:
                self._send(self._entries_answer(held.request))
            else:
                self._send(self._fetch_error(held.request, ErrorCode.NOT_LEADER_OR_FOLLOWER))

    def _snapshot_pointer(self, m: FetchRequest) -> FetchResponse:
        snapshot_id = self._log.snapshot_id()
        if snapshot_id is None:
            raise RaftInvariantError(f"node={self.node_id} has no snapshot below its log start")
        return FetchResponse(
            self._cfg.cluster_id, self.node_id, m.src, self.epoch, ErrorCode.NONE, self.node_id,
            m.fetch_offset, m.last_fetched_epoch, (), self._high_watermark, None, None,
            snapshot_id,
        )  # fmt: skip

    def _fetch_error(self, m: FetchRequest, error: ErrorCode) -> FetchResponse:
        return FetchResponse(
            self._cfg.cluster_id, self.node_id, m.src, self.epoch, error, self.leader_id,
            m.fetch_offset, m.last_fetched_epoch, (), 0, None, None, None,
        )  # fmt: skip

    def _maybe_advance_high_watermark(self) -> None:
        leader = self._leader
        if leader is None:
            return
        # Our own entries count once persisted: the unstable ones may be lost by a crash.
        ends = [self._log.unstable_offset]
        for voter in self._cfg.voters:
            if voter != self.node_id:
                progress = leader.progress.get(voter)
                ends.append(progress.end_offset if progress is not None else 0)
        ends.sort(reverse=True)
        candidate = ends[self._majority - 1]
        # Only an offset past our epoch's first entry: section 5.4.2, Figure 8.
        if candidate > self._high_watermark and candidate > leader.epoch_start_offset:
            self._high_watermark = candidate
