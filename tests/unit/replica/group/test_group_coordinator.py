"""The group coordinator (KIP-848): membership, cooperative reconciliation, timeouts,
offsets, typed errors for bad input, and failover by replaying the persisted records.

Each claim of the module docstring of ``replica/group/coordinator.py`` has a test here.
``_Member`` is a well-behaved consumer: it gives up what an answer no longer lists and takes
what it lists, and reports what it owns on its next heartbeat.
"""

# Over 600 lines: the group coordinator core's tests, beside the helpers they all share.
from __future__ import annotations

import dataclasses
import logging
import random
from collections.abc import Iterable

import pytest

import replica.group
from lograft.protocol.errors import (
    CoordinatorLoadInProgressError,
    FencedMemberEpochError,
    GroupIdNotFoundError,
    GroupMaxSizeReachedError,
    GroupNotEmptyError,
    InvalidGroupIdError,
    InvalidRequestError,
    InvalidSessionTimeoutError,
    InvalidTopicError,
    LograftError,
    NotCoordinatorError,
    OffsetMetadataTooLargeError,
    StaleMemberEpochError,
    UnassignedPartitionError,
    UnknownMemberIdError,
    UnknownTopicOrPartitionError,
    UnsupportedAssignorError,
)
from lograft.protocol.topic_partition import TopicPartition as TP
from replica.group import (
    CoordinatorState,
    GroupCoordinator,
    GroupCoordinatorConfig,
    GroupInvariantError,
    GroupLoggers,
    GroupRecord,
    GroupState,
    HeartbeatResult,
    MemberState,
    OffsetAndMetadata,
    OffsetCommitKey,
    PartitionLag,
    decode,
    encode,
    partition_for_group,
)

# The cores' logger in these tests (their shells pass the real ones).
CORE_LOG = logging.getLogger(__name__)
GROUP_LOGGERS = GroupLoggers(CORE_LOG, CORE_LOG, CORE_LOG)

SESSION_MS = 1_000
REBALANCE_MS = 500
CONFIG = GroupCoordinatorConfig(
    session_timeout_ms=SESSION_MS,
    min_session_timeout_ms=100,
    max_session_timeout_ms=60_000,
    heartbeat_interval_ms=100,
    max_group_size=10,
)


def _t(*partitions: int, topic: str = "t") -> frozenset[TP]:
    return frozenset(TP(topic, p) for p in partitions)


class _Log:
    """What the shell would have appended to ``__consumer_offsets``, as bytes."""

    def __init__(self) -> None:
        self.entries: list[tuple[bytes, bytes | None]] = []

    def add(self, records: Iterable[GroupRecord]) -> None:
        self.entries.extend(encode(r) for r in records)

    def records(self) -> list[GroupRecord]:
        return [decode(k, v) for k, v in self.entries]

    def compacted(self) -> list[GroupRecord]:
        latest: dict[bytes, int] = {k: i for i, (k, _) in enumerate(self.entries)}
        return [decode(k, v) for i, (k, v) in enumerate(self.entries) if latest[k] == i]


def _coordinator(
    topics: dict[str, int] | None = None, config: GroupCoordinatorConfig = CONFIG, seed: int = 1
) -> tuple[GroupCoordinator, _Log]:
    coordinator = GroupCoordinator(random.Random(seed), config, loggers=GROUP_LOGGERS)
    coordinator.replay([])
    log = _Log()
    log.add(coordinator.complete_load({"t": 6} if topics is None else topics, 0))
    return coordinator, log


