"""What must hold of a node between any two of its inputs; a broken rule halts it.

:meth:`RaftNode.check_invariants <controller.raft.node.RaftNode.check_invariants>` runs
these. They read the state only (and remember the last epoch, vote and high watermark to
see them move), so calling them after every step changes nothing about the run.
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.raft._core import Core
from controller.raft._state import LeaderState
from controller.raft.errors import RaftInvariantError
from controller.raft.quorum_state import Role

__all__ = ["InvariantMemory", "check_invariants"]

_CANDIDATES = (Role.PRE_CANDIDATE, Role.CANDIDATE)


@dataclass(slots=True)
class InvariantMemory:
    """What the previous check saw: epochs, votes and the high watermark only move on."""

    epoch: int
    voted_for: int | None
    high_watermark: int


def check_invariants(core: Core, memory: InvariantMemory) -> None:
    """Raise :class:`RaftInvariantError` if a rule is broken; then update ``memory``."""
    _check_offsets(core)
    _check_election_state(core, memory)
    _check_role_objects(core)
    if core.leader is not None:
        _check_leader(core, core.leader)
    memory.epoch, memory.voted_for = core.epoch, core.voted_for
    memory.high_watermark = core.high_watermark


def _fail(core: Core, what: str) -> None:
    raise RaftInvariantError(
        f"node={core.node_id} role={core.role.value} epoch={core.epoch}: {what}"
    )


def _check_offsets(core: Core) -> None:
    log = core.log
    start, end = log.log_start_offset, log.log_end_offset
    if not start <= log.unstable_offset <= end:
        _fail(core, f"log start {start} <= unstable {log.unstable_offset} <= end {end} broken")
    # The commit index never passes the log end; nothing uncommitted is ever applied.
    if not core.applied_end <= core.high_watermark <= end:
        _fail(
            core,
            f"applied {core.applied_end} <= high watermark {core.high_watermark} "
            f"<= log end {end} broken",
        )


def _check_election_state(core: Core, memory: InvariantMemory) -> None:
    if core.epoch < memory.epoch:
        _fail(core, f"epoch went back from {memory.epoch}")
    same_epoch = core.epoch == memory.epoch
    if same_epoch and memory.voted_for is not None and core.voted_for != memory.voted_for:
        _fail(core, f"voted for {memory.voted_for} and then {core.voted_for} in one epoch")
    if core.high_watermark < memory.high_watermark:
        _fail(core, f"high watermark went back from {memory.high_watermark}")
    voter = core.quorum.is_voter
    if (core.role is Role.OBSERVER) == voter:
        _fail(core, f"is_voter={voter} in this role")
    if core.voted_for is not None and (not voter or core.voted_for not in core.cfg.voters):
        _fail(core, f"voted for {core.voted_for}")
    leader_id = core.leader_id
    if core.role in (Role.LEADER, Role.CANDIDATE) and core.voted_for != core.node_id:
        _fail(core, f"voted for {core.voted_for}, not for itself")
    if core.role is Role.LEADER and leader_id != core.node_id:
        _fail(core, f"leads but names leader {leader_id}")
    if core.role is Role.FOLLOWER and (leader_id is None or leader_id == core.node_id):
        _fail(core, f"follows leader {leader_id}")
    if core.role in (Role.UNATTACHED, *_CANDIDATES) and leader_id is not None:
        _fail(core, f"knows leader {leader_id}")
    if leader_id is not None and leader_id not in core.cfg.voters:
        _fail(core, f"leader {leader_id} is not a voter")


def _check_role_objects(core: Core) -> None:
    # Each role object exists exactly in its role: no state of an old role lingers.
    if (core.leader is not None) != (core.role is Role.LEADER):
        _fail(core, "leader state present outside the Leader role, or missing in it")
    candidacy = core.candidacy
    if (candidacy is not None) != (core.role in _CANDIDATES):
        _fail(core, "candidacy present outside the candidate roles, or missing in them")
    if candidacy is not None and not (
        core.node_id in candidacy.votes and candidacy.votes <= core.cfg.voters
    ):
        _fail(core, f"votes {sorted(candidacy.votes)} are not this node's and voters'")
    if core.node_id in core.held_fetches:
        _fail(core, "holds a fetch of its own")


def _check_leader(core: Core, leader: LeaderState) -> None:
    log = core.log
    end = log.log_end_offset
    # The leader counts itself at its persisted end: its own match is never past its log.
    if log.unstable_offset > end or core.node_id in leader.progress:
        _fail(core, "the leader's own progress is not its log end")
    if core.fetch.want_fetch or core.fetch.want_snapshot is not None:
        _fail(core, "the leader wants to fetch")
    if not leader.epoch_start_offset < end:
        _fail(core, f"epoch start {leader.epoch_start_offset} is not in the log (end {end})")
    if log.last_epoch != core.epoch:
        _fail(core, f"last entry of epoch {log.last_epoch}, not of the leader's")
    for replica, progress in leader.progress.items():
        if progress.end_offset > end:
            _fail(core, f"replica {replica} acknowledged {progress.end_offset} past {end}")
