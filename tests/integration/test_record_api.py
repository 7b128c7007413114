"""Records as messages (issue 42): a client with no RecordBatch codec produces and fetches.

ProduceRecords and FetchRecords carry key/value/headers/timestamp messages; the broker builds
and checks the batch. What they write, the batch path reads, and the reverse; an idempotent
retry is written once; a read_committed reader sees no aborted record.
"""

from __future__ import annotations

import grpc

from cluster.client import Producer
from lograft.protocol.batch_builder import encode_batch
from lograft.protocol.wire import broker_pb2 as pb
from lograft.protocol.wire import broker_pb2_grpc as pb_grpc
from tests.integration.nodes import wait_until
from tests.integration.quorum import CLUSTER_TIMEOUT_S, QuorumCluster
from tests.integration.wire_helpers import TIMEOUT_S, create_topic, fetch_all, produce


def _produce_records(
    stub: pb_grpc.BrokerStub,
    topic: str,
    records: list[pb.ProducedRecord],
    producer: pb.ProducerSequence | None = None,
    partition: int = 0,
) -> pb.ProduceRecordsResponse:
    answer: pb.ProduceRecordsResponse = stub.ProduceRecords(
        pb.ProduceRecordsRequest(
            topic=topic,
            partition=partition,
            acks=-1,
            timeout_ms=10_000,
            records=records,
            producer=producer,
        ),
        timeout=TIMEOUT_S,
    )
    return answer


def _fetch_records(
    stub: pb_grpc.BrokerStub, topic: str, offset: int, **fields: int
) -> pb.FetchRecordsResponse:
    answer: pb.FetchRecordsResponse = stub.FetchRecords(
        pb.FetchRecordsRequest(topic=topic, partition=0, offset=offset, **fields),
        timeout=TIMEOUT_S,
    )
    return answer


def _values(stub: pb_grpc.BrokerStub, topic: str, **fields: int) -> list[bytes]:
    answer = _fetch_records(stub, topic, 0, **fields)
    assert answer.error_name == "NONE", answer
    return [record.value for record in answer.records]


def test_records_produced_as_messages_read_back_field_by_field_on_both_paths(
    stub: pb_grpc.BrokerStub,
) -> None:
    create_topic(stub, "plain")
    sent = [
        pb.ProducedRecord(
            key=b"k1",
            value=b"v1",
            headers=[pb.RecordHeader(key="trace", value=b"abc"), pb.RecordHeader(key="null")],
            timestamp_ms=1_700_000_000_000,
        ),
        pb.ProducedRecord(value=b"no key"),
        pb.ProducedRecord(key=b"tombstone"),
        pb.ProducedRecord(key=b"", value=b""),
    ]
    answer = _produce_records(stub, "plain", sent)
    assert (answer.error_name, answer.base_offset) == ("NONE", 0)
    batch_written = produce(stub, "plain", 0, encode_batch([b"from a batch"], [b"k5"]))
    assert batch_written.base_offset == 4

    fetched = _fetch_records(stub, "plain", 0)
    assert fetched.error_code == 0
    assert (fetched.next_offset, fetched.high_watermark) == (5, 5)
    first, no_key, tombstone, empty, from_batch = fetched.records
    assert (first.offset, first.key, first.value, first.timestamp_ms) == (
        0,
        b"k1",
        b"v1",
        1_700_000_000_000,
    )
    assert [(h.key, h.HasField("value"), h.value) for h in first.headers] == [
        ("trace", True, b"abc"),
        ("null", False, b""),
    ]
    assert not no_key.HasField("key") and no_key.value == b"no key"
    assert no_key.timestamp_ms > first.timestamp_ms  # stamped by the broker
    assert tombstone.key == b"tombstone" and not tombstone.HasField("value")
    assert empty.HasField("key") and empty.HasField("value") and empty.value == b""
    assert (from_batch.offset, from_batch.key, from_batch.value) == (4, b"k5", b"from a batch")

    # The batch path reads what the message path wrote, byte for byte.
    records = fetch_all(stub, "plain", 0)
    assert [(r.key, r.value) for r in records[:4]] == [
        (b"k1", b"v1"),
        (None, b"no key"),
        (b"tombstone", None),
        (b"", b""),
    ]
    assert records[0].headers == (("trace", b"abc"), ("null", None))

    assert [r.offset for r in _fetch_records(stub, "plain", 1, max_records=2).records] == [1, 2]
    assert _fetch_records(stub, "plain", 1, max_records=2).next_offset == 3
    at_end = _fetch_records(stub, "plain", 5, max_wait_ms=50)
    assert (list(at_end.records), at_end.next_offset, at_end.error_code) == ([], 5, 0)


