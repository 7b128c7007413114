"""Log entries, snapshots, hard state and the messages voters and observers exchange.

Everything here is a frozen dataclass with slots: a message is a value, the core never
mutates one, and the shell can hash, compare and log them. The protocol follows Kafka's
KRaft (KIP-595) rather than etcd's push model:

* ``VoteRequest`` / ``VoteResponse`` -- the election, with ``pre_vote=True`` for the
  pre-vote round (KIP-996) that does not bump anybody's epoch.
* ``BeginQuorumEpoch`` -- a new leader tells the voters it won (they then fetch from it).
  A voter already in a later epoch answers ``BeginQuorumEpochResponse`` with
  ``FENCED_LEADER_EPOCH``, so the stale leader steps down (etcd does the same with its
  append responses); without it a voter stuck in a later epoch could never rejoin.
* ``FetchRequest`` / ``FetchResponse`` -- followers and observers *pull* the log from the
  leader: ``fetch_offset`` is the fetcher's log end offset and ``last_fetched_epoch`` the
  epoch of its last entry. A fetch that finds nothing new is held (long poll) until the
  log or the high watermark moves or its ``max_wait_ticks`` pass. The leader answers with
  entries and its high watermark, or with
  a diverging epoch and end offset (the fetcher truncates, KIP-101/KIP-320), or with the id
  of the snapshot to fetch when ``fetch_offset`` is below the leader's log start offset.
  A voter's validated ``fetch_offset`` is its acknowledgement for the high watermark.
* ``FetchSnapshotRequest`` / ``FetchSnapshotResponse`` -- a lagging replica installs the
  leader's snapshot (one chunk: the whole state machine image).

Every message carries ``cluster_id`` (a node ignores another cluster's messages) and the
sender's ``epoch``. Offsets are Kafka's: the first entry has offset 0, the log end offset
is one past the last entry, and the high watermark is exclusive (entries below it are
committed).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = [
    "BeginQuorumEpoch",
    "BeginQuorumEpochResponse",
    "Entry",
    "EntryKind",
    "ErrorCode",
    "FetchRequest",
    "FetchResponse",
    "FetchSnapshotRequest",
    "FetchSnapshotResponse",
    "HardState",
    "Message",
    "RaftMessage",
    "Snapshot",
    "SnapshotId",
    "VoteRequest",
    "VoteResponse",
]


class EntryKind(enum.IntEnum):
    """What an entry carries: application data or a control record."""

    DATA = 0
    #: The no-op a new leader appends at the start of its epoch (Kafka's LeaderChange
    #: control record). Committing it commits every earlier entry (Raft paper section 5.4.2).
    LEADER_CHANGE = 1


class ErrorCode(enum.Enum):
    """Kafka's error names and codes for what the Raft core answers or rejects."""

    NONE = 0
    NOT_LEADER_OR_FOLLOWER = 6
    INVALID_REQUEST = 42
    FENCED_LEADER_EPOCH = 74
    SNAPSHOT_NOT_FOUND = 98
    INCONSISTENT_CLUSTER_ID = 104

    @property
    def code(self) -> int:
        """Kafka's numeric error code."""
        return self.value


@dataclass(frozen=True, slots=True)
class Entry:
    """One record of the replicated log at ``offset``, written by the leader of ``epoch``."""

    offset: int
    epoch: int
    data: bytes = b""
    kind: EntryKind = EntryKind.DATA


@dataclass(frozen=True, slots=True)
class SnapshotId:
    """Names a snapshot as Kafka does: its end offset and the epoch of the entry before it."""

    end_offset: int
    epoch: int


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A state machine image holding the effect of every entry below ``end_offset``.

    ``epoch`` is the epoch of entry ``end_offset - 1``; the log after the snapshot starts
    at ``end_offset`` (its log start offset). ``image`` is opaque to the core: the
    application produces it and restores from it.
    """

    end_offset: int
    epoch: int
    image: bytes

    @property
    def id(self) -> SnapshotId:
        """The snapshot's ``(end_offset, epoch)``."""
        return SnapshotId(self.end_offset, self.epoch)


