"""Per-role behaviour: which function handles each message and each tick, by role.

etcd swaps ``stepLeader``/``stepCandidate``/``stepFollower`` (and its tick functions) on
every role change; here the role picks a table. Roles differ where the protocol makes
them differ: only the leader serves fetches and snapshots (every other role answers
``NOT_LEADER_OR_FOLLOWER``), an observer takes no part in elections, and each role ticks
its own timers. The handlers themselves live with their concern (``_election``,
``_leader``, ``_fetcher``, ``_snapshots``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from controller.raft._core import Core
from controller.raft._election import (
    on_vote_request,
    on_vote_response,
    refuse_vote_request,
    refuse_vote_response,
    start_election,
)
from controller.raft._fetcher import (
    fetch_ticks_until_due,
    fetches_as_prospective,
    on_begin_quorum_epoch,
    on_fetch_response,
    tick_fetch,
    tick_observer,
)
from controller.raft._leader import (
    leader_ticks_until_due,
    on_begin_quorum_epoch_response,
    refuse_fetch_request,
    serve_fetch_request,
    tick_leader,
)
from controller.raft._snapshots import (
    on_fetch_snapshot_response,
    refuse_fetch_snapshot,
    serve_fetch_snapshot,
)
from controller.raft.messages import (
    BeginQuorumEpoch,
    BeginQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    VoteRequest,
    VoteResponse,
)
from controller.raft.quorum_state import Role
from controller.raft.ready import Rejection

__all__ = ["HANDLERS", "TICKS", "TICKS_UNTIL_DUE", "Handler"]

#: A message handler; ``Any`` because each table entry takes its own message type.
Handler = Callable[[Core, Any], Rejection | None]

_FOLLOWER_STEP: dict[type, Handler] = {
    FetchRequest: refuse_fetch_request,
    FetchResponse: on_fetch_response,
    VoteRequest: on_vote_request,
    VoteResponse: on_vote_response,
    BeginQuorumEpoch: on_begin_quorum_epoch,
    BeginQuorumEpochResponse: on_begin_quorum_epoch_response,
    FetchSnapshotRequest: refuse_fetch_snapshot,
    FetchSnapshotResponse: on_fetch_snapshot_response,
}
_LEADER_STEP: dict[type, Handler] = {
    **_FOLLOWER_STEP,
    FetchRequest: serve_fetch_request,
    FetchSnapshotRequest: serve_fetch_snapshot,
}
_OBSERVER_STEP: dict[type, Handler] = {
    **_FOLLOWER_STEP,
    VoteRequest: refuse_vote_request,
    VoteResponse: refuse_vote_response,
}

#: The step table of each role (Unattached, pre-candidates and candidates step like a
#: follower: what differs between them is decided by the election state inside).
HANDLERS: Mapping[Role, dict[type, Handler]] = {
    Role.LEADER: _LEADER_STEP,
    Role.FOLLOWER: _FOLLOWER_STEP,
    Role.UNATTACHED: _FOLLOWER_STEP,
    Role.PRE_CANDIDATE: _FOLLOWER_STEP,
    Role.CANDIDATE: _FOLLOWER_STEP,
    Role.OBSERVER: _OBSERVER_STEP,
}


def _tick_voter(core: Core) -> None:
    """A voter that does not lead: fetch (if following) and campaign on timeout."""
    core.timer.elapsed += 1
    if core.role is Role.FOLLOWER or fetches_as_prospective(core):
        tick_fetch(core)
    if core.timer.expired:
        start_election(core)


def _voter_ticks_until_due(core: Core) -> int:
    due = core.timer.timeout - core.timer.elapsed
    if core.role is Role.FOLLOWER or fetches_as_prospective(core):
        due = min(due, fetch_ticks_until_due(core))
    return max(1, due)


def _observer_ticks_until_due(core: Core) -> int:
    due = core.cfg.election_timeout_ticks - core.timer.elapsed
    return max(1, min(due, fetch_ticks_until_due(core)))


#: The tick function of each role.
TICKS: Mapping[Role, Callable[[Core], None]] = {
    Role.LEADER: tick_leader,
    Role.FOLLOWER: _tick_voter,
    Role.UNATTACHED: _tick_voter,
    Role.PRE_CANDIDATE: _tick_voter,
    Role.CANDIDATE: _tick_voter,
    Role.OBSERVER: tick_observer,
}

#: How many ticks from now the first one is that may act, by role (see ``ticks_until_due``).
TICKS_UNTIL_DUE: Mapping[Role, Callable[[Core], int]] = {
    Role.LEADER: leader_ticks_until_due,
    Role.FOLLOWER: _voter_ticks_until_due,
    Role.UNATTACHED: _voter_ticks_until_due,
    Role.PRE_CANDIDATE: _voter_ticks_until_due,
    Role.CANDIDATE: _voter_ticks_until_due,
    Role.OBSERVER: _observer_ticks_until_due,
}
