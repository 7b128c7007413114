"""The consumer-group coordinator (Kafka's KIP-848 protocol) as a pure state machine.

One :class:`GroupCoordinator` serves every group that hashes to one partition of
``__consumer_offsets`` (:func:`partition_for_group`); the broker that leads that partition
runs it. Pure: inputs are requests, ``now_ms`` and topic metadata; outputs are answers and
the :class:`~replica.group.records.GroupRecord` s to persist. No clock, socket, thread or
disk; member ids come from the ``random.Random`` it is given. Not thread-safe: one event
loop owns it.

**Ordering rule for the shell.** Every call that changes state returns its records. Append
them to ``__consumer_offsets`` as one batch (``acks=all``) *before* sending the answer. If
the append fails, this object is ahead of the log: drop it and load a new one from the log
(``NOT_COORDINATOR`` to clients meanwhile). Records of one call must never be split.

**The protocol** (``ConsumerGroupHeartbeat``; the coordinator assigns, members reconcile):

* A member joins with ``member_epoch`` 0 (an empty ``member_id`` gets one generated), its
  subscribed topics and a rebalance timeout (``max.poll.interval.ms``); it heartbeats with
  the epoch it last got and leaves with -1. Fields sent as ``None`` are unchanged.
* The **group epoch** is bumped when a member joins, leaves or is removed, changes its
  subscription or assignor, or when a subscribed topic changes its partition count. Each
  bump computes a new **target assignment** at once (the assignor most members name);
  its epoch, the **assignment epoch**, equals the group epoch.
* Each member then moves to its target on its own heartbeats, never stopping for others
  (the cooperative, incremental rebalance): partitions it keeps stay its own throughout.
  Partitions it must give up are *revoked* first: its heartbeat answer stops listing them,
  they stay ``pending_revocation`` (still its own) until a heartbeat reports owned
  partitions without them, or until ``rebalance_timeout_ms`` passes and the member is
  removed. Only then does the member get the target's epoch. A partition moves to its new
  owner only when no other member holds it, assigned or pending, so **no partition is
  ever owned by two members**.
* A member's **member epoch** never decreases while it is in the group. A heartbeat with a
  newer epoch than the coordinator's, or an older one (except the previous epoch with owned
  partitions inside its assignment: the answer with the bump was lost), or one reporting
  partitions it was never given, gets ``FENCED_MEMBER_EPOCH``: the member drops everything
  and joins again with epoch 0 (and may keep its id). An unknown member id gets
  ``UNKNOWN_MEMBER_ID``. A member silent for its ``session_timeout_ms`` is removed by
  :meth:`GroupCoordinator.tick`.
* **Offsets.** A member commits with its member id and exactly its current epoch
  (``STALE_MEMBER_EPOCH`` if older, ``FENCED_MEMBER_EPOCH`` if newer), and only for
  partitions it owns, assigned or pending revocation (``UNASSIGNED_PARTITION`` per
  partition otherwise). An empty member id with epoch -1 is an admin ("simple") commit,
  allowed when the group has no members (it creates the group if needed). Committed
  offsets may move backwards (a consumer may seek back); they survive failover because
  they are records. ``OffsetDelete`` removes committed offsets of topics no member
  subscribes to (``GROUP_SUBSCRIBED_TO_TOPIC`` per partition otherwise).

Member reconciliation (``from`` row -> ``to`` column; the event that causes it)::

    from \\ to              STABLE             UNREVOKED_PARTITIONS   UNRELEASED_PARTITIONS
    (new member)           target all free    -                      some still held
    STABLE                 target unchanged   new target drops some  new target, some held
    UNREVOKED_PARTITIONS   ack, rest free     ack, target drops more ack, some held
    UNRELEASED_PARTITIONS  all released       new target drops some  still waiting
    any                    -> removed: leave (epoch -1), session timeout, rebalance timeout

("ack": a heartbeat reports owned partitions without the pending ones. A member stays in
``UNREVOKED_PARTITIONS``, at its epoch, until then.)

Coordinator lifecycle (:data:`COORDINATOR_TRANSITIONS`)::

    from \\ to   LOADING   ACTIVE            CLOSED
    LOADING     replay    complete_load     close
    ACTIVE      -         -                 close
    CLOSED      -         -                 -

While ``LOADING`` every request gets ``COORDINATOR_LOAD_IN_PROGRESS``; once ``CLOSED``,
``NOT_COORDINATOR``. A transition outside the table raises
:class:`~replica.group.errors.GroupInvariantError`.

Group state (derived, as Kafka reports it): ``Empty`` without members; ``Assigning``
while the assignment epoch is behind the group epoch; ``Reconciling`` while a member is
not ``STABLE`` at the assignment epoch; ``Stable`` otherwise.
"""

from __future__ import annotations

import base64
import enum
import logging
import random
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from cluster.errors import (
    CoordinatorLoadInProgressError,
    FencedMemberEpochError,
    GroupIdNotFoundError,
    GroupMaxSizeReachedError,
    GroupNotEmptyError,
    GroupSubscribedToTopicError,
    InvalidConfigError,
    InvalidGroupIdError,
    InvalidRequestError,
    InvalidSessionTimeoutError,
    LograftError,
    NotCoordinatorError,
    OffsetMetadataTooLargeError,
    StaleMemberEpochError,
    UnassignedPartitionError,
    UnknownMemberIdError,
    UnknownTopicOrPartitionError,
    UnsupportedAssignorError,
)
from replica.group.assignors import ASSIGNOR_NAMES, assign, canonical_assignor
from replica.group.errors import GroupInvariantError, GroupRecordError
from replica.group.records import (
    NO_LEADER_EPOCH,
    CurrentAssignmentKey,
    CurrentAssignmentValue,
    GroupKey,
    GroupMetadataKey,
    GroupMetadataValue,
    GroupRecord,
    GroupValue,
    MemberMetadataKey,
    MemberMetadataValue,
    MemberState,
    OffsetCommitKey,
    OffsetCommitValue,
    TargetAssignmentKey,
    TargetAssignmentValue,
)
from replica.topic_partition import MAX_PARTITIONS, TopicPartition, validate_topic_name

__all__ = [
    "COORDINATOR_TRANSITIONS",
    "JOIN_EPOCH",
    "LEAVE_EPOCH",
    "MAX_CLIENT_ID_LENGTH",
    "MAX_GROUP_ID_LENGTH",
    "MAX_MEMBER_ID_LENGTH",
    "CommitResult",
    "CoordinatorState",
    "ExpiredMember",
    "GroupCoordinator",
    "GroupCoordinatorConfig",
    "GroupDescription",
    "GroupListing",
    "GroupState",
    "HeartbeatResult",
    "MemberDescription",
    "OffsetAndMetadata",
    "PartitionLag",
    "TickResult",
    "partition_for_group",
]

