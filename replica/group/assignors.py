"""Server-side partition assignors: pure, deterministic functions of the group's members.

An assignor takes each member's subscribed topics and each topic's partition count and
returns, for *every* member, the partitions it should own (possibly none). Topics that do
not exist (absent from the counts, or with zero partitions) are ignored. Same input, same
output: no randomness, members and partitions are always taken in sorted order.

* ``range`` -- Kafka's range assignor, topic by topic: the members subscribed to a topic,
  sorted by member id, get consecutive runs of its partitions; the first
  ``partitions % members`` get one more. Partition *i* of co-partitioned topics therefore
  lands on the same member (what joins over keys need). Balanced *per topic* (counts differ
  by at most one); over several topics the first members carry the remainders of each.
* ``roundrobin`` (alias ``uniform``, Kafka's name for its server-side default) -- balanced
  over all partitions and *sticky*: given the previous assignment, members keep what they
  had as far as balance allows, so a rebalance moves as few partitions as it can. When all
  members subscribe to the same topics, counts differ by at most one. When subscriptions
  differ, no partition can be moved to another subscribed member that owns two or more
  fewer (a local optimum; a perfect balance may need chains of moves). Without a previous
  assignment partitions are dealt in ``(topic, partition)`` order to the member with the
  fewest, which is round-robin dealing for identical subscriptions.

:func:`assign` dispatches by name; :func:`canonical_assignor` maps aliases and refuses
unknown names with ``UNSUPPORTED_ASSIGNOR``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping

from lograft.protocol.errors import UnsupportedAssignorError
from lograft.protocol.topic_partition import TopicPartition

__all__ = [
    "ASSIGNOR_ALIASES",
    "ASSIGNOR_NAMES",
    "RANGE",
    "ROUNDROBIN",
    "Assignment",
    "assign",
    "assign_range",
    "assign_roundrobin",
    "canonical_assignor",
]

RANGE = "range"
"""The range assignor's name (Kafka's ``RangeAssignor``, KIP-848 ``range``)."""
ROUNDROBIN = "roundrobin"
"""The round-robin assignor's name (KIP-848's ``uniform`` is an alias of it)."""
ASSIGNOR_NAMES = (ROUNDROBIN, RANGE)
"""Every assignor this module implements, by canonical name."""
ASSIGNOR_ALIASES = {"uniform": ROUNDROBIN}
"""Other names accepted for an assignor."""

Assignment = dict[str, frozenset[TopicPartition]]
"""Member id -> the partitions it owns."""


def canonical_assignor(name: str) -> str:
    """The canonical name of assignor ``name`` (``uniform`` -> ``roundrobin``).

    Raises ``UNSUPPORTED_ASSIGNOR`` for a name this module does not implement.
    """
    canonical = ASSIGNOR_ALIASES.get(name, name)
    if canonical not in ASSIGNOR_NAMES:
        known = ", ".join(sorted((*ASSIGNOR_NAMES, *ASSIGNOR_ALIASES)))
        raise UnsupportedAssignorError(f"assignor {name!r} is not one of {known}")
    return canonical


def _existing(
    subscriptions: Mapping[str, Collection[str]], counts: Mapping[str, int]
) -> dict[str, frozenset[str]]:
    """Each member's subscribed topics that exist."""
    return {
        m: frozenset(t for t in subscriptions[m] if counts.get(t, 0) > 0) for m in subscriptions
    }


def assign_range(
    subscriptions: Mapping[str, Collection[str]],
    partition_counts: Mapping[str, int],
) -> Assignment:
    """Kafka's range assignment (see the module docstring)."""
    subs = _existing(subscriptions, partition_counts)
    out: dict[str, set[TopicPartition]] = {m: set() for m in subs}
    for topic in sorted(set().union(*subs.values())):
        subscribers = sorted(m for m in subs if topic in subs[m])
        quota, extra = divmod(partition_counts[topic], len(subscribers))
        start = 0
        for i, member in enumerate(subscribers):
            length = quota + (1 if i < extra else 0)
            out[member].update(TopicPartition(topic, p) for p in range(start, start + length))
            start += length
    return {m: frozenset(parts) for m, parts in out.items()}


def assign_roundrobin(
    subscriptions: Mapping[str, Collection[str]],
    partition_counts: Mapping[str, int],
    previous: Mapping[str, Collection[TopicPartition]] | None = None,
) -> Assignment:
    """Balanced, sticky assignment (Kafka's ``uniform``; see the module docstring)."""
    subs = _existing(subscriptions, partition_counts)
    members = sorted(subs)
    if not members:
        return {}
    topics = sorted(set().union(*subs.values()))
    partitions = [TopicPartition(t, p) for t in topics for p in range(partition_counts[t])]
    prev = previous or {}
    if len(set(subs.values())) == 1:
        owned = _uniform_identical(members, partitions, prev)
    else:
        owned = _uniform_general(members, subs, partitions, prev)
    return {m: frozenset(owned[m]) for m in members}