class _Member:
    """A well-behaved consumer: takes each assignment at once, reports what it owns."""

    def __init__(
        self,
        coordinator: GroupCoordinator,
        log: _Log,
        topics: Iterable[str] = ("t",),
        assignor: str | None = None,
        group: str = "g",
    ) -> None:
        self.c, self.log, self.group = coordinator, log, group
        self.topics, self.assignor = tuple(topics), assignor
        self.member_id, self.epoch = "", 0
        self.owned: frozenset[TP] = frozenset()
        self.revoked: list[frozenset[TP]] = []

    def join(self, now_ms: int) -> HeartbeatResult:
        result = self.c.heartbeat(
            self.group,
            self.member_id,
            0,
            now_ms=now_ms,
            rebalance_timeout_ms=REBALANCE_MS,
            subscribed_topics=self.topics,
            assignor=self.assignor,
            client_id="test",
        )
        return self._take(result)

    def beat(self, now_ms: int, *, report: bool = True) -> HeartbeatResult:
        result = self.c.heartbeat(
            self.group,
            self.member_id,
            self.epoch,
            now_ms=now_ms,
            rebalance_timeout_ms=REBALANCE_MS,
            owned_partitions=self.owned if report else None,
        )
        return self._take(result)

    def leave(self, now_ms: int) -> HeartbeatResult:
        result = self.c.heartbeat(self.group, self.member_id, -1, now_ms=now_ms)
        self.log.add(result.records)
        self.owned = frozenset()
        return result

    def _take(self, result: HeartbeatResult) -> HeartbeatResult:
        self.log.add(result.records)
        self.member_id, self.epoch = result.member_id, result.member_epoch
        if result.assignment is not None:
            if self.owned - result.assignment:
                self.revoked.append(self.owned - result.assignment)
            self.owned = result.assignment
        self.c.check_invariants()
        return result


def _settle(members: list[_Member], now_ms: int, rounds: int = 6) -> int:
    """Heartbeat round after round until the group is Stable; checks ownership each step."""
    for _ in range(rounds):
        for m in members:
            m.beat(now_ms)
            now_ms += 1
            _assert_exclusive(members)
        if members[0].c.describe(members[0].group).state is GroupState.STABLE:
            return now_ms
    raise AssertionError(f"not stable after {rounds} rounds: {members[0].c.describe('g')}")


def _assert_exclusive(members: list[_Member]) -> None:
    seen: dict[TP, str] = {}
    for m in members:
        for tp in m.owned:
            assert tp not in seen, f"{tp} owned by {seen[tp]} and {m.member_id}"
            seen[tp] = m.member_id


def _group_of(
    n: int, topics: dict[str, int] | None = None, assignor: str | None = None
) -> tuple[GroupCoordinator, _Log, list[_Member], int]:
    c, log = _coordinator(topics)
    members = [
        _Member(c, log, topics=sorted(topics or {"t": 6}), assignor=assignor) for _ in range(n)
    ]
    for i, m in enumerate(members):
        m.join(i)
    now = _settle(members, 10)
    return c, log, members, now


# ---- joining and the balanced assignment --------------------------------------------------------


def test_a_join_creates_the_group_gives_an_id_an_epoch_and_an_assignment() -> None:
    c, log = _coordinator()
    result = _Member(c, log).join(0)
    assert len(result.member_id) == 22 and result.member_epoch == 1
    assert result.assignment == _t(0, 1, 2, 3, 4, 5)
    assert result.heartbeat_interval_ms == 100
    described = c.describe("g")
    assert (described.group_epoch, described.assignment_epoch) == (1, 1)
    assert described.state is GroupState.STABLE and described.assignor == "roundrobin"
    assert described.members[0].client_id == "test"
    kinds = [type(r.key).__name__ for r in result.records]
    assert kinds == [
        "MemberMetadataKey",
        "TargetAssignmentKey",
        "GroupMetadataKey",
        "CurrentAssignmentKey",
    ]


@pytest.mark.parametrize("assignor", ["range", "roundrobin", "uniform"])
def test_three_consumers_over_six_partitions_get_two_each(assignor: str) -> None:
    c, _, members, _ = _group_of(3, assignor=assignor)
    assert sorted(len(m.owned) for m in members) == [2, 2, 2]
    assert frozenset().union(*(m.owned for m in members)) == _t(0, 1, 2, 3, 4, 5)
    described = c.describe("g")
    assert described.assignor == ("range" if assignor == "range" else "roundrobin")
    assert all(d.member_epoch == described.assignment_epoch for d in described.members)


def test_member_ids_come_from_the_seeded_random() -> None:
    ids = []
    for _ in range(2):
        c, log = _coordinator(seed=7)
        ids.append(_Member(c, log).join(0).member_id)
    assert ids[0] == ids[1]


def test_a_client_chosen_member_id_is_kept() -> None:
    c, log = _coordinator()
    m = _Member(c, log)
    m.member_id = "my-own-id"
    assert m.join(0).member_id == "my-own-id"


def test_the_heartbeat_interval_is_at_most_a_third_of_the_session() -> None:
    c, _ = _coordinator()
    result = c.heartbeat(
        "g",
        "",
        0,
        now_ms=0,
        rebalance_timeout_ms=1,
        subscribed_topics=["t"],
        session_timeout_ms=150,
    )
    assert result.heartbeat_interval_ms == 50


