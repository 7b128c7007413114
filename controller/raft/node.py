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
injected ``random.Random``, storage is read through :class:`Storage`, and everything it wants
done comes out in a :class:`Ready`. Same inputs, same outputs -- which is what lets the
simulator replay a failing seed exactly.

Layout: this module is the entry point (the inputs, the outputs and the read-only view);
the behaviour is one module per concern, each a base class of :class:`RaftNode` sharing
:class:`~controller.raft._node_state.NodeState`: ``_election`` (pre-vote, vote, winning),
``_leader`` (fetch answers, high watermark, check-quorum), ``_fetcher`` (followers and
observers fetching), ``_snapshots`` (``FetchSnapshot``) and ``_validation`` (refusing
malformed messages). The values live in ``config``, ``ready`` and ``status``.
"""

from __future__ import annotations

from controller.raft._election import Election
from controller.raft._fetcher import Fetcher
from controller.raft._leader import Leader
from controller.raft._snapshots import SnapshotTransfer
from controller.raft._validation import malformed
from controller.raft.config import RaftConfig
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
    Message,
    RaftMessage,
    Snapshot,
    VoteRequest,
    VoteResponse,
)
from controller.raft.quorum_state import Role
from controller.raft.ready import Ready, Rejection
from controller.raft.status import RaftStatus, ReplicaStatus

__all__ = ["RaftConfig", "RaftNode", "RaftStatus", "Ready", "Rejection", "ReplicaStatus"]


class RaftNode(Election, Leader, Fetcher, SnapshotTransfer):
    """One voter or observer of the Raft quorum, as a pure state machine.

    Build it as ``RaftNode(config, storage, rng)``: the :class:`RaftConfig`, the
    :class:`~controller.raft.storage.Storage` it reads its persisted state from, and the
    ``random.Random`` it draws election timeouts and observer fetch targets from.
    See the module docstring for the protocol and the ``ready``/``advance`` contract.
    Not thread-safe: one owner calls it from one thread.
    """

    # --- read-only view (identity and role: see NodeState) --------------------------------

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

    # --- inputs ---------------------------------------------------------------------------

    def tick(self) -> None:
        """Advance the logical clock by one tick."""
        role = self._quorum.role
        if role is Role.LEADER:
            self._tick_leader()
        elif role is Role.OBSERVER:
            self._tick_observer()
        else:
            self._election_elapsed += 1
            if role is Role.FOLLOWER or self._fetches_as_prospective():
                self._tick_fetch()
            if self._election_elapsed >= self._randomized_election_timeout:
                self._start_election()

    def ticks_until_due(self) -> int:
        """How many ``tick()`` calls from now the first one is that may act (>= 1).

        The ticks before it only advance counters: no message, no role change, nothing for
        :meth:`ready`. A shell may therefore sleep until then and make the ticks it slept
        through at once -- as long as it steps no message in between (a message changes
        the answer). Idle nodes then wake for their long polls and timeouts, not every tick.
        """
        role = self._quorum.role
        if role is Role.LEADER:
            return self._leader_ticks_until_due()
        if role is Role.OBSERVER:
            due = self._cfg.election_timeout_ticks - self._election_elapsed
            return max(1, min(due, self._fetch_ticks_until_due()))
        due = self._randomized_election_timeout - self._election_elapsed
        if role is Role.FOLLOWER or self._fetches_as_prospective():
            due = min(due, self._fetch_ticks_until_due())
        return max(1, due)

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
        problem = malformed(message, self.node_id)
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
            or self._held_fetch_due()
        )

    def ready(self) -> Ready:
        """Collect what to persist, send and apply; call :meth:`advance` with it when done."""
        if self._outstanding is not None:
            raise RaftUsageError("ready() called again before advance()")
        self._answer_held_fetches()
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
