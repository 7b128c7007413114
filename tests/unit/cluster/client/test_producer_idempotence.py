"""The idempotent producer: config resolution, sequences, retries, duplicates, epoch bumps.

Against ``FakeLeader`` (``tests.unit.producer_fixtures``), an in-process gRPC leader that
checks produced batches with ``replica.producer_state`` as a real leader does and flags
protocol violations. The sequencing rules alone are tested in ``test_producer_sequencing``.
"""

from __future__ import annotations

import re
import threading
from collections import deque
from collections.abc import Iterator

import pytest

from cluster.client import Producer, TopicPartition
from cluster.client._accumulator import ProducerBatch, requeue
from cluster.client._clock import ManualClock
from cluster.client._sequencing import PartitionSequences
from cluster.client.producer import PRODUCER_CONFIGS
from lograft.protocol.batch_header import (
    BatchHeader,
    parse_header,
    validate_batches,
    with_producer_fields,
)
from lograft.protocol.errors import (
    InvalidConfigError,
    InvalidRequestError,
    MessageTooLargeError,
    NotLeaderOrFollowerError,
    OutOfOrderSequenceNumberError,
    RequestTimedOutError,
)
from lograft.protocol.records import RecordBatchBuilder, encode_batch, iter_records
from replica.producer_state import ProducerStateManager
from tests.unit.producer_fixtures import (
    PRODUCER_ID,
    TIMEOUT_S,
    FakeLeader,
    Plan,
    Received,
    fake_leader,
)

COORDINATOR_NOT_AVAILABLE = 15


@pytest.fixture
def fake() -> Iterator[FakeLeader]:
    with fake_leader() as leader:
        yield leader


def _producer(fake: FakeLeader, **overrides: object) -> Producer:
    config: dict[str, object] = {
        "bootstrap.servers": f"127.0.0.1:{fake.port}",
        "retry.backoff.ms": 5,
        "linger.ms": 0,
    }
    config.update({name.replace("_", "."): value for name, value in overrides.items()})
    return Producer(config)


def _values(received: Received) -> list[bytes | None]:
    return [record.value for record in iter_records(received.data)]


def _idempotent_headers(fake: FakeLeader, topic: str, partition: int) -> list[BatchHeader]:
    return [h for h in fake.headers(topic, partition) if h.producer_id >= 0]


# ---- header stamping and re-queueing ----------------------------------------------------------


@pytest.mark.parametrize("compression", [0, 1, 4])
def test_stamping_equals_encoding_with_the_producer_fields(compression: int) -> None:
    values = [f"value-{i}".encode() * (i + 1) for i in range(50)]
    plain = encode_batch(values, timestamp_ms=1_000, compression=compression)
    stamped = with_producer_fields(plain, 77, 3, 2**31 - 5)
    assert stamped == encode_batch(
        values,
        timestamp_ms=1_000,
        compression=compression,
        producer_id=77,
        producer_epoch=3,
        base_sequence=2**31 - 5,
    )
    (header,) = validate_batches(bytearray(stamped), 1 << 30)  # the CRC holds
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 3, 2**31 - 5)


def test_stamping_a_built_batch_keeps_its_records() -> None:
    builder = RecordBatchBuilder()
    for i in range(5):
        builder.append(f"v{i}".encode(), key=b"k", timestamp_ms=2_000 + i, headers=[("h", b"x")])
    stamped = with_producer_fields(builder.build(), 5, 0, 10)
    assert parse_header(stamped).base_sequence == 10
    records = list(iter_records(stamped))
    assert [r.value for r in records] == [f"v{i}".encode() for i in range(5)]
    assert all(r.headers == (("h", b"x"),) for r in records)


def test_requeue_puts_batches_back_in_creation_order() -> None:
    tp = TopicPartition("t", 0)
    batches = {seq: ProducerBatch(tp, seq, 0.0, 60.0) for seq in range(1, 7)}
    q: deque[ProducerBatch] = deque([batches[5], batches[6]])  # never sent, still queued
    for seq in (3, 1, 4, 2):  # answers come back in any order
        requeue(q, batches[seq])
    assert [b.seq for b in q] == [1, 2, 3, 4, 5, 6]


# ---- configuration ----------------------------------------------------------------------------


