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
injected random generator. The fetcher's fields live in
:class:`~controller.raft._state.FetchState`; these are functions of the core.
"""

from __future__ import annotations

from controller.raft._core import Core
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

__all__ = [
    "emit_fetch",
    "fetch_due",
    "fetch_ticks_until_due",
    "fetches_as_prospective",
    "on_begin_quorum_epoch",
    "on_fetch_response",
    "tick_fetch",
    "tick_observer",
]


def tick_observer(core: Core) -> None:
    """One tick as observer: forget a silent leader, then the fetch timer."""
    core.timer.elapsed += 1
    if core.timer.elapsed >= core.cfg.election_timeout_ticks:
        core.timer.elapsed = 0
        if core.leader_id is not None:
            core.forget_leader()
        core.fetch.observer_target = None
        core.fetch.pending = False
    tick_fetch(core)


def tick_fetch(core: Core) -> None:
    """Age the pending fetch; send again once its patience has run out."""
    fetch = core.fetch
    fetch.age += 1
    patience = core.cfg.fetch_max_wait_ticks + core.cfg.fetch_timeout_ticks
    if fetch.pending and fetch.age < patience:
        return
    if fetch.pending and core.leader_id is None:
        fetch.observer_target = None  # that voter did not answer: an observer asks another
    fetch.pending = False
    fetch.want_fetch = True


def fetch_ticks_until_due(core: Core) -> int:
    """The first of the coming ticks at which :func:`tick_fetch` may act (>= 1).

    Only a pending fetch waits: it is sent again once its patience runs out.
    """
    if not core.fetch.pending:
        return 1
    patience = core.cfg.fetch_max_wait_ticks + core.cfg.fetch_timeout_ticks
    return max(1, patience - core.fetch.age)


def _prospective_target(core: Core) -> int | None:
    """KIP-996: the leader a pre-candidate that timed out under it keeps fetching from.

    Otherwise one slow answer would cost that leader a voter, and with one voter down
    its quorum (check-quorum), while a majority still follows it. ``None`` unless this
    node is a pre-candidate in the epoch it followed that leader in.
    """
    candidacy = core.candidacy
    if core.role is Role.PRE_CANDIDATE and candidacy is not None:
        prospective = candidacy.prospective_leader
        if prospective is not None and prospective[0] == core.epoch:
            return prospective[1]
    return None


def fetches_as_prospective(core: Core) -> bool:
    """Whether this pre-candidate keeps fetching from the leader it followed."""
    return _prospective_target(core) is not None


def fetch_due(core: Core) -> bool:
    """Whether the next ``ready()`` sends a fetch."""
    return core.fetch.want_fetch and (
        core.role in (Role.FOLLOWER, Role.OBSERVER) or fetches_as_prospective(core)
    )


def _fetch_target(core: Core) -> int:
    if core.leader_id is not None:
        return core.leader_id
    prospective = _prospective_target(core)
    if prospective is not None:
        return prospective
    if core.fetch.observer_target is None:
        core.fetch.observer_target = core.rng.choice(sorted(core.cfg.voters))
    return core.fetch.observer_target


def emit_fetch(core: Core) -> None:
    """Send the fetch that is due, if any (called at ``ready()`` time)."""
    # Fetches are built here, at ready() time, so their fetch offset describes exactly
    # the log this Ready persists: the leader counts it as an acknowledgement.
    fetch = core.fetch
    if not fetch_due(core):
        fetch.want_fetch = False
        return
    target = _fetch_target(core)
    cid, me, epoch = core.cfg.cluster_id, core.node_id, core.epoch
    if fetch.want_snapshot is not None:
        core.send(FetchSnapshotRequest(cid, me, target, epoch, fetch.want_snapshot))
    else:
        leo, last_epoch, hw = core.log.log_end_offset, core.log.last_epoch, core.high_watermark
        wait = core.cfg.fetch_max_wait_ticks
        core.send(FetchRequest(cid, me, target, epoch, leo, last_epoch, hw, wait))
    fetch.want_fetch = False
    fetch.pending = True
    fetch.age = 0


def on_begin_quorum_epoch(core: Core, m: BeginQuorumEpoch) -> Rejection | None:
    """A leader announces its epoch: follow it (or tell a stale one of ours)."""
    if m.src not in core.cfg.voters or m.src == core.node_id:
        return core.reject(ErrorCode.INVALID_REQUEST, f"BeginQuorumEpoch from {m.src}")
    if m.epoch < core.epoch:
        # Tell the stale leader: a voter stuck in a later epoch (it campaigned and lost)
        # refuses every pre-vote of ours and could otherwise never rejoin.
        core.send(
            BeginQuorumEpochResponse(
                core.cfg.cluster_id, core.node_id, m.src, core.epoch,
                ErrorCode.FENCED_LEADER_EPOCH, core.leader_id,
            )
        )  # fmt: skip
        return core.reject(ErrorCode.FENCED_LEADER_EPOCH, f"stale epoch {m.epoch}")
    core.observe_leader(m.epoch, m.src)
    return None


def on_fetch_response(core: Core, m: FetchResponse) -> Rejection | None:
    """The leader's (or a non-leader's) answer to our fetch."""
    if m.error is not ErrorCode.NONE:
        if m.epoch < core.epoch:
            return core.reject(ErrorCode.FENCED_LEADER_EPOCH, f"stale epoch {m.epoch}")
        core.on_leader_hint(m.epoch, m.leader_id)
        return None
    if m.epoch < core.epoch:
        return core.reject(ErrorCode.FENCED_LEADER_EPOCH, f"stale epoch {m.epoch}")
    core.observe_leader(m.epoch, m.src)
    log, fetch = core.log, core.fetch
    if m.fetch_offset != log.log_end_offset or m.last_fetched_epoch != log.last_epoch:
        return None  # answers a fetch our log has moved past (duplicate or late)
    fetch.pending = False
    if m.snapshot_id is not None:
        fetch.want_snapshot = m.snapshot_id  # fetched (and retried) instead of entries
        fetch.want_fetch = True
        return None
    if m.diverging_end_offset is not None and m.diverging_epoch is not None:
        _truncate_diverging(core, m.diverging_epoch, m.diverging_end_offset)
        return None
    if m.entries:
        log.append(m.entries)
        fetch.want_fetch = True  # there may be more: keep pulling
    elif fetch.age > 0:
        fetch.want_fetch = True  # held across a tick: the long poll ended, poll again
    matched_end = m.fetch_offset + len(m.entries)
    high_watermark = max(core.high_watermark, min(m.high_watermark, matched_end))
    if high_watermark > core.high_watermark:
        core.high_watermark = high_watermark
        fetch.want_fetch = True  # the next fetch waits for news past this one
    return None


def _truncate_diverging(core: Core, epoch: int, end_offset: int) -> None:
    """KIP-320: cut our log where it stops agreeing with the leader's."""
    log = core.log
    ours = log.end_offset_for_epoch(epoch)
    own_end = ours[1] if ours is not None else log.log_start_offset
    target = min(end_offset, own_end)
    if target < core.high_watermark:
        raise RaftInvariantError(
            f"node={core.node_id} asked to truncate to {target} below high watermark "
            f"{core.high_watermark}: committed entries would be lost"
        )
    if target >= log.log_end_offset:
        raise RaftInvariantError(
            f"node={core.node_id} diverging epoch={epoch} end={end_offset} does not shorten "
            f"the log (end {log.log_end_offset}): fetching would never converge"
        )
    log.truncate_to(target)
    core.fetch.want_fetch = True
