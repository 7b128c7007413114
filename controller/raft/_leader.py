"""The leader side of replication: fetch answers, the high watermark, check-quorum.

A voter's fetch offset, once validated against the leader's log, is its acknowledgement;
the high watermark is the largest offset a majority of voters reached that also covers an
entry of the leader's epoch (Raft section 5.4.2). A fetch that does not match the log is
answered with the diverging epoch (KIP-320) or, below the log start, with the snapshot id
(KIP-630). The leader repeats ``BeginQuorumEpoch`` to silent voters and resigns when a
majority stops fetching (check-quorum). The leader's state for its epoch
(:class:`~controller.raft._state.LeaderState`) lives only while the core is the leader;
the rest is functions of the core.

Long poll (KRaft's fetch purgatory): a fetch that finds nothing new -- no entry past its
offset, no high watermark above the fetcher's -- is held for up to its ``max_wait_ticks``
(capped by ours) and answered, at ``ready()`` time, as soon as the log or the high
watermark moves, when the wait runs out, or with an error when leadership is lost. A held
fetch is a fetcher waiting on us: it counts as heard from every tick it is held.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from controller.raft._state import HeldFetch, LeaderState, Progress
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

if TYPE_CHECKING:
    from controller.raft._core import Core

__all__ = [
    "answer_held_fetches",
    "fetch_error",
    "held_fetch_due",
    "leader_ticks_until_due",
    "maybe_advance_high_watermark",
    "on_begin_quorum_epoch_response",
    "refuse_fetch_request",
    "serve_fetch_request",
    "tick_leader",
]


def _state(core: Core) -> LeaderState:
    leader = core.leader
    if leader is None:
        raise RaftInvariantError(f"node={core.node_id} is Leader without leader state")
    return leader


def tick_leader(core: Core) -> None:
    """One tick as leader: age held fetches, repeat BeginQuorumEpoch, check the quorum."""
    leader = _state(core)
    cfg = core.cfg
    leader.ticks += 1
    for src, held in core.held_fetches.items():
        held.ticks_left -= 1
        if held.request.epoch == core.epoch:
            leader.progress.setdefault(src, Progress()).last_fetch_tick = leader.ticks
    if leader.ticks % cfg.fetch_timeout_ticks == 0:
        # Voters that have not fetched lately may not know us (lost BeginQuorumEpoch,
        # restarted): tell them again. Cheap, and it is what lets them stop campaigning.
        stale_after = leader.ticks - cfg.fetch_timeout_ticks
        for voter in sorted(cfg.voters):
            if voter == core.node_id:
                continue
            progress = leader.progress.get(voter)
            if progress is None or progress.last_fetch_tick < stale_after:
                core.send(BeginQuorumEpoch(cfg.cluster_id, core.node_id, voter, core.epoch))
    if not cfg.check_quorum:
        return
    # Check-quorum: without a majority fetching from us within the last election
    # timeout we may be cut off while another leader commits; step down so clients go
    # elsewhere (and our lease-based refusal of pre-votes ends).
    heard_after = leader.ticks - cfg.election_timeout_ticks
    if heard_after < 0:
        return
    active = 1 + sum(
        1
        for voter, progress in leader.progress.items()
        if voter in cfg.voters and progress.last_fetch_tick > heard_after
    )
    if active < core.majority:
        core.resign()


def leader_ticks_until_due(core: Core) -> int:
    """The first of the coming ticks at which :func:`tick_leader` may act (>= 1).

    The ticks before it only count: no held fetch runs out, no voter turns stale (for
    ``BeginQuorumEpoch``) or silent (for check-quorum). A held fetch keeps its fetcher
    heard from while it is held, and it runs out first.
    """
    leader = _state(core)
    cfg = core.cfg
    now = leader.ticks
    due = [max(1, held.ticks_left) for held in core.held_fetches.values()]
    held_now = {src for src, held in core.held_fetches.items() if held.request.epoch == core.epoch}
    period = cfg.fetch_timeout_ticks
    silent_at: list[int] = []
    for voter in cfg.voters:
        if voter == core.node_id or voter in held_now:
            continue
        progress = leader.progress.get(voter)
        last = progress.last_fetch_tick if progress is not None else None
        # BeginQuorumEpoch goes at ticks that are multiples of the period, to a voter
        # whose last fetch is more than a period old by then.
        first = 1 if last is None else max(1, last + period - now + 1)
        due.append(first + (-(now + first)) % period)
        if last is not None:
            silent_at.append(max(1, last + cfg.election_timeout_ticks - now))
    if cfg.check_quorum:
        held_voters = len(held_now & (cfg.voters - {core.node_id}))
        due.append(_check_quorum_due(core, now, held_voters, silent_at))
    return min(due)


def _check_quorum_due(core: Core, now: int, held: int, silent_at: list[int]) -> int:
    """The first coming tick at which check-quorum may find fewer than a majority.

    ``silent_at`` holds, per voter not held, the tick from which it no longer counts as
    heard from; held voters (and this node) count until their hold runs out.
    """
    timeout = core.cfg.election_timeout_ticks
    first = max(1, timeout - now)
    for tick in sorted({first, *(t for t in silent_at if t > first)}):
        active = 1 + held + sum(1 for t in silent_at if t > tick)
        if active < core.majority:
            return tick
    return first + timeout  # re-examined well before then


def on_begin_quorum_epoch_response(core: Core, m: BeginQuorumEpochResponse) -> Rejection | None:
    """A voter told a (stale) leader of its later epoch."""
    if m.src not in core.cfg.voters:
        return core.reject(ErrorCode.INVALID_REQUEST, f"BeginQuorumEpoch answer from {m.src}")
    if m.epoch <= core.epoch:
        return None  # nothing new: a late answer
    core.on_leader_hint(m.epoch, m.leader_id)
    return None


def refuse_fetch_request(core: Core, m: FetchRequest) -> Rejection | None:
    """A fetch to a node that does not lead (after learning the fetcher's higher epoch)."""
    if m.epoch > core.epoch:
        core.become_unattached(m.epoch)
    core.send(fetch_error(core, m, ErrorCode.NOT_LEADER_OR_FOLLOWER))
    return None


def serve_fetch_request(core: Core, m: FetchRequest) -> Rejection | None:
    """The leader's answer to a fetch: entries, a diverging epoch, a snapshot id, or hold."""
    if m.epoch > core.epoch:
        return refuse_fetch_request(core, m)
    if m.epoch < core.epoch:
        core.send(fetch_error(core, m, ErrorCode.FENCED_LEADER_EPOCH))
        return core.reject(ErrorCode.FENCED_LEADER_EPOCH, f"fetch at stale epoch {m.epoch}")
    leader = _state(core)
    # A newer fetch supersedes a held one: its sender stopped waiting for that answer.
    core.held_fetches.pop(m.src, None)
    progress = leader.progress.setdefault(m.src, Progress())
    progress.last_fetch_tick = leader.ticks
    log = core.log
    offset, last_epoch = m.fetch_offset, m.last_fetched_epoch
    if offset < log.log_start_offset:
        core.send(_snapshot_pointer(core, m))
        return None
    if offset > log.log_end_offset or log.epoch_at(offset - 1) != last_epoch:
        found = log.end_offset_for_epoch(last_epoch)
        if found is None:
            core.send(_snapshot_pointer(core, m))
            return None
        div_epoch, div_end = found
        cid, me, epoch, hw = core.cfg.cluster_id, core.node_id, core.epoch, core.high_watermark
        core.send(
            FetchResponse(
                cid, me, m.src, epoch, ErrorCode.NONE, me, offset, last_epoch, (), hw,
                div_epoch, min(div_end, offset), None,
            )
        )  # fmt: skip
        return None
    # The fetcher's log matches ours up to ``offset``: that is its acknowledgement.
    progress.end_offset = max(progress.end_offset, offset)
    maybe_advance_high_watermark(core)
    wait = min(m.max_wait_ticks, core.cfg.fetch_max_wait_ticks)
    if wait > 0 and not _has_news_for(core, m):
        core.held_fetches[m.src] = HeldFetch(m, wait)
        return None
    core.send(_entries_answer(core, m))
    return None


def _has_news_for(core: Core, m: FetchRequest) -> bool:
    """Whether a (validated) fetch has entries or a higher high watermark to get."""
    return m.fetch_offset < core.log.log_end_offset or m.high_watermark < core.high_watermark


def _entries_answer(core: Core, m: FetchRequest) -> FetchResponse:
    """The answer to a fetch validated against our log: entries from its offset."""
    offset = m.fetch_offset
    entries = tuple(core.log.entries(offset, offset + core.cfg.max_fetch_entries))
    return FetchResponse(
        core.cfg.cluster_id, core.node_id, m.src, core.epoch, ErrorCode.NONE, core.node_id,
        offset, m.last_fetched_epoch, entries, core.high_watermark, None, None, None,
    )  # fmt: skip


def held_fetch_due(core: Core) -> bool:
    """Whether a held fetch is to be answered now (see :func:`answer_held_fetches`)."""
    return any(_held_fetch_is_due(core, held) for held in core.held_fetches.values())


def _held_fetch_is_due(core: Core, held: HeldFetch) -> bool:
    return (
        core.role is not Role.LEADER
        or held.request.epoch != core.epoch
        or held.ticks_left <= 0
        or _has_news_for(core, held.request)
    )


def answer_held_fetches(core: Core) -> None:
    """Answer the held fetches that are due: at ``ready()`` time, like fetches are sent.

    Entries appended since (ours, not yet durable) go out only after this Ready persists
    them. A fetch held in an epoch we no longer lead is answered with the error a fetch
    to a non-leader gets, which names the new leader when we know it.
    """
    for src in sorted(core.held_fetches):
        held = core.held_fetches[src]
        if not _held_fetch_is_due(core, held):
            continue
        del core.held_fetches[src]
        if core.role is Role.LEADER and held.request.epoch == core.epoch:
            core.send(_entries_answer(core, held.request))
        else:
            core.send(fetch_error(core, held.request, ErrorCode.NOT_LEADER_OR_FOLLOWER))


def _snapshot_pointer(core: Core, m: FetchRequest) -> FetchResponse:
    snapshot_id = core.log.snapshot_id()
    if snapshot_id is None:
        raise RaftInvariantError(f"node={core.node_id} has no snapshot below its log start")
    return FetchResponse(
        core.cfg.cluster_id, core.node_id, m.src, core.epoch, ErrorCode.NONE, core.node_id,
        m.fetch_offset, m.last_fetched_epoch, (), core.high_watermark, None, None,
        snapshot_id,
    )  # fmt: skip


def fetch_error(core: Core, m: FetchRequest, error: ErrorCode) -> FetchResponse:
    """An answer to ``m`` carrying ``error`` (and the leader we know of)."""
    return FetchResponse(
        core.cfg.cluster_id, core.node_id, m.src, core.epoch, error, core.leader_id,
        m.fetch_offset, m.last_fetched_epoch, (), 0, None, None, None,
    )  # fmt: skip


def maybe_advance_high_watermark(core: Core) -> None:
    """Move the leader's high watermark to what a majority of voters has (section 5.4.2)."""
    leader = core.leader
    if leader is None:
        return
    # Our own entries count once persisted: the unstable ones may be lost by a crash.
    ends = [core.log.unstable_offset]
    for voter in core.cfg.voters:
        if voter != core.node_id:
            progress = leader.progress.get(voter)
            ends.append(progress.end_offset if progress is not None else 0)
    ends.sort(reverse=True)
    candidate = ends[core.majority - 1]
    # Only an offset past our epoch's first entry: section 5.4.2, Figure 8.
    if candidate > core.high_watermark and candidate > leader.epoch_start_offset:
        core.high_watermark = candidate