def _uniform_identical(
    members: list[str],
    partitions: list[TopicPartition],
    previous: Mapping[str, Collection[TopicPartition]],
) -> dict[str, set[TopicPartition]]:
    """Every member subscribes to every partition: quotas of ``n // m``, ``n % m`` get +1."""
    quota, extras = divmod(len(partitions), len(members))
    valid = set(partitions)
    claimed: set[TopicPartition] = set()
    kept: dict[str, list[TopicPartition]] = {}
    for member in members:
        mine = sorted(tp for tp in _prev_of(previous, member) if tp in valid and tp not in claimed)
        kept[member] = mine
        claimed.update(mine)
    capacity: dict[str, int] = {}
    for member in members:  # members that had more than the quota keep one extra first
        if len(kept[member]) > quota and extras > 0:
            capacity[member] = quota + 1
            extras -= 1
        else:
            capacity[member] = quota
    for member in members:  # then the remaining extra slots, in member order
        if extras == 0:
            break
        if capacity[member] == quota:
            capacity[member] = quota + 1
            extras -= 1
    owned = {m: set(kept[m][: capacity[m]]) for m in members}
    taken = set().union(*owned.values())
    pool = [tp for tp in partitions if tp not in taken]
    needy = [m for m in members if len(owned[m]) < capacity[m]]
    i = 0
    for tp in pool:  # deal round-robin to the members below their capacity
        while len(owned[needy[i % len(needy)]]) >= capacity[needy[i % len(needy)]]:
            i += 1
        owned[needy[i % len(needy)]].add(tp)
        i += 1
    return owned


def _prev_of(
    previous: Mapping[str, Collection[TopicPartition]], member: str
) -> Collection[TopicPartition]:
    """``previous[member]``, or nothing."""
    return previous.get(member, ())


def _uniform_general(
    members: list[str],
    subs: Mapping[str, frozenset[str]],
    partitions: list[TopicPartition],
    previous: Mapping[str, Collection[TopicPartition]],
) -> dict[str, set[TopicPartition]]:
    """Subscriptions differ: keep what is still valid, place the rest, then even out."""
    eligible = {tp: [m for m in members if tp.topic in subs[m]] for tp in partitions}
    owned: dict[str, set[TopicPartition]] = {m: set() for m in members}
    owner: dict[TopicPartition, str] = {}
    for member in members:
        for tp in sorted(_prev_of(previous, member)):
            if tp in eligible and tp not in owner and tp.topic in subs[member]:
                owner[tp] = member
                owned[member].add(tp)
    unplaced = sorted(
        (tp for tp in partitions if tp not in owner),
        key=lambda tp: (
            len(eligible[tp]),
            tp,
        ),
    )
    for tp in unplaced:
        best = min(eligible[tp], key=lambda m: (len(owned[m]), m))
        owner[tp] = best
        owned[best].add(tp)
    while True:  # each move lowers the sum of squared counts, so this ends
        moved = False
        for a in sorted(members, key=lambda m: (-len(owned[m]), m)):
            for tp in sorted(owned[a]):
                b = min(eligible[tp], key=lambda m: (len(owned[m]), m))
                if len(owned[b]) <= len(owned[a]) - 2:
                    owned[a].discard(tp)
                    owned[b].add(tp)
                    moved = True
                    break
            if moved:
                break
        if not moved:
            return owned


_ASSIGNORS: dict[
    str,
    Callable[
        [
            Mapping[str, Collection[str]],
            Mapping[str, int],
            Mapping[str, Collection[TopicPartition]] | None,
        ],
        Assignment,
    ],
] = {
    RANGE: lambda subs, counts, previous: assign_range(subs, counts),
    ROUNDROBIN: assign_roundrobin,
}


def assign(
    assignor: str,
    subscriptions: Mapping[str, Collection[str]],
    partition_counts: Mapping[str, int],
    previous: Mapping[str, Collection[TopicPartition]] | None = None,
) -> Assignment:
    """Run assignor ``assignor`` (any accepted name); ``previous`` makes it sticky if it can be.

    ``subscriptions`` maps each member id to its subscribed topics; ``partition_counts``
    maps each existing topic to its number of partitions. Every member is in the result.
    """
    return _ASSIGNORS[canonical_assignor(assignor)](subscriptions, partition_counts, previous)
