"""Member reconciliation: one member's next assignment on its way to its target (Kafka's
``CurrentAssignmentBuilder``).

How a member moves to its target without a partition ever being owned by two members is
the protocol's, in :mod:`replica.group.coordinator`; here it is as a table, and as the code
that computes it. A partition moves only when no other member holds it (:func:`is_free`).

Member reconciliation (``from`` row -> ``to`` column; the event that causes it)::

    from \\ to              STABLE             UNREVOKED_PARTITIONS   UNRELEASED_PARTITIONS
    (new member)           target all free    -                      some still held
    STABLE                 target unchanged   new target drops some  new target, some held
    UNREVOKED_PARTITIONS   ack, rest free     ack, target drops more ack, some held
    UNRELEASED_PARTITIONS  all released       new target drops some  still waiting
    any                    -> removed: leave (epoch -1), session timeout, rebalance timeout

("ack": a heartbeat reports owned partitions without the pending ones. A member stays in
``UNREVOKED_PARTITIONS``, at its epoch, until then.) Removal is
:mod:`replica.group._membership`'s; this module only computes the next state.
"""

from __future__ import annotations

from lograft.protocol.topic_partition import TopicPartition
from replica.group._store import Group
from replica.group.records import CurrentAssignmentValue, MemberState

__all__ = ["is_free", "next_assignment"]


def next_assignment(
    group: Group,
    member_id: str,
    current: CurrentAssignmentValue,
    owned: frozenset[TopicPartition] | None,
) -> CurrentAssignmentValue:
    """The member's next assignment state (the reconciliation table).

    ``owned`` is what its heartbeat reports owning (None: not reported).
    """
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
    free = frozenset(tp for tp in wanted if is_free(group, tp, member_id))
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


def is_free(group: Group, tp: TopicPartition, member_id: str) -> bool:
    """Whether ``member_id`` may take ``tp``: no other member holds it."""
    return group.owners.get(tp, member_id) == member_id