# ---- the cooperative rebalance ------------------------------------------------------------------


def test_a_new_consumer_takes_over_partitions_without_the_others_stopping() -> None:
    c, log, members, now = _group_of(3)
    before = {m.member_id: m.owned for m in members}
    newcomer = _Member(c, log)
    first = newcomer.join(now)
    assert first.assignment == frozenset(), "nothing is free yet: it waits for releases"
    everyone = [*members, newcomer]
    now = _settle(everyone, now + 1)
    assert sorted(len(m.owned) for m in everyone) == [1, 1, 2, 2]
    for m in members:
        kept = before[m.member_id] & m.owned
        assert kept, "an old member kept at least one partition"
        for revoked in m.revoked:
            assert not revoked & kept, "partitions a member keeps are never revoked"
    moved = sum(len(before[m.member_id] - m.owned) for m in members)
    assert moved == 1 and len(newcomer.owned) == 1


def test_a_partition_moves_only_after_its_owner_released_it() -> None:
    c, log, members, now = _group_of(2)
    newcomer = _Member(c, log)
    assert newcomer.join(now).assignment == frozenset()
    for m in members:  # told to give one partition up; they do, but do not report it yet
        m.beat(now + 1, report=False)
    described = {d.member_id: d for d in c.describe("g").members}
    pending = frozenset().union(*(d.pending_revocation for d in described.values()))
    assert len(pending) == 2 and pending == described[newcomer.member_id].target_assignment
    assert described[newcomer.member_id].state is MemberState.UNRELEASED_PARTITIONS
    assert newcomer.beat(now + 2).assignment == frozenset(), "still held by their owners"
    for m in members:  # now they report owned partitions without the revoked ones
        m.beat(now + 3)
    assert newcomer.beat(now + 4).assignment == pending
    assert c.describe("g").state is GroupState.STABLE


def test_a_member_that_does_not_revoke_in_time_is_removed_and_its_partitions_move() -> None:
    c, log, members, now = _group_of(1)
    old = members[0]
    newcomer = _Member(c, log)
    newcomer.join(now)
    old.beat(now, report=False)  # told to revoke; it never reports back
    assert (
        c.describe("g").members[0].pending_revocation
        or c.describe("g").members[1].pending_revocation
    )
    assert c.tick(now + REBALANCE_MS - 1).expired == ()
    tick = c.tick(now + REBALANCE_MS)
    log.add(tick.records)
    assert [(e.member_id, e.reason) for e in tick.expired] == [(old.member_id, "rebalance_timeout")]
    assert newcomer.beat(now + REBALANCE_MS + 1).assignment == _t(0, 1, 2, 3, 4, 5)
    with pytest.raises(UnknownMemberIdError):
        old.beat(now + REBALANCE_MS + 2)


def test_killing_a_consumer_rebalances_within_the_session_timeout_and_keeps_offsets() -> None:
    c, log, members, now = _group_of(3)
    for i, m in enumerate(members):
        result = c.commit_offsets(
            "g", m.member_id, m.epoch, {tp: OffsetAndMetadata(100 + i) for tp in m.owned}, now
        )
        assert set(result.errors.values()) == {None}
        log.add(result.records)
    committed = c.fetch_offsets("g")
    for m in members:
        m.beat(now)
    last_beat = now
    survivors = members[1:]
    for m in survivors:  # the survivors keep heartbeating; members[0] is killed
        m.beat(now + SESSION_MS - 1)
    assert c.tick(last_beat + SESSION_MS - 1).expired == ()
    tick = c.tick(last_beat + SESSION_MS)
    log.add(tick.records)
    assert [e.reason for e in tick.expired] == ["session_timeout"]
    assert c.next_deadline_ms() is not None
    _settle(survivors, last_beat + SESSION_MS + 1)
    assert sorted(len(m.owned) for m in survivors) == [3, 3]
    assert c.fetch_offsets("g") == committed, "no committed offset lost or moved"


