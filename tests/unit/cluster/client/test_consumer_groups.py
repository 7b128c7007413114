"""Consumer groups in the Python ``Consumer``, against an in-process fake coordinator.

The fake is the fake broker of ``test_client_config`` (Metadata, Produce, Fetch,
ListOffsets in memory) plus a scripted group coordinator speaking the KIP-848 RPCs:
``FindCoordinator`` names itself, ``ConsumerGroupHeartbeat`` hands the one member the
assignment a test sets (bumping the member epoch when it changes) or the next scripted
error code, ``OffsetCommit``/``OffsetFetch`` keep offsets in a dict and answer scripted
errors. The real broker does not serve these RPCs yet.

The tests check what a user sees: callbacks with the right partitions in the right order,
no record of a partition after its revocation, positions from committed offsets,
auto-commit of only what ``poll`` returned, typed commit errors, the leave heartbeat on
close. Nothing sleeps: tests wait on the fake's condition or poll with a timeout.
"""

# Over 600 lines: the scripted fake group coordinator and the tests that script it.
from __future__ import annotations

import logging
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

from cluster.client import Consumer, ConsumerRebalanceListener, TopicPartition
from lograft.protocol.errors import IllegalStateError, InvalidTopicError, LograftError
from lograft.protocol.wire import broker_pb2_grpc as pb_grpc
from tests.unit.client_fixtures import FakeBroker
from tests.unit.consumer_fixtures import (
    STALE_MEMBER_EPOCH,
    WAIT_S,
    FakeGroupBroker,
    Recorder,
    consumer_config,
    owned_partitions,
    serve,
)

A0, A1 = TopicPartition("a", 0), TopicPartition("a", 1)
NOT_COORDINATOR = 16
ILLEGAL_GENERATION = 22
FENCED_MEMBER_EPOCH = 110


@pytest.fixture
def fake() -> Iterator[FakeGroupBroker]:
    broker = FakeGroupBroker()
    server = serve(broker)
    broker.add_topic("a", 2)
    try:
        yield broker
    finally:
        server.stop(grace=None)


def test_cooperative_rebalance_revokes_then_a_fence_loses_then_rejoins(
    fake: FakeGroupBroker,
) -> None:
    fake.produce(A0, 20)
    fake.produce(A1, 20)
    fake.committed[A0] = 2  # a-0 starts at its committed offset, a-1 at auto.offset.reset
    fake.set_target({A0, A1})
    seen = Recorder()
    consumer = Consumer(
        consumer_config(
            fake, enable_auto_commit=False, session_timeout_ms=10000, max_poll_interval_ms=60000
        )
    )
    try:
        consumer.subscribe(
            ["a"], on_assign=seen.on_assign, on_revoke=seen.on_revoke, on_lost=seen.on_lost
        )
        seen.poll_until(consumer, lambda: bool(seen.records(A0) and seen.records(A1)), "both")
        assert seen.callbacks() == [("assign", [A0, A1])]
        assert seen.records(A0)[0] == 2 and seen.records(A1)[0] == 0

        join = fake.heartbeats[0]
        assert (join.group_id, join.member_id, join.member_epoch) == ("g", "", 0)
        assert list(join.subscribed_topic_names.names) == ["a"]
        assert join.server_assignor == "range" and join.client_id == "c-1"
        assert (join.session_timeout_ms, join.rebalance_timeout_ms) == (10000, 60000)
        assert owned_partitions(join) == set()
        fake.wait_for(lambda: fake.reported({A0, A1}), "owned {a-0, a-1} reported")

        # The coordinator moves a-1 away: it is revoked, a-0 goes on.
        fake.set_target({A0})
        fake.wait_until_received()  # so the revocation comes before any more records
        revoke = ("revoke", [A1])
        seen.poll_until(consumer, lambda: revoke in seen.events, "the revocation")
        cut = seen.events.index(revoke)
        seen.poll_until(consumer, lambda: 19 in seen.records(A0), "the rest of a-0")
        after = [e for e in seen.events[cut:] if e[0] == "record" and e[1][0] == A1]
        assert after == [], "a record of a revoked partition was returned"
        assert len(seen.records(A1)) < 20, "a-1 had records buffered when it was revoked"
        assert consumer.assignment() == {A0}
        assert seen.records(A0) == list(range(2, 20))
        fake.wait_for(lambda: fake.reported({A0}), "owned {a-0} reported")

        # Fenced: a-0 is lost (nothing committed), the member joins again and gets it back
        # from its committed offset.
        fake.heartbeat_errors.append(FENCED_MEMBER_EPOCH)
        seen.poll_until(consumer, lambda: ("lost", [A0]) in seen.events, "the loss")
        seen.poll_until(consumer, lambda: len(seen.records(A0)) > 18, "a-0 again")
        assert seen.callbacks() == [
            ("assign", [A0, A1]),
            ("revoke", [A1]),
            ("lost", [A0]),
            ("assign", [A0]),
        ]
        assert seen.records(A0)[18] == 2, "restarts at the committed offset"
        rejoin = [h for h in fake.heartbeats if h.member_epoch == 0][-1]
        assert rejoin.member_id == "m-1", "a fenced member keeps its id"
        assert fake.commits == [], "enable.auto.commit=false commits nothing"
    finally:
        consumer.close()
    assert seen.callbacks()[-1] == ("revoke", [A0]), "close revokes"
    last = fake.heartbeats[-1]
    assert (last.member_id, last.member_epoch) == ("m-1", -1), "close leaves the group"