def test_an_idempotent_retry_is_written_once_and_a_sequence_gap_is_refused(
    stub: pb_grpc.BrokerStub,
) -> None:
    create_topic(stub, "idem")
    ids = stub.InitProducerId(pb.InitProducerIdRequest(), timeout=TIMEOUT_S)
    assert ids.error_code == 0

    def sequence(base: int) -> pb.ProducerSequence:
        return pb.ProducerSequence(
            producer_id=ids.producer_id, producer_epoch=ids.producer_epoch, base_sequence=base
        )

    first = [pb.ProducedRecord(value=b"a"), pb.ProducedRecord(value=b"b")]
    assert _produce_records(stub, "idem", first, sequence(0)).base_offset == 0
    retried = _produce_records(stub, "idem", first, sequence(0))
    assert (retried.error_name, retried.base_offset) == ("NONE", 0)
    assert (
        _produce_records(stub, "idem", [pb.ProducedRecord(value=b"c")], sequence(2)).base_offset
        == 2
    )
    gap = _produce_records(stub, "idem", [pb.ProducedRecord(value=b"e")], sequence(9))
    assert (gap.error_name, gap.retriable, gap.base_offset) == (
        "OUT_OF_ORDER_SEQUENCE_NUMBER",
        False,
        -1,
    )
    assert _values(stub, "idem") == [b"a", b"b", b"c"]


def test_errors_are_named_with_their_retriability(stub: pb_grpc.BrokerStub) -> None:
    unknown = _produce_records(stub, "nowhere", [pb.ProducedRecord(value=b"x")])
    assert (unknown.error_name, unknown.retriable, unknown.error_code) == (
        "UNKNOWN_TOPIC_OR_PARTITION",
        True,
        3,
    )
    create_topic(stub, "errors")
    assert _produce_records(stub, "errors", []).error_name == "INVALID_RECORD"
    too_new = pb.ProducerSequence(producer_id=1, producer_epoch=40_000, base_sequence=0)
    wide_epoch = _produce_records(stub, "errors", [pb.ProducedRecord(value=b"x")], too_new)
    assert wide_epoch.error_name == "INVALID_RECORD"
    assert _fetch_records(stub, "errors", 0, isolation_level=5).error_name == "INVALID_REQUEST"
    bad_codec = stub.ProduceRecords(
        pb.ProduceRecordsRequest(
            topic="errors", acks=1, compression=9, records=[pb.ProducedRecord(value=b"x")]
        ),
        timeout=TIMEOUT_S,
    )
    assert bad_codec.error_name == "UNSUPPORTED_COMPRESSION_TYPE"
    past_end = _fetch_records(stub, "errors", 7)
    assert (past_end.error_name, past_end.retriable) == ("OFFSET_OUT_OF_RANGE", False)
    # KIP-320: a reader following an epoch this leader has not reached is told so.
    ahead = _fetch_records(stub, "errors", 0, current_leader_epoch=5)
    assert (ahead.error_name, ahead.retriable) == ("UNKNOWN_LEADER_EPOCH", True)
    assert _fetch_records(stub, "errors", 0, current_leader_epoch=0).error_name == "NONE"


def test_read_committed_leaves_out_aborted_records_and_moves_past_the_markers(
    grouped: QuorumCluster,
) -> None:
    assert grouped.create_topic(grouped.nodes[1], "txn", 1, 3) == 0
    wait_until(
        lambda: grouped.leaders(grouped.nodes[1], "txn").get(0, -1) >= 0,
        CLUSTER_TIMEOUT_S,
        "a leader for txn-0",
    )
    with Producer(bootstrap_servers=grouped.bootstrap, transactional_id="records-tx") as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("txn", b"committed", partition=0)
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send("txn", b"aborted", partition=0).result(timeout=30)
        producer.abort_transaction()
    leader = grouped.nodes[grouped.leaders(grouped.nodes[1], "txn")[0]]
    with grpc.insecure_channel(leader.address) as channel:
        stub = pb_grpc.BrokerStub(channel)
        # committed(0) commit-marker(1) aborted(2) abort-marker(3); EndTxn answers before
        # the coordinator's markers are written, so wait for the abort marker.
        wait_until(
            lambda: _fetch_records(stub, "txn", 0, isolation_level=1).last_stable_offset == 4,
            CLUSTER_TIMEOUT_S,
            "the abort marker",
        )
        committed = _fetch_records(stub, "txn", 0, isolation_level=1)
        assert [r.value for r in committed.records] == [b"committed"]
        assert (committed.next_offset, committed.last_stable_offset) == (4, 4)
        assert _values(stub, "txn") == [b"committed", b"aborted"]