def test_idempotence_is_on_by_default_and_documented() -> None:
    (definition,) = [d for d in PRODUCER_CONFIGS if d.name == "enable.idempotence"]
    assert definition.default is True
    assert "acks=all" in definition.doc
    producer = Producer(bootstrap_servers="127.0.0.1:1")  # no cluster: construction succeeds
    try:
        assert producer.config["enable.idempotence"] is True
    finally:
        producer.close(timeout=1)


@pytest.mark.parametrize(
    "conflict",
    [
        {"acks": 1},
        {"acks": "0"},
        {"retries": 0},
        {"max.in.flight.requests.per.connection": 6},
    ],
)
def test_an_incompatible_setting_turns_default_idempotence_off(conflict: dict[str, object]) -> None:
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", **conflict})
    try:
        assert producer.config["enable.idempotence"] is False
    finally:
        producer.close(timeout=1)


@pytest.mark.parametrize(
    ("conflict", "named"),
    [
        ({"acks": 1}, "acks=all"),
        ({"retries": 0}, "retries"),
        ({"max_in_flight_requests_per_connection": 6}, "max.in.flight.requests.per.connection"),
    ],
)
def test_explicit_idempotence_with_an_incompatible_setting_is_a_config_error(
    conflict: dict[str, object], named: str
) -> None:
    with pytest.raises(InvalidConfigError, match=re.escape(named)):
        Producer(bootstrap_servers="127.0.0.1:1", enable_idempotence=True, **conflict)
    with pytest.raises(InvalidConfigError, match=re.escape(named)):
        Producer({"bootstrap.servers": "127.0.0.1:1", "enable.idempotence": "true"}, **conflict)


@pytest.mark.parametrize(("given", "expected"), [(False, False), ("FALSE", False), ("true", True)])
def test_enable_idempotence_values(given: object, expected: bool) -> None:
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", "enable.idempotence": given})
    try:
        assert producer.config["enable.idempotence"] is expected
    finally:
        producer.close(timeout=1)


@pytest.mark.parametrize("bad", ["yes", 1, None])
def test_enable_idempotence_rejects_non_booleans(bad: object) -> None:
    with pytest.raises(InvalidConfigError, match=re.escape("enable.idempotence")):
        Producer({"bootstrap.servers": "127.0.0.1:1", "enable.idempotence": bad})


def test_explicitly_disabled_producer_sends_no_producer_id(fake: FakeLeader) -> None:
    fake.add_topic("t", 1)
    with _producer(fake, enable_idempotence=False) as producer:
        producer.send("t", b"x").result(timeout=TIMEOUT_S)
    assert fake.init_calls == 0
    (header,) = fake.headers("t", 0)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (-1, -1, -1)


# ---- sequences ----------------------------------------------------------------------------------


def test_each_partition_numbers_its_batches_from_zero(fake: FakeLeader) -> None:
    fake.add_topic("t", 2)
    with _producer(fake, batch_size=200, linger_ms=5) as producer:
        sent = [producer.send("t", f"v{i:03d}".encode() * 10, partition=i % 2) for i in range(60)]
        producer.flush(timeout=TIMEOUT_S)
        bulk = producer.send_bulk("t", [b"b" * 100] * 50, partition=0).result(timeout=TIMEOUT_S)
    assert fake.init_calls == 1
    for partition in range(2):
        headers = fake.headers("t", partition)
        assert len(headers) > 2
        expected = 0
        for header in headers:
            assert (header.producer_id, header.producer_epoch) == (PRODUCER_ID, 0)
            assert header.base_sequence == expected
            expected += header.records_count
        values = fake.values("t", partition)
        mine = [f"v{i:03d}".encode() * 10 for i in range(partition, 60, 2)]
        assert values[: len(mine)] == mine
        for future in sent[partition::2]:
            meta = future.result(timeout=0)
            assert values[meta.offset] == mine[meta.offset]
    assert bulk.offset_of(0) == (0, 30)
    assert fake.values("t", 0)[30:] == [b"b" * 100] * 50