def test_a_leaving_member_is_removed_at_once() -> None:
    c, _log, members, now = _group_of(2)
    result = members[0].leave(now)
    assert result.member_epoch == -1 and result.assignment is None
    described = c.describe("g")
    assert [d.member_id for d in described.members] == [members[1].member_id]
    assert described.group_epoch == 3, "two joins and a leave"
    members[1].beat(now + 1)
    assert members[1].owned == _t(0, 1, 2, 3, 4, 5)
    with pytest.raises(UnknownMemberIdError):
        members[0].leave(now + 2)


def test_topic_metadata_changes_reassign() -> None:
    c, log, members, now = _group_of(2, topics={"t": 2, "u": 0})
    log.add(c.on_topic_metadata({"t": 4, "u": 2}))
    assert c.describe("g").topic_partitions == {"t": 4, "u": 2}
    now = _settle(members, now)
    assert frozenset().union(*(m.owned for m in members)) == _t(0, 1, 2, 3) | _t(0, 1, topic="u")
    assert c.on_topic_metadata({"t": 4, "u": 2}) == (), "nothing changed, no new epoch"
    log.add(c.on_topic_metadata({"t": 4}))  # u deleted: its partitions are revoked
    _settle(members, now)
    assert all(tp.topic == "t" for m in members for tp in m.owned)


def test_a_subscription_change_reassigns() -> None:
    c, _log, members, now = _group_of(2, topics={"t": 2, "u": 2})
    assert all(m.owned for m in members)
    epoch = c.describe("g").group_epoch
    result = c.heartbeat(
        "g", members[0].member_id, members[0].epoch, now_ms=now, subscribed_topics=["u"]
    )
    members[0]._take(result)
    assert c.describe("g").group_epoch == epoch + 1
    _settle(members, now + 1)
    assert all(tp.topic == "u" for tp in members[0].owned)


def test_the_group_uses_the_assignor_most_members_name() -> None:
    c, log = _coordinator()
    for name in ("range", "range", "uniform"):
        _Member(c, log, assignor=name).join(0)
    assert c.describe("g").assignor == "range"


# ---- epochs and fencing -------------------------------------------------------------------------


def test_member_epochs_are_validated() -> None:
    c, _log, members, now = _group_of(3)
    m = members[0]
    assert m.epoch == 3, "joined at 1, then at 3 once it gave partitions up (previous: 1)"
    with pytest.raises(FencedMemberEpochError, match="newer"):
        c.heartbeat("g", m.member_id, m.epoch + 1, now_ms=now)
    with pytest.raises(FencedMemberEpochError, match="older"):
        c.heartbeat("g", m.member_id, 2, now_ms=now, owned_partitions=m.owned)
    with pytest.raises(FencedMemberEpochError, match="not given"):
        c.heartbeat("g", m.member_id, m.epoch, now_ms=now, owned_partitions=_t(0, 1, 2, 3, 4, 5))
    with pytest.raises(UnknownMemberIdError):
        c.heartbeat("g", "nobody", 3, now_ms=now)
    with pytest.raises(GroupIdNotFoundError):
        c.heartbeat("other", m.member_id, 3, now_ms=now)
    assert FencedMemberEpochError.code == 110 and UnknownMemberIdError.code == 25


def test_the_previous_epoch_is_accepted_when_the_bump_was_lost() -> None:
    c, log, members, now = _group_of(1)
    m = members[0]
    newcomer = _Member(c, log)
    newcomer.join(now)
    m.beat(now)  # revocation
    old_epoch = m.epoch
    bumped = c.heartbeat("g", m.member_id, m.epoch, now_ms=now, owned_partitions=m.owned)
    log.add(bumped.records)
    assert bumped.member_epoch > old_epoch  # ... but this answer is "lost"
    again = c.heartbeat("g", m.member_id, old_epoch, now_ms=now + 1, owned_partitions=m.owned)
    assert again.member_epoch == bumped.member_epoch and again.assignment == m.owned
    with pytest.raises(FencedMemberEpochError):  # without owned partitions: fenced
        c.heartbeat("g", m.member_id, old_epoch, now_ms=now + 1)


def test_a_fenced_member_rejoins_with_its_id_and_its_epoch_does_not_go_back() -> None:
    _c, _log, members, now = _group_of(2)
    m = members[0]
    epoch, owned = m.epoch, m.owned
    m.owned = frozenset()  # it dropped everything after FENCED_MEMBER_EPOCH
    result = m.join(now)
    assert result.member_id == members[0].member_id
    assert result.member_epoch == epoch and result.assignment == owned