@dataclass(frozen=True, slots=True)
class HardState:
    """What a voter must persist (and fsync) before it sends anything: epoch and vote."""

    epoch: int
    voted_for: int | None


@dataclass(frozen=True, slots=True)
class Message:
    """Fields every Raft message carries."""

    cluster_id: str
    src: int
    dst: int
    epoch: int


@dataclass(frozen=True, slots=True)
class VoteRequest(Message):
    """Ask ``dst`` for its vote in ``epoch`` (or, with ``pre_vote``, whether it would vote).

    For a pre-vote, ``epoch`` is the epoch the sender would campaign in (its own + 1); the
    sender's stored epoch does not change until the pre-vote wins.
    """

    last_epoch: int
    log_end_offset: int
    pre_vote: bool


@dataclass(frozen=True, slots=True)
class VoteResponse(Message):
    """The answer to a :class:`VoteRequest`.

    A granted pre-vote echoes the requested epoch; a refusal carries the voter's own epoch
    so that a stale candidate learns the current one.
    """

    granted: bool
    pre_vote: bool


@dataclass(frozen=True, slots=True)
class BeginQuorumEpoch(Message):
    """Sent by the new leader (``src``) of ``epoch`` to every voter until it fetches."""


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochResponse(Message):
    """A voter's refusal of a stale :class:`BeginQuorumEpoch`: ``epoch`` is the voter's."""

    error: ErrorCode
    leader_id: int | None


@dataclass(frozen=True, slots=True)
class FetchRequest(Message):
    """Pull entries from ``fetch_offset``; ``last_fetched_epoch`` is the epoch before it.

    ``high_watermark`` is the fetcher's own and ``max_wait_ticks`` how long the leader may
    hold the fetch when it has nothing new for it (KRaft's ``MaxWaitMs``; Kafka 4.1's
    KIP-1166 sends the fetcher's high watermark for the same reason): no entry past
    ``fetch_offset`` and no high watermark above the fetcher's. ``0`` asks for an answer at
    once.
    """

    fetch_offset: int
    last_fetched_epoch: int
    high_watermark: int = 0
    max_wait_ticks: int = 0


@dataclass(frozen=True, slots=True)
class FetchResponse(Message):
    """The leader's answer to a :class:`FetchRequest` (echoing its offset and epoch).

    Exactly one of these holds when ``error`` is ``NONE``: ``entries`` (possibly empty)
    continue the fetcher's log at ``fetch_offset``; or ``diverging_end_offset`` is set and
    the fetcher truncates its log to at most that offset; or ``snapshot_id`` is set and the
    fetcher must install that snapshot. Any other ``error`` carries a leader hint.
    """

    error: ErrorCode
    leader_id: int | None
    fetch_offset: int
    last_fetched_epoch: int
    entries: tuple[Entry, ...]
    high_watermark: int
    diverging_epoch: int | None
    diverging_end_offset: int | None
    snapshot_id: SnapshotId | None


@dataclass(frozen=True, slots=True)
class FetchSnapshotRequest(Message):
    """Ask the leader for its snapshot (named by the fetch response that pointed to it)."""

    snapshot_id: SnapshotId


@dataclass(frozen=True, slots=True)
class FetchSnapshotResponse(Message):
    """The leader's current snapshot, whole, or an error with a leader hint."""

    error: ErrorCode
    leader_id: int | None
    snapshot: Snapshot | None


# Every message one Raft node sends another; the driver steps them into the core.
RaftMessage = (
    VoteRequest
    | VoteResponse
    | BeginQuorumEpoch
    | BeginQuorumEpochResponse
    | FetchRequest
    | FetchResponse
    | FetchSnapshotRequest
    | FetchSnapshotResponse
)
