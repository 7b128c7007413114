"""The asyncio clients (``cluster.client.aio``): the thread/loop bridge, and
``AsyncConsumer`` against the in-process fake broker and coordinator of
``test_consumer_groups``.

What a user would notice: calls run in order on the client's worker and a cancelled one
never runs; cancelling the awaiting of a record's future does not unsend it; cancelling
``getmany`` at any moment loses no record, duplicates none, and ``commit`` never passes a
record not handed out; async rebalance callbacks run on the loop, may await the consumer,
and the rebalance waits for them.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

import pytest

from cluster.client import (
    AsyncConsumer,
    AsyncConsumerRebalanceListener,
    AsyncProducer,
    TopicPartition,
)
from cluster.client._aio_worker import Worker, observe
from cluster.client.consumer import ConsumerRecord
from lograft.protocol.errors import IllegalStateError
from tests.unit.consumer_fixtures import WAIT_S, FakeGroupBroker, consumer_config, serve

A0, A1 = TopicPartition("a", 0), TopicPartition("a", 1)


@pytest.fixture
def fake() -> Iterator[FakeGroupBroker]:
    broker = FakeGroupBroker()
    server = serve(broker)
    broker.add_topic("a", 2)
    try:
        yield broker
    finally:
        server.stop(grace=None)


# ---- the bridge -----------------------------------------------------------------------------


def test_worker_runs_jobs_in_order_skips_cancelled_ones_and_refuses_after_stop() -> None:
    worker = Worker("test-worker")
    gate = threading.Event()
    ran: list[int] = []
    first = worker.submit(gate.wait, WAIT_S)
    jobs = [worker.submit(ran.append, n) for n in range(5)]
    assert jobs[2].cancel(), "a job not started yet can be cancelled"
    gate.set()
    assert first.result(WAIT_S) is True
    for job in (jobs[0], jobs[1], jobs[3], jobs[4]):
        job.result(WAIT_S)
    assert ran == [0, 1, 3, 4]
    worker.stop()
    late = worker.submit(ran.append, 9)
    with pytest.raises(IllegalStateError):
        late.result(WAIT_S)
    assert ran == [0, 1, 3, 4]


def test_worker_runs_only_nested_jobs_inside_a_waiting_job_and_keeps_the_rest() -> None:
    """A rebalance callback's own calls run while poll waits for the callback; another
    task's calls, and a stop, wait until the poll is done, in their order."""
    worker = Worker("test-worker")
    outside: Future[None] = Future()
    ran: list[str] = []
    other: list[Future[None]] = []

    def waiting_job() -> str:
        other.append(worker.submit(ran.append, "other task"))
        worker.stop()
        nested = worker.submit(ran.append, "callback", nested_ok=True)
        nested.add_done_callback(lambda _f: outside.set_result(None))
        worker.serve_until(outside)
        ran.append("outer done")
        return "outer"

    assert worker.submit(waiting_job).result(WAIT_S) == "outer"
    other[0].result(WAIT_S)
    assert ran == ["callback", "outer done", "other task"]
    late = worker.submit(ran.append, "after stop")
    with pytest.raises(IllegalStateError):
        late.result(WAIT_S)
    assert ran == ["callback", "outer done", "other task"]


async def test_cancelling_an_observed_future_leaves_the_source_alone() -> None:
    loop = asyncio.get_running_loop()
    source: Future[int] = Future()
    observed = observe(source, loop)
    observed.cancel()
    assert not source.cancelled(), "a record's future belongs to the producer's threads"
    source.set_result(7)

    ok: Future[int] = Future()
    assert_ok = observe(ok, loop)
    threading.Thread(target=ok.set_result, args=(3,)).start()
    assert await asyncio.wait_for(assert_ok, WAIT_S) == 3

    failing: Future[int] = Future()
    observed_failure = observe(failing, loop)
    failing.set_exception(IllegalStateError("boom"))
    with pytest.raises(IllegalStateError, match="boom"):
        await asyncio.wait_for(observed_failure, WAIT_S)


# ---- the producer ---------------------------------------------------------------------------