log = logging.getLogger(__name__)

JOIN_EPOCH = 0
"""``member_epoch`` of a heartbeat that joins (or rejoins) the group."""
LEAVE_EPOCH = -1
"""``member_epoch`` of a heartbeat that leaves the group (and of an admin commit)."""
MAX_GROUP_ID_LENGTH = 255
"""Longest group id, in characters."""
MAX_MEMBER_ID_LENGTH = 255
"""Longest member id a client may choose, in characters."""
MAX_CLIENT_ID_LENGTH = 255
"""Longest client id kept, in characters."""
_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1
_NO_ASSIGNMENT = CurrentAssignmentValue(0, 0, MemberState.STABLE, frozenset(), frozenset())
_NEW_GROUP = GroupMetadataValue(0, 0, ())


def partition_for_group(group_id: str, partition_count: int) -> int:
    """The ``__consumer_offsets`` partition of ``group_id``: Kafka's
    ``Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions``, bit for bit."""
    if partition_count <= 0:
        raise InvalidRequestError(f"partition_count must be positive, not {partition_count}")
    h = 0
    raw = group_id.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(raw), 2):  # Java's String.hashCode over UTF-16 code units
        h = (31 * h + (raw[i] << 8 | raw[i + 1])) & 0xFFFFFFFF
    signed = h - 2**32 if h >= 2**31 else h
    return (0 if signed == -(2**31) else abs(signed)) % partition_count


# ---- configuration, inputs and outputs ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupCoordinatorConfig:
    """The coordinator's settings (Kafka's ``group.consumer.*`` broker configs).

    ``session_timeout_ms`` is used for members that ask for none; a member may ask for any
    value in ``[min_session_timeout_ms, max_session_timeout_ms]``. The heartbeat interval
    told to a member is ``min(heartbeat_interval_ms, its session timeout / 3)``.
    ``assignors`` lists the accepted server-side assignors; the first is the default.
    """

    session_timeout_ms: int = 45_000
    min_session_timeout_ms: int = 6_000
    max_session_timeout_ms: int = 1_800_000
    heartbeat_interval_ms: int = 5_000
    max_group_size: int = 1_000
    assignors: tuple[str, ...] = ASSIGNOR_NAMES
    offset_metadata_max_bytes: int = 4_096
    max_subscribed_topics: int = 1_000

    def __post_init__(self) -> None:
        def bad(message: str) -> InvalidConfigError:
            return InvalidConfigError(f"group coordinator: {message}")

        if not 0 < self.min_session_timeout_ms <= self.max_session_timeout_ms <= _INT32_MAX:
            raise bad("need 0 < min_session_timeout_ms <= max_session_timeout_ms")
        if (
            not self.min_session_timeout_ms
            <= self.session_timeout_ms
            <= self.max_session_timeout_ms
        ):
            raise bad("session_timeout_ms must be within [min, max]_session_timeout_ms")
        if not 0 < self.heartbeat_interval_ms < self.session_timeout_ms:
            raise bad("need 0 < heartbeat_interval_ms < session_timeout_ms")
        if self.max_group_size < 1 or self.max_subscribed_topics < 1:
            raise bad("max_group_size and max_subscribed_topics must be positive")
        if self.offset_metadata_max_bytes < 0:
            raise bad("offset_metadata_max_bytes must not be negative")
        if not self.assignors:
            raise bad("at least one assignor is needed")
        try:
            canonical = [canonical_assignor(a) for a in self.assignors]
        except UnsupportedAssignorError as e:
            raise bad(e.message) from None
        if canonical != list(self.assignors) or len(set(canonical)) != len(canonical):
            raise bad(f"assignors must be distinct canonical names from {ASSIGNOR_NAMES}")


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """An offset to commit: the next offset to consume, its leader epoch, free-form metadata."""

    offset: int
    leader_epoch: int = NO_LEADER_EPOCH
    metadata: str = ""


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    """The answer to a heartbeat, and the records to persist before sending it.

    ``assignment`` is the member's whole current assignment when it must (re)learn it (it
    joined, reported its owned partitions, or its assignment or epoch changed); ``None``
    means unchanged. ``member_epoch`` is -1 after a leave.
    """

    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: frozenset[TopicPartition] | None
    records: tuple[GroupRecord, ...]


@dataclass(frozen=True, slots=True)
class CommitResult:
    """Per partition: ``None`` (committed) or the error; and the records to persist."""

    errors: dict[TopicPartition, LograftError | None]
    records: tuple[GroupRecord, ...]


@dataclass(frozen=True, slots=True)
class ExpiredMember:
    """A member :meth:`GroupCoordinator.tick` removed, and why.

    ``reason`` is ``session_timeout`` (no heartbeat for ``session_timeout_ms``) or
    ``rebalance_timeout`` (did not revoke within ``rebalance_timeout_ms``).
    """

    group_id: str
    member_id: str
    member_epoch: int
    reason: str


@dataclass(frozen=True, slots=True)
class TickResult:
    """What a tick removed, and the records to persist."""

    expired: tuple[ExpiredMember, ...]
    records: tuple[GroupRecord, ...]