def test_auto_commit_commits_only_what_poll_returned_before_revoke_and_on_close(
    fake: FakeGroupBroker,
) -> None:
    fake.produce(A0, 20)
    fake.produce(A1, 20)
    fake.set_target({A0, A1})
    seen = Recorder()
    committed_at_revoke: list[Any] = []

    def on_revoke(consumer: Consumer, partitions: list[TopicPartition]) -> None:
        seen.on_revoke(consumer, partitions)
        committed_at_revoke.extend(fake.commits)

    consumer = Consumer(consumer_config(fake, auto_commit_interval_ms=3_600_000))
    try:
        consumer.subscribe(["a"], on_assign=seen.on_assign, on_revoke=on_revoke)
        seen.poll_until(consumer, lambda: len(seen.records(A1)) >= 3, "three of a-1")
        assert fake.commits == [], "the interval has not passed"
        fake.set_target({A0})
        seen.poll_until(consumer, lambda: ("revoke", [A1]) in seen.events, "the revocation")
        (before_revoke,) = committed_at_revoke
        offsets = {
            (t.name, p.partition): p.committed_offset
            for t in before_revoke.topics
            for p in t.partitions
        }
        assert offsets == {("a", 1): seen.records(A1)[-1] + 1}
        # Sent with the epoch that came with the new assignment, as the coordinator expects.
        assert (before_revoke.member_id, before_revoke.member_epoch) == ("m-1", 2)
        seen.poll_until(consumer, lambda: len(seen.records(A0)) >= 5, "five of a-0")
        last_a0 = seen.records(A0)[-1]
    finally:
        consumer.close()
    final = fake.commits[-1]
    assert [
        (t.name, p.partition, p.committed_offset) for t in final.topics for p in t.partitions
    ] == [("a", 0, last_a0 + 1)]
    assert final.member_epoch == 2
    assert fake.committed == {A1: seen.records(A1)[-1] + 1, A0: last_a0 + 1}
    assert fake.heartbeats[-1].member_epoch == -1


def test_periodic_auto_commit_never_passes_a_record_poll_did_not_return(
    fake: FakeGroupBroker,
) -> None:
    fake.produce(A0, 30)
    consumer = Consumer(consumer_config(fake, auto_commit_interval_ms=0))
    seen = Recorder()
    try:
        consumer.assign([A0])
        seen.poll_until(consumer, lambda: len(seen.records(A0)) >= 10, "ten records")
        returned = set(seen.records(A0))
        last = seen.records(A0)[-1]
        consumer.poll(timeout_ms=0)  # commits the position after the last record returned
        fake.wait_for(lambda: fake.committed.get(A0) == last + 1, "the last auto-commit")
        offsets = [p.committed_offset for c in fake.commits for t in c.topics for p in t.partitions]
        # Each commit is a position: 0 (nothing read yet) or one past a record poll returned.
        assert offsets and all(o == 0 or o - 1 in returned for o in offsets), offsets
        assert all(c.member_epoch == -1 and c.member_id == "" for c in fake.commits)
    finally:
        consumer.close()


def test_commit_surfaces_typed_errors_and_committed_reads_offsets_back(
    fake: FakeGroupBroker,
) -> None:
    with Consumer(consumer_config(fake, enable_auto_commit=False)) as consumer:
        consumer.assign([A0, A1])
        assert consumer.commit({A0: 3}) == {A0: 3}
        assert fake.committed == {A0: 3}
        assert consumer.committed([A0, A1]) == {A0: 3, A1: None}

        fake.commit_errors.append((ILLEGAL_GENERATION, False))
        with pytest.raises(LograftError) as per_partition:
            consumer.commit([(A0, 4)])
        assert per_partition.value.code == ILLEGAL_GENERATION
        assert per_partition.value.error_name == "ILLEGAL_GENERATION"
        assert not per_partition.value.retriable

        fake.commit_errors.append((STALE_MEMBER_EPOCH, True))
        future = consumer.commit({A0: 5}, asynchronous=True)
        error = future.exception(timeout=WAIT_S)
        assert isinstance(error, LograftError) and error.code == STALE_MEMBER_EPOCH
        assert fake.committed == {A0: 3}

        # NOT_COORDINATOR is retried, after finding the coordinator again.
        finds = fake.find_calls
        fake.commit_errors.append((NOT_COORDINATOR, True))
        assert consumer.commit({A0: 6, A1: 1}, asynchronous=True).result(WAIT_S) == {A0: 6, A1: 1}
        assert fake.find_calls == finds + 1
        assert consumer.committed([A0, A1]) == {A0: 6, A1: 1}

        with pytest.raises(ValueError):
            consumer.commit({A0: -1})