async def test_async_producer_send_then_await_and_bulk(fake: FakeGroupBroker) -> None:
    async with AsyncProducer(bootstrap_servers=f"127.0.0.1:{fake.port}", linger_ms=0) as producer:
        future = await producer.send("a", b"one", partition=0)
        metadata = await asyncio.wait_for(future, WAIT_S)
        assert (metadata.topic, metadata.partition, metadata.offset) == ("a", 0, 0)
        again = await producer.send_and_wait("a", b"two", partition=0)
        assert again.offset == 1
        bulk = await producer.send_bulk("a", [b"x", b"y", b"z"], partition=1)
        result = await asyncio.wait_for(bulk, WAIT_S)
        assert [result.offset_of(i) for i in range(3)] == [(1, 0), (1, 1), (1, 2)]
        await producer.flush(timeout=WAIT_S)
        assert await producer.partitions_for("a") == [0, 1]
    with pytest.raises(IllegalStateError):
        await producer.send("a", b"late")


# ---- the consumer ---------------------------------------------------------------------------


def _offsets(records: list[ConsumerRecord]) -> list[int]:
    return [r.offset for r in records]


async def test_cancelling_getmany_at_any_moment_loses_and_repeats_no_record(
    fake: FakeGroupBroker,
) -> None:
    fake.produce(A0, 300)
    seen: list[int] = []
    rng = random.Random(5)
    consumer = AsyncConsumer(
        consumer_config(fake, enable_auto_commit=False, max_poll_records=7, fetch_max_wait_ms=50)
    )
    try:
        await consumer.assign([A0])
        for _ in range(2000):
            if len(seen) >= 300:
                break
            task = asyncio.create_task(consumer.getmany(timeout_ms=1000))
            for _ in range(rng.randrange(6)):
                await asyncio.sleep(0)  # let the task get to a random point, then cancel it
            task.cancel()
            try:
                got = await task
            except asyncio.CancelledError:
                # Nothing it fetched is handed out, and nothing is committed past it.
                committed = await consumer.commit()
                assert committed.get(A0, 0) == (seen[-1] + 1 if seen else 0)
                assert await consumer.position(A0) == (seen[-1] + 1 if seen else 0)
                continue
            seen.extend(_offsets(got.get(A0, [])))
        assert seen == list(range(300)), "every record exactly once, in order"
    finally:
        await consumer.close()


async def test_async_iteration_and_seek_drop_what_is_buffered(fake: FakeGroupBroker) -> None:
    fake.produce(A0, 10)
    async with AsyncConsumer(consumer_config(fake, group_id=None, max_poll_records=10)) as consumer:
        await consumer.assign([A0])
        assert consumer.assignment() == {A0}
        first = await anext(aiter(consumer))
        assert first.offset == 0
        assert await consumer.position(A0) == 1, "buffered records are not past the position"
        await consumer.seek(A0, 7)
        rest = [await anext(aiter(consumer)) for _ in range(3)]
        assert _offsets(rest) == [7, 8, 9]
        await consumer.pause(A0)
        assert consumer.paused() == {A0}
        assert await consumer.getmany(timeout_ms=0) == {}
        await consumer.resume(A0)
        assert await consumer.lag(A0) == 0
    records = [r async for r in consumer]
    assert records == [], "a closed consumer's iteration ends"


async def test_async_callbacks_run_on_the_loop_and_the_rebalance_waits_for_them(
    fake: FakeGroupBroker,
) -> None:
    fake.produce(A0, 20)
    fake.produce(A1, 20)
    fake.committed[A1] = 5
    fake.set_target({A0, A1})
    loop = asyncio.get_running_loop()
    events: list[tuple[str, Any]] = []

    class Listener(AsyncConsumerRebalanceListener):
        async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
            assert asyncio.get_running_loop() is loop
            await asyncio.sleep(0)
            events.append(("assign", assigned))
            if A0 in assigned:
                await consumer.seek(A0, 10)  # a callback may await the consumer's calls
            events.append(("position", await consumer.position(A1)))

        async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
            await asyncio.sleep(0)
            events.append(("revoke", revoked))
            events.append(("commit", await consumer.commit()))
            with pytest.raises(IllegalStateError, match="must not poll"):
                await consumer.getmany()

    consumer = AsyncConsumer(consumer_config(fake, enable_auto_commit=False, max_poll_records=3))
    try:
        await consumer.subscribe(["a"], listener=Listener())
        got: dict[TopicPartition, list[int]] = {A0: [], A1: []}

        async def read_until(done: Any) -> None:
            for _ in range(1000):
                if done():
                    return
                for tp, records in (await consumer.getmany(timeout_ms=20)).items():
                    events.append(("records", tp))
                    got[tp].extend(_offsets(records))
            raise AssertionError(f"never done; events: {events}")

        await read_until(lambda: len(got[A0]) >= 10 and len(got[A1]) >= 3)
        assert events[:2] == [("assign", [A0, A1]), ("position", 5)]
        assert got[A0][0] == 10 and got[A1][0] == 5
        fake.set_target({A0})
        fake.wait_until_received()
        await read_until(lambda: any(e[0] == "revoke" for e in events))
        revoke_at = events.index(("revoke", [A1]))
        commit = events[revoke_at + 1]
        # The revocation waited for the callback, which committed what was handed out.
        assert commit == ("commit", {A0: got[A0][-1] + 1, A1: got[A1][-1] + 1})
        assert fake.committed[A1] == got[A1][-1] + 1
        await read_until(lambda: len(got[A0]) == 10)
        assert ("records", A1) not in events[revoke_at:], "no record after on_revoke began"
        assert consumer.assignment() == {A0}
    finally:
        await consumer.close()
    assert events[-2] == ("revoke", [A0]), "close revokes through the callback"
    assert fake.heartbeats[-1].member_epoch == -1