class GroupState(enum.Enum):
    """A group's state as Kafka names it for consumer groups (see the module docstring)."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"


@dataclass(frozen=True, slots=True)
class MemberDescription:
    """One member as ``DescribeGroups`` shows it."""

    member_id: str
    client_id: str
    member_epoch: int
    state: MemberState
    subscribed_topics: tuple[str, ...]
    assignor: str
    assignment: frozenset[TopicPartition]
    pending_revocation: frozenset[TopicPartition]
    target_assignment: frozenset[TopicPartition]
    rebalance_timeout_ms: int
    session_timeout_ms: int
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """One group as ``DescribeGroups`` shows it; ``assignor`` is the one the group uses."""

    group_id: str
    state: GroupState
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: tuple[MemberDescription, ...]
    topic_partitions: dict[str, int]


@dataclass(frozen=True, slots=True)
class GroupListing:
    """One group as ``ListGroups`` shows it."""

    group_id: str
    state: GroupState


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """Lag of one partition: ``end_offset - committed_offset`` (None when nothing is
    committed, as Kafka's tools show ``-``)."""

    committed_offset: int | None
    end_offset: int
    lag: int | None


class CoordinatorState(enum.Enum):
    """Lifecycle of a coordinator (see the module docstring)."""

    LOADING = "Loading"
    ACTIVE = "Active"
    CLOSED = "Closed"


#: The lifecycle table above as data.
COORDINATOR_TRANSITIONS: dict[CoordinatorState, frozenset[CoordinatorState]] = {
    CoordinatorState.LOADING: frozenset({CoordinatorState.ACTIVE, CoordinatorState.CLOSED}),
    CoordinatorState.ACTIVE: frozenset({CoordinatorState.CLOSED}),
    CoordinatorState.CLOSED: frozenset(),
}


# ---- internal state ---------------------------------------------------------------------------


class _Member:
    """A member: persisted metadata and assignment, plus timers that are never persisted."""

    __slots__ = (
        "current",
        "member_id",
        "metadata",
        "revocation_deadline_ms",
        "session_deadline_ms",
    )

    def __init__(self, member_id: str) -> None:
        self.member_id = member_id
        self.metadata: MemberMetadataValue | None = None
        self.current = _NO_ASSIGNMENT
        self.session_deadline_ms = 0
        self.revocation_deadline_ms: int | None = None

    @property
    def meta(self) -> MemberMetadataValue:
        if self.metadata is None:
            raise GroupInvariantError(f"member {self.member_id} has no metadata")
        return self.metadata


class _Group:
    """A group; ``owners`` maps each partition a member holds (assigned or pending) to it."""

    __slots__ = ("group_id", "members", "metadata", "offsets", "owners", "targets")

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.metadata = _NEW_GROUP
        self.members: dict[str, _Member] = {}
        self.targets: dict[str, frozenset[TopicPartition]] = {}
        self.offsets: dict[TopicPartition, OffsetCommitValue] = {}
        self.owners: dict[TopicPartition, str] = {}


def _validate_group_id(group_id: str) -> None:
    if not isinstance(group_id, str) or not group_id:
        raise InvalidGroupIdError("the group id must not be empty")
    if len(group_id) > MAX_GROUP_ID_LENGTH:
        raise InvalidGroupIdError(f"the group id is longer than {MAX_GROUP_ID_LENGTH} characters")
    if not group_id.isprintable():
        raise InvalidGroupIdError(f"the group id {group_id!r} has unprintable characters")


def _validate_tp(tp: TopicPartition) -> None:
    """Raises ``INVALID_TOPIC_EXCEPTION`` or ``INVALID_REQUEST`` for a malformed partition."""
    if not isinstance(tp, TopicPartition):
        raise InvalidRequestError(f"{tp!r} is not a TopicPartition")
    validate_topic_name(tp.topic)
    if not isinstance(tp.partition, int) or not 0 <= tp.partition < MAX_PARTITIONS:
        raise InvalidRequestError(f"partition {tp.partition!r} of {tp.topic} is out of range")


# ---- the coordinator --------------------------------------------------------------------------


class GroupCoordinator:
    """Every group of one ``__consumer_offsets`` partition (see the module docstring).

    A new coordinator is ``LOADING``: :meth:`replay` the partition's records (any number of
    calls, in log order), then :meth:`complete_load` with the current topic metadata and
    persist what it returns. ``rng`` generates member ids (seed it in tests).
    """

    def __init__(
        self,
        rng: random.Random,
        config: GroupCoordinatorConfig | None = None,
        *,
        partition: int = -1,
    ) -> None:
        self._rng = rng
        self._config = config or GroupCoordinatorConfig()
        self._partition = partition
        self._state = CoordinatorState.LOADING
        self._groups: dict[str, _Group] = {}
        self._topics: dict[str, int] = {}
        self._out: list[GroupRecord] = []

    # ---- lifecycle ----------------------------------------------------------------------------

    @property
    def state(self) -> CoordinatorState:
        """``LOADING``, ``ACTIVE`` or ``CLOSED``."""
        return self._state

    @property
    def config(self) -> GroupCoordinatorConfig:
        """The settings this coordinator runs with."""
        return self._config

    def replay(self, records: Iterable[GroupRecord]) -> None:
        """Apply records read from ``__consumer_offsets``, in log order (``LOADING`` only).

        Later records of a key replace earlier ones and tombstones delete, so a compacted
        log gives the same state as the full one.
        """
        if self._state is not CoordinatorState.LOADING:
            raise GroupInvariantError(f"replay in state {self._state.value}")
        for record in records:
            self._apply(record)

    def complete_load(
        self, topic_partitions: Mapping[str, int], now_ms: int
    ) -> tuple[GroupRecord, ...]:
        """Finish loading: check the replayed state, start every member's session (and
        pending revocation) timer at ``now_ms``, become ``ACTIVE``, and follow the current
        topic metadata. Returns records to persist (groups whose topics changed meanwhile
        get a new epoch and target)."""
        self._transition_to(CoordinatorState.ACTIVE, check_only=True)
        for group in self._groups.values():
            for member in group.members.values():
                if member.metadata is None:
                    raise GroupRecordError(
                        f"group {group.group_id}: member {member.member_id} has an assignment "
                        "record but no member metadata record"
                    )
            for member_id in [m for m in group.targets if m not in group.members]:
                del group.targets[member_id]
            group.owners = {}
            for member in group.members.values():
                for tp in member.current.owned:
                    other = group.owners.setdefault(tp, member.member_id)
                    if other != member.member_id:
                        raise GroupInvariantError(
                            f"group {group.group_id}: the records give {tp} to both {other} "
                            f"and {member.member_id}"
                        )
                member.session_deadline_ms = now_ms + member.meta.session_timeout_ms
                if member.current.state is MemberState.UNREVOKED_PARTITIONS:
                    member.revocation_deadline_ms = now_ms + member.meta.rebalance_timeout_ms
        self._transition_to(CoordinatorState.ACTIVE)
        members = sum(len(g.members) for g in self._groups.values())
        log.info(
            "group coordinator loaded partition=%d groups=%d members=%d",
            self._partition,
            len(self._groups),
            members,
        )
        records = self.on_topic_metadata(topic_partitions)
        for group_id in sorted(self._groups):  # a target never computed (not written by us)
            group = self._groups[group_id]
            if group.members and group.metadata.assignment_epoch < group.metadata.group_epoch:
                self._bump_and_assign(group, "load")
        return records + self._take()

    def close(self) -> None:
        """Stop serving (leadership of the partition moved): calls get ``NOT_COORDINATOR``."""
        self._transition_to(CoordinatorState.CLOSED)

    def _transition_to(self, to: CoordinatorState, *, check_only: bool = False) -> None:
        if to not in COORDINATOR_TRANSITIONS[self._state]:
            raise GroupInvariantError(
                f"group coordinator {self._state.value} -> {to.value} is not allowed"
            )
        if check_only:
            return
        log.info(
            "group coordinator state partition=%d from=%s to=%s",
            self._partition,
            self._state.value,
            to.value,
        )
        self._state = to

    def _require_active(self) -> None:
        if self._state is CoordinatorState.LOADING:
            raise CoordinatorLoadInProgressError(
                f"__consumer_offsets partition {self._partition} is still loading"
            )
        if self._state is CoordinatorState.CLOSED:
            raise NotCoordinatorError(
                f"this broker no longer coordinates __consumer_offsets partition {self._partition}"
            )

    # ---- heartbeat ----------------------------------------------------------------------------

    def heartbeat(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        *,
        now_ms: int,
        rebalance_timeout_ms: int = -1,
        subscribed_topics: Iterable[str] | None = None,
        assignor: str | None = None,
        owned_partitions: Iterable[TopicPartition] | None = None,
        session_timeout_ms: int | None = None,
        client_id: str | None = None,
        client_host: str | None = None,
    ) -> HeartbeatResult:
        """Handle one ``ConsumerGroupHeartbeat`` (see the module docstring).

        ``member_epoch`` 0 joins (``subscribed_topics`` and a positive
        ``rebalance_timeout_ms`` required, ``owned_partitions`` empty), -1 leaves, anything
        else heartbeats. ``None`` (and for the timeouts 0 or less, for the assignor ``""``)
        means unchanged. ``client_host`` is where the request came from (the shell fills it
        in, as Kafka shows it: ``/127.0.0.1``). Raises a :class:`~cluster.errors.LograftError`
        and changes nothing on a refused request.
        """
        self._require_active()
        _validate_group_id(group_id)
        if not isinstance(member_epoch, int) or member_epoch < LEAVE_EPOCH:
            raise InvalidRequestError(
                f"member_epoch {member_epoch} is not valid: 0 joins, -1 leaves "
                "(static membership is not supported)"
            )
        if not isinstance(member_id, str) or len(member_id) > MAX_MEMBER_ID_LENGTH:
            raise InvalidRequestError(f"member_id must be at most {MAX_MEMBER_ID_LENGTH} chars")
        if member_epoch == LEAVE_EPOCH:
            return self._leave(group_id, member_id)
        topics = self._validate_subscription(subscribed_topics)
        owned = None
        if owned_partitions is not None:
            owned = frozenset(owned_partitions)
            for tp in owned:
                _validate_tp(tp)
        chosen = canonical_assignor(assignor) if assignor else None
        if chosen is not None and chosen not in self._config.assignors:
            raise UnsupportedAssignorError(
                f"assignor {assignor!r} is not enabled "
                f"(enabled: {', '.join(self._config.assignors)})"
            )
        session = self._validate_session_timeout(session_timeout_ms)
        if client_id is not None and len(client_id) > MAX_CLIENT_ID_LENGTH:
            client_id = client_id[:MAX_CLIENT_ID_LENGTH]
        if client_host is not None and len(client_host) > MAX_CLIENT_ID_LENGTH:
            client_host = client_host[:MAX_CLIENT_ID_LENGTH]
        if rebalance_timeout_ms > _INT32_MAX:
            raise InvalidRequestError(f"rebalance_timeout_ms {rebalance_timeout_ms} is too large")
        group = self._groups.get(group_id)
        if member_epoch == JOIN_EPOCH:
            if topics is None:
                raise InvalidRequestError("a joining member must send its subscribed topics")
            if rebalance_timeout_ms <= 0:
                raise InvalidRequestError("a joining member must send a positive rebalance timeout")
            if owned:
                raise InvalidRequestError("owned partitions must be empty when joining")
            member = group.members.get(member_id) if group is not None and member_id else None
            if member is None:
                if group is not None and len(group.members) >= self._config.max_group_size:
                    raise GroupMaxSizeReachedError(
                        f"group {group_id} has {len(group.members)} members, the maximum"
                    )
                member_id = member_id or self._new_member_id(group)
            owned = frozenset()
        else:
            if not member_id:
                raise InvalidRequestError("a heartbeat with member_epoch > 0 needs its member_id")
            if group is None:
                raise GroupIdNotFoundError(f"group {group_id} does not exist")
            member = group.members.get(member_id)
            if member is None:
                raise UnknownMemberIdError(f"group {group_id} has no member {member_id}")
            self._check_member_epoch(group_id, member, member_epoch, owned)
        # ---- accepted: from here on, state changes and records are written ----
        if group is None:
            group = self._groups[group_id] = _Group(group_id)
        new_member = member is None
        if member is None:
            member = group.members[member_id] = _Member(member_id)
        old = member.metadata
        meta = MemberMetadataValue(
            client_id=client_id if client_id is not None else (old.client_id if old else ""),
            subscribed_topics=topics
            if topics is not None
            else (old.subscribed_topics if old else ()),
            assignor=chosen if chosen is not None else (old.assignor if old else ""),
            rebalance_timeout_ms=rebalance_timeout_ms
            if rebalance_timeout_ms > 0
            else (old.rebalance_timeout_ms if old else 0),
            session_timeout_ms=session
            or (old.session_timeout_ms if old else self._config.session_timeout_ms),
            client_host=client_host
            if client_host is not None
            else (old.client_host if old else ""),
        )
        if meta != old:
            self._write(MemberMetadataKey(group_id, member_id), meta)
        if new_member:
            log.info(
                "member joined group=%s member_id=%s client_id=%s topics=%s assignor=%s",
                group_id,
                member_id,
                meta.client_id,
                ",".join(meta.subscribed_topics),
                meta.assignor or "-",
            )
            self._bump_and_assign(group, "member_joined")
        elif old is not None and (
            old.subscribed_topics != meta.subscribed_topics or old.assignor != meta.assignor
        ):
            self._bump_and_assign(group, "subscription_changed")
        before = member.current
        after = self._reconcile(group, member, owned, now_ms)
        include = (
            member_epoch == JOIN_EPOCH
            or owned is not None
            or after.assigned != before.assigned
            or after.member_epoch != member_epoch
        )
        return HeartbeatResult(
            member_id=member_id,
            member_epoch=after.member_epoch,
            heartbeat_interval_ms=self._interval_ms(meta),
            assignment=after.assigned if include else None,
            records=self._take(),
        )

    def _validate_subscription(self, topics: Iterable[str] | None) -> tuple[str, ...] | None:
        if topics is None:
            return None
        if isinstance(topics, str):
            raise InvalidRequestError("subscribed_topics must be a collection of topic names")
        unique = sorted(set(topics))
        if len(unique) > self._config.max_subscribed_topics:
            raise InvalidRequestError(
                f"{len(unique)} subscribed topics, at most {self._config.max_subscribed_topics}"
            )
        for topic in unique:
            validate_topic_name(topic)
        return tuple(unique)

    def _validate_session_timeout(self, session_timeout_ms: int | None) -> int | None:
        if session_timeout_ms is None or session_timeout_ms <= 0:
            return None
        low, high = self._config.min_session_timeout_ms, self._config.max_session_timeout_ms
        if not low <= session_timeout_ms <= high:
            raise InvalidSessionTimeoutError(
                f"session_timeout_ms {session_timeout_ms} is not in [{low}, {high}]"
            )
        return session_timeout_ms

    def _check_member_epoch(
        self,
        group_id: str,
        member: _Member,
        member_epoch: int,
        owned: frozenset[TopicPartition] | None,
    ) -> None:
        current = member.current
        where = f"group {group_id} member {member.member_id}"
        if member_epoch > current.member_epoch:
            raise FencedMemberEpochError(
                f"{where}: epoch {member_epoch} is newer than the coordinator's "
                f"{current.member_epoch}; give up every partition and rejoin"
            )
        if member_epoch < current.member_epoch and (
            member_epoch != current.previous_member_epoch
            or owned is None
            or not owned <= current.assigned
        ):
            raise FencedMemberEpochError(
                f"{where}: epoch {member_epoch} is older than the coordinator's "
                f"{current.member_epoch}; give up every partition and rejoin"
            )
        if owned is not None and not owned <= current.owned:
            extra = ", ".join(str(tp) for tp in sorted(owned - current.owned))
            raise FencedMemberEpochError(
                f"{where}: reports owning {extra}, which it was not given; "
                "give up every partition and rejoin"
            )

    def _leave(self, group_id: str, member_id: str) -> HeartbeatResult:
        group = self._groups.get(group_id)
        if group is None or not member_id or member_id not in group.members:
            raise UnknownMemberIdError(f"group {group_id} has no member {member_id or '(none)'}")
        member = group.members[member_id]
        self._remove_member(group, member, "left")
        self._bump_and_assign(group, "member_left")
        return HeartbeatResult(
            member_id=member_id,
            member_epoch=LEAVE_EPOCH,
            heartbeat_interval_ms=self._interval_ms(member.meta),
            assignment=None,
            records=self._take(),
        )

    def _interval_ms(self, meta: MemberMetadataValue) -> int:
        return max(1, min(self._config.heartbeat_interval_ms, meta.session_timeout_ms // 3))

    def _new_member_id(self, group: _Group | None) -> str:
        while True:
            raw = self._rng.getrandbits(128).to_bytes(16, "big")
            member_id = base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")
            if group is None or member_id not in group.members:
                return member_id

    # ---- reconciliation -----------------------------------------------------------------------

    def _reconcile(
        self,
        group: _Group,
        member: _Member,
        owned: frozenset[TopicPartition] | None,
        now_ms: int,
    ) -> CurrentAssignmentValue:
        """Move ``member`` one step towards its target; restart its session timer."""
        before = member.current
        after = self._next_assignment(group, member.member_id, before, owned)
        if after != before:
            self._write(CurrentAssignmentKey(group.group_id, member.member_id), after)
            log.debug(
                "member assignment group=%s member_id=%s epoch=%d->%d state=%s assigned=%d "
                "pending_revocation=%d",
                group.group_id,
                member.member_id,
                before.member_epoch,
                after.member_epoch,
                after.state.value,
                len(after.assigned),
                len(after.pending_revocation),
            )
        member.session_deadline_ms = now_ms + member.meta.session_timeout_ms
        if after.state is MemberState.UNREVOKED_PARTITIONS:
            if (
                before.state is not MemberState.UNREVOKED_PARTITIONS
                or before.pending_revocation != after.pending_revocation
            ):
                member.revocation_deadline_ms = now_ms + member.meta.rebalance_timeout_ms
        else:
            member.revocation_deadline_ms = None
        return after

    def _next_assignment(
        self,
        group: _Group,
        member_id: str,
        current: CurrentAssignmentValue,
        owned: frozenset[TopicPartition] | None,
    ) -> CurrentAssignmentValue:
        """The member's next assignment state (the reconciliation table)."""
        target_epoch = group.metadata.assignment_epoch
        target = group.targets.get(member_id, frozenset())
        if current.state is MemberState.UNREVOKED_PARTITIONS:
            if owned is None or owned & current.pending_revocation:
                return current  # not acknowledged yet: it still owns what it must give up
        elif current.state is MemberState.STABLE and current.member_epoch == target_epoch:
            return current
        assigned = current.assigned
        keep = assigned & target
        revoke = assigned - target
        if revoke:
            return CurrentAssignmentValue(
                current.member_epoch,
                current.previous_member_epoch,
                MemberState.UNREVOKED_PARTITIONS,
                keep,
                revoke,
            )
        wanted = target - assigned
        free = frozenset(tp for tp in wanted if self._is_free(group, tp, member_id))
        previous = (
            current.member_epoch
            if target_epoch != current.member_epoch
            else current.previous_member_epoch
        )
        return CurrentAssignmentValue(
            target_epoch,
            previous,
            MemberState.UNRELEASED_PARTITIONS if free != wanted else MemberState.STABLE,
            keep | free,
            frozenset(),
        )

    def _is_free(self, group: _Group, tp: TopicPartition, member_id: str) -> bool:
        """Whether ``member_id`` may take ``tp``: no other member holds it."""
        return group.owners.get(tp, member_id) == member_id

    def _bump_and_assign(self, group: _Group, reason: str) -> None:
        """Bump the group epoch and compute the target assignment for it."""
        counts = self._subscribed_counts(group)
        assignor = self._group_assignor(group)
        subscriptions = {m.member_id: m.meta.subscribed_topics for m in group.members.values()}
        targets = assign(assignor, subscriptions, counts, group.targets)
        epoch = group.metadata.group_epoch + 1
        for member_id in sorted(targets):
            if group.targets.get(member_id) != targets[member_id]:
                self._write(
                    TargetAssignmentKey(group.group_id, member_id),
                    TargetAssignmentValue(targets[member_id]),
                )
        self._write(GroupMetadataKey(group.group_id), GroupMetadataValue.of(epoch, epoch, counts))
        log.info(
            "group epoch bumped group=%s epoch=%d reason=%s members=%d assignor=%s partitions=%d",
            group.group_id,
            epoch,
            reason,
            len(group.members),
            assignor,
            sum(counts.values()),
        )

    def _subscribed_counts(self, group: _Group) -> dict[str, int]:
        topics: set[str] = set()
        for member in group.members.values():
            topics.update(member.meta.subscribed_topics)
        return {t: self._topics[t] for t in sorted(topics) if t in self._topics}

    def _group_assignor(self, group: _Group) -> str:
        """The assignor most members name (ties: the configured order); else the default."""
        votes = Counter(
            m.meta.assignor
            for m in group.members.values()
            if m.meta.assignor in self._config.assignors
        )
        if not votes:
            return self._config.assignors[0]
        most = max(votes.values())
        return next(a for a in self._config.assignors if votes.get(a) == most)

    def _remove_member(self, group: _Group, member: _Member, reason: str) -> None:
        """Write the member's tombstones (the caller bumps the group epoch afterwards)."""
        key = (group.group_id, member.member_id)
        self._write(CurrentAssignmentKey(*key), None)
        self._write(TargetAssignmentKey(*key), None)
        self._write(MemberMetadataKey(*key), None)
        log.info(
            "member removed group=%s member_id=%s epoch=%d reason=%s",
            group.group_id,
            member.member_id,
            member.current.member_epoch,
            reason,
        )

    # ---- time and metadata ------------------------------------------------------------------

    def tick(self, now_ms: int) -> TickResult:
        """Remove members whose session timed out, or that did not revoke within their
        rebalance timeout; their groups get a new epoch and target."""
        self._require_active()
        expired: list[ExpiredMember] = []
        for group_id in sorted(self._groups):
            group = self._groups[group_id]
            gone: list[tuple[_Member, str]] = []
            for member_id in sorted(group.members):
                member = group.members[member_id]
                if now_ms >= member.session_deadline_ms:
                    gone.append((member, "session_timeout"))
                elif member.revocation_deadline_ms is not None and (
                    now_ms >= member.revocation_deadline_ms
                ):
                    gone.append((member, "rebalance_timeout"))
            for member, reason in gone:
                expired.append(
                    ExpiredMember(group_id, member.member_id, member.current.member_epoch, reason)
                )
                self._remove_member(group, member, reason)
            if gone:
                self._bump_and_assign(group, gone[0][1])
        return TickResult(tuple(expired), self._take())

    def next_deadline_ms(self) -> int | None:
        """When :meth:`tick` next has something to do (None: no members)."""
        deadlines = [
            d
            for g in self._groups.values()
            for m in g.members.values()
            for d in (m.session_deadline_ms, m.revocation_deadline_ms)
            if d is not None
        ]
        return min(deadlines, default=None)

    def on_topic_metadata(self, partition_counts: Mapping[str, int]) -> tuple[GroupRecord, ...]:
        """The cluster's topics now (topic -> partition count; absent = no such topic).

        Groups whose subscribed topics changed get a new epoch and target assignment.
        """
        self._require_active()
        topics: dict[str, int] = {}
        for topic, count in partition_counts.items():
            validate_topic_name(topic)
            if not isinstance(count, int) or not 0 <= count <= MAX_PARTITIONS:
                raise InvalidRequestError(f"partition count {count!r} of {topic} is out of range")
            if count:
                topics[topic] = count
        self._topics = topics
        for group_id in sorted(self._groups):
            group = self._groups[group_id]
            if group.members and self._subscribed_counts(group) != group.metadata.partition_counts:
                self._bump_and_assign(group, "metadata_changed")
        return self._take()

    # ---- offsets ----------------------------------------------------------------------------

    def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        now_ms: int,
    ) -> CommitResult:
        """Handle one ``OffsetCommit`` (see the module docstring for who may commit what).

        Group-level refusals raise (``GROUP_ID_NOT_FOUND``, ``UNKNOWN_MEMBER_ID``,
        ``STALE_MEMBER_EPOCH``, ``FENCED_MEMBER_EPOCH``, ``INVALID_GROUP_ID``); partition-level
        ones are in :attr:`CommitResult.errors` and the other partitions are committed.
        """
        self._require_active()
        _validate_group_id(group_id)
        group = self._groups.get(group_id)
        admin = member_epoch < 0
        owned: frozenset[TopicPartition] | None = None
        if group is None:
            if not admin:
                raise GroupIdNotFoundError(f"group {group_id} does not exist")
        elif group.members or not admin:
            member = group.members.get(member_id) if member_id else None
            if member is None and admin:
                # Kafka's answer to an admin commit while consumers are active.
                raise UnknownMemberIdError(
                    f"group {group_id} has {len(group.members)} active members: offsets can "
                    "only be committed without membership (admin tools, reset-offsets) while "
                    "the group has no members; stop its consumers first"
                )
            if member is None:
                raise UnknownMemberIdError(
                    f"group {group_id} has no member {member_id or '(none)'}"
                )
            current = member.current
            if member_epoch > current.member_epoch:
                raise FencedMemberEpochError(
                    f"group {group_id} member {member_id}: epoch {member_epoch} is newer than "
                    f"the coordinator's {current.member_epoch}"
                )
            if member_epoch < current.member_epoch:
                raise StaleMemberEpochError(
                    f"group {group_id} member {member_id}: epoch {member_epoch} is older than "
                    f"its current {current.member_epoch}; heartbeat and commit again"
                )
            owned = current.owned
        errors: dict[TopicPartition, LograftError | None] = {}
        accepted: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp, oam in offsets.items():
            error = self._offset_error(tp, oam)
            if error is None and owned is not None and tp not in owned:
                error = UnassignedPartitionError(
                    f"{tp} is not assigned to member {member_id} of group {group_id} "
                    f"at epoch {member_epoch}"
                )
            if error is None and owned is None:
                error = self._unknown_partition(tp)
            errors[tp] = error
            if error is None:
                accepted[tp] = oam
        if accepted:
            self._commit(group_id, group, accepted, now_ms)
        return CommitResult(errors, self._take())

    def reset_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | None],
        now_ms: int,
    ) -> CommitResult:
        """Admin: set (or, with None, delete) committed offsets of a group without members.

        ``GROUP_NOT_EMPTY`` while it has members. A missing group is created, as an admin
        commit does.
        """
        self._require_active()
        _validate_group_id(group_id)
        group = self._groups.get(group_id)
        if group is not None and group.members:
            raise GroupNotEmptyError(
                f"group {group_id} has {len(group.members)} members; offsets can only be reset "
                "while it has none"
            )
        errors: dict[TopicPartition, LograftError | None] = {}
        accepted: dict[TopicPartition, OffsetAndMetadata] = {}
        deleted: list[TopicPartition] = []
        for tp, oam in offsets.items():
            if oam is None:
                try:
                    _validate_tp(tp)
                    errors[tp] = None
                    deleted.append(tp)
                except LograftError as e:
                    errors[tp] = e
                continue
            error = self._offset_error(tp, oam) or self._unknown_partition(tp)
            errors[tp] = error
            if error is None:
                accepted[tp] = oam
        if accepted:
            group = self._commit(group_id, group, accepted, now_ms)
        if group is not None:
            for tp in sorted(deleted):
                if tp in group.offsets:
                    self._write(OffsetCommitKey(group_id, tp.topic, tp.partition), None)
        return CommitResult(errors, self._take())

    def delete_offsets(self, group_id: str, partitions: Iterable[TopicPartition]) -> CommitResult:
        """Handle one ``OffsetDelete``: drop the committed offsets of ``partitions``.

        ``GROUP_ID_NOT_FOUND`` if there is no such group. A partition of a topic that a
        member subscribes to is refused with ``GROUP_SUBSCRIBED_TO_TOPIC`` (its offset is in
        use), as Kafka does; the others are deleted (nothing to do if none is committed).
        """
        self._require_active()
        _validate_group_id(group_id)
        group = self._groups.get(group_id)
        if group is None:
            raise GroupIdNotFoundError(f"group {group_id} does not exist")
        subscribed = {t for m in group.members.values() for t in m.meta.subscribed_topics}
        errors: dict[TopicPartition, LograftError | None] = {}
        for tp in sorted(set(partitions)):
            try:
                _validate_tp(tp)
            except LograftError as e:
                errors[tp] = e
                continue
            if tp.topic in subscribed:
                errors[tp] = GroupSubscribedToTopicError(
                    f"members of group {group_id} subscribe to {tp.topic}: its offsets are in use"
                )
                continue
            errors[tp] = None
            if tp in group.offsets:
                self._write(OffsetCommitKey(group_id, tp.topic, tp.partition), None)
        return CommitResult(errors, self._take())

    def _offset_error(self, tp: TopicPartition, oam: OffsetAndMetadata) -> LograftError | None:
        try:
            _validate_tp(tp)
        except LograftError as e:
            return e
        if not isinstance(oam.offset, int) or not 0 <= oam.offset <= _INT64_MAX:
            return InvalidRequestError(f"committed offset {oam.offset!r} of {tp} must be >= 0")
        if (
            not isinstance(oam.leader_epoch, int)
            or not NO_LEADER_EPOCH <= oam.leader_epoch <= _INT32_MAX
        ):
            return InvalidRequestError(f"leader epoch {oam.leader_epoch!r} of {tp} is not valid")
        size = len(oam.metadata.encode("utf-8"))
        if size > self._config.offset_metadata_max_bytes:
            return OffsetMetadataTooLargeError(
                f"metadata of {tp} is {size} bytes, "
                f"at most {self._config.offset_metadata_max_bytes}"
            )
        return None

    def _unknown_partition(self, tp: TopicPartition) -> LograftError | None:
        if tp.partition >= self._topics.get(tp.topic, 0):
            return UnknownTopicOrPartitionError(f"{tp} does not exist")
        return None

    def _commit(
        self,
        group_id: str,
        group: _Group | None,
        accepted: Mapping[TopicPartition, OffsetAndMetadata],
        now_ms: int,
    ) -> _Group:
        if group is None:
            self._write(GroupMetadataKey(group_id), _NEW_GROUP)
            group = self._groups[group_id]
            log.info("group created group=%s by=offset_commit", group_id)
        for tp in sorted(accepted):
            oam = accepted[tp]
            self._write(
                OffsetCommitKey(group_id, tp.topic, tp.partition),
                OffsetCommitValue(oam.offset, oam.leader_epoch, oam.metadata, now_ms),
            )
        return group

    def fetch_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, OffsetCommitValue | None]:
        """Committed offsets (``OffsetFetch``): of ``partitions``, or every committed one.

        ``None`` for a partition without a committed offset. A group that does not exist
        has nothing committed (Kafka answers so, and a consumer using ``assign()`` with a
        fresh ``group.id`` relies on it).
        """
        self._require_active()
        _validate_group_id(group_id)
        group = self._groups.get(group_id)
        committed = group.offsets if group is not None else {}
        if partitions is None:
            return {tp: committed[tp] for tp in sorted(committed)}
        return {tp: committed.get(tp) for tp in partitions}

    def lag(
        self, group_id: str, end_offsets: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, PartitionLag]:
        """Lag per partition of ``end_offsets`` (the shell reads log end offsets or high
        watermarks; :meth:`describe` tells which partitions the members own)."""
        self._require_active()
        _validate_group_id(group_id)
        group = self._groups.get(group_id)
        if group is None:
            raise GroupIdNotFoundError(f"group {group_id} does not exist")
        out: dict[TopicPartition, PartitionLag] = {}
        for tp in sorted(end_offsets):
            end = end_offsets[tp]
            committed = group.offsets.get(tp)
            if committed is None:
                out[tp] = PartitionLag(None, end, None)
            else:
                out[tp] = PartitionLag(committed.offset, end, max(0, end - committed.offset))
        return out

    # ---- admin --------------------------------------------------------------------------------

    def describe(self, group_id: str) -> GroupDescription:
        """The group, its members and their assignments (``GROUP_ID_NOT_FOUND`` if none)."""
        self._require_active()
        _validate_group_id(group_id)
        group = self._groups.get(group_id)
        if group is None:
            raise GroupIdNotFoundError(f"group {group_id} does not exist")
        members = tuple(
            MemberDescription(
                member_id=m.member_id,
                client_id=m.meta.client_id,
                member_epoch=m.current.member_epoch,
                state=m.current.state,
                subscribed_topics=m.meta.subscribed_topics,
                assignor=m.meta.assignor,
                assignment=m.current.assigned,
                pending_revocation=m.current.pending_revocation,
                target_assignment=group.targets.get(m.member_id, frozenset()),
                rebalance_timeout_ms=m.meta.rebalance_timeout_ms,
                session_timeout_ms=m.meta.session_timeout_ms,
                client_host=m.meta.client_host,
            )
            for m in sorted(group.members.values(), key=lambda m: m.member_id)
        )
        return GroupDescription(
            group_id=group_id,
            state=self._group_state(group),
            group_epoch=group.metadata.group_epoch,
            assignment_epoch=group.metadata.assignment_epoch,
            assignor=self._group_assignor(group),
            members=members,
            topic_partitions=group.metadata.partition_counts,
        )

    def list_groups(self) -> tuple[GroupListing, ...]:
        """Every group of this partition, sorted by id."""
        self._require_active()
        return tuple(
            GroupListing(group_id, self._group_state(self._groups[group_id]))
            for group_id in sorted(self._groups)
        )

    def delete_group(self, group_id: str) -> tuple[GroupRecord, ...]:
        """Delete a group without members and its committed offsets.

        ``GROUP_ID_NOT_FOUND`` if there is no such group, ``GROUP_NOT_EMPTY`` if it has members.
        """
        self._require_active()
        _validate_group_id(group_id)
        group = self._groups.get(group_id)
        if group is None:
            raise GroupIdNotFoundError(f"group {group_id} does not exist")
        if group.members:
            raise GroupNotEmptyError(f"group {group_id} has {len(group.members)} members")
        for tp in sorted(group.offsets):
            self._write(OffsetCommitKey(group_id, tp.topic, tp.partition), None)
        self._write(GroupMetadataKey(group_id), None)
        log.info("group deleted group=%s", group_id)
        return self._take()

    def _group_state(self, group: _Group) -> GroupState:
        if not group.members:
            return GroupState.EMPTY
        if group.metadata.assignment_epoch < group.metadata.group_epoch:
            return GroupState.ASSIGNING
        epoch = group.metadata.assignment_epoch
        for m in group.members.values():
            if m.current.state is not MemberState.STABLE or m.current.member_epoch != epoch:
                return GroupState.RECONCILING
        return GroupState.STABLE

    # ---- persisted state --------------------------------------------------------------------

    def snapshot(self) -> tuple[GroupRecord, ...]:
        """The persisted state as the fewest records that rebuild it, in a canonical order
        (two coordinators in the same state give equal snapshots). Works in every state."""
        out: list[GroupRecord] = []
        for group_id in sorted(self._groups):
            group = self._groups[group_id]
            out.append(GroupRecord(GroupMetadataKey(group_id), group.metadata))
            for member_id in sorted(group.members):
                member = group.members[member_id]
                if member.metadata is not None:
                    out.append(GroupRecord(MemberMetadataKey(group_id, member_id), member.metadata))
                if member_id in group.targets:
                    out.append(
                        GroupRecord(
                            TargetAssignmentKey(group_id, member_id),
                            TargetAssignmentValue(group.targets[member_id]),
                        )
                    )
                out.append(GroupRecord(CurrentAssignmentKey(group_id, member_id), member.current))
            for tp in sorted(group.offsets):
                out.append(
                    GroupRecord(
                        OffsetCommitKey(group_id, tp.topic, tp.partition), group.offsets[tp]
                    )
                )
        return tuple(out)

    def check_invariants(self) -> None:
        """Raise :class:`~replica.group.errors.GroupInvariantError` if the state is broken:
        a partition held by two members, an ownership index out of step, a member epoch
        above the assignment epoch, a target giving a partition twice (``ACTIVE`` only)."""
        if self._state is not CoordinatorState.ACTIVE:
            return
        for group in self._groups.values():
            owners: dict[TopicPartition, str] = {}
            targets: set[TopicPartition] = set()
            for member in group.members.values():
                current = member.current
                if current.assigned & current.pending_revocation:
                    raise GroupInvariantError(f"{member.member_id}: assigned and pending overlap")
                if current.member_epoch > group.metadata.assignment_epoch:
                    raise GroupInvariantError(
                        f"group {group.group_id}: member {member.member_id} epoch "
                        f"{current.member_epoch} > assignment epoch "
                        f"{group.metadata.assignment_epoch}"
                    )
                for tp in current.owned:
                    if tp in owners:
                        raise GroupInvariantError(
                            f"group {group.group_id}: {tp} owned by {owners[tp]} and "
                            f"{member.member_id}"
                        )
                    owners[tp] = member.member_id
                target = group.targets.get(member.member_id, frozenset())
                if targets & target:
                    raise GroupInvariantError(
                        f"group {group.group_id}: target gives a partition twice"
                    )
                targets |= target
            if owners != group.owners:
                raise GroupInvariantError(f"group {group.group_id}: ownership index out of step")

    # ---- applying records ---------------------------------------------------------------------

    def _write(self, key: GroupKey, value: GroupValue | None) -> None:
        """Record a change and apply it: the only way live state changes (so replaying the
        records rebuilds exactly this state)."""
        record = GroupRecord(key, value)
        self._apply(record)
        self._out.append(record)

    def _take(self) -> tuple[GroupRecord, ...]:
        out, self._out = tuple(self._out), []
        return out

    def _apply(self, record: GroupRecord) -> None:
        key, value = record.key, record.value
        live = self._state is CoordinatorState.ACTIVE
        group = self._groups.get(key.group_id)
        if group is None:
            if value is None:
                return
            group = self._groups[key.group_id] = _Group(key.group_id)
        match key:
            case GroupMetadataKey():
                if value is None:
                    if live and group.members:
                        raise GroupInvariantError(f"deleting group {key.group_id} with members")
                    del self._groups[key.group_id]
                else:
                    assert isinstance(value, GroupMetadataValue)
                    group.metadata = value
            case OffsetCommitKey():
                if value is None:
                    group.offsets.pop(key.topic_partition, None)
                else:
                    assert isinstance(value, OffsetCommitValue)
                    group.offsets[key.topic_partition] = value
            case TargetAssignmentKey():
                if value is None:
                    group.targets.pop(key.member_id, None)
                else:
                    assert isinstance(value, TargetAssignmentValue)
                    group.targets[key.member_id] = value.partitions
            case MemberMetadataKey():
                if value is None:
                    gone = group.members.pop(key.member_id, None)
                    if live and gone is not None and gone.current.owned:
                        raise GroupInvariantError(
                            f"removing member {key.member_id} that still holds partitions"
                        )
                else:
                    assert isinstance(value, MemberMetadataValue)
                    group.members.setdefault(key.member_id, _Member(key.member_id)).metadata = value
            case CurrentAssignmentKey():
                member = group.members.get(key.member_id)
                if value is None and member is None:
                    return
                if member is None:
                    member = group.members[key.member_id] = _Member(key.member_id)
                new = _NO_ASSIGNMENT if value is None else value
                assert isinstance(new, CurrentAssignmentValue)
                if live:
                    self._move_ownership(group, key.member_id, member.current, new)
                member.current = new

    def _move_ownership(
        self,
        group: _Group,
        member_id: str,
        old: CurrentAssignmentValue,
        new: CurrentAssignmentValue,
    ) -> None:
        for tp in old.owned - new.owned:
            if group.owners.pop(tp, None) != member_id:
                raise GroupInvariantError(
                    f"group {group.group_id}: {member_id} released {tp} it did not hold"
                )
        for tp in new.owned - old.owned:
            holder = group.owners.setdefault(tp, member_id)
            if holder != member_id:
                raise GroupInvariantError(
                    f"group {group.group_id}: {tp} given to {member_id} while {holder} holds it"
                )
        if new.member_epoch < old.member_epoch and new is not _NO_ASSIGNMENT:
            raise GroupInvariantError(
                f"group {group.group_id}: member {member_id} epoch {old.member_epoch} -> "
                f"{new.member_epoch} goes backwards"
            )
