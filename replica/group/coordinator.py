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

The modules behind this facade, one concept each::

    replica.group._membership      joins, heartbeats, epochs, target assignment, expiry
    replica.group._reconciliation  a member's next assignment (the reconciliation table)
    replica.group._offsets         offset commit, fetch, reset, delete and lag
    replica.group._describe        DescribeGroups and ListGroups (the group state table)
    replica.group._store           the groups as their records build them
    replica.group._config          the settings, and the limits requests are checked against

Coordinator lifecycle (:data:`COORDINATOR_TRANSITIONS`)::

    from \\ to   LOADING   ACTIVE            CLOSED
    LOADING     replay    complete_load     close
    ACTIVE      -         -                 close
    CLOSED      -         -                 -

While ``LOADING`` every request gets ``COORDINATOR_LOAD_IN_PROGRESS``; once ``CLOSED``,
``NOT_COORDINATOR``. A transition outside the table raises
:class:`~replica.group.errors.GroupInvariantError`.

**Leadership.** A coordinator is made for the ``leader_epoch`` at which its broker leads the
partition, and answers only while the broker still leads it at that epoch: before every
request the shell passes the epoch at which the broker leads the partition now to
:meth:`GroupCoordinator.check_leadership`, and answers from the coordinator in the same
step (the rule and its table: :mod:`replica.coordinator_leadership`). Closing it when the
leadership moves is not enough: the broker learns of the move before it gets round to that.
"""

from __future__ import annotations

import enum
import logging
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from lograft.protocol.errors import (
    CoordinatorLoadInProgressError,
    GroupIdNotFoundError,
    GroupNotEmptyError,
    NotCoordinatorError,
)
from lograft.protocol.topic_partition import TopicPartition, partition_for_name
from replica.coordinator_leadership import check_leadership
from replica.group._config import (
    MAX_CLIENT_ID_LENGTH,
    MAX_GROUP_ID_LENGTH,
    MAX_MEMBER_ID_LENGTH,
    GroupCoordinatorConfig,
    validate_group_id,
)
from replica.group._describe import (
    GroupDescription,
    GroupListing,
    GroupState,
    MemberDescription,
    describe_group,
    list_groups,
)
from replica.group._membership import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    ExpiredMember,
    GroupMembership,
    HeartbeatResult,
    TickResult,
)
from replica.group._offsets import CommitResult, OffsetAndMetadata, OffsetManager, PartitionLag
from replica.group._store import GroupStore
from replica.group.errors import GroupInvariantError
from replica.group.records import GroupMetadataKey, GroupRecord, OffsetCommitValue

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
    "GroupLoggers",
    "GroupState",
    "HeartbeatResult",
    "MemberDescription",
    "OffsetAndMetadata",
    "PartitionLag",
    "TickResult",
    "partition_for_group",
]


@dataclass(frozen=True, slots=True)
class GroupLoggers:
    """The loggers of a group coordinator and of its membership and offsets parts, which
    its shell creates and passes in (a pure core creates none)."""

    coordinator: logging.Logger
    membership: logging.Logger
    offsets: logging.Logger


def partition_for_group(group_id: str, partition_count: int) -> int:
    """The ``__consumer_offsets`` partition of ``group_id``: Kafka's
    ``Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions``, bit for bit."""
    return partition_for_name(group_id, partition_count)


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


class GroupCoordinator:
    """Every group of one ``__consumer_offsets`` partition (see the module docstring).

    A new coordinator is ``LOADING``: :meth:`replay` the partition's records (any number of
    calls, in log order), then :meth:`complete_load` with the current topic metadata and
    persist what it returns. ``rng`` generates member ids (seed it in tests).
    ``leader_epoch`` is the partition's leader epoch at which this broker loads it;
    ``loggers`` are the shell's.
    """

    def __init__(
        self,
        rng: random.Random,
        config: GroupCoordinatorConfig | None = None,
        *,
        loggers: GroupLoggers,
        partition: int = -1,
        leader_epoch: int = 0,
    ) -> None:
        self._config = config or GroupCoordinatorConfig()
        self._partition = partition
        self._leader_epoch = leader_epoch
        self._log = loggers.coordinator
        self._state = CoordinatorState.LOADING
        self._store = GroupStore()
        self._membership = GroupMembership(
            self._config, self._store, rng, logger=loggers.membership
        )
        self._offsets = OffsetManager(self._config, self._store, logger=loggers.offsets)

    # ---- lifecycle ----------------------------------------------------------------------------

    @property
    def state(self) -> CoordinatorState:
        """``LOADING``, ``ACTIVE`` or ``CLOSED``."""
        return self._state

    @property
    def leader_epoch(self) -> int:
        """The leader epoch of the partition's leadership this coordinator serves."""
        return self._leader_epoch

    def check_leadership(self, leader_epoch: int | None) -> None:
        """Raise unless this coordinator may answer a request now that its broker leads the
        partition at ``leader_epoch`` (``None``: it does not): ``NOT_COORDINATOR`` once the
        leadership it was loaded for is over (or it is ``CLOSED``),
        ``COORDINATOR_LOAD_IN_PROGRESS`` while it, or the coordinator of a newer leadership
        of this broker, loads. The shell calls it before every request and answers in the
        same step (see the module docstring)."""
        if self._state is CoordinatorState.CLOSED:
            raise NotCoordinatorError(
                f"this broker no longer coordinates __consumer_offsets partition {self._partition}"
            )
        check_leadership(
            f"__consumer_offsets-{self._partition}",
            self._leader_epoch,
            leader_epoch,
            loading=self._state is CoordinatorState.LOADING,
        )

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
            self._store.apply(record)

    def replay_transactional(self, producer_id: int, records: Iterable[GroupRecord]) -> None:
        """Apply the records of a transactional batch of ``producer_id`` read back from the
        log: offsets pending until the transaction's marker (``LOADING`` only)."""
        if self._state is not CoordinatorState.LOADING:
            raise GroupInvariantError(f"replay in state {self._state.value}")
        self._offsets.replay_pending(producer_id, records)

    def complete_transaction(self, producer_id: int, committed: bool) -> int:
        """A transaction marker of ``producer_id`` is in the partition (read back while
        loading, or just written): its pending offsets are committed or dropped. Idempotent;
        returns how many offsets it ended."""
        if self._state is CoordinatorState.CLOSED:
            raise GroupInvariantError("transaction marker for a closed coordinator")
        return self._offsets.complete_transaction(producer_id, committed)

    def complete_load(
        self, topic_partitions: Mapping[str, int], now_ms: int
    ) -> tuple[GroupRecord, ...]:
        """Finish loading: check the replayed state, start every member's session (and
        pending revocation) timer at ``now_ms``, become ``ACTIVE``, and follow the current
        topic metadata. Returns records to persist (groups whose topics changed meanwhile
        get a new epoch and target)."""
        self._transition_to(CoordinatorState.ACTIVE, check_only=True)
        self._store.index_loaded()
        self._membership.start_timers(now_ms)
        self._transition_to(CoordinatorState.ACTIVE)
        self._log.info(
            "group coordinator loaded partition=%d groups=%d members=%d",
            self._partition,
            len(self._store.groups),
            sum(len(g.members) for g in self._store.groups.values()),
        )
        records = self.on_topic_metadata(topic_partitions)
        return records + self._membership.assign_unassigned()

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
        self._log.info(
            "group coordinator state partition=%d from=%s to=%s",
            self._partition,
            self._state.value,
            to.value,
        )
        self._state = to
        # Ownership is checked on every record while serving; replayed records are checked
        # once, as a whole, by complete_load.
        self._store.live = to is CoordinatorState.ACTIVE

    def _require_active(self) -> None:
        if self._state is CoordinatorState.LOADING:
            raise CoordinatorLoadInProgressError(
                f"__consumer_offsets partition {self._partition} is still loading"
            )
        if self._state is CoordinatorState.CLOSED:
            raise NotCoordinatorError(
                f"this broker no longer coordinates __consumer_offsets partition {self._partition}"
            )

    # ---- membership ---------------------------------------------------------------------------

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
        in, as Kafka shows it: ``/127.0.0.1``). Raises a
        :class:`~lograft.protocol.errors.LograftError` and changes nothing on a refused request.
        """
        self._require_active()
        return self._membership.heartbeat(
            group_id,
            member_id,
            member_epoch,
            now_ms=now_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            subscribed_topics=subscribed_topics,
            assignor=assignor,
            owned_partitions=owned_partitions,
            session_timeout_ms=session_timeout_ms,
            client_id=client_id,
            client_host=client_host,
        )

    def tick(self, now_ms: int) -> TickResult:
        """Remove members whose session timed out, or that did not revoke within their
        rebalance timeout; their groups get a new epoch and target."""
        self._require_active()
        return self._membership.tick(now_ms)

    def next_deadline_ms(self) -> int | None:
        """When :meth:`tick` next has something to do (None: no members)."""
        return self._membership.next_deadline_ms()

    def on_topic_metadata(self, partition_counts: Mapping[str, int]) -> tuple[GroupRecord, ...]:
        """The cluster's topics now (topic -> partition count; absent = no such topic).

        Groups whose subscribed topics changed get a new epoch and target assignment.
        """
        self._require_active()
        return self._membership.on_topic_metadata(partition_counts)

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
        return self._offsets.commit_offsets(group_id, member_id, member_epoch, offsets, now_ms)

    def txn_commit_offsets(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        producer_id: int,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        now_ms: int,
    ) -> CommitResult:
        """Handle one ``TxnOffsetCommit``: offsets that become committed when the
        producer's transaction commits (its marker reaches this partition), and are dropped
        if it aborts. The records returned are written in a transactional batch of the
        producer. Member checks as :meth:`commit_offsets` unless the committer names no
        member (``member_epoch`` -1)."""
        self._require_active()
        return self._offsets.txn_commit_offsets(
            group_id, member_id, member_epoch, producer_id, offsets, now_ms
        )

    def unstable_partitions(self, group_id: str) -> frozenset[TopicPartition]:
        """Partitions of the group whose offsets a transaction in flight may still move
        (a stable ``OffsetFetch`` answers them ``UNSTABLE_OFFSET_COMMIT``)."""
        self._require_active()
        return self._offsets.pending_partitions(group_id)

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
        return self._offsets.reset_offsets(group_id, offsets, now_ms)

    def delete_offsets(self, group_id: str, partitions: Iterable[TopicPartition]) -> CommitResult:
        """Handle one ``OffsetDelete``: drop the committed offsets of ``partitions``.

        ``GROUP_ID_NOT_FOUND`` if there is no such group. A partition of a topic that a
        member subscribes to is refused with ``GROUP_SUBSCRIBED_TO_TOPIC`` (its offset is in
        use), as Kafka does; the others are deleted (nothing to do if none is committed).
        """
        self._require_active()
        return self._offsets.delete_offsets(group_id, partitions)

    def fetch_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, OffsetCommitValue | None]:
        """Committed offsets (``OffsetFetch``): of ``partitions``, or every committed one.

        ``None`` for a partition without a committed offset. A group that does not exist
        has nothing committed (Kafka answers so, and a consumer using ``assign()`` with a
        fresh ``group.id`` relies on it).
        """
        self._require_active()
        return self._offsets.fetch_offsets(group_id, partitions)

    def lag(
        self, group_id: str, end_offsets: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, PartitionLag]:
        """Lag per partition of ``end_offsets`` (the shell reads log end offsets or high
        watermarks; :meth:`describe` tells which partitions the members own)."""
        self._require_active()
        return self._offsets.lag(group_id, end_offsets)

    # ---- admin --------------------------------------------------------------------------------

    def describe(self, group_id: str) -> GroupDescription:
        """The group, its members and their assignments (``GROUP_ID_NOT_FOUND`` if none)."""
        self._require_active()
        validate_group_id(group_id)
        group = self._store.groups.get(group_id)
        if group is None:
            raise GroupIdNotFoundError(f"group {group_id} does not exist")
        return describe_group(group, self._membership.group_assignor(group))

    def list_groups(self) -> tuple[GroupListing, ...]:
        """Every group of this partition, sorted by id."""
        self._require_active()
        return list_groups(self._store)

    def delete_group(self, group_id: str) -> tuple[GroupRecord, ...]:
        """Delete a group without members and its committed offsets.

        ``GROUP_ID_NOT_FOUND`` if there is no such group, ``GROUP_NOT_EMPTY`` if it has members.
        """
        self._require_active()
        validate_group_id(group_id)
        group = self._store.groups.get(group_id)
        if group is None:
            raise GroupIdNotFoundError(f"group {group_id} does not exist")
        if group.members:
            raise GroupNotEmptyError(f"group {group_id} has {len(group.members)} members")
        self._offsets.delete_all_offsets(group)
        self._store.write(GroupMetadataKey(group_id), None)
        self._log.info("group deleted group=%s", group_id)
        return self._store.take()

    # ---- persisted state --------------------------------------------------------------------

    def snapshot(self) -> tuple[GroupRecord, ...]:
        """The persisted state as the fewest records that rebuild it, in a canonical order
        (two coordinators in the same state give equal snapshots). Works in every state."""
        return self._store.snapshot()

    def check_invariants(self) -> None:
        """Raise :class:`~replica.group.errors.GroupInvariantError` if the state is broken:
        a partition held by two members, an ownership index out of step, a member epoch
        above the assignment epoch, a target giving a partition twice (``ACTIVE`` only)."""
        if self._state is not CoordinatorState.ACTIVE:
            return
        self._store.check_invariants()