async def test_plain_callbacks_get_the_async_consumer(fake: FakeGroupBroker) -> None:
    fake.set_target({A0})
    calls: list[tuple[str, object, list[TopicPartition]]] = []
    async with AsyncConsumer(consumer_config(fake)) as consumer:
        await consumer.subscribe(
            ["a"],
            on_assign=lambda c, ps: calls.append(("assign", c, ps)),
            on_revoke=lambda c, ps: calls.append(("revoke", c, ps)),
        )
        assert consumer.subscription() == {"a"}
        for _ in range(1000):
            if calls:
                break
            await consumer.getmany(timeout_ms=20)
        assert calls == [("assign", consumer, [A0])]
        await consumer.unsubscribe()
        assert calls[-1] == ("revoke", consumer, [A0])
        assert consumer.assignment() == set()


async def _until(condition: Callable[[], bool], what: str) -> None:
    """Yield to the loop until ``condition()`` holds, for at most ``WAIT_S``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while not condition():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


async def test_a_call_from_another_task_waits_for_the_running_rebalance_callback(
    fake: FakeGroupBroker,
) -> None:
    """close() while on_assign runs: the rebalance ends first, then close revokes."""
    fake.set_target({A0})
    events: list[str] = []
    assigning = asyncio.Event()
    release = asyncio.Event()

    async def on_assign(_consumer: AsyncConsumer, _partitions: list[TopicPartition]) -> None:
        events.append("assign-start")
        assigning.set()
        await release.wait()
        events.append("assign-end")

    async def on_revoke(_consumer: AsyncConsumer, _partitions: list[TopicPartition]) -> None:
        events.append("revoke")

    async def close() -> None:
        await consumer.close()
        events.append("closed")

    consumer = AsyncConsumer(consumer_config(fake))
    try:
        await consumer.subscribe(["a"], on_assign=on_assign, on_revoke=on_revoke)
        reading = asyncio.create_task(consumer.getmany(timeout_ms=int(WAIT_S * 1000)))
        await asyncio.wait_for(assigning.wait(), WAIT_S)
        closing = asyncio.create_task(close())
        # Until the worker, busy with the poll that waits for on_assign, has taken close()'s
        # job and stop marker off its queue (to run them, or to keep them for later).
        await _until(
            lambda: consumer._close_future is not None and consumer._worker._jobs.empty(),
            "the worker to take close()'s job",
        )
        assert not closing.done(), "close() finished while on_assign was still running"
        release.set()
        await asyncio.wait_for(closing, WAIT_S)
        assert events == ["assign-start", "assign-end", "revoke", "closed"]
        assert fake.heartbeats[-1].member_epoch == -1, "close left the group"
        with pytest.raises(IllegalStateError, match="closed"):
            await asyncio.wait_for(reading, WAIT_S)  # it went no further after the rebalance
    finally:
        release.set()
        await consumer.close()


async def test_a_commit_is_sent_even_if_its_task_is_cancelled_before_its_turn(
    fake: FakeGroupBroker,
) -> None:
    consumer = AsyncConsumer(consumer_config(fake, enable_auto_commit=False))
    gate = threading.Event()
    try:
        await consumer.assign([A0])
        started = threading.Event()

        def busy() -> None:
            started.set()
            gate.wait(WAIT_S)

        consumer._worker.submit(busy)  # the worker is busy: the commit waits for its turn
        assert started.wait(WAIT_S)
        committing = asyncio.create_task(consumer.commit({A0: 5}))
        await _until(lambda: not consumer._worker._jobs.empty(), "the commit to be queued")
        committing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await committing
        gate.set()
        fake.wait_for(lambda: fake.committed.get(A0) == 5, "the commit of a-0 at 5")
    finally:
        gate.set()
        await consumer.close()