def test_a_rejoin_releases_pending_revocations() -> None:
    c, log, members, now = _group_of(1)
    m = members[0]
    _Member(c, log).join(now)
    m.beat(now, report=False)
    assert c.describe("g").state is GroupState.RECONCILING
    m.owned = frozenset()
    m.join(now + 1)
    states = {d.member_id: d.pending_revocation for d in c.describe("g").members}
    assert states[m.member_id] == frozenset()


# ---- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"group_id": ""}, InvalidGroupIdError),
        ({"group_id": "x" * 256}, InvalidGroupIdError),
        ({"group_id": "a\nb"}, InvalidGroupIdError),
        ({"member_epoch": -2}, InvalidRequestError),
        ({"subscribed_topics": None}, InvalidRequestError),
        ({"rebalance_timeout_ms": 0}, InvalidRequestError),
        ({"owned_partitions": [TP("t", 0)]}, InvalidRequestError),
        ({"assignor": "sticky"}, UnsupportedAssignorError),
        ({"session_timeout_ms": 50}, InvalidSessionTimeoutError),
        ({"session_timeout_ms": 10**6}, InvalidSessionTimeoutError),
        ({"subscribed_topics": ["bad topic"]}, InvalidTopicError),
        ({"subscribed_topics": "t"}, InvalidRequestError),
        ({"member_id": "m" * 256}, InvalidRequestError),
    ],
)
def test_bad_joins_get_typed_errors_and_change_nothing(
    kwargs: dict[str, object], error: type[LograftError]
) -> None:
    c, _log = _coordinator()
    args: dict[str, object] = {
        "group_id": "g",
        "member_id": "",
        "member_epoch": 0,
        "now_ms": 0,
        "rebalance_timeout_ms": 1000,
        "subscribed_topics": ["t"],
        **kwargs,
    }
    with pytest.raises(error):
        c.heartbeat(**args)  # type: ignore[arg-type]
    assert c.snapshot() == () and c.list_groups() == ()


def test_a_heartbeat_without_member_id_is_invalid() -> None:
    c, _log, _members, now = _group_of(1)
    with pytest.raises(InvalidRequestError):
        c.heartbeat("g", "", 3, now_ms=now)
    with pytest.raises(UnknownMemberIdError):
        c.heartbeat("g", "", -1, now_ms=now)


def test_a_full_group_refuses_new_members() -> None:
    config = dataclasses.replace(CONFIG, max_group_size=2)
    c, log = _coordinator(config=config)
    _Member(c, log).join(0)
    _Member(c, log).join(0)
    with pytest.raises(GroupMaxSizeReachedError):
        _Member(c, log).join(0)


def test_bad_config_is_refused() -> None:
    from lograft.protocol.errors import InvalidConfigError

    for bad in (
        {"heartbeat_interval_ms": 2_000},
        {"session_timeout_ms": 50},
        {"assignors": ("uniform",)},
        {"assignors": ()},
        {"max_group_size": 0},
    ):
        with pytest.raises(InvalidConfigError):
            dataclasses.replace(CONFIG, **bad)  # type: ignore[arg-type]


# ---- offsets ------------------------------------------------------------------------------------


def test_members_commit_only_their_partitions_at_their_epoch() -> None:
    c, _log, members, now = _group_of(2)
    a, b = members
    mine, theirs = sorted(a.owned)[0], sorted(b.owned)[0]
    result = c.commit_offsets(
        "g",
        a.member_id,
        a.epoch,
        {mine: OffsetAndMetadata(10, 3, "m"), theirs: OffsetAndMetadata(5)},
        now,
    )
    assert result.errors[mine] is None
    error = result.errors[theirs]
    assert isinstance(error, UnassignedPartitionError) and error.code == 134
    assert [r.key for r in result.records] == [OffsetCommitKey("g", mine.topic, mine.partition)]
    committed = c.fetch_offsets("g", [mine, theirs])
    assert committed[theirs] is None
    value = committed[mine]
    assert value is not None and (value.offset, value.leader_epoch, value.metadata) == (10, 3, "m")
    assert value.commit_timestamp_ms == now
    with pytest.raises(StaleMemberEpochError):
        c.commit_offsets("g", a.member_id, a.epoch - 1, {mine: OffsetAndMetadata(11)}, now)
    with pytest.raises(FencedMemberEpochError):
        c.commit_offsets("g", a.member_id, a.epoch + 1, {mine: OffsetAndMetadata(11)}, now)
    with pytest.raises(UnknownMemberIdError):
        c.commit_offsets("g", "nobody", a.epoch, {mine: OffsetAndMetadata(11)}, now)
    with pytest.raises(GroupIdNotFoundError):
        c.commit_offsets("nope", a.member_id, a.epoch, {mine: OffsetAndMetadata(11)}, now)
    with pytest.raises(UnknownMemberIdError, match="without members"):
        c.commit_offsets("g", "", -1, {mine: OffsetAndMetadata(11)}, now)


