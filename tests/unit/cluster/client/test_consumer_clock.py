"""The consumer's timing on a manual clock: poll's timeout, auto.commit.interval.ms,
retry.backoff.ms, max.poll.interval.ms, the heartbeat interval, commit and close timeouts.

``Consumer._with_clock(ManualClock(), ...)`` runs the consumer against the in-process fake
coordinator of ``test_consumer_groups`` (frozen on demand, as in ``test_consumer_bounds``;
records are appended to it directly, without a producer) with time that moves only when the
test advances it, so each test states when something happens, to the millisecond, without
sleeping. ``ManualClock.wait_for_parked(deadline)`` is how a test knows a consumer thread
has caught up and chosen to wait until ``deadline``; asserting that something has not
happened yet is meaningful only then. Real time bounds only the waits for things that
should happen at once (``TIMEOUT_S``), and the fake's own waits (its fetch long-poll) are
real time too: the manual clock is the client's.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any, TypeVar

import pytest

from cluster.client import Consumer, ConsumerRecord, TopicPartition
from cluster.client._clock import ManualClock
from lograft.protocol.batch_builder import encode_batch
from lograft.protocol.errors import CoordinatorNotAvailableError, NotLeaderOrFollowerError
from lograft.protocol.wire import broker_pb2 as pb
from tests.unit.consumer_fixtures import HANG_MS, FreezingBroker, Recorder, consumer_config, serve

A0, A1 = TopicPartition("a", 0), TopicPartition("a", 1)
TIMEOUT_S = 30.0
"""Real seconds a test waits for something that should happen at once."""

_T = TypeVar("_T")


class ClockBroker(FreezingBroker):
    """The fake coordinator and broker; ``fetch_errors`` scripts partition errors of fetches."""

    def __init__(self) -> None:
        super().__init__()
        self.fetches = 0
        self.fetch_errors: deque[int] = deque()

    def Fetch(self, request: Any, context: Any) -> Any:
        with self.cond:
            self.fetches += 1
            self.cond.notify_all()
            code = self.fetch_errors.popleft() if self.fetch_errors else 0
        if not code:
            return super().Fetch(request, context)
        response = pb.FetchResponse()
        for topic in request.topics:
            answer = response.topics.add(name=topic.name)
            for p in topic.partitions:
                answer.partitions.add(partition=p.partition, error_code=code, high_watermark=-1)
        return response

    def append(self, tp: TopicPartition, count: int) -> None:
        """Append ``count`` records to ``tp`` as a Produce would (without a producer)."""
        values = [f"{tp}/{i}".encode() for i in range(count)]
        data = pb.PartitionProduceData(partition=tp.partition, records=encode_batch(values))
        request = pb.ProduceRequest(
            acks=-1, topics=[pb.TopicProduceData(name=tp.topic, partitions=[data])]
        )
        (answer,) = self.Produce(request, None).topics[0].partitions
        assert answer.error_code == 0, answer

    def leaves(self) -> int:
        return sum(1 for h in self.heartbeats if h.member_epoch == -1)

    def joins(self) -> int:
        return sum(1 for h in self.heartbeats if h.member_epoch == 0)


@pytest.fixture
def fake() -> Iterator[ClockBroker]:
    broker = ClockBroker()
    server = serve(broker)
    broker.add_topic("a", 2)
    try:
        yield broker
    finally:
        broker.thaw()
        server.stop(grace=None)


@pytest.fixture
def clock() -> Iterator[ManualClock]:
    clock = ManualClock()
    yield clock
    # A closed consumer may leave a thread behind that waits on this clock (a commit backing
    # off from a hung coordinator, until its deadline): move past every deadline, or the
    # interpreter's exit would wait for that thread forever.
    clock.advance(24 * 3600.0)


def _consumer(fake: ClockBroker, clock: ManualClock, **overrides: object) -> Consumer:
    return Consumer._with_clock(clock, consumer_config(fake, **overrides))


def _start(work: Callable[[], _T]) -> Future[_T]:
    """Run ``work`` on its own thread: for the calls that block until the clock moves."""
    future: Future[_T] = Future()

    def run() -> None:
        try:
            future.set_result(work())
        except BaseException as exc:
            future.set_exception(exc)

    threading.Thread(target=run, daemon=True).start()
    return future


def _poll_records(consumer: Consumer, count: int) -> list[ConsumerRecord]:
    """Poll until ``count`` records came: at once, whatever the clock, when they are there."""

    def poll() -> list[ConsumerRecord]:
        records: list[ConsumerRecord] = []
        while len(records) < count:
            records.extend(consumer.poll(timeout_ms=3_600_000))  # never passes on the clock
        return records

    return _start(poll).result(TIMEOUT_S)


# ---- poll(timeout_ms) ---------------------------------------------------------------------------


def test_poll_returns_nothing_once_the_clock_passes_its_timeout(
    fake: ClockBroker, clock: ManualClock
) -> None:
    consumer = _consumer(fake, clock, group_id=None, retry_backoff_ms=60_000)
    try:
        consumer.assign([A0])  # empty: the broker answers every fetch with no records
        start = clock.monotonic()
        polled = _start(lambda: consumer.poll(timeout_ms=1000))
        fake.wait_for(lambda: fake.fetches >= 2, "fetches that found nothing")
        clock.wait_for_parked(start + 1.0)
        clock.advance(0.999)
        clock.wait_for_parked(start + 1.0)
        assert not polled.done(), "poll returned before its timeout passed on the clock"
        clock.advance(0.001)
        assert polled.result(TIMEOUT_S) == []

        # A record that arrives ends a poll at once: its timeout is only a bound.
        fake.append(A0, 1)
        assert [r.offset for r in _poll_records(consumer, 1)] == [0]
        assert clock.monotonic() == start + 1.0
    finally:
        consumer.close()


# ---- auto.commit.interval.ms --------------------------------------------------------------------


def test_auto_commit_waits_for_auto_commit_interval_ms_on_the_clock(
    fake: ClockBroker, clock: ManualClock
) -> None:
    fake.append(A0, 3)
    consumer = _consumer(fake, clock, auto_commit_interval_ms=5000, max_poll_records=10)
    try:
        start = clock.monotonic()
        consumer.assign([A0])
        assert [r.offset for r in _poll_records(consumer, 3)] == [0, 1, 2]
        clock.advance(4.999)
        consumer.poll(timeout_ms=0)
        # Commits go out one at a time in order: once this one is answered, an auto-commit
        # made by the poll before it would have been too.
        assert consumer.commit({A1: 0}) == {A1: 0}
        assert fake.committed == {A1: 0}, "auto-committed before auto.commit.interval.ms"

        clock.advance(0.001)
        consumer.poll(timeout_ms=0)
        fake.wait_for(lambda: fake.committed.get(A0) == 3, "the auto-commit")

        # The next interval counts from this auto-commit.
        commits = len(fake.commits)
        clock.advance(4.999)
        consumer.poll(timeout_ms=0)
        assert consumer.commit({A1: 0}) == {A1: 0}
        assert len(fake.commits) == commits + 1, "auto-committed again too soon"
        clock.advance(0.001)
        consumer.poll(timeout_ms=0)
        fake.wait_for(lambda: len(fake.commits) == commits + 2, "the second auto-commit")
        assert clock.monotonic() == start + 10.0
    finally:
        consumer.close()


# ---- retry.backoff.ms ---------------------------------------------------------------------------


def test_a_fetch_error_backs_off_retry_backoff_ms_on_the_clock(
    fake: ClockBroker, clock: ManualClock
) -> None:
    fake.append(A0, 3)
    fake.fetch_errors.append(NotLeaderOrFollowerError.code)
    consumer = _consumer(fake, clock, group_id=None, retry_backoff_ms=500, max_poll_records=10)
    try:
        consumer.assign([A0])
        start = clock.monotonic()
        polled = _start(lambda: consumer.poll(timeout_ms=60_000))
        fake.wait_for(lambda: fake.fetches >= 1, "the fetch answered NOT_LEADER_OR_FOLLOWER")
        clock.wait_for_parked(start + 0.5)  # a poll with nothing to fetch waits the backoff
        assert fake.fetches == 1 and not polled.done()
        clock.advance(0.499)
        clock.wait_for_parked(start + 0.5)
        assert fake.fetches == 1 and not polled.done(), "fetched again within the backoff"
        clock.advance(0.001)
        assert [r.offset for r in polled.result(TIMEOUT_S)] == [0, 1, 2]
        assert fake.fetches >= 2  # and the next fetch may be out already
    finally:
        consumer.close()


# ---- max.poll.interval.ms and the heartbeat interval --------------------------------------------


def test_missing_max_poll_interval_ms_on_the_clock_leaves_the_group(
    fake: ClockBroker, clock: ManualClock
) -> None:
    fake.heartbeat_interval_ms = 60_000  # no heartbeat due meanwhile: only the poll timer
    fake.append(A0, 3)
    fake.set_target({A0})
    seen = Recorder()
    consumer = _consumer(
        fake, clock, max_poll_interval_ms=1000, enable_auto_commit=False, max_poll_records=10
    )
    try:
        start = clock.monotonic()
        consumer.subscribe(["a"], on_assign=seen.on_assign, on_lost=seen.on_lost)
        assert len(_poll_records(consumer, 3)) == 3  # the last poll, at `start`
        fake.wait_for(lambda: fake.reported({A0}), "owned {a-0} reported")
        clock.wait_for_parked(start + 1.001)  # the heartbeat thread, until the poll timer
        clock.advance(1.0)
        clock.wait_for_parked(start + 1.001)
        assert fake.leaves() == 0, "left at exactly max.poll.interval.ms"
        clock.advance(0.001)
        fake.wait_for(lambda: fake.leaves() == 1, "the poll-timeout leave")
        assert seen.callbacks() == [("assign", [A0])], "the partitions go at the next poll"

        joins = fake.joins()
        assert consumer.poll(timeout_ms=0) == []
        assert seen.callbacks() == [("assign", [A0]), ("lost", [A0])]
        assert consumer.assignment() == set()
        fake.wait_for(lambda: fake.joins() > joins, "the join after the poll")
        assert len(_poll_records(consumer, 3)) == 3  # nothing was committed: from 0 again
        assert seen.callbacks()[2:] == [("assign", [A0])]
    finally:
        consumer.close()


def test_heartbeats_go_every_heartbeat_interval_on_the_clock(
    fake: ClockBroker, clock: ManualClock
) -> None:
    fake.heartbeat_interval_ms = 1000
    fake.append(A0, 1)
    fake.set_target({A0})
    seen = Recorder()
    consumer = _consumer(fake, clock, max_poll_interval_ms=3_600_000, enable_auto_commit=False)
    try:
        start = clock.monotonic()
        consumer.subscribe(["a"], on_assign=seen.on_assign)
        assert len(_poll_records(consumer, 1)) == 1  # the assignment came, and a record
        fake.wait_for(lambda: fake.reported({A0}), "owned {a-0} reported")
        assert seen.callbacks() == [("assign", [A0])]
        sent = len(fake.heartbeats)
        clock.wait_for_parked(start + 1.0)
        clock.advance(0.999)
        clock.wait_for_parked(start + 1.0)
        assert len(fake.heartbeats) == sent, "a heartbeat before the interval"
        clock.advance(0.001)
        fake.wait_for(lambda: len(fake.heartbeats) == sent + 1, "the heartbeat at the interval")
        clock.wait_for_parked(start + 2.0)  # and the next one, an interval later
        assert len(fake.heartbeats) == sent + 1
    finally:
        consumer.close()


# ---- commit and close timeouts ------------------------------------------------------------------


def test_a_commit_retries_for_request_timeout_ms_on_the_clock(
    fake: ClockBroker, clock: ManualClock
) -> None:
    fake.commit_errors.extend((CoordinatorNotAvailableError.code, True) for _ in range(10))
    consumer = _consumer(
        fake, clock, enable_auto_commit=False, request_timeout_ms=1000, retry_backoff_ms=250
    )
    try:
        consumer.assign([A0])
        start = clock.monotonic()
        committing = _start(lambda: consumer.commit({A0: 1}))
        # Sent at 0, 250, 500 and 750 ms; another backoff would end at the 1000 ms deadline.
        for attempt in range(1, 4):
            clock.wait_for_parked(start + 0.25 * attempt)
            assert len(fake.commits) == attempt and not committing.done()
            clock.advance(0.25)
        with pytest.raises(CoordinatorNotAvailableError):
            committing.result(TIMEOUT_S)
        assert len(fake.commits) == 4
        assert clock.monotonic() == start + 0.75
        assert fake.committed == {}
    finally:
        consumer.close()


def test_close_gives_up_on_a_hung_coordinator_when_its_timeout_passes_on_the_clock(
    fake: ClockBroker, clock: ManualClock
) -> None:
    fake.append(A0, 3)
    fake.set_target({A0})
    seen = Recorder()
    consumer = _consumer(
        fake,
        clock,
        request_timeout_ms=HANG_MS,
        auto_commit_interval_ms=3_600_000,
        max_poll_records=10,
    )
    closing: Future[None] | None = None
    try:
        consumer.subscribe(["a"], on_assign=seen.on_assign, on_revoke=seen.on_revoke)
        assert len(_poll_records(consumer, 3)) == 3
        fake.freeze()
        start = clock.monotonic()
        closing = _start(lambda: consumer.close(timeout_ms=2000))
        clock.wait_for_parked(start + 2.0)  # the last auto-commit, on the frozen coordinator
        clock.advance(1.999)
        clock.wait_for_parked(start + 2.0)
        assert not closing.done(), "close gave up before its timeout passed on the clock"
        clock.advance(0.001)
        closing.result(TIMEOUT_S)
        assert seen.callbacks() == [("assign", [A0]), ("revoke", [A0])]
        assert fake.committed == {}, "the frozen coordinator took no commit"
    finally:
        fake.thaw()
        if closing is None:
            consumer.close()
