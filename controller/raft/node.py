"""The Raft core: a pure state machine in etcd's RawNode shape, speaking KRaft's protocol.

Protocol (KIP-595 with pre-vote from KIP-996 and check-quorum)::

    voter, election timer fires  -> PreCandidate: VoteRequest(pre_vote, epoch + 1) to voters
    pre-votes from a majority    -> Candidate: epoch + 1, vote for self, VoteRequest to voters
    votes from a majority        -> Leader: append a LEADER_CHANGE entry (the no-op),
                                    BeginQuorumEpoch to voters (repeated to silent ones)
    follower / observer          -> FetchRequest(fetch_offset = log end offset,
                                    last_fetched_epoch, high_watermark, max_wait_ticks)
                                    to the leader: again at once after an answer that
                                    brought something or was held across a tick, else
                                    on the next tick
    leader answers               -> entries + high watermark | diverging epoch (truncate)
                                    | snapshot id (then FetchSnapshotRequest); with nothing
                                    new, it holds the fetch (long poll) until the log or
                                    the high watermark moves or max_wait_ticks pass
    leader, each election timeout -> resign (Unattached, same epoch) unless a majority of
                                    voters fetched during it (check-quorum)

A voter's fetch offset, once the leader validated it against its own log, is that voter's
acknowledgement; the high watermark (Raft's commit index, exclusive) is the largest offset
that a majority of voters reached *and* that covers an entry of the leader's epoch (Raft
paper section 5.4.2: only entries of the current epoch are committed by counting replicas).

Driving it (the shell does this; tests and the simulator do the same)::

    node.tick()                    # every tick_ms of the shell's clock
    node.step(message)             # every message received (returns a Rejection or None)
    node.propose(data)             # on the leader only; returns the entry's offset
    if node.has_ready():
        ready = node.ready()
        # 1. persist: ready.snapshot, then truncate at ready.truncate_from_offset, then
        #    append ready.entries, then ready.hard_state -- and fsync. BEFORE step 2.
        # 2. send ready.messages (they may promise what step 1 stored: a vote, a fetch
        #    offset that acknowledges entries).
        # 3. if ready.apply_snapshot: restore the state machine from ready.snapshot.image;
        #    apply ready.committed_entries in order.
        node.advance(ready)

``tick``, ``step`` and ``propose`` may be called between ``ready`` and ``advance`` (for
example while the fsync runs); ``ready`` may not be called again before ``advance``.

The core reads no clock and performs no I/O: time is ``tick()`` calls, randomness is the
injected ``random.Random``, logging goes to the injected ``logging.Logger``, storage is
read through :class:`Storage`, and everything it wants done comes out in a
:class:`Ready`. Same inputs, same outputs -- which is what lets the simulator replay a
failing seed exactly.

Layout: this module is the entry point (the inputs, the outputs and the read-only view).
The node's state is a :class:`~controller.raft._core.Core` composed of one object per
concern, with the role objects (``Candidacy``, ``LeaderState``) present only in their
role; the core's role-change methods are the only place they appear and go. The
behaviour is functions of the core, one module per concern: ``_election`` (pre-vote,
vote, winning), ``_leader`` (fetch answers, high watermark, check-quorum), ``_fetcher``
(followers and observers fetching), ``_snapshots`` (``FetchSnapshot``) and
``_validation`` (refusing malformed messages); ``_step`` picks the handler of a message
and the tick function by role, as etcd's ``stepLeader``/``stepFollower`` do, and
``_invariants`` is :meth:`RaftNode.check_invariants`. The values live in ``config``,
``ready`` and ``status``.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from controller.raft._core import Core
from controller.raft._fetcher import emit_fetch, fetch_due
from controller.raft._invariants import InvariantMemory, check_invariants
from controller.raft._leader import (
    answer_held_fetches,
    held_fetch_due,
    maybe_advance_high_watermark,
)
from controller.raft._step import HANDLERS, TICKS, TICKS_UNTIL_DUE
from controller.raft._validation import malformed
from controller.raft.config import RaftConfig
from controller.raft.errors import (
    InvalidSnapshotError,
    NotLeaderError,
    RaftInvariantError,
    RaftUsageError,
)
from controller.raft.messages import (
    Entry,
    EntryKind,
    ErrorCode,
    HardState,
    Message,
    RaftMessage,
    Snapshot,
)
from controller.raft.quorum_state import Role
from controller.raft.ready import Ready, Rejection
from controller.raft.status import RaftStatus, ReplicaStatus

if TYPE_CHECKING:
    from logging import Logger
    from random import Random

    from controller.raft.storage import Storage

__all__ = ["RaftConfig", "RaftNode", "RaftStatus", "Ready", "Rejection", "ReplicaStatus"]


class RaftNode:
    """One voter or observer of the Raft quorum, as a pure state machine.

    Build it as ``RaftNode(config, storage, rng, logger)``: the :class:`RaftConfig`, the
    :class:`~controller.raft.storage.Storage` it reads its persisted state from, the
    ``random.Random`` it draws election timeouts and observer fetch targets from, and the
    ``logging.Logger`` its role changes and votes are logged to (the shell's choice).
    See the module docstring for the protocol and the ``ready``/``advance`` contract.
    Not thread-safe: one owner calls it from one thread.
    """

    def __init__(self, config: RaftConfig, storage: Storage, rng: Random, logger: Logger) -> None:
        self._core = Core(config, storage, rng, logger)
        #: The Ready handed out and not yet advanced (the ready/advance contract).
        self._outstanding: Ready | None = None
        self._persisted_hard_state: HardState = storage.hard_state()
        core = self._core
        self._seen = InvariantMemory(core.epoch, core.voted_for, core.high_watermark)

    # --- read-only view -------------------------------------------------------------------

    @property
    def node_id(self) -> int:
        """This node's id."""
        return self._core.node_id

    @property
    def config(self) -> RaftConfig:
        """The configuration the node was built with."""
        return self._core.cfg

    @property
    def role(self) -> Role:
        """The current role."""
        return self._core.role

    @property
    def epoch(self) -> int:
        """The current epoch."""
        return self._core.epoch

    @property
    def leader_id(self) -> int | None:
        """The leader of the current epoch, if known."""
        return self._core.leader_id

    @property
    def voted_for(self) -> int | None:
        """The vote cast in the current epoch."""
        return self._core.voted_for

    @property
    def rejections(self) -> Counter[ErrorCode]:
        """Messages refused by ``step``, by error (wrong cluster, stale epoch, malformed...)."""
        return self._core.out.rejections

    @property
    def high_watermark(self) -> int:
        """Entries below this offset are committed (Raft's commit index + 1)."""
        return self._core.high_watermark

    @property
    def applied_offset(self) -> int:
        """Entries below this offset were handed to the application and advanced."""
        return self._core.applied_end

    @property
    def log_start_offset(self) -> int:
        """First offset still in the log (the snapshot's end offset, or 0)."""
        return self._core.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        """One past the last entry (persisted or not)."""
        return self._core.log.log_end_offset

    @property
    def last_epoch(self) -> int:
        """Epoch of the last entry."""
        return self._core.log.last_epoch

    def epoch_at(self, offset: int) -> int | None:
        """Epoch of the entry at ``offset`` (``None`` if compacted or past the end)."""
        return self._core.log.epoch_at(offset)

    def entries(self, start: int, end: int) -> list[Entry]:
        """Entries ``[start, end)`` of the log (``start`` must be >= the log start offset)."""
        return self._core.log.entries(start, end)

    def snapshot(self) -> Snapshot | None:
        """The newest snapshot (persisted or about to be)."""
        return self._core.log.snapshot()

    def status(self) -> RaftStatus:
        """Role, epoch, offsets and, on the leader, every replica's progress."""
        core = self._core
        log = core.log
        replicas: tuple[ReplicaStatus, ...] = ()
        if core.leader is not None:
            leo = log.log_end_offset
            replicas = tuple(
                ReplicaStatus(rid, rid in core.cfg.voters, p.end_offset, leo - p.end_offset)
                for rid, p in sorted(core.leader.progress.items())
            )
        return RaftStatus(
            node_id=core.node_id,
            role=core.role,
            epoch=core.epoch,
            leader_id=core.leader_id,
            voted_for=core.voted_for,
            high_watermark=core.high_watermark,
            log_start_offset=log.log_start_offset,
            log_end_offset=log.log_end_offset,
            applied_offset=core.applied_end,
            replicas=replicas,
        )

    def check_invariants(self) -> None:
        """Raise :class:`RaftInvariantError` if the node's state breaks a Raft rule.

        Checks that the high watermark stays within the log and above what was applied,
        that the epoch, the vote of an epoch and the high watermark never go back, that
        the role objects (candidacy, leader state) exist exactly in their roles and agree
        with the vote and the known leader, and that a leader's log and its replicas'
        progress agree. Reads only: a simulation calls it after every step.
        """
        check_invariants(self._core, self._seen)

    # --- inputs ---------------------------------------------------------------------------

    def tick(self) -> None:
        """Advance the logical clock by one tick."""
        TICKS[self._core.role](self._core)

    def ticks_until_due(self) -> int:
        """How many ``tick()`` calls from now the first one is that may act (>= 1).

        The ticks before it only advance counters: no message, no role change, nothing for
        :meth:`ready`. A shell may therefore sleep until then and make the ticks it slept
        through at once -- as long as it steps no message in between (a message changes
        the answer). Idle nodes then wake for their long polls and timeouts, not every tick.
        """
        return TICKS_UNTIL_DUE[self._core.role](self._core)

    def propose(self, data: bytes) -> int:
        """Append ``data`` as a new entry; returns its offset.

        Raises :class:`NotLeaderError` (``NOT_LEADER_OR_FOLLOWER``) unless this node is the
        leader. The entry is committed once the high watermark passes its offset *with the
        same epoch*: a later leader may replace an uncommitted entry.
        """
        if not isinstance(data, bytes):
            raise TypeError(f"data must be bytes, not {type(data).__name__}")
        core = self._core
        if core.role is not Role.LEADER:
            raise NotLeaderError(core.node_id, core.epoch, core.leader_id)
        offset = core.log.log_end_offset
        core.log.append([Entry(offset, core.epoch, data, EntryKind.DATA)])
        return offset

    def create_snapshot(self, end_offset: int, image: bytes) -> Snapshot:
        """Record the application's state machine image covering entries below ``end_offset``.

        ``end_offset`` must not exceed :attr:`applied_offset`. The next ``Ready`` carries the
        snapshot to persist; the log prefix below it is dropped (and a replica that needs
        that prefix is sent the snapshot instead).
        """
        if not isinstance(image, bytes):
            raise TypeError("image must be bytes")
        log, applied_end = self._core.log, self._core.applied_end
        if log.pending_snapshot is not None:
            raise InvalidSnapshotError("a snapshot is still waiting to be persisted")
        if not log.log_start_offset < end_offset <= applied_end:
            raise InvalidSnapshotError(
                f"end_offset {end_offset} outside ({log.log_start_offset}, "
                f"{applied_end}] (log start, applied offset]"
            )
        epoch = log.epoch_at(end_offset - 1)
        if epoch is None:
            raise RaftInvariantError(f"no epoch for applied offset {end_offset - 1}")
        snapshot = Snapshot(end_offset, epoch, image)
        log.compact(snapshot)
        return snapshot

    def step(self, message: RaftMessage) -> Rejection | None:
        """Handle one received message. Returns a :class:`Rejection` if it was refused.

        A refused message changes nothing (a stale request is still answered with the
        current epoch, as Raft requires, so its sender can catch up).
        """
        core = self._core
        if not isinstance(message, Message):
            return core.reject(ErrorCode.INVALID_REQUEST, f"not a Raft message: {message!r}")
        if message.cluster_id != core.cfg.cluster_id:
            return core.reject(
                ErrorCode.INCONSISTENT_CLUSTER_ID,
                f"cluster_id={message.cluster_id!r} expected={core.cfg.cluster_id!r}",
            )
        problem = malformed(message, core.node_id)
        if problem is not None:
            return core.reject(ErrorCode.INVALID_REQUEST, problem)
        handlers = HANDLERS[core.role]
        for cls in type(message).__mro__:
            handler = handlers.get(cls)
            if handler is not None:
                return handler(core, message)
        return core.reject(ErrorCode.INVALID_REQUEST, f"unknown message {type(message).__name__}")

    # --- outputs --------------------------------------------------------------------------

    def has_ready(self) -> bool:
        """Whether :meth:`ready` has anything to hand out."""
        if self._outstanding is not None:
            return False
        core = self._core
        log = core.log
        return bool(
            core.out.messages
            or log.unstable
            or log.pending_snapshot is not None
            or core.quorum.hard_state != self._persisted_hard_state
            or core.high_watermark > core.applied_end
            or log.truncate_from_offset() is not None
            or fetch_due(core)
            or held_fetch_due(core)
        )

    def ready(self) -> Ready:
        """Collect what to persist, send and apply; call :meth:`advance` with it when done."""
        if self._outstanding is not None:
            raise RaftUsageError("ready() called again before advance()")
        core = self._core
        answer_held_fetches(core)
        emit_fetch(core)
        log = core.log
        hard_state = core.quorum.hard_state
        committed_end = min(core.high_watermark, core.applied_end + core.cfg.max_committed_entries)
        committed = tuple(log.entries(core.applied_end, committed_end))
        snapshot = log.pending_snapshot
        ready = Ready(
            hard_state=None if hard_state == self._persisted_hard_state else hard_state,
            snapshot=snapshot,
            apply_snapshot=snapshot is not None and snapshot is core.snapshot_to_apply,
            truncate_from_offset=log.truncate_from_offset(),
            entries=tuple(log.unstable),
            messages=tuple(core.out.messages),
            committed_entries=committed,
            role=core.role,
            epoch=core.epoch,
            leader_id=core.leader_id,
            high_watermark=core.high_watermark,
        )
        core.out.messages = []
        self._outstanding = ready
        return ready

    def advance(self, ready: Ready) -> None:
        """Tell the core that ``ready`` was persisted, sent and applied."""
        if ready is not self._outstanding:
            raise RaftUsageError("advance() with a Ready that is not the outstanding one")
        self._outstanding = None
        core = self._core
        if ready.hard_state is not None:
            self._persisted_hard_state = ready.hard_state
        if ready.snapshot is not None:
            core.log.snapshot_persisted(ready.snapshot)
            if ready.snapshot is core.snapshot_to_apply:
                core.snapshot_to_apply = None
        if ready.entries:
            last = ready.entries[-1]
            core.log.stable_to(last.offset, last.epoch)
        if ready.committed_entries:
            core.applied_end = max(core.applied_end, ready.committed_entries[-1].offset + 1)
        if core.leader is not None:
            # The leader counts its own entries only once they are durable.
            maybe_advance_high_watermark(core)