def test_sequences_wrap_from_int32_max_to_zero(fake: FakeLeader) -> None:
    fake.add_topic("t", 2)
    with _producer(fake) as producer:
        producer.send("t", b"first", partition=0).result(timeout=TIMEOUT_S)
        # Pretend partition 1 has already used almost every sequence (the fake has no state
        # for this producer on partition 1, so it accepts any first sequence, as Kafka does).
        sequences = PartitionSequences()
        sequences.producer_id, sequences.producer_epoch = PRODUCER_ID, 0
        sequences.next_sequence = 2**31 - 2
        sequences.last_acked_sequence = 2**31 - 3
        with producer._lock:
            assert producer._sender.sequencer is not None
            producer._sender.sequencer.partitions[TopicPartition("t", 1)] = sequences
        producer.send_bulk("t", [b"a", b"b", b"c"], partition=1).result(timeout=TIMEOUT_S)
        producer.send_bulk("t", [b"d", b"e"], partition=1).result(timeout=TIMEOUT_S)
    assert [h.base_sequence for h in fake.headers("t", 1)] == [2**31 - 2, 1]
    assert fake.values("t", 1) == [b"a", b"b", b"c", b"d", b"e"]


# ---- lost responses and duplicates --------------------------------------------------------------


def test_a_lost_response_is_retried_and_answered_with_the_original_offset(
    fake: FakeLeader,
) -> None:
    fake.add_topic("t", 1)
    fake.plans.append(Plan(lose_response=True))
    with _producer(fake) as producer:
        first = producer.send("t", b"a").result(timeout=TIMEOUT_S)
        second = producer.send("t", b"b").result(timeout=TIMEOUT_S)
    assert (first.offset, second.offset) == (0, 1)
    assert fake.values("t", 0) == [b"a", b"b"]
    assert fake.duplicates == 1
    assert fake.received[0].data == fake.received[1].data  # the retry was not re-sequenced


def test_a_retried_batch_goes_alone_and_each_is_deduplicated(fake: FakeLeader) -> None:
    fake.add_topic("t", 1)
    gate = threading.Event()
    fake.plans.extend([Plan(gate=gate), Plan(lose_response=True)])
    with _producer(fake, batch_size=1) as producer:
        first = producer.send("t", b"r0")
        assert fake.held.wait(TIMEOUT_S)
        # Until the broker acknowledges a batch of this producer, the partition has one
        # request in flight: these two wait, and then go together in one request.
        rest = [producer.send("t", b"r1"), producer.send("t", b"r2")]
        gate.set()
        offsets = [f.result(timeout=TIMEOUT_S).offset for f in (first, *rest)]
    assert offsets == [0, 1, 2]
    assert fake.values("t", 0) == [b"r0", b"r1", b"r2"]
    assert [len(part.headers) for (part,) in fake.requests] == [1, 2, 1, 1]
    assert fake.duplicates == 2


def test_a_lost_bulk_response_writes_every_value_once(fake: FakeLeader) -> None:
    fake.add_topic("t", 1)
    values = [i.to_bytes(4, "big") * 25 for i in range(5_000)]
    fake.lose_nth_append = 3  # while later batches are in flight behind it
    with _producer(fake, max_request_size=64 * 1024) as producer:
        result = producer.send_bulk("t", values, partition=0).result(timeout=TIMEOUT_S)
    assert len(fake.logs[("t", 0)]) > 5
    assert fake.values("t", 0) == values
    assert fake.duplicates == 1
    for index in (0, 1_234, 4_999):
        assert result.offset_of(index) == (0, index)


# ---- out-of-order answers, retries in order -----------------------------------------------------


def test_a_request_that_overtakes_its_predecessor_is_retried_after_it(fake: FakeLeader) -> None:
    fake.add_topic("t", 1)
    with _producer(fake) as producer:
        producer.send("t", b"warm-up").result(timeout=TIMEOUT_S)
        fake.plans.append(Plan(hold_until_another_answered=True))
        a = producer.send("t", b"a")
        assert fake.held.wait(TIMEOUT_S)
        b = producer.send("t", b"b")  # reaches the leader first: OUT_OF_ORDER_SEQUENCE_NUMBER
        assert (a.result(timeout=TIMEOUT_S).offset, b.result(timeout=TIMEOUT_S).offset) == (1, 2)
    assert fake.values("t", 0) == [b"warm-up", b"a", b"b"]
    b_attempts = [r.headers[0].base_sequence for r in fake.received if _values(r) == [b"b"]]
    assert b_attempts == [2, 2]  # overtook "a", then went again after it, same sequence