def test_a_commit_refused_as_stale_is_sent_again_with_the_new_epoch(
    fake: FakeGroupBroker,
) -> None:
    fake.produce(A0, 3)
    fake.set_target({A0})
    seen = Recorder()
    with Consumer(consumer_config(fake, enable_auto_commit=False)) as consumer:
        consumer.subscribe(["a"], on_assign=seen.on_assign)
        seen.poll_until(consumer, lambda: len(seen.records(A0)) == 3, "a-0")
        fake.bump_epoch_on_stale = True
        fake.commit_errors.append((STALE_MEMBER_EPOCH, True))
        assert consumer.commit() == {A0: 3}
        stale, again = fake.commits
        assert (stale.member_id, stale.member_epoch) == ("m-1", 1)
        assert (again.member_id, again.member_epoch) == ("m-1", 2)
        assert fake.committed == {A0: 3}


def test_assign_with_a_group_starts_at_committed_offsets(fake: FakeGroupBroker) -> None:
    fake.produce(A0, 5)
    fake.committed[A0] = 3
    with Consumer(consumer_config(fake, enable_auto_commit=False, max_poll_records=10)) as consumer:
        consumer.assign([A0, A1])
        assert consumer.position(A0) == 3
        assert consumer.position(A1) == 0, "nothing committed: auto.offset.reset"


def test_subscribe_needs_a_group_and_excludes_assign(fake: FakeGroupBroker) -> None:
    with Consumer(consumer_config(fake, group_id=None)) as plain:
        with pytest.raises(IllegalStateError, match=r"group\.id"):
            plain.subscribe(["a"])
        with pytest.raises(IllegalStateError, match=r"group\.id"):
            plain.commit()
    with Consumer(consumer_config(fake)) as consumer:
        with pytest.raises(TypeError):
            consumer.subscribe("a")
        with pytest.raises(InvalidTopicError):
            consumer.subscribe(["no spaces"])
        consumer.assign([A0])
        with pytest.raises(IllegalStateError, match="unsubscribe"):
            consumer.subscribe(["a"])
        consumer.unsubscribe()
        assert consumer.assignment() == set()
        consumer.subscribe(["a"])
        assert consumer.subscription() == {"a"}
        with pytest.raises(IllegalStateError, match="unsubscribe"):
            consumer.assign([A0])


def test_unsubscribe_leaves_and_a_listener_object_gets_the_callbacks(
    fake: FakeGroupBroker,
) -> None:
    fake.produce(A0, 3)
    fake.set_target({A0, A1})
    calls: list[tuple[str, list[TopicPartition]]] = []

    class Listener(ConsumerRebalanceListener):
        def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
            calls.append(("assigned", assigned))

        def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
            calls.append(("revoked", revoked))

    seen = Recorder()
    with Consumer(consumer_config(fake)) as consumer:
        consumer.subscribe(["a"], listener=Listener())
        seen.poll_until(consumer, lambda: len(seen.records(A0)) == 3, "a-0")
        fake.heartbeat_errors.append(FENCED_MEMBER_EPOCH)
        seen.poll_until(consumer, lambda: len(calls) >= 3, "the loss and the new assignment")
        assert calls[:3] == [
            ("assigned", [A0, A1]),
            ("revoked", [A0, A1]),  # on_partitions_lost defaults to on_partitions_revoked
            ("assigned", [A0, A1]),
        ]
        consumer.unsubscribe()
        assert calls[3:] == [("revoked", [A0, A1])]
        assert consumer.assignment() == set()
        fake.wait_for(
            lambda: any(h.member_epoch == -1 for h in fake.heartbeats), "the leave heartbeat"
        )
        leaves = sum(1 for h in fake.heartbeats if h.member_epoch == -1)
    assert sum(1 for h in fake.heartbeats if h.member_epoch == -1) == leaves, "left once"