def test_committed_offsets_may_move_backwards() -> None:
    c, _log, members, now = _group_of(1)
    m = members[0]
    tp = sorted(m.owned)[0]
    for offset in (50, 20):
        c.commit_offsets("g", m.member_id, m.epoch, {tp: OffsetAndMetadata(offset)}, now)
    assert c.fetch_offsets("g", [tp])[tp].offset == 20  # type: ignore[union-attr]


def test_partitions_pending_revocation_can_still_be_committed() -> None:
    c, log, members, now = _group_of(1)
    m = members[0]
    _Member(c, log).join(now)
    before = m.owned
    m.beat(now)
    pending = before - m.owned
    assert pending
    result = c.commit_offsets(
        "g", m.member_id, m.epoch, {tp: OffsetAndMetadata(7) for tp in pending}, now
    )
    assert set(result.errors.values()) == {None}


def test_bad_offsets_get_per_partition_errors() -> None:
    c, _log, members, now = _group_of(1)
    m = members[0]
    p0, p1, p2, p3 = sorted(m.owned)[:4]
    result = c.commit_offsets(
        "g",
        m.member_id,
        m.epoch,
        {
            p0: OffsetAndMetadata(-1),
            p1: OffsetAndMetadata(1, -5),
            p2: OffsetAndMetadata(1, -1, "x" * 5000),
            p3: OffsetAndMetadata(9),
            TP("bad topic", 0): OffsetAndMetadata(1),
        },
        now,
    )
    assert isinstance(result.errors[p0], InvalidRequestError)
    assert isinstance(result.errors[p1], InvalidRequestError)
    assert isinstance(result.errors[p2], OffsetMetadataTooLargeError)
    assert isinstance(result.errors[TP("bad topic", 0)], InvalidTopicError)
    assert result.errors[p3] is None and len(result.records) == 1


def test_admin_commits_need_an_empty_group_and_create_it() -> None:
    c, _log = _coordinator()
    result = c.commit_offsets(
        "simple", "", -1, {TP("t", 0): OffsetAndMetadata(3), TP("t", 9): OffsetAndMetadata(1)}, 5
    )
    assert result.errors[TP("t", 0)] is None
    assert isinstance(result.errors[TP("t", 9)], UnknownTopicOrPartitionError)
    assert [g.group_id for g in c.list_groups()] == ["simple"]
    assert c.describe("simple").state is GroupState.EMPTY
    assert c.fetch_offsets("simple")[TP("t", 0)].offset == 3  # type: ignore[union-attr]


def test_fetching_offsets_of_an_unknown_group_finds_nothing() -> None:
    c, _ = _coordinator()
    assert c.fetch_offsets("fresh") == {}
    assert c.fetch_offsets("fresh", [TP("t", 0)]) == {TP("t", 0): None}
    with pytest.raises(InvalidGroupIdError):
        c.fetch_offsets("")


def test_reset_offsets_only_while_the_group_is_empty() -> None:
    c, _log, members, now = _group_of(1)
    tp = sorted(members[0].owned)[0]
    with pytest.raises(GroupNotEmptyError):
        c.reset_offsets("g", {tp: OffsetAndMetadata(0)}, now)
    c.commit_offsets("g", members[0].member_id, members[0].epoch, {tp: OffsetAndMetadata(9)}, now)
    members[0].leave(now)
    assert c.reset_offsets("g", {tp: OffsetAndMetadata(2)}, now).errors == {tp: None}
    assert c.fetch_offsets("g", [tp])[tp].offset == 2  # type: ignore[union-attr]
    result = c.reset_offsets("g", {tp: None}, now)
    assert [r.tombstone for r in result.records] == [True]
    assert c.fetch_offsets("g", [tp]) == {tp: None}


