"""The Raft core: a pure state machine in etcd's RawNode shape, speaking KRaft's protocol.

Protocol (KIP-595 with pre-vote from KIP-996 and check-quorum)::

    voter, election timer fires  -> PreCandidate: VoteRequest(pre_vote, epoch + 1) to voters
    pre-votes from a majority    -> Candidate: epoch + 1, vote for self, VoteRequest to voters
    votes from a majority        -> Leader: append a LEADER_CHANGE entry (the no-op),
                                    BeginQuorumEpoch to voters (repeated to silent ones)
    follower / observer, each tick -> FetchRequest(fetch_offset = log end offset,
                                    last_fetched_epoch) to the leader
    leader answers               -> entries + high watermark | diverging epoch (truncate)
                                    | snapshot id (then FetchSnapshotRequest)
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
injected ``random.Random``, storage is read through :class:`Storage`, and everything it wants
done comes out in a :class:`Ready`. Same inputs, same outputs -- which is what lets the
simulator replay a failing seed exactly.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from controller.raft._log import RaftLog
from controller.raft.errors import (
    InvalidSnapshotError,
    NotLeaderError,
    RaftInvariantError,
    RaftUsageError,
)
from controller.raft.messages import (
    BeginQuorumEpoch,
    BeginQuorumEpochResponse,
    Entry,
    EntryKind,
    ErrorCode,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    HardState,
    Message,
    RaftMessage,
    Snapshot,
    SnapshotId,
    VoteRequest,
    VoteResponse,
)
from controller.raft.quorum_state import QuorumState, Role
from controller.raft.storage import Storage

if TYPE_CHECKING:
    # Only the type: the generator itself is injected, never the global one.
    from random import Random

__all__ = ["RaftConfig", "RaftNode", "RaftStatus", "Ready", "Rejection", "ReplicaStatus"]


@dataclass(frozen=True, slots=True)
class RaftConfig:
    """Static configuration of one node of the quorum.

    Times are in ticks: the shell calls ``tick()`` every ``tick_ms`` of real time, so with
    ``tick_ms=50`` the default election timeout is 500-1000 ms (randomised per election in
    ``[election_timeout_ticks, 2 * election_timeout_ticks)``).
    """

    node_id: int
    cluster_id: str
    #: Kafka's ``controller.quorum.voters`` ids. A node not in it is an observer.
    voters: frozenset[int]
    election_timeout_ticks: int = 10
    #: A fetch not answered within this many ticks is sent again.
    fetch_timeout_ticks: int = 2
    pre_vote: bool = True
    check_quorum: bool = True
    max_fetch_entries: int = 256
    max_committed_entries: int = 1024

    def __post_init__(self) -> None:
        if not self.voters:
            raise ValueError("voters must not be empty")
        if min(self.voters) < 0 or self.node_id < 0:
            raise ValueError("node ids must be >= 0")
        if self.election_timeout_ticks < 2 or self.fetch_timeout_ticks < 1:
            raise ValueError("election_timeout_ticks must be >= 2, fetch_timeout_ticks >= 1")
        if self.max_fetch_entries < 1 or self.max_committed_entries < 1:
            raise ValueError("max_fetch_entries and max_committed_entries must be >= 1")


@dataclass(frozen=True, slots=True)
class Ready:
    """Everything the core wants done, in one batch; see the module doc for the order.

    Persist first (``snapshot``, ``truncate_from_offset``, ``entries``, ``hard_state``, then
    fsync), then send ``messages``, then apply (``apply_snapshot``, ``committed_entries``),
    then ``advance(ready)``. Sending before the fsync breaks Raft: a vote or an
    acknowledged entry could be forgotten by a crash after the peer counted it.
    """

    #: Epoch and vote to persist, or ``None`` when unchanged.
    hard_state: HardState | None
    #: A snapshot to persist; then drop persisted entries below its end offset.
    snapshot: Snapshot | None
    #: True when ``snapshot`` came from the leader: reset the state machine to its image.
    apply_snapshot: bool
    #: Drop persisted entries at and above this offset (after the snapshot, before appending).
    truncate_from_offset: int | None
    #: Entries to append (they continue the log at its end after the truncation).
    entries: tuple[Entry, ...]
    #: Messages to send once the above is durable.
    messages: tuple[RaftMessage, ...]
    #: Committed entries to apply, in offset order (LEADER_CHANGE ones carry no data).
    committed_entries: tuple[Entry, ...]
    #: Soft state, for the shell's metrics and routing; nothing to persist.
    role: Role
    epoch: int
    leader_id: int | None
    high_watermark: int

    @property
    def must_sync(self) -> bool:
        """Whether step 1 has anything to write (and therefore fsync)."""
        return (
            self.hard_state is not None
            or self.snapshot is not None
            or self.truncate_from_offset is not None
            or bool(self.entries)
        )


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why ``step`` refused a message; the node's state did not change because of it."""

    error: ErrorCode
    detail: str