def test_missing_max_poll_interval_leaves_and_the_next_poll_rejoins(
    fake: FakeGroupBroker,
) -> None:
    fake.set_target({A0})
    seen = Recorder()
    consumer = Consumer(consumer_config(fake, max_poll_interval_ms=1000))
    try:
        consumer.subscribe(["a"], on_assign=seen.on_assign, on_lost=seen.on_lost)
        seen.poll_until(consumer, lambda: ("assign", [A0]) in seen.events, "the assignment")
        fake.wait_for(
            lambda: any(h.member_epoch == -1 for h in fake.heartbeats), "the poll-timeout leave"
        )
        joins = sum(1 for h in fake.heartbeats if h.member_epoch == 0)
        consumer.poll(timeout_ms=0)
        assert seen.callbacks() == [("assign", [A0]), ("lost", [A0])]
        assert consumer.assignment() == set()
        fake.wait_for(
            lambda: sum(1 for h in fake.heartbeats if h.member_epoch == 0) > joins, "a rejoin"
        )
        seen.poll_until(consumer, lambda: len(seen.callbacks()) == 3, "the new assignment")
        assert seen.callbacks()[2] == ("assign", [A0])
    finally:
        consumer.close()


def test_a_coordinator_move_is_followed(fake: FakeGroupBroker) -> None:
    fake.set_target({A0})
    seen = Recorder()
    with Consumer(consumer_config(fake)) as consumer:
        consumer.subscribe(["a"], on_assign=seen.on_assign)
        seen.poll_until(consumer, lambda: bool(seen.callbacks()), "the assignment")
        with fake.cond:
            finds, since = fake.find_calls, len(fake.heartbeats)
            fake.heartbeat_errors.append(NOT_COORDINATOR)
        fake.wait_for(lambda: fake.find_calls > finds, "FindCoordinator again")
        fake.wait_for(
            lambda: any(
                h.HasField("subscribed_topic_names") and owned_partitions(h) == {A0}
                for h in fake.heartbeats[since + 1 :]
            ),
            "a full heartbeat to the coordinator found again",
        )
        consumer.poll(timeout_ms=0)
        assert seen.callbacks() == [("assign", [A0])], "a move takes nothing away"


def test_a_member_outlasts_an_outage_of_every_broker(caplog: pytest.LogCaptureFixture) -> None:
    # While no broker answers at all, the heartbeat cannot even find the coordinator; that
    # ends no membership: the member keeps trying and carries on once a broker is back.
    caplog.set_level(logging.DEBUG, logger="cluster.client._group_client")
    broker = FakeGroupBroker()
    server = serve(broker)
    broker.add_topic("a", 2)
    broker.set_target({A0})
    seen = Recorder()
    try:
        with Consumer(consumer_config(broker)) as consumer:
            consumer.subscribe(["a"], on_assign=seen.on_assign)
            seen.poll_until(consumer, lambda: bool(seen.callbacks()), "the assignment")
            server.stop(grace=None).wait()
            seen.poll_until(
                consumer,
                lambda: "no broker answered" in caplog.text,
                "a heartbeat that reached no broker",
            )
            server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
            pb_grpc.add_BrokerServicer_to_server(broker, server)
            assert server.add_insecure_port(f"127.0.0.1:{broker.port}") == broker.port
            server.start()
            with broker.cond:
                since = len(broker.heartbeats)
            seen.poll_until(
                consumer,
                lambda: len(broker.heartbeats) > since + 1,
                "heartbeats to the broker once it is back",
            )
            assert consumer.assignment() == {A0}
    finally:
        server.stop(grace=None)


def test_a_broker_without_groups_fails_the_subscription_with_a_typed_error() -> None:
    broker = FakeBroker()  # answers the group RPCs with UNIMPLEMENTED, as the real one today
    server = serve(broker)
    try:
        with Consumer(consumer_config(broker)) as consumer:
            consumer.subscribe(["a"])
            with pytest.raises(LograftError, match="UNIMPLEMENTED"):
                for _ in range(1000):
                    consumer.poll(timeout_ms=20)
    finally:
        server.stop(grace=None)


def test_pause_resume_and_lag(fake: FakeGroupBroker) -> None:
    fake.produce(A0, 3)
    fake.produce(A1, 3)
    seen = Recorder()
    with Consumer(consumer_config(fake, group_id=None)) as consumer:
        consumer.assign([A0, A1])
        consumer.pause(A0)
        assert consumer.paused() == {A0}
        seen.poll_until(consumer, lambda: len(seen.records(A1)) == 1, "one of a-1")
        assert consumer.lag(A1) == 2
        assert consumer.lag(A0) is None, "not fetched yet"
        seen.poll_until(consumer, lambda: len(seen.records(A1)) == 3, "a-1")
        assert seen.records(A0) == []
        assert consumer.lag(A1) == 0
        consumer.resume(A0)
        assert consumer.paused() == set()
        seen.poll_until(consumer, lambda: len(seen.records(A0)) == 3, "a-0")
        assert consumer.lag(A0) == 0
        assert consumer.assignment() == {A0, A1}
