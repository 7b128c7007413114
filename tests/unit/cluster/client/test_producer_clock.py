"""The producer's timing on a manual clock: linger.ms, retry.backoff.ms, delivery.timeout.ms.

``Producer._with_clock(ManualClock(), ...)`` runs the producer against ``FakeLeader``
(``tests.unit.producer_fixtures``) with time that moves only when the test advances it, so
each test states when something happens, to the millisecond, without sleeping.
``ManualClock.wait_for_parked(deadline)`` is how a test knows the sender thread has caught up:
it has seen everything so far and chosen to wait until ``deadline``; asserting that nothing
was sent is meaningful only then. Real time bounds only the waits for things that should
happen at once (``TIMEOUT_S``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from cluster.client import Producer
from cluster.client._clock import ManualClock
from lograft.protocol.errors import (
    MessageTooLargeError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
)
from lograft.protocol.records import iter_records
from tests.unit.producer_fixtures import TIMEOUT_S, FakeLeader, Plan, fake_leader

COORDINATOR_NOT_AVAILABLE = 15


@pytest.fixture
def fake() -> Iterator[FakeLeader]:
    with fake_leader() as leader:
        leader.add_topic("t", 1)
        yield leader


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@contextmanager
def _producer(fake: FakeLeader, clock: ManualClock, **overrides: object) -> Iterator[Producer]:
    config: dict[str, object] = {"bootstrap.servers": f"127.0.0.1:{fake.port}"}
    config.update({name.replace("_", "."): value for name, value in overrides.items()})
    producer = Producer._with_clock(clock, config)
    try:
        yield producer
    finally:
        # Not the default close(): it waits for every record, and on a manual clock a
        # record that never completes would be waited for forever.
        producer.close(timeout=0)


# ---- linger.ms ----------------------------------------------------------------------------------


def test_a_batch_is_not_sent_before_linger_ms(fake: FakeLeader, clock: ManualClock) -> None:
    with _producer(fake, clock, linger_ms=1000) as producer:
        start = clock.monotonic()
        future = producer.send("t", b"x")
        clock.wait_for_parked(start + 1.0)  # the sender holds the batch until linger.ms
        clock.advance(0.999)
        clock.wait_for_parked(start + 1.0)
        assert fake.requests == [] and not future.done()
        clock.advance(0.001)
        assert future.result(timeout=TIMEOUT_S).offset == 0
    assert len(fake.requests) == 1


def test_a_full_batch_goes_before_linger_ms(fake: FakeLeader, clock: ManualClock) -> None:
    with _producer(fake, clock, linger_ms=60_000, batch_size=100) as producer:
        start = clock.monotonic()
        small = producer.send("t", b"s", partition=0)
        clock.wait_for_parked(start + 60.0)
        # A record that does not fit closes the lingering batch, and fills its own: both go.
        full = producer.send("t", b"f" * 100, partition=0)
        assert [f.result(timeout=TIMEOUT_S).offset for f in (small, full)] == [0, 1]
        assert clock.monotonic() == start


def test_flush_sends_at_once_whatever_linger_ms(fake: FakeLeader, clock: ManualClock) -> None:
    with _producer(fake, clock, linger_ms=60_000) as producer:
        future = producer.send("t", b"x")
        producer.flush(timeout=TIMEOUT_S)
        assert future.result(timeout=0).offset == 0
        assert clock.monotonic() == 1000.0


def test_records_are_stamped_with_the_clock_s_wall_time(
    fake: FakeLeader, clock: ManualClock
) -> None:
    with _producer(fake, clock, linger_ms=0) as producer:
        clock.advance(2.5)
        metadata = producer.send("t", b"x").result(timeout=TIMEOUT_S)
    assert metadata.timestamp == 1_700_000_002_500


# ---- retry.backoff.ms ---------------------------------------------------------------------------


def test_a_retriable_error_is_retried_after_retry_backoff_ms(
    fake: FakeLeader, clock: ManualClock
) -> None:
    fake.plans.append(Plan(error=NotLeaderOrFollowerError.code))
    with _producer(fake, clock, linger_ms=0, retry_backoff_ms=500) as producer:
        start = clock.monotonic()
        future = producer.send("t", b"x")
        clock.wait_for_parked(start + 0.5)  # answered NOT_LEADER_OR_FOLLOWER, backing off
        assert len(fake.requests) == 1 and not future.done()
        clock.advance(0.499)
        clock.wait_for_parked(start + 0.5)
        assert len(fake.requests) == 1 and not future.done()
        clock.advance(0.001)
        assert future.result(timeout=TIMEOUT_S).offset == 0
    assert len(fake.requests) == 2
    assert fake.values("t", 0) == [b"x"]


def test_retries_stop_when_the_next_would_pass_delivery_timeout_ms(
    fake: FakeLeader, clock: ManualClock
) -> None:
    fake.plans.extend(Plan(error=NotLeaderOrFollowerError.code) for _ in range(10))
    with _producer(
        fake, clock, linger_ms=0, retry_backoff_ms=250, delivery_timeout_ms=1000
    ) as producer:
        start = clock.monotonic()
        future = producer.send("t", b"x")
        # Sent at 0, 250, 500 and 750 ms; another backoff would end at the 1000 ms deadline.
        for attempt in range(1, 4):
            clock.wait_for_parked(start + 0.25 * attempt)
            assert len(fake.requests) == attempt and not future.done()
            clock.advance(0.25)
        with pytest.raises(NotLeaderOrFollowerError):
            future.result(timeout=TIMEOUT_S)
        assert clock.monotonic() == start + 0.75
    assert len(fake.requests) == 4
    assert fake.values("t", 0) == []


# ---- delivery.timeout.ms ------------------------------------------------------------------------


def test_a_record_fails_with_request_timed_out_after_delivery_timeout_ms(
    fake: FakeLeader, clock: ManualClock
) -> None:
    fake.init_always_fails = COORDINATOR_NOT_AVAILABLE  # the batch waits for a producer id
    with _producer(
        fake, clock, linger_ms=0, retry_backoff_ms=125, delivery_timeout_ms=1000
    ) as producer:
        start = clock.monotonic()
        future = producer.send("t", b"x")
        for step in range(1, 9):  # InitProducerId again every retry.backoff.ms
            clock.wait_for_parked(start + 0.125 * step)
            assert not future.done(), f"failed {0.125 * (step - 1)} s after the send"
            clock.advance(0.125)
        with pytest.raises(RequestTimedOutError, match=r"delivery\.timeout\.ms passed"):
            future.result(timeout=TIMEOUT_S)
    assert fake.init_calls == 9
    assert fake.requests == []


def test_delivery_timeout_ms_bounds_the_retries_that_come_before_an_epoch_bump(
    fake: FakeLeader, clock: ManualClock
) -> None:
    gate = threading.Event()
    with _producer(
        fake, clock, linger_ms=0, retry_backoff_ms=250, delivery_timeout_ms=1000
    ) as producer:
        producer.send("t", b"warm-up").result(timeout=TIMEOUT_S)
        start = clock.monotonic()
        # "written" is appended with its response lost after "refused" failed for good; its
        # retries under its own sequence then meet NOT_LEADER_OR_FOLLOWER until the deadline.
        fake.plans.extend(
            [Plan(gate=gate, lose_response=True), Plan(error=MessageTooLargeError.code)]
        )
        fake.plans.extend(Plan(error=NotLeaderOrFollowerError.code) for _ in range(3))
        written = producer.send("t", b"written")
        assert fake.held.wait(TIMEOUT_S)
        with pytest.raises(MessageTooLargeError):
            producer.send("t", b"refused").result(timeout=TIMEOUT_S)
        after = producer.send("t", b"after")  # waits: the partition's sequence is broken
        gate.set()
        # Retried at 250, 500 and 750 ms; another backoff would end at the 1000 ms deadline.
        for attempt in range(1, 4):
            clock.wait_for_parked(start + 0.25 * attempt)
            assert len(fake.requests) == 2 + attempt and not after.done()
            clock.advance(0.25)
        with pytest.raises(NotLeaderOrFollowerError):
            written.result(timeout=TIMEOUT_S)
        # Only now does the partition restart, under epoch 1.
        assert after.result(timeout=TIMEOUT_S).offset == 2
        assert clock.monotonic() == start + 0.75
    attempts = [
        (r.headers[0].producer_epoch, r.headers[0].base_sequence)
        for r in fake.received
        if [record.value for record in iter_records(r.data)] == [b"written"]
    ]
    assert attempts == [(0, 1)] * 4
    assert fake.values("t", 0) == [b"warm-up", b"written", b"after"]
    last = fake.headers("t", 0)[-1]
    assert (last.producer_epoch, last.base_sequence) == (1, 0)


def test_flush_times_out_on_the_clock(fake: FakeLeader, clock: ManualClock) -> None:
    fake.init_always_fails = COORDINATOR_NOT_AVAILABLE  # the record stays incomplete
    with _producer(fake, clock, linger_ms=0, retry_backoff_ms=125) as producer:
        start = clock.monotonic()
        producer.send("t", b"x")
        clock.wait_for_parked(start + 0.125)
        outcome: list[BaseException | None] = []

        def flush() -> None:
            try:
                producer.flush(timeout=0.25)
                outcome.append(None)
            except RequestTimedOutError as exc:
                outcome.append(exc)

        flusher = threading.Thread(target=flush)
        flusher.start()
        clock.wait_for_parked(start + 0.25)  # the flush
        clock.advance(0.125)
        clock.wait_for_parked(start + 0.25, count=2)  # and the sender, after InitProducerId
        assert flusher.is_alive() and outcome == []
        clock.advance(0.125)
        flusher.join(TIMEOUT_S)
        assert len(outcome) == 1 and isinstance(outcome[0], RequestTimedOutError)


# ---- the manual clock itself --------------------------------------------------------------------


def test_advance_wakes_only_the_waits_it_reaches() -> None:
    clock = ManualClock(start=10.0)
    woke: list[float] = []

    def wait(timeout: float) -> None:
        condition = threading.Condition()  # one each: a notify wakes every wait on it
        with condition:
            clock.wait(condition, timeout)
        woke.append(timeout)

    waiters = [threading.Thread(target=wait, args=(t,)) for t in (1.0, 2.0)]
    for waiter in waiters:
        waiter.start()
    clock.wait_for_parked(count=2)
    assert clock.parked() == [11.0, 12.0]
    clock.advance(1.0)
    waiters[0].join(TIMEOUT_S)
    assert woke == [1.0] and clock.parked() == [12.0]
    clock.advance(1.0)
    waiters[1].join(TIMEOUT_S)
    assert woke == [1.0, 2.0] and clock.parked() == []


def test_a_wait_whose_deadline_has_come_returns_at_once() -> None:
    clock = ManualClock()
    condition = threading.Condition()
    with condition:
        clock.wait(condition, 0.0)
        clock.wait(condition, -1.0)
    assert clock.parked() == []


def test_sleep_ends_when_the_clock_reaches_it() -> None:
    clock = ManualClock(start=0.0)
    done = threading.Event()

    def sleep() -> None:
        clock.sleep(0.5)
        done.set()

    sleeper = threading.Thread(target=sleep)
    sleeper.start()
    clock.wait_for_parked(0.5)
    clock.advance(0.3)
    clock.wait_for_parked(0.5)
    assert not done.is_set()
    clock.advance(0.2)
    assert done.wait(TIMEOUT_S)
    sleeper.join(TIMEOUT_S)


def test_the_clock_does_not_go_back() -> None:
    clock = ManualClock(start=5.0, wall_start=100.0)
    clock.advance(0.999)
    clock.advance(0.001)
    assert (clock.monotonic(), clock.time()) == (6.0, 101.0)
    with pytest.raises(ValueError):
        clock.advance(-0.001)