@dataclass(frozen=True, slots=True)
class ReplicaStatus:
    """The leader's view of one replica (voter or observer)."""

    replica_id: int
    is_voter: bool
    log_end_offset: int
    lag: int


@dataclass(frozen=True, slots=True)
class RaftStatus:
    """A snapshot of a node's state for ``lograft cluster status`` and tests."""

    node_id: int
    role: Role
    epoch: int
    leader_id: int | None
    voted_for: int | None
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    applied_offset: int
    replicas: tuple[ReplicaStatus, ...] = ()


@dataclass(slots=True)
class _Progress:
    """The leader's knowledge of one fetcher in the current epoch."""

    end_offset: int = 0
    last_fetch_tick: int = -1


@dataclass(slots=True)
class _LeaderState:
    """State a leader keeps for its epoch only (Kafka's ``LeaderState``)."""

    epoch_start_offset: int
    progress: dict[int, _Progress] = field(default_factory=dict)
    #: Ticks since this node became leader (the clock of ``last_fetch_tick``).
    ticks: int = 0


class RaftNode:
    """One voter or observer of the Raft quorum, as a pure state machine.

    See the module docstring for the protocol and the ``ready``/``advance`` contract.
    Not thread-safe: one owner calls it from one thread.
    """

    def __init__(self, config: RaftConfig, storage: Storage, rng: Random) -> None:
        self._cfg = config
        self._rng = rng
        self._majority = len(config.voters) // 2 + 1
        self._log = RaftLog(storage)
        self._quorum = QuorumState(config.node_id, config.voters, storage.hard_state())
        self._persisted_hard_state = storage.hard_state()
        snapshot = storage.snapshot()
        # The high watermark is not persisted (as in KRaft): after a restart it is known to
        # be at least the snapshot's end, and the leader tells the rest. The application
        # restored its state machine from that snapshot before building the node.
        self._high_watermark = snapshot.end_offset if snapshot is not None else 0
        self._applied_end = self._high_watermark
        self._messages: list[RaftMessage] = []
        self._outstanding: Ready | None = None
        self._snapshot_to_apply: Snapshot | None = None
        self._election_elapsed = 0
        self._randomized_election_timeout = self._draw_election_timeout()
        self._votes: set[int] = set()
        self._leader: _LeaderState | None = None
        self._want_fetch = False
        self._fetch_pending = False
        self._fetch_age = 0
        self._want_snapshot: SnapshotId | None = None
        self._observer_target: int | None = None
        #: Messages refused by ``step``, by error (wrong cluster, stale epoch, malformed...).
        self.rejections: Counter[ErrorCode] = Counter()
        if not self._quorum.is_voter:
            self._want_fetch = True

    # --- read-only view -------------------------------------------------------------------

    @property
    def node_id(self) -> int:
        """This node's id."""
        return self._cfg.node_id

    @property
    def config(self) -> RaftConfig:
        """The configuration the node was built with."""
        return self._cfg

    @property
    def role(self) -> Role:
        """The current role."""
        return self._quorum.role

    @property
    def epoch(self) -> int:
        """The current epoch."""
        return self._quorum.epoch

    @property
    def leader_id(self) -> int | None:
        """The leader of the current epoch, if known."""
        return self._quorum.leader_id

    @property
    def voted_for(self) -> int | None:
        """The vote cast in the current epoch."""
        return self._quorum.voted_for

    @property
    def high_watermark(self) -> int:
        """Entries below this offset are committed (Raft's commit index + 1)."""
        return self._high_watermark

    @property
    def applied_offset(self) -> int:
        """Entries below this offset were handed to the application and advanced."""
        return self._applied_end

    @property
    def log_start_offset(self) -> int:
        """First offset still in the log (the snapshot's end offset, or 0)."""
        return self._log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        """One past the last entry (persisted or not)."""
        return self._log.log_end_offset

    @property
    def last_epoch(self) -> int:
        """Epoch of the last entry."""
        return self._log.last_epoch

    def epoch_at(self, offset: int) -> int | None:
        """Epoch of the entry at ``offset`` (``None`` if compacted or past the end)."""
        return self._log.epoch_at(offset)

    def entries(self, start: int, end: int) -> list[Entry]:
        """Entries ``[start, end)`` of the log (``start`` must be >= the log start offset)."""
        return self._log.entries(start, end)

    def snapshot(self) -> Snapshot | None:
        """The newest snapshot (persisted or about to be)."""
        return self._log.snapshot()

    def status(self) -> RaftStatus:
        """Role, epoch, offsets and, on the leader, every replica's progress."""
        replicas: tuple[ReplicaStatus, ...] = ()
        if self._leader is not None:
            leo = self._log.log_end_offset
            replicas = tuple(
                ReplicaStatus(rid, rid in self._cfg.voters, p.end_offset, leo - p.end_offset)
                for rid, p in sorted(self._leader.progress.items())
            )
        return RaftStatus(
            node_id=self.node_id,
            role=self.role,
            epoch=self.epoch,
            leader_id=self.leader_id,
            voted_for=self.voted_for,
            high_watermark=self._high_watermark,
            log_start_offset=self._log.log_start_offset,
            log_end_offset=self._log.log_end_offset,
            applied_offset=self._applied_end,
            replicas=replicas,
        )

    # --- inputs -------------------------------------------------------------------------

    def tick(self) -> None:
        """Advance the logical clock by one tick."""
        role = self._quorum.role
        if role is Role.LEADER:
            self._tick_leader()
        elif role is Role.OBSERVER:
            self._tick_observer()
        else:
            self._election_elapsed += 1
            if role is Role.FOLLOWER:
                self._tick_fetch()
            if self._election_elapsed >= self._randomized_election_timeout:
                self._start_election()

    def propose(self, data: bytes) -> int:
        """Append ``data`` as a new entry; returns its offset.

        Raises :class:`NotLeaderError` (``NOT_LEADER_OR_FOLLOWER``) unless this node is the
        leader. The entry is committed once the high watermark passes its offset *with the
        same epoch*: a later leader may replace an uncommitted entry.
        """
        if not isinstance(data, bytes):
            raise TypeError(f"data must be bytes, not {type(data).__name__}")
        if self._quorum.role is not Role.LEADER:
            raise NotLeaderError(self.node_id, self.epoch, self.leader_id)
        offset = self._log.log_end_offset
        self._log.append([Entry(offset, self.epoch, data, EntryKind.DATA)])
        return offset

    def create_snapshot(self, end_offset: int, image: bytes) -> Snapshot:
        """Record the application's state machine image covering entries below ``end_offset``.

        ``end_offset`` must not exceed :attr:`applied_offset`. The next ``Ready`` carries the
        snapshot to persist; the log prefix below it is dropped (and a replica that needs
        that prefix is sent the snapshot instead).
        """
        if not isinstance(image, bytes):
            raise TypeError("image must be bytes")
        if self._log.pending_snapshot is not None:
            raise InvalidSnapshotError("a snapshot is still waiting to be persisted")
        if not self._log.log_start_offset < end_offset <= self._applied_end:
            raise InvalidSnapshotError(
                f"end_offset {end_offset} outside ({self._log.log_start_offset}, "
                f"{self._applied_end}] (log start, applied offset]"
            )
        epoch = self._log.epoch_at(end_offset - 1)
        if epoch is None:
            raise RaftInvariantError(f"no epoch for applied offset {end_offset - 1}")
        snapshot = Snapshot(end_offset, epoch, image)
        self._log.compact(snapshot)
        return snapshot

    def step(self, message: RaftMessage) -> Rejection | None:
        """Handle one received message. Returns a :class:`Rejection` if it was refused.

        A refused message changes nothing (a stale request is still answered with the
        current epoch, as Raft requires, so its sender can catch up).
        """
        if not isinstance(message, Message):
            return self._reject(ErrorCode.INVALID_REQUEST, f"not a Raft message: {message!r}")
        if message.cluster_id != self._cfg.cluster_id:
            return self._reject(
                ErrorCode.INCONSISTENT_CLUSTER_ID,
                f"cluster_id={message.cluster_id!r} expected={self._cfg.cluster_id!r}",
            )
        problem = _malformed(message, self.node_id)
        if problem is not None:
            return self._reject(ErrorCode.INVALID_REQUEST, problem)
        if isinstance(message, FetchRequest):
            return self._on_fetch_request(message)
        if isinstance(message, FetchResponse):
            return self._on_fetch_response(message)
        if isinstance(message, VoteRequest):
            return self._on_vote_request(message)
        if isinstance(message, VoteResponse):
            return self._on_vote_response(message)
        if isinstance(message, BeginQuorumEpoch):
            return self._on_begin_quorum_epoch(message)
        if isinstance(message, BeginQuorumEpochResponse):
            return self._on_begin_quorum_epoch_response(message)
        if isinstance(message, FetchSnapshotRequest):
            return self._on_fetch_snapshot_request(message)
        if isinstance(message, FetchSnapshotResponse):
            return self._on_fetch_snapshot_response(message)
        return self._reject(ErrorCode.INVALID_REQUEST, f"unknown message {type(message).__name__}")

    # --- outputs --------------------------------------------------------------------------

    def has_ready(self) -> bool:
        """Whether :meth:`ready` has anything to hand out."""
        if self._outstanding is not None:
            return False
        log = self._log
        return bool(
            self._messages
            or log.unstable
            or log.pending_snapshot is not None
            or self._quorum.hard_state != self._persisted_hard_state
            or self._high_watermark > self._applied_end
            or log.truncate_from_offset() is not None
            or self._fetch_due()
        )

    def ready(self) -> Ready:
        """Collect what to persist, send and apply; call :meth:`advance` with it when done."""
        if self._outstanding is not None:
            raise RaftUsageError("ready() called again before advance()")
        self._emit_fetch()
        log = self._log
        hard_state = self._quorum.hard_state
        committed_end = min(
            self._high_watermark, self._applied_end + self._cfg.max_committed_entries
        )
        committed = tuple(log.entries(self._applied_end, committed_end))
        snapshot = log.pending_snapshot
        ready = Ready(
            hard_state=None if hard_state == self._persisted_hard_state else hard_state,
            snapshot=snapshot,
            apply_snapshot=snapshot is not None and snapshot is self._snapshot_to_apply,
            truncate_from_offset=log.truncate_from_offset(),
            entries=tuple(log.unstable),
            messages=tuple(self._messages),
            committed_entries=committed,
            role=self.role,
            epoch=self.epoch,
            leader_id=self.leader_id,
            high_watermark=self._high_watermark,
        )
        self._messages = []
        self._outstanding = ready
        return ready

    def advance(self, ready: Ready) -> None:
        """Tell the core that ``ready`` was persisted, sent and applied."""
        if ready is not self._outstanding:
            raise RaftUsageError("advance() with a Ready that is not the outstanding one")
        self._outstanding = None
        if ready.hard_state is not None:
            self._persisted_hard_state = ready.hard_state
        if ready.snapshot is not None:
            self._log.snapshot_persisted(ready.snapshot)
            if ready.snapshot is self._snapshot_to_apply:
                self._snapshot_to_apply = None
        if ready.entries:
            last = ready.entries[-1]
            self._log.stable_to(last.offset, last.epoch)
        if ready.committed_entries:
            self._applied_end = max(self._applied_end, ready.committed_entries[-1].offset + 1)
        if self._leader is not None:
            # The leader counts its own entries only once they are durable.
            self._maybe_advance_high_watermark()

    # --- ticks ----------------------------------------------------------------------------

    def _tick_leader(self) -> None:
        leader = self._leader
        if leader is None:
            raise RaftInvariantError(f"node={self.node_id} is Leader without leader state")
        leader.ticks += 1
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
        if self._fetch_pending and self._fetch_age < self._cfg.fetch_timeout_ticks:
            return
        if self._fetch_pending and self.leader_id is None:
            self._observer_target = None  # that voter did not answer: an observer asks another
        self._fetch_pending = False
        self._want_fetch = True

    def _fetch_due(self) -> bool:
        return self._want_fetch and self.role in (
            Role.FOLLOWER,
            Role.OBSERVER,
        )

    def _fetch_target(self) -> int:
        if self.leader_id is not None:
            return self.leader_id
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
            leo = self._log.log_end_offset
            self._send(FetchRequest(cid, me, target, epoch, leo, self._log.last_epoch))
        self._want_fetch = False
        self._fetch_pending = True
        self._fetch_age = 0

    # --- elections ------------------------------------------------------------------------

    def _draw_election_timeout(self) -> int:
        timeout = self._cfg.election_timeout_ticks
        return timeout + self._rng.randrange(timeout)

    def _reset_election_timer(self) -> None:
        self._election_elapsed = 0
        self._randomized_election_timeout = self._draw_election_timeout()

    def _start_election(self) -> None:
        if self._cfg.pre_vote:
            self._quorum.transition_to_pre_candidate()
            self._reset_election_timer()
            self._votes = {self.node_id}
            self._request_votes(pre_vote=True)
            if len(self._votes) >= self._majority:
                self._become_candidate()
        else:
            self._become_candidate()

    def _become_candidate(self) -> None:
        self._quorum.transition_to_candidate()
        self._reset_election_timer()
        self._votes = {self.node_id}
        self._request_votes(pre_vote=False)
        if len(self._votes) >= self._majority:
            self._become_leader()

    def _request_votes(self, *, pre_vote: bool) -> None:
        epoch = self.epoch + 1 if pre_vote else self.epoch
        last_epoch, leo = self._log.last_epoch, self._log.log_end_offset
        for voter in sorted(self._cfg.voters):
            if voter != self.node_id:
                self._send(
                    VoteRequest(
                        self._cfg.cluster_id, self.node_id, voter, epoch, last_epoch, leo, pre_vote
                    )
                )

    def _become_leader(self) -> None:
        self._quorum.transition_to_leader()
        start = self._log.log_end_offset
        self._leader = _LeaderState(epoch_start_offset=start)
        self._want_fetch = False
        self._want_snapshot = None
        # The no-op: committing an entry of our own epoch is what commits the entries of
        # earlier epochs we inherited (section 5.4.2), and it lets the high watermark move.
        self._log.append([Entry(start, self.epoch, b"", EntryKind.LEADER_CHANGE)])
        for voter in sorted(self._cfg.voters):
            if voter != self.node_id:
                self._send(BeginQuorumEpoch(self._cfg.cluster_id, self.node_id, voter, self.epoch))

    def _in_lease(self) -> bool:
        """Whether this voter heard from a live leader within the minimum election timeout.

        Such a voter refuses pre-votes and ignores higher-epoch votes, so a node that was
        partitioned away cannot depose a leader that a majority still follows (section 9.6).
        """
        if self.role is Role.LEADER:
            return True
        return (
            self.role is Role.FOLLOWER
            and self._cfg.check_quorum
            and self._election_elapsed < self._cfg.election_timeout_ticks
        )

    def _log_is_up_to_date(self, last_epoch: int, log_end_offset: int) -> bool:
        """Section 5.4.1: grant only to a candidate whose log is at least as up to date."""
        return (last_epoch, log_end_offset) >= (self._log.last_epoch, self._log.log_end_offset)

    def _on_vote_request(self, m: VoteRequest) -> Rejection | None:
        if not self._quorum.is_voter:
            return self._reject(ErrorCode.INVALID_REQUEST, "an observer does not vote")
        if m.src not in self._cfg.voters:
            return self._reject(ErrorCode.INVALID_REQUEST, f"vote requested by non-voter {m.src}")
        if m.pre_vote:
            granted = (
                m.epoch > self.epoch
                and not self._in_lease()
                and self._log_is_up_to_date(m.last_epoch, m.log_end_offset)
            )
            self._send(
                self._vote_response(m.src, m.epoch if granted else self.epoch, granted, True)
            )
            return None
        if m.epoch < self.epoch:
            self._send(self._vote_response(m.src, self.epoch, False, False))
            return self._reject(ErrorCode.FENCED_LEADER_EPOCH, f"vote for stale epoch {m.epoch}")
        if m.epoch > self.epoch:
            if self._in_lease():
                return None  # ignored, not refused: see _in_lease
            self._become_unattached(m.epoch)
        granted = (
            self.role in (Role.UNATTACHED, Role.PRE_CANDIDATE)
            and self.voted_for in (None, m.src)
            and self._log_is_up_to_date(m.last_epoch, m.log_end_offset)
        )
        if granted:
            self._quorum.grant_vote(m.src)
            self._election_elapsed = 0
        self._send(self._vote_response(m.src, self.epoch, granted, False))
        return None

    def _vote_response(self, dst: int, epoch: int, granted: bool, pre_vote: bool) -> VoteResponse:
        return VoteResponse(self._cfg.cluster_id, self.node_id, dst, epoch, granted, pre_vote)

    def _on_vote_response(self, m: VoteResponse) -> Rejection | None:
        if not self._quorum.is_voter or m.src not in self._cfg.voters:
            return self._reject(ErrorCode.INVALID_REQUEST, f"vote response from {m.src}")
        if m.pre_vote:
            if m.granted:
                if self.role is Role.PRE_CANDIDATE and m.epoch == self.epoch + 1:
                    self._votes.add(m.src)
                    if len(self._votes) >= self._majority:
                        self._become_candidate()
            elif m.epoch > self.epoch:
                self._become_unattached(m.epoch)
            return None
        if m.epoch > self.epoch:
            self._become_unattached(m.epoch)
            return None
        if m.epoch < self.epoch:
            return self._reject(ErrorCode.FENCED_LEADER_EPOCH, f"vote from stale epoch {m.epoch}")
        if self.role is Role.CANDIDATE and m.granted:
            self._votes.add(m.src)
            if len(self._votes) >= self._majority:
                self._become_leader()
        return None

    def _become_unattached(self, epoch: int) -> None:
        """Learn a higher epoch with no leader (voters) or an unknown leader (observers)."""
        self._leader = None
        if self._quorum.is_voter:
            self._quorum.transition_to_unattached(epoch)
            self._reset_election_timer()
        else:
            self._quorum.transition_to_observer(epoch, None)

    def _observe_leader(self, epoch: int, leader_id: int) -> None:
        """``leader_id`` is the leader of ``epoch`` (it said so, or answered as leader)."""
        if epoch > self.epoch or (epoch == self.epoch and self.leader_id is None):
            self._leader = None
            if self._quorum.is_voter:
                self._quorum.transition_to_follower(epoch, leader_id)
                self._reset_election_timer()
            else:
                self._quorum.transition_to_observer(epoch, leader_id)
            self._fetch_pending = False
            self._want_fetch = True
            self._want_snapshot = None
        elif epoch == self.epoch and self.leader_id != leader_id:
            raise RaftInvariantError(
                f"node={self.node_id} epoch={epoch} has leader={self.leader_id}; "
                f"{leader_id} claims it too"
            )
        self._election_elapsed = 0

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

    def _on_begin_quorum_epoch_response(self, m: BeginQuorumEpochResponse) -> Rejection | None:
        if m.src not in self._cfg.voters:
            return self._reject(ErrorCode.INVALID_REQUEST, f"BeginQuorumEpoch answer from {m.src}")
        if m.epoch <= self.epoch:
            return None  # nothing new: a late answer
        self._on_leader_hint(m.epoch, m.leader_id)
        return None

    # --- replication: the leader side -----------------------------------------------------

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
        progress = leader.progress.setdefault(m.src, _Progress())
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
        entries = tuple(log.entries(offset, offset + self._cfg.max_fetch_entries))
        self._send(
            FetchResponse(
                cid, me, m.src, epoch, ErrorCode.NONE, me, offset, last_epoch, entries,
                self._high_watermark, None, None, None,
            )
        )  # fmt: skip
        return None

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
            progress = self._leader.progress.setdefault(m.src, _Progress())
            progress.last_fetch_tick = self._leader.ticks
        snapshot = self._log.snapshot()
        error = ErrorCode.NONE if snapshot is not None else ErrorCode.SNAPSHOT_NOT_FOUND
        self._send(FetchSnapshotResponse(cid, me, m.src, self.epoch, error, me, snapshot))
        return None

    # --- replication: the fetcher side ----------------------------------------------------

    def _on_leader_hint(self, epoch: int, leader_id: int | None) -> None:
        """A non-leader answered our fetch, maybe naming the leader."""
        self._fetch_pending = False
        is_other_voter = leader_id in self._cfg.voters and leader_id != self.node_id
        if (
            leader_id is not None
            and is_other_voter
            and (epoch > self.epoch or (epoch == self.epoch and self.leader_id is None))
        ):
            self._observe_leader(epoch, leader_id)
            return
        if epoch > self.epoch:
            self._become_unattached(epoch)
        if not self._quorum.is_voter and self.leader_id is None:
            self._observer_target = None  # ask another voter next time

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
        matched_end = m.fetch_offset + len(m.entries)
        self._high_watermark = max(self._high_watermark, min(m.high_watermark, matched_end))
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

    # --- helpers --------------------------------------------------------------------------

    def _send(self, message: RaftMessage) -> None:
        self._messages.append(message)

    def _reject(self, error: ErrorCode, detail: str) -> Rejection:
        self.rejections[error] += 1
        return Rejection(error, detail)


def _is_int(value: object, minimum: int = 0) -> bool:
    return type(value) is int and value >= minimum


def _malformed(m: Message, node_id: int) -> str | None:
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
        if not (_is_int(m.fetch_offset) and _is_int(m.last_fetched_epoch)):
            return "bad FetchRequest fields"
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
