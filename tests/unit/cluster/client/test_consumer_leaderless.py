"""A partition without a leader holds up no other partition of a consumer.

As Kafka's consumer does, each partition's offset lookup and fetch go to its own leader: a
partition whose metadata names no leader (or a leader that does not answer) is retried in
the background with fresh metadata, while the records of the others are delivered. Against
the in-process fake broker and coordinator of ``test_consumer_groups``, whose metadata is
told which partitions have no leader (or a leader at an address nothing listens on).

``lograft consume`` names such a partition once on stderr when it stays so for a few
seconds; ``_StalledNotices`` is checked here against a scripted consumer.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any, cast

import pytest

from cluster.cli import consume
from cluster.client import Consumer, TopicPartition
from lograft.protocol.errors import LeaderNotAvailableError
from lograft.protocol.wire import broker_pb2 as pb
from tests.integration.nodes import free_port
from tests.unit.consumer_fixtures import FakeGroupBroker, Recorder, consumer_config, serve

A0, A1 = TopicPartition("a", 0), TopicPartition("a", 1)
DEAD_NODE = 2


class LeaderlessBroker(FakeGroupBroker):
    """The fake, whose metadata gives the partitions of ``leaderless`` no leader, and those
    of ``unreachable`` broker 2, at an address where nothing listens."""

    def __init__(self) -> None:
        super().__init__()
        self.leaderless: set[TopicPartition] = set()
        self.unreachable: set[TopicPartition] = set()
        self.dead_port = free_port()

    def Metadata(self, request: Any, context: Any) -> Any:
        response = super().Metadata(request, context)
        with self.cond:
            leaderless, unreachable = set(self.leaderless), set(self.unreachable)
        if unreachable:
            response.brokers.append(
                pb.BrokerMetadata(node_id=DEAD_NODE, host="127.0.0.1", port=self.dead_port)
            )
        for topic in response.topics:
            for p in topic.partitions:
                tp = TopicPartition(topic.name, p.partition)
                if tp in leaderless:
                    p.leader_id = -1
                elif tp in unreachable:
                    p.leader_id = DEAD_NODE
        return response

    def heal(self) -> None:
        """Every partition is led by this broker again."""
        with self.cond:
            self.leaderless.clear()
            self.unreachable.clear()


@pytest.fixture
def fake() -> Iterator[LeaderlessBroker]:
    broker = LeaderlessBroker()
    server = serve(broker)
    broker.add_topic("a", 2)
    try:
        yield broker
    finally:
        server.stop(grace=None)


def _stall(fake: LeaderlessBroker, how: str, tp: TopicPartition) -> None:
    with fake.cond:
        (fake.leaderless if how == "no leader" else fake.unreachable).add(tp)


@pytest.mark.parametrize("how", ["no leader", "leader unreachable"])
def test_assigned_partitions_are_read_while_one_has_no_leader(
    fake: LeaderlessBroker, how: str
) -> None:
    fake.produce(A0, 3)
    _stall(fake, how, A1)
    seen = Recorder()
    with Consumer(consumer_config(fake, group_id=None, max_poll_records=10)) as consumer:
        consumer.assign([A0, A1])
        consumer.seek_to_beginning()
        seen.poll_until(consumer, lambda: len(seen.records(A0)) == 3, "the records of a-0")
        assert seen.records(A0) == [0, 1, 2]
        assert seen.records(A1) == []
        assert consumer.position(A0) == 3
        stalled = consumer._stalled_partitions(0)
        assert list(stalled) == [A1]
        if how == "no leader":
            assert stalled[A1] == "LEADER_NOT_AVAILABLE: a-1"
        else:
            assert stalled[A1].startswith(f"NETWORK_EXCEPTION: broker {DEAD_NODE} at ")

        # Its leader is back: a-1's position is found in the background, its records come.
        fake.heal()
        fake.produce(A1, 2)
        seen.poll_until(consumer, lambda: len(seen.records(A1)) == 2, "the records of a-1")
        assert seen.records(A1) == [0, 1]
        assert seen.records(A0) == [0, 1, 2], "nothing read twice"
        assert consumer._stalled_partitions(0) == {}


def test_group_member_reads_and_commits_partitions_that_have_a_leader(
    fake: LeaderlessBroker,
) -> None:
    fake.produce(A0, 2)
    # No committed offsets: both start where auto.offset.reset says, asked of their leaders.
    _stall(fake, "no leader", A1)
    fake.set_target({A0, A1})
    seen = Recorder()
    with Consumer(consumer_config(fake, enable_auto_commit=False, max_poll_records=10)) as consumer:
        consumer.subscribe(["a"], on_assign=seen.on_assign, on_revoke=seen.on_revoke)
        seen.poll_until(consumer, lambda: len(seen.records(A0)) == 2, "the records of a-0")
        assert seen.callbacks() == [("assign", [A0, A1])]
        assert seen.records(A0) == [0, 1]
        assert seen.records(A1) == []
        # Only what poll returned is committed: a-1 has no position yet, so nothing of it.
        assert consumer.commit() == {A0: 2}
        assert fake.committed == {A0: 2}

        fake.heal()
        fake.produce(A1, 1)
        seen.poll_until(consumer, lambda: bool(seen.records(A1)), "the record of a-1")
        assert seen.records(A1) == [0]
        assert consumer.commit() == {A0: 2, A1: 1}


class ScriptedConsumer:
    """What ``_StalledNotices`` asks of a consumer: its partitions, and the stalled ones
    with the milliseconds since they stalled."""

    def __init__(self, partitions: set[TopicPartition]) -> None:
        self.partitions = partitions
        self.stalled_ms: dict[TopicPartition, tuple[int, str]] = {}

    def assignment(self) -> set[TopicPartition]:
        return set(self.partitions)

    def _stalled_partitions(self, min_ms: int) -> dict[TopicPartition, str]:
        return {tp: why for tp, (ms, why) in self.stalled_ms.items() if ms >= min_ms}


def test_consume_names_a_stalled_partition_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=consume.__name__)
    scripted = ScriptedConsumer({A0, A1})
    consumer = cast(Consumer, scripted)
    notices = consume._StalledNotices(start=0.0)
    no_leader = str(LeaderNotAvailableError("a-1"))
    warn_s = consume.STALLED_WARNING_MS / 1000.0
    now = warn_s

    def check(times: int = 1) -> None:
        nonlocal now
        for _ in range(times):
            now += 1.0
            notices.check(consumer, now)

    def lines() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == consume.__name__]

    scripted.stalled_ms[A1] = (consume.STALLED_WARNING_MS - 1, no_leader)
    check()
    assert lines() == [], "not before STALLED_WARNING_MS"
    scripted.stalled_ms[A1] = (consume.STALLED_WARNING_MS, no_leader)
    check(5)
    named = "partition a-1 has no leader; waiting for one (other partitions are read)"
    assert lines() == [named]

    # Read again, then stalled anew (its leader does not answer): named again, once.
    del scripted.stalled_ms[A1]
    check()
    unreachable = "NETWORK_EXCEPTION: broker 2 at 127.0.0.1:1: connection refused"
    scripted.stalled_ms[A1] = (consume.STALLED_WARNING_MS, unreachable)
    check(3)
    assert lines() == [
        named,
        f"partition a-1 cannot be read from its leader ({unreachable}); retrying "
        "(other partitions are read)",
    ]

    # The only partition read: nothing else is read meanwhile, so the line does not say so.
    caplog.clear()
    alone = ScriptedConsumer({A0})
    alone.stalled_ms[A0] = (consume.STALLED_WARNING_MS, str(LeaderNotAvailableError("a-0")))
    first = consume._StalledNotices(start=0.0)
    first.check(cast(Consumer, alone), warn_s - 0.001)
    assert lines() == [], "no partition can have stalled that long yet: not even asked"
    first.check(cast(Consumer, alone), warn_s)
    assert lines() == ["partition a-0 has no leader; waiting for one"]
