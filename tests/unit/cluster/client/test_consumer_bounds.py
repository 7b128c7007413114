"""``Consumer.poll`` and ``Consumer.close`` keep their time bounds when the coordinator
does not answer (the fake coordinator of ``test_consumer_groups``, frozen on demand: its
group RPCs hang, as a SIGSTOPped broker's would).

The bounds asserted are generous next to what the consumer promises and far below what
a consumer waiting on the coordinator would take (``request.timeout.ms`` is 60 s here): a
pass or a failure does not depend on the machine's speed.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from cluster.client import Consumer, ConsumerRecord, TopicPartition
from tests.unit.consumer_fixtures import (
    HANG_MS,
    FreezingBroker,
    Recorder,
    consumer_config,
    serve,
)

A0 = TopicPartition("a", 0)
WATCHDOG_S = 15.0


@pytest.fixture
def fake() -> Iterator[FreezingBroker]:
    broker = FreezingBroker()
    server = serve(broker)
    broker.add_topic("a", 2)
    try:
        yield broker
    finally:
        broker.thaw()
        server.stop(grace=None)


def test_poll_zero_returns_at_once_while_committed_offsets_are_being_read(
    fake: FreezingBroker,
) -> None:
    fake.produce(A0, 5)
    fake.committed[A0] = 3
    fake.freeze()
    with Consumer(
        consumer_config(
            fake, enable_auto_commit=False, request_timeout_ms=HANG_MS, max_poll_records=10
        )
    ) as consumer:
        consumer.assign([A0])
        polled: list[list[ConsumerRecord]] = []

        def poll_twenty_times() -> None:
            for _ in range(20):
                polled.append(consumer.poll(timeout_ms=0))

        # A poll that waited for the lookup would take at least a second each (before the
        # fix) or the whole request.timeout.ms: 20 of them would overrun the watchdog.
        poller = threading.Thread(target=poll_twenty_times)
        poller.start()
        poller.join(WATCHDOG_S)
        stuck = poller.is_alive()
        if stuck:
            fake.thaw()  # let it end before the consumer closes
            poller.join(WATCHDOG_S)
        assert not stuck, "20 poll(timeout_ms=0) still running after 15 s"
        # The position is unknown until OffsetFetch answers: nothing to return yet.
        assert polled == [[]] * 20
        fake.wait_for(lambda: fake.offset_fetches >= 1, "the committed offsets to be asked")
        fake.thaw()
        seen = Recorder()
        seen.poll_until(consumer, lambda: len(seen.records(A0)) == 2, "a-0 from offset 3")
        assert seen.records(A0) == [3, 4], "started at the committed offset"


def _close_in_thread(consumer: Consumer, timeout_ms: int) -> threading.Thread:
    closer = threading.Thread(target=consumer.close, kwargs={"timeout_ms": timeout_ms})
    closer.start()
    closer.join(WATCHDOG_S)
    return closer


def test_close_returns_within_its_timeout_while_the_coordinator_hangs(
    fake: FreezingBroker,
) -> None:
    """Leave heartbeat, the last auto-commit and the thread joins share one deadline."""
    fake.produce(A0, 5)
    fake.set_target({A0})
    seen = Recorder()
    consumer = Consumer(
        consumer_config(fake, request_timeout_ms=HANG_MS, auto_commit_interval_ms=3_600_000)
    )
    try:
        consumer.subscribe(["a"], on_assign=seen.on_assign, on_revoke=seen.on_revoke)
        seen.poll_until(consumer, lambda: len(seen.records(A0)) == 5, "a-0")
        commits = len(fake.commits)
        fake.freeze()
        closer = _close_in_thread(consumer, timeout_ms=2000)
        assert not closer.is_alive(), "close(timeout_ms=2000) still running after 15 s"
        # It did try: the partitions were revoked (callback) and a commit was on its way.
        assert seen.callbacks()[-1] == ("revoke", [A0])
        assert len(fake.commits) == commits, "the frozen coordinator took no commit"
    finally:
        fake.thaw()
        consumer.close()


def test_close_of_an_assigned_consumer_is_bounded_too(fake: FreezingBroker) -> None:
    fake.produce(A0, 5)
    consumer = Consumer(consumer_config(fake, request_timeout_ms=HANG_MS, max_poll_records=10))
    try:
        consumer.assign([A0])
        seen = Recorder()
        seen.poll_until(consumer, lambda: len(seen.records(A0)) == 5, "a-0")
        fake.freeze()
        closer = _close_in_thread(consumer, timeout_ms=1000)
        assert not closer.is_alive(), "close(timeout_ms=1000) still running after 15 s"
    finally:
        fake.thaw()
        consumer.close()
