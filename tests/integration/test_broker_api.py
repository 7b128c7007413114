"""Broker API behaviour against a real node: long-poll fetch, offsets by time, topics."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from pathlib import Path

import grpc
import pytest

from lograft.protocol.errors import (
    InvalidConfigError,
    InvalidReplicationFactorError,
    TopicAlreadyExistsError,
)
from lograft.protocol.records import RecordBatchBuilder, encode_batch, iter_records
from lograft.protocol.wire import broker_pb2 as pb
from lograft.protocol.wire import broker_pb2_grpc as pb_grpc
from tests.integration.nodes import NodeProcess
from tests.integration.wire_helpers import (
    TIMEOUT_S,
    create_topic,
    fetch_all,
    fetch_once,
    list_offset,
    produce,
)

pytestmark = pytest.mark.integration


def _long_poll(stub: pb_grpc.BrokerStub, topic: str, offset: int, max_wait_ms: int) -> bytes:
    response = stub.Fetch(
        pb.FetchRequest(
            max_wait_ms=max_wait_ms,
            min_bytes=1,
            max_bytes=1 << 20,
            replica_id=-1,
            topics=[
                pb.FetchTopic(
                    name=topic,
                    partitions=[pb.FetchPartition(partition=0, fetch_offset=offset)],
                )
            ],
        ),
        timeout=TIMEOUT_S,
    )
    assert response.topics[0].partitions[0].error_code == 0
    records: bytes = response.topics[0].partitions[0].records
    return records


def test_long_poll_fetch_returns_data_produced_while_it_waits(
    stub: pb_grpc.BrokerStub,
) -> None:
    create_topic(stub, "poll")
    result: Future[bytes] = Future()
    started = threading.Event()

    def fetch() -> None:
        started.set()
        result.set_result(_long_poll(stub, "poll", 0, max_wait_ms=25_000))

    waiter = threading.Thread(target=fetch)
    waiter.start()
    assert started.wait(TIMEOUT_S)
    assert not result.done(), "an empty partition answered a 25 s long poll at once"
    assert produce(stub, "poll", 0, encode_batch([b"wake up"])).error_code == 0
    waiter.join(TIMEOUT_S)
    assert [r.value for r in iter_records(result.result(timeout=0))] == [b"wake up"]


def test_a_long_poll_over_several_partitions_wakes_for_data_on_any_of_them(
    stub: pb_grpc.BrokerStub,
) -> None:
    create_topic(stub, "polls", partitions=3)
    # Held longer than the call's deadline: an answer can only come from the wake-up.
    request = pb.FetchRequest(
        max_wait_ms=60_000,
        min_bytes=1,
        max_bytes=1 << 20,
        replica_id=-1,
        topics=[
            pb.FetchTopic(
                name="polls",
                partitions=[pb.FetchPartition(partition=p, fetch_offset=0) for p in range(3)],
            )
        ],
    )
    answer = stub.Fetch.future(request, timeout=TIMEOUT_S)
    # The last partition of the request: the wait must be on every partition, not the first.
    assert produce(stub, "polls", 2, encode_batch([b"third"])).error_code == 0
    by_partition = {p.partition: p.records for p in answer.result().topics[0].partitions}
    assert [r.value for r in iter_records(by_partition[2])] == [b"third"]
    assert by_partition[0] == by_partition[1] == b""


def test_fetch_with_nothing_to_read_returns_empty_after_max_wait(
    stub: pb_grpc.BrokerStub,
) -> None:
    create_topic(stub, "quiet")
    assert _long_poll(stub, "quiet", 0, max_wait_ms=100) == b""


def test_list_offsets_by_timestamp(stub: pb_grpc.BrokerStub) -> None:
    create_topic(stub, "clock")
    for base in (1_000, 2_000, 3_000):
        builder = RecordBatchBuilder()
        for step in range(5):
            builder.append(f"t{base + step * 100}".encode(), timestamp_ms=base + step * 100)
        assert produce(stub, "clock", 0, builder.build()).error_code == 0
    assert list_offset(stub, "clock", 0, -2) == 0
    assert list_offset(stub, "clock", 0, -1) == 15
    assert list_offset(stub, "clock", 0, 0) == 0
    assert list_offset(stub, "clock", 0, 1_250) == 3  # first record at or after 1250 is t1300
    assert list_offset(stub, "clock", 0, 2_000) == 5
    assert list_offset(stub, "clock", 0, 3_400) == 14
    assert list_offset(stub, "clock", 0, 3_401) == -1  # nothing that late
    assert list_offset(stub, "clock", 0, -3) == 14  # the record holding the max timestamp


def test_log_append_time_topic_stamps_batches(stub: pb_grpc.BrokerStub) -> None:
    create_topic(stub, "stamped", configs={"message.timestamp.type": "LogAppendTime"})
    result = produce(stub, "stamped", 0, encode_batch([b"a", b"b"], timestamp_ms=5))
    assert result.error_code == 0 and result.log_append_time_ms > 5
    records = fetch_all(stub, "stamped", 0)
    assert {r.timestamp for r in records} == {result.log_append_time_ms}


def test_create_topic_errors(stub: pb_grpc.BrokerStub) -> None:
    create_topic(stub, "once")
    cases = {
        "once": (
            pb.CreatableTopic(name="once", num_partitions=1, replication_factor=1),
            TopicAlreadyExistsError.code,
        ),
        "rf": (
            pb.CreatableTopic(name="rf", num_partitions=1, replication_factor=3),
            InvalidReplicationFactorError.code,
        ),
        "cfg": (
            pb.CreatableTopic(
                name="cfg", num_partitions=1, replication_factor=1, configs={"retention.ms": "soon"}
            ),
            InvalidConfigError.code,
        ),
        "unknown-cfg": (
            pb.CreatableTopic(
                name="unknown-cfg", num_partitions=1, replication_factor=1, configs={"no.such": "1"}
            ),
            InvalidConfigError.code,
        ),
    }
    response = stub.CreateTopics(
        pb.CreateTopicsRequest(topics=[topic for topic, _ in cases.values()]), timeout=TIMEOUT_S
    )
    assert [t.error_code for t in response.topics] == [code for _, code in cases.values()]
    names = [t.name for t in stub.Metadata(pb.MetadataRequest(), timeout=TIMEOUT_S).topics]
    assert names == ["once"]


def test_deleted_topic_is_gone_from_disk_and_metadata(
    stub: pb_grpc.BrokerStub, node: NodeProcess
) -> None:
    create_topic(stub, "doomed", partitions=2)
    assert produce(stub, "doomed", 1, encode_batch([b"x"])).error_code == 0
    response = stub.DeleteTopics(pb.DeleteTopicsRequest(topic_names=["doomed"]), timeout=TIMEOUT_S)
    assert response.topics[0].error_code == 0
    assert not list(node.data_dir.glob("doomed-*"))
    assert fetch_once(stub, "doomed", 1, 0).error_code != 0
    create_topic(stub, "doomed")  # the name is free again, with an empty log
    assert fetch_all(stub, "doomed", 0) == []


def test_clean_shutdown_flushes_and_restart_keeps_everything(tmp_path: Path) -> None:
    node = NodeProcess(data_dir=tmp_path / "node-1", configs={"log.flush.policy": "interval"})
    node.start()
    try:
        with grpc.insecure_channel(node.address) as channel:
            stub = pb_grpc.BrokerStub(channel)
            create_topic(stub, "kept")
            values = [f"v{n}".encode() for n in range(500)]
            assert produce(stub, "kept", 0, encode_batch(values)).error_code == 0
        assert node.stop() == 0
        assert "node stopped" in node.read_log()
        node.start()
        with grpc.insecure_channel(node.address) as channel:
            assert [r.value for r in fetch_all(pb_grpc.BrokerStub(channel), "kept", 0)] == values
    finally:
        node.kill()
