"""``Producer.send`` against a fake partition leader: what a record carries and what is refused."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cluster.client import Producer
from lograft.protocol.errors import InvalidRecordError, MessageTooLargeError
from lograft.protocol.records import iter_records
from tests.unit.producer_fixtures import TIMEOUT_S, FakeLeader, Plan, fake_leader


@pytest.fixture
def fake() -> Iterator[FakeLeader]:
    with fake_leader() as leader:
        leader.add_topic("t", 2)
        yield leader


def _producer(fake: FakeLeader, **config: object) -> Producer:
    return Producer(bootstrap_servers=f"127.0.0.1:{fake.port}", **config)


def test_records_sent_one_by_one_arrive_as_sent(fake: FakeLeader) -> None:
    with _producer(fake, linger_ms=60_000) as producer:
        futures = [
            producer.send("t", b"plain", partition=0, timestamp_ms=1_000),
            producer.send("t", None, key=b"k", partition=0, timestamp_ms=900),
            producer.send("t", b"h", partition=0, timestamp_ms=2_000, headers=[("a", None)]),
            producer.send("t", b"", key=b"", partition=0, timestamp_ms=1_500),
        ]
        producer.flush(timeout=TIMEOUT_S)
        offsets = [future.result(timeout=0).offset for future in futures]
    assert offsets == [0, 1, 2, 3]
    (received,) = [r for r in fake.received if r.partition == 0]
    records = list(iter_records(received.data))
    assert [(r.key, r.value, r.timestamp, r.headers) for r in records] == [
        (None, b"plain", 1_000, ()),
        (b"k", None, 900, ()),
        (None, b"h", 2_000, (("a", None),)),
        (b"", b"", 1_500, ()),
    ]


def test_a_buffer_changed_after_send_does_not_change_the_record(fake: FakeLeader) -> None:
    value, key = bytearray(b"before"), bytearray(b"key")
    with _producer(fake, linger_ms=60_000) as producer:
        future = producer.send("t", value, key=key, partition=1)
        value[:] = b"after!"
        key[:] = b"new"
        producer.flush(timeout=TIMEOUT_S)
        assert future.result(timeout=0).offset == 0
    assert fake.values("t", 1) == [b"before"]


def test_bad_records_are_refused_by_send_itself(fake: FakeLeader) -> None:
    with _producer(fake) as producer:
        with pytest.raises(TypeError):
            producer.send("t", "text")  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            producer.send("t", b"v", key=7)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            producer.send("t", b"v", headers=[(b"not-str", b"v")])  # type: ignore[list-item]
        with pytest.raises(ValueError, match="non-negative"):
            producer.send("t", b"v", timestamp_ms=-1)
        # Nothing refused reached the batch: the next record is the partition's first.
        assert producer.send("t", b"ok", partition=0).result(timeout=TIMEOUT_S).offset == 0


def test_a_batch_size_above_max_request_size_still_makes_batches_a_request_can_carry(
    fake: FakeLeader,
) -> None:
    with _producer(fake, linger_ms=60_000, batch_size=1 << 24, max_request_size=4096) as producer:
        futures = [producer.send("t", bytes(100), partition=0) for _ in range(200)]
        producer.flush(timeout=TIMEOUT_S)
        assert [f.result(timeout=0).offset for f in futures] == list(range(200))
    assert len([r for r in fake.received if r.partition == 0]) > 1


def test_a_callback_given_to_send_runs_in_send_order_with_those_added_later(
    fake: FakeLeader,
) -> None:
    seen: list[tuple[str, int]] = []
    with _producer(fake, linger_ms=60_000) as producer:
        producer.send(
            "t", b"a", partition=0, callback=lambda f: seen.append(("a", f.result().offset))
        )
        producer.send("t", b"b", partition=0).add_done_callback(
            lambda f: seen.append(("b", f.result().offset))
        )
        future = producer.send(
            "t", b"c", partition=0, callback=lambda f: seen.append(("c", f.result().offset))
        )
        future.add_done_callback(lambda f: seen.append(("c again", f.result().offset)))
        assert seen == []
        producer.flush(timeout=TIMEOUT_S)
    assert seen == [("a", 0), ("b", 1), ("c", 2), ("c again", 2)]


def test_a_callback_given_to_send_gets_the_error_of_its_record(fake: FakeLeader) -> None:
    errors: list[BaseException | None] = []
    with _producer(fake, max_request_size=1024) as producer:
        producer.send("t", bytes(2048), callback=lambda f: errors.append(f.exception()))
        # Refused before it was queued: the callback has already run, in this thread.
        assert [type(e) for e in errors] == [MessageTooLargeError]
        fake.plans.append(Plan(error=InvalidRecordError.code))
        future = producer.send(
            "t", b"v", partition=1, callback=lambda f: errors.append(f.exception())
        )
        with pytest.raises(InvalidRecordError):
            future.result(timeout=TIMEOUT_S)
        producer.flush(timeout=TIMEOUT_S)
    assert [type(e) for e in errors] == [MessageTooLargeError, InvalidRecordError]