def test_failed_batches_are_retried_in_sequence_order(fake: FakeLeader) -> None:
    fake.add_topic("t", 1)
    with _producer(fake) as producer:
        producer.send("t", b"warm-up").result(timeout=TIMEOUT_S)
        fake.plans.append(
            Plan(error=NotLeaderOrFollowerError.code, hold_until_another_answered=True)
        )
        a = producer.send("t", b"a")
        assert fake.held.wait(TIMEOUT_S)
        b = producer.send("t", b"b")
        assert (a.result(timeout=TIMEOUT_S).offset, b.result(timeout=TIMEOUT_S).offset) == (1, 2)
    assert fake.values("t", 0) == [b"warm-up", b"a", b"b"]


def test_many_batches_in_flight_stay_in_order_and_within_five(fake: FakeLeader) -> None:
    fake.add_topic("t", 1)
    with _producer(fake, batch_size=1) as producer:
        producer.send("t", b"warm-up").result(timeout=TIMEOUT_S)
        fake.plans.append(Plan(hold_until_another_answered=True))
        sent = [producer.send("t", b"first")]
        assert fake.held.wait(TIMEOUT_S)
        sent += [producer.send("t", f"r{i}".encode()) for i in range(30)]
        offsets = [f.result(timeout=TIMEOUT_S).offset for f in sent]
    assert offsets == list(range(1, 32))
    assert fake.values("t", 0) == [b"warm-up", b"first"] + [f"r{i}".encode() for i in range(30)]


def test_callers_sending_while_the_sender_waits_keep_each_threads_order(
    fake: FakeLeader,
) -> None:
    # With linger 0 a send that finds the sender idle drains and sends in its own thread.
    # Two such callers and the sender still get every record written, in each thread's
    # order, with no sequence the leader refuses. (The drain lock's race, a caller's
    # requests overtaking the sender's, is too narrow for this test to hit.)
    fake.add_topic("t", 1)
    failures: list[BaseException] = []

    def caller(name: str, synchronous: bool) -> None:
        try:
            for i in range(150):
                future = producer.send("t", f"{name}{i}".encode())
                if synchronous or i % 10 == 9:
                    future.result(timeout=TIMEOUT_S)
        except BaseException as exc:
            failures.append(exc)

    with _producer(fake, linger_ms=0) as producer:
        threads = [
            threading.Thread(target=caller, args=("s", True)),
            threading.Thread(target=caller, args=("a", False)),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=TIMEOUT_S)
        producer.flush(timeout=TIMEOUT_S)
    assert failures == []
    assert fake.violations == []
    values = fake.values("t", 0)
    for name in ("s", "a"):
        assert [v for v in values if v is not None and v.startswith(name.encode())] == [
            f"{name}{i}".encode() for i in range(150)
        ]


def test_a_real_gap_restarts_the_partition_under_a_new_epoch_and_writes_the_batch(
    fake: FakeLeader,
) -> None:
    """KIP-360 (issue 40): the leader lost a sequence it had acknowledged; nothing fails.

    The leader's producer state is rebuilt from a log that lacks the second acknowledged
    batch (an unclean election; a power loss under ``flush.policy=interval``), so it
    answers the third batch OUT_OF_ORDER_SEQUENCE_NUMBER. The producer bumps its epoch and
    sends that batch again from sequence 0.
    """
    fake.add_topic("t", 1)
    with _producer(fake) as producer:
        producer.send("t", b"first").result(timeout=TIMEOUT_S)
        producer.send("t", b"second").result(timeout=TIMEOUT_S)
        first = _idempotent_headers(fake, "t", 0)[0]
        with fake.cond:  # the leader's state as a log holding only the first batch gives it
            lost_state = ProducerStateManager()
            lost_state.rebuild_from_batches([first])
            fake.states[("t", 0)] = lost_state
        third = producer.send("t", b"third").result(timeout=TIMEOUT_S)
        after = producer.send("t", b"after").result(timeout=TIMEOUT_S)
    assert (third.offset, after.offset) == (2, 3)
    assert fake.values("t", 0) == [b"first", b"second", b"third", b"after"]
    attempts = [r.headers[0] for r in fake.received if _values(r) == [b"third"]]
    assert [(h.producer_epoch, h.base_sequence) for h in attempts] == [(0, 2), (1, 0)]
    assert not fake.violations