def test_lag_per_partition() -> None:
    c, _log, members, now = _group_of(1)
    m = members[0]
    c.commit_offsets("g", m.member_id, m.epoch, {TP("t", 0): OffsetAndMetadata(40)}, now)
    lag = c.lag("g", {TP("t", 0): 100, TP("t", 1): 7})
    assert lag == {TP("t", 0): PartitionLag(40, 100, 60), TP("t", 1): PartitionLag(None, 7, None)}
    with pytest.raises(GroupIdNotFoundError):
        c.lag("unknown", {})


def test_delete_group() -> None:
    c, _log, members, now = _group_of(1)
    m = members[0]
    c.commit_offsets("g", m.member_id, m.epoch, {TP("t", 0): OffsetAndMetadata(4)}, now)
    with pytest.raises(GroupNotEmptyError):
        c.delete_group("g")
    with pytest.raises(GroupIdNotFoundError):
        c.delete_group("other")
    m.leave(now)
    records = c.delete_group("g")
    assert all(r.tombstone for r in records) and records[-1].key == replica.group.GroupMetadataKey(
        "g"
    )
    assert c.list_groups() == () and c.fetch_offsets("g") == {}
    with pytest.raises(GroupIdNotFoundError):
        c.describe("g")


# ---- failover -----------------------------------------------------------------------------------


@pytest.mark.parametrize("compact", [False, True])
def test_a_new_coordinator_rebuilt_from_the_records_serves_the_same_state(compact: bool) -> None:
    c, log, members, now = _group_of(3)
    for m in members:
        result = c.commit_offsets(
            "g",
            m.member_id,
            m.epoch,
            {tp: OffsetAndMetadata(tp.partition * 10) for tp in m.owned},
            now,
        )
        log.add(result.records)
    members[2].leave(now)
    log.add(c.commit_offsets("simple", "", -1, {TP("t", 1): OffsetAndMetadata(1)}, now).records)
    now = _settle(members[:2], now + 1)

    successor = GroupCoordinator(random.Random(99), CONFIG, loggers=GROUP_LOGGERS)
    with pytest.raises(CoordinatorLoadInProgressError):
        successor.fetch_offsets("g")
    successor.replay(log.compacted() if compact else log.records())
    assert successor.snapshot() == c.snapshot()
    assert successor.complete_load({"t": 6}, now + 5) == ()
    assert successor.fetch_offsets("g") == c.fetch_offsets("g")
    assert successor.describe("g") == c.describe("g")
    for m in members[:2]:  # members go on with their epochs: no rejoin needed
        m.c = successor
        assert m.beat(now + 6).member_epoch == m.epoch
    assert successor.tick(now + 5 + SESSION_MS - 1).expired == ()
    assert [e.reason for e in successor.tick(now + 5 + SESSION_MS + 7).expired] == [
        "session_timeout",
        "session_timeout",
    ]


def test_replaying_into_an_inconsistent_state_is_refused() -> None:
    _c, log, _members, now = _group_of(2)
    records = log.records()
    dropped = [r for r in records if not isinstance(r.key, replica.group.MemberMetadataKey)]
    successor = GroupCoordinator(random.Random(1), CONFIG, loggers=GROUP_LOGGERS)
    successor.replay(dropped)
    with pytest.raises(replica.group.GroupRecordError, match="no member metadata"):
        successor.complete_load({"t": 6}, now)


def test_topics_that_changed_during_failover_reassign_on_load() -> None:
    c, log, _members, now = _group_of(2)
    successor = GroupCoordinator(random.Random(1), CONFIG, loggers=GROUP_LOGGERS)
    successor.replay(log.records())
    records = successor.complete_load({"t": 8}, now)
    assert records and successor.describe("g").group_epoch == c.describe("g").group_epoch + 1


def test_lifecycle() -> None:
    c = GroupCoordinator(random.Random(1), CONFIG, loggers=GROUP_LOGGERS)
    assert c.state is CoordinatorState.LOADING
    with pytest.raises(CoordinatorLoadInProgressError):
        c.heartbeat("g", "", 0, now_ms=0, rebalance_timeout_ms=1, subscribed_topics=["t"])
    c.complete_load({}, 0)
    with pytest.raises(GroupInvariantError):
        c.replay([])
    with pytest.raises(GroupInvariantError):
        c.complete_load({}, 0)
    c.close()
    with pytest.raises(NotCoordinatorError):
        c.list_groups()
    with pytest.raises(GroupInvariantError):
        c.close()