def test_a_batch_whose_time_runs_out_on_an_out_of_order_answer_fails_as_timed_out(
    fake: FakeLeader,
) -> None:
    """Issue 40's kill-all finding: OUT_OF_ORDER_SEQUENCE_NUMBER only asks for a resend; a
    batch with no time left for it fails as timed out, and the partition goes on."""
    fake.add_topic("t", 1)
    clock = ManualClock()
    config = {
        "bootstrap.servers": f"127.0.0.1:{fake.port}",
        "linger.ms": 0,
        "retry.backoff.ms": 100,
        "delivery.timeout.ms": 1000,
    }
    producer = Producer._with_clock(clock, config)
    try:
        producer.send("t", b"warm-up").result(timeout=TIMEOUT_S)
        gate = threading.Event()
        fake.plans.append(Plan(gate=gate, error=OutOfOrderSequenceNumberError.code))
        late = producer.send("t", b"late")
        assert fake.held.wait(TIMEOUT_S)
        clock.advance(0.95)  # the answer comes within the batch's last retry.backoff.ms
        gate.set()
        with pytest.raises(RequestTimedOutError, match="OUT_OF_ORDER_SEQUENCE_NUMBER"):
            late.result(timeout=TIMEOUT_S)
        after = producer.send("t", b"after").result(timeout=TIMEOUT_S)
    finally:
        producer.close(timeout=0)  # on a manual clock, close must not wait for anything
    assert after.offset == 1
    assert fake.values("t", 0) == [b"warm-up", b"after"]
    last = _idempotent_headers(fake, "t", 0)[-1]
    assert (last.producer_epoch, last.base_sequence) == (1, 0)


def test_a_written_batch_whose_response_was_lost_is_not_written_again_after_a_bump(
    fake: FakeLeader,
) -> None:
    fake.add_topic("t", 1)
    gate = threading.Event()
    with _producer(fake) as producer:
        producer.send("t", b"warm-up").result(timeout=TIMEOUT_S)
        # "written" is appended but its response is lost, after "refused" has failed for good.
        fake.plans.extend(
            [Plan(gate=gate, lose_response=True), Plan(error=MessageTooLargeError.code)]
        )
        written = producer.send("t", b"written")
        assert fake.held.wait(TIMEOUT_S)
        with pytest.raises(MessageTooLargeError):
            producer.send("t", b"refused").result(timeout=TIMEOUT_S)
        gate.set()
        # Retried under its own epoch and sequence, it is answered as a duplicate; only then
        # does the partition restart under a new epoch.
        assert written.result(timeout=TIMEOUT_S).offset == 1
        after = producer.send("t", b"after").result(timeout=TIMEOUT_S)
    assert after.offset == 2
    assert fake.values("t", 0) == [b"warm-up", b"written", b"after"]
    assert fake.duplicates == 1
    attempts = [r.headers[0] for r in fake.received if _values(r) == [b"written"]]
    assert [(h.producer_epoch, h.base_sequence) for h in attempts] == [(0, 1), (0, 1)]
    last = _idempotent_headers(fake, "t", 0)[-1]
    assert (last.producer_id, last.producer_epoch, last.base_sequence) == (PRODUCER_ID, 1, 0)


# ---- InitProducerId -----------------------------------------------------------------------------


def test_retriable_init_producer_id_errors_are_retried(fake: FakeLeader) -> None:
    fake.add_topic("t", 1)
    fake.init_errors.extend([COORDINATOR_NOT_AVAILABLE, NotLeaderOrFollowerError.code])
    with _producer(fake) as producer:
        assert producer.send("t", b"x").result(timeout=TIMEOUT_S).offset == 0
    assert fake.init_calls == 3


def test_a_fatal_init_producer_id_error_fails_the_records(fake: FakeLeader) -> None:
    fake.add_topic("t", 1)
    fake.init_errors.append(InvalidRequestError.code)
    with _producer(fake) as producer:
        with pytest.raises(InvalidRequestError):
            producer.send("t", b"x").result(timeout=TIMEOUT_S)
        with pytest.raises(InvalidRequestError):
            producer.send("t", b"y").result(timeout=TIMEOUT_S)
    assert fake.values("t", 0) == []


def test_delivery_timeout_bounds_the_wait_for_a_producer_id(fake: FakeLeader) -> None:
    fake.add_topic("t", 1)
    fake.init_always_fails = COORDINATOR_NOT_AVAILABLE
    with (
        _producer(fake, delivery_timeout_ms=200) as producer,
        pytest.raises(RequestTimedOutError),
    ):
        producer.send("t", b"x").result(timeout=TIMEOUT_S)
    assert fake.values("t", 0) == []