def test_describe_and_list() -> None:
    c, log, _members, now = _group_of(2)
    _Member(c, log, group="h").join(now)
    listing = {g.group_id: g.state for g in c.list_groups()}
    assert listing == {"g": GroupState.STABLE, "h": GroupState.STABLE}
    member = c.describe("g").members[0]
    assert member.subscribed_topics == ("t",) and member.assignment == member.target_assignment
    assert (member.rebalance_timeout_ms, member.session_timeout_ms) == (REBALANCE_MS, SESSION_MS)


def test_partition_for_group_is_kafkas() -> None:
    assert partition_for_group("hello", 50) == 99162322 % 50
    assert partition_for_group("a", 50) == 97 % 50
    assert partition_for_group("polygenelubricants", 50) == 0  # hashCode is Integer.MIN_VALUE
    with pytest.raises(InvalidRequestError):
        partition_for_group("g", 0)


# ---- public names --------------------------------------------------------------------------------


def test_the_results_are_frozen_values() -> None:
    for name in ("HeartbeatResult", "CommitResult", "GroupDescription", "OffsetAndMetadata"):
        cls = getattr(replica.group, name)
        assert cls.__dataclass_params__.frozen and "__slots__" in cls.__dict__


# ---- offsets committed in transactions ------------------------------------------------------


def test_transactional_offsets_wait_for_their_marker_and_survive_a_reload() -> None:
    c, log = _coordinator()
    log.add(c.commit_offsets("app", "", -1, {TP("t", 0): OffsetAndMetadata(5)}, 0).records)
    # Producer 7 commits offsets in its transaction; producer 8 in one it will abort.
    pending = c.txn_commit_offsets("app", "", -1, 7, {TP("t", 0): OffsetAndMetadata(9)}, 1)
    aborted = c.txn_commit_offsets("app", "", -1, 8, {TP("t", 1): OffsetAndMetadata(3)}, 1)
    assert pending.errors == {TP("t", 0): None} and aborted.errors == {TP("t", 1): None}
    assert c.fetch_offsets("app")[TP("t", 0)].offset == 5, "not committed before the marker"  # type: ignore[union-attr]
    assert TP("t", 1) not in c.fetch_offsets("app")
    assert c.unstable_partitions("app") == _t(0, 1)

    # What the log holds: the transactional batches, then the markers.
    successor = GroupCoordinator(random.Random(2), CONFIG, loggers=GROUP_LOGGERS)
    successor.replay(log.records())
    successor.replay_transactional(7, pending.records)
    successor.replay_transactional(8, aborted.records)

    assert c.complete_transaction(7, committed=True) == 1
    assert c.complete_transaction(8, committed=False) == 1
    assert c.complete_transaction(7, committed=True) == 0, "a repeated marker ends nothing"
    assert c.fetch_offsets("app")[TP("t", 0)].offset == 9  # type: ignore[union-attr]
    assert TP("t", 1) not in c.fetch_offsets("app")
    assert c.unstable_partitions("app") == frozenset()

    successor.complete_transaction(7, committed=True)
    successor.complete_transaction(8, committed=False)
    successor.complete_load({"t": 6}, 2)
    assert successor.fetch_offsets("app") == c.fetch_offsets("app")
    assert successor.snapshot() == c.snapshot()


def test_a_transactional_commit_checks_the_member_it_names() -> None:
    """KIP-447: a consumer that lost its partitions (an old epoch) cannot commit them
    through a transaction; one that owns them can, and only them."""
    c, _log, members, now = _group_of(2)
    member = members[0]
    owned = sorted(member.owned)[0]
    other = sorted(members[1].owned)[0]
    with pytest.raises(StaleMemberEpochError):
        c.txn_commit_offsets(
            "g", member.member_id, member.epoch - 1, 7, {owned: OffsetAndMetadata(1)}, now
        )
    result = c.txn_commit_offsets(
        "g",
        member.member_id,
        member.epoch,
        7,
        {owned: OffsetAndMetadata(1), other: OffsetAndMetadata(1)},
        now,
    )
    assert result.errors[owned] is None
    assert isinstance(result.errors[other], UnassignedPartitionError)
    assert [r.key.topic_partition for r in result.records] == [owned]  # type: ignore[union-attr]
