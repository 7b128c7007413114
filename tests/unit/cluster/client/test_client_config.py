"""Client configuration checks, gRPC error mapping, and client behaviour against a fake broker.

The fake broker is an in-process gRPC servicer on 127.0.0.1 (port 0) that stores batches in
memory, validates and numbers them with ``lograft.protocol.batch_header`` and can be told to answer
the next produce with an error code. It lets these tests drive the producer's retry and
failure paths, which a healthy real node never takes.
"""

# Over 600 lines: the in-process FakeBroker and the client tests that drive it, together.
from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

from cluster.client import (
    AdminClient,
    Consumer,
    NewTopic,
    Producer,
    TopicPartition,
    partition_for_key,
)
from cluster.client._client_config import (
    COMMON_CONFIGS,
    parse_bootstrap_servers,
    resolve_config,
)
from cluster.client._connection import map_rpc_error
from cluster.client.admin import ADMIN_CONFIGS, AdminConfig
from cluster.client.consumer import CONSUMER_CONFIGS, ConsumerConfig
from cluster.client.producer import PRODUCER_CONFIGS, ProducerConfig
from lograft.protocol.errors import (
    IllegalStateError,
    InvalidConfigError,
    InvalidRequestError,
    MessageTooLargeError,
    NetworkError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
    RequestTimedOutError,
    TopicAlreadyExistsError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
)
from lograft.protocol.wire import broker_pb2_grpc as pb_grpc
from tests.unit.client_fixtures import FakeBroker

# ---- configuration --------------------------------------------------------------------------


def test_producer_defaults_are_kafkas() -> None:
    config = resolve_config("producer", PRODUCER_CONFIGS, None, {})
    assert config["acks"] == -1
    assert config["linger.ms"] == 5
    assert config["batch.size"] == 524_288
    assert config["max.request.size"] == 1048576
    assert config["delivery.timeout.ms"] == 120000
    assert config["max.in.flight.requests.per.connection"] == 5
    assert config["compression.type"] == 0
    assert config["bootstrap.servers"] == "127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094"
    assert config["socket.connection.setup.timeout.ms"] == 3000


@pytest.mark.parametrize(
    ("given", "expected"),
    [("all", -1), ("-1", -1), (-1, -1), (1, 1), ("1", 1), (0, 0), ("0", 0), ("ALL", -1)],
)
def test_acks_values(given: object, expected: int) -> None:
    producer = Producer(acks=given, bootstrap_servers="127.0.0.1:1")
    try:
        assert producer.config["acks"] == expected
    finally:
        producer.close()


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("acks", 2),
        ("acks", "some"),
        ("acks", True),
        ("linger.ms", -1),
        ("linger.ms", "soon"),
        ("batch.size", -5),
        ("compression.type", "brotli"),
        ("compression.type", 3),
        ("max.request.size", 0),
        ("retries", -1),
        ("max.in.flight.requests.per.connection", 0),
        ("bootstrap.servers", "localhost"),
        ("bootstrap.servers", "host:notaport"),
        ("bootstrap.servers", ""),
        ("client.id", 7),
        ("delivery.timeout.ms", 0),
    ],
)
def test_producer_rejects_bad_values(name: str, value: object) -> None:
    with pytest.raises(InvalidConfigError) as info:
        Producer({name: value})
    assert name in str(info.value)


def test_unknown_names_are_refused() -> None:
    with pytest.raises(InvalidConfigError, match=r"linger\.msec"):
        Producer({"linger.msec": 5})
    with pytest.raises(InvalidConfigError, match=r"heartbeat\.interval\.ms"):
        Consumer({"heartbeat.interval.ms": 3000})  # the group coordinator decides it
    with pytest.raises(InvalidConfigError, match="acks"):
        Consumer(acks=1)
    with pytest.raises(InvalidConfigError, match=r"fetch\.max\.wait\.ms"):
        AdminClient({"fetch.max.wait.ms": 5})


def test_keyword_overrides_use_underscores_and_win() -> None:
    producer = Producer(
        {"linger.ms": 50, "bootstrap.servers": "127.0.0.1:1"}, linger_ms=7, compression_type="lz4"
    )
    try:
        assert producer.config["linger.ms"] == 7
        assert producer.config["compression.type"] == 3
    finally:
        producer.close()


def test_resolved_configs_are_typed_values_readable_by_kafka_name() -> None:
    producer = Producer(bootstrap_servers="127.0.0.1:1", linger_ms="7", acks="all")
    consumer = Consumer(bootstrap_servers="127.0.0.1:1", group_id="g1", max_poll_records="9")
    admin = AdminClient(bootstrap_servers="127.0.0.1:1", default_api_timeout_ms="1500")
    try:
        assert isinstance(producer.config, ProducerConfig)
        assert (producer.config.linger_ms, producer.config.acks) == (7, -1)
        assert isinstance(consumer.config, ConsumerConfig)
        assert (consumer.config.group_id, consumer.config.max_poll_records) == ("g1", 9)
        assert isinstance(admin.config, AdminConfig)
        assert admin.config.default_api_timeout_ms == 1500
        assert consumer.config.as_dict()["max.poll.records"] == 9
        with pytest.raises(KeyError):
            consumer.config["linger.ms"]
        with pytest.raises(dataclasses.FrozenInstanceError):
            producer.config.linger_ms = 8  # type: ignore[misc]
    finally:
        producer.close()
        consumer.close()
        admin.close()


def test_each_table_is_its_config_class_in_field_order() -> None:
    assert [d.name for d in PRODUCER_CONFIGS] == list(ProducerConfig().as_dict())
    assert [d.name for d in CONSUMER_CONFIGS] == list(ConsumerConfig().as_dict())
    assert [d.name for d in ADMIN_CONFIGS] == list(AdminConfig().as_dict())
    assert [d.name for d in COMMON_CONFIGS] == [d.name for d in ADMIN_CONFIGS][:-1]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("auto.offset.reset", "smallest"),
        ("max.poll.records", 0),
        ("fetch.min.bytes", -1),
        ("fetch.max.wait.ms", "x"),
        ("group.id", 5),
        ("group.id", ""),
        ("max.partition.fetch.bytes", -1),
        ("enable.auto.commit", "yes"),
        ("auto.commit.interval.ms", -1),
        ("session.timeout.ms", 0),
        ("max.poll.interval.ms", 0),
        ("group.remote.assignor", "sticky"),
        ("max.poll.interval.ms", 2**31),
    ],
)
def test_consumer_rejects_bad_values(name: str, value: object) -> None:
    with pytest.raises(InvalidConfigError):
        Consumer({name: value})


def test_consumer_defaults_and_group_id_is_kept() -> None:
    consumer = Consumer(group_id="g1", bootstrap_servers="127.0.0.1:1")
    try:
        assert consumer.config["group.id"] == "g1"
        assert consumer.config["auto.offset.reset"] == "latest"
        assert consumer.config["max.poll.records"] == 500
        assert consumer.config["fetch.max.bytes"] == 52428800
    finally:
        consumer.close()
    without_group = Consumer(bootstrap_servers="127.0.0.1:1")
    try:
        with pytest.raises(IllegalStateError, match=r"group\.id"):
            without_group.subscribe(["t"])
    finally:
        without_group.close()
    defaults = {d.name: d.default for d in CONSUMER_CONFIGS}
    assert defaults["fetch.min.bytes"] == 1
    assert defaults["fetch.max.wait.ms"] == 500
    assert defaults["max.partition.fetch.bytes"] == 1048576
    assert defaults["group.id"] is None
    assert defaults["enable.auto.commit"] is True
    assert defaults["auto.commit.interval.ms"] == 5000
    assert defaults["session.timeout.ms"] == 45000
    assert defaults["max.poll.interval.ms"] == 300000
    assert defaults["group.remote.assignor"] == "range"


def test_bootstrap_parsing() -> None:
    assert parse_bootstrap_servers("a:1, b:2,[::1]:9092") == [("a", 1), ("b", 2), ("::1", 9092)]
    for bad in ("", "a", "a:0", "a:70000", ":9092", ","):
        with pytest.raises(InvalidConfigError):
            parse_bootstrap_servers(bad)


# ---- gRPC error mapping ---------------------------------------------------------------------


class _FakeRpcError(grpc.RpcError):  # type: ignore[misc]
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self._code = code
        self._details = details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


@pytest.mark.parametrize(
    ("status", "details", "expected", "retriable"),
    [
        (grpc.StatusCode.UNAVAILABLE, "connection refused", NetworkError, True),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, "too big", RecordListTooLargeError, False),
        (grpc.StatusCode.DEADLINE_EXCEEDED, "", RequestTimedOutError, True),
        (grpc.StatusCode.INVALID_ARGUMENT, "bad", InvalidRequestError, False),
        (grpc.StatusCode.INTERNAL, "boom", UnknownServerError, False),
        (grpc.StatusCode.UNKNOWN, "NOT_LEADER_OR_FOLLOWER: moved", NotLeaderOrFollowerError, True),
    ],
)
def test_map_rpc_error(
    status: grpc.StatusCode, details: str, expected: type[Exception], retriable: bool
) -> None:
    error = map_rpc_error(_FakeRpcError(status, details))
    assert type(error) is expected
    assert error.retriable is retriable


# ---- a fake broker ----------------------------------------------------------------------------


def _serve(max_receive: int | None = None) -> tuple[Any, FakeBroker]:
    options = [("grpc.max_receive_message_length", max_receive)] if max_receive else []
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), options=options)
    broker = FakeBroker()
    pb_grpc.add_BrokerServicer_to_server(broker, server)
    broker.port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, broker


@pytest.fixture
def fake() -> Iterator[FakeBroker]:
    server, broker = _serve()
    try:
        yield broker
    finally:
        server.stop(grace=None)


def _bootstrap(broker: FakeBroker) -> str:
    return f"127.0.0.1:{broker.port}"


def _read_all(broker: FakeBroker, topic: str, partitions: int, expected: int) -> list[Any]:
    with Consumer(bootstrap_servers=_bootstrap(broker), auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        records: list[Any] = []
        for _ in range(200):
            records.extend(consumer.poll(timeout_ms=100))
            if len(records) >= expected:
                break
        return records


def test_round_trip_against_fake_broker(fake: FakeBroker) -> None:
    fake.add_topic("t", 3)
    with Producer(bootstrap_servers=_bootstrap(fake), linger_ms=1) as producer:
        keyed = [producer.send("t", f"v{i}".encode(), key=f"k{i}".encode()) for i in range(50)]
        unkeyed = [producer.send("t", f"u{i}".encode(), headers=[("h", b"x")]) for i in range(50)]
        producer.flush(timeout=10)
    for i, future in enumerate(keyed):
        meta = future.result(timeout=0)
        assert meta.partition == partition_for_key(f"k{i}".encode(), 3)
        assert meta.topic == "t"
    records = _read_all(fake, "t", 3, 100)
    assert len(records) == 100
    by_partition: dict[int, list[Any]] = {}
    for record in records:
        by_partition.setdefault(record.partition, []).append(record)
    for partition, items in by_partition.items():
        assert [r.offset for r in items] == list(range(len(items)))
        sent = sorted(
            (f.result().offset, f) for f in keyed + unkeyed if f.result().partition == partition
        )
        assert len(sent) == len(items)
    values = {r.value for r in records}
    assert values == {f"v{i}".encode() for i in range(50)} | {f"u{i}".encode() for i in range(50)}
    assert all(r.headers == (("h", b"x"),) for r in records if r.value.startswith(b"u"))


def test_retriable_error_is_retried(fake: FakeBroker) -> None:
    fake.add_topic("t", 1)
    fake.produce_errors.extend([NotLeaderOrFollowerError.code, NotLeaderOrFollowerError.code])
    with Producer(bootstrap_servers=_bootstrap(fake), retry_backoff_ms=10) as producer:
        meta = producer.send("t", b"x").result(timeout=10)
    assert meta.offset == 0
    assert fake.produce_requests == 3


def test_non_retriable_and_exhausted_errors_fail_the_future(fake: FakeBroker) -> None:
    fake.add_topic("t", 1)
    fake.produce_errors.append(MessageTooLargeError.code)
    with (
        Producer(bootstrap_servers=_bootstrap(fake)) as producer,
        pytest.raises(MessageTooLargeError),
    ):
        producer.send("t", b"x").result(timeout=10)
    fake.produce_errors.extend([NotLeaderOrFollowerError.code] * 3)
    config = {"retries": 1, "retry.backoff.ms": 1, "bootstrap.servers": _bootstrap(fake)}
    with Producer(config) as producer, pytest.raises(NotLeaderOrFollowerError):
        producer.send("t", b"x").result(timeout=10)


def test_acks_zero_completes_with_minus_one(fake: FakeBroker) -> None:
    fake.add_topic("t", 1)
    with Producer(bootstrap_servers=_bootstrap(fake), acks=0) as producer:
        meta = producer.send("t", b"x", timestamp_ms=1234).result(timeout=10)
    assert meta.offset == -1
    assert meta.timestamp == 1234


def test_oversized_request_maps_to_record_list_too_large() -> None:
    server, broker = _serve(max_receive=64 * 1024)
    try:
        broker.add_topic("t", 1)
        with Producer(bootstrap_servers=_bootstrap(broker)) as producer:
            with pytest.raises(RecordListTooLargeError):
                producer.send("t", b"x" * 200_000).result(timeout=10)
            with pytest.raises(MessageTooLargeError):
                producer.send("t", b"x" * 2_000_000).result(timeout=10)
    finally:
        server.stop(grace=None)


def test_bulk_round_trip_in_many_chunks(fake: FakeBroker) -> None:
    fake.add_topic("t", 2)
    values = [i.to_bytes(4, "big") * 25 for i in range(20_000)]
    # The fake serves requests on a thread pool, which may reorder concurrent ones: one
    # request in flight keeps the offsets in input order.
    config = {
        "bootstrap.servers": _bootstrap(fake),
        "max.request.size": 64 * 1024,
        "max.in.flight.requests.per.connection": 1,
    }
    with Producer(config) as producer:
        result = producer.send_bulk("t", values, partition=1).result(timeout=30)
    assert result.record_count == len(values)
    assert len(result.batches) > 10
    assert result.offset_of(0) == (1, 0)
    assert result.offset_of(19_999) == (1, 19_999)
    records = _read_all(fake, "t", 2, len(values))
    assert [r.value for r in records] == values
    assert {r.partition for r in records} == {1}


def test_bulk_keyed_uses_murmur2(fake: FakeBroker) -> None:
    fake.add_topic("t", 4)
    keys: list[bytes | None] = [f"key-{i}".encode() for i in range(400)]
    values = [f"value-{i}".encode() for i in range(400)]
    with Producer(bootstrap_servers=_bootstrap(fake)) as producer:
        producer.send_bulk("t", values, keys=keys).result(timeout=30)
    records = _read_all(fake, "t", 4, 400)
    assert len(records) == 400
    for record in records:
        assert record.key is not None
        assert record.partition == partition_for_key(record.key, 4)
        assert record.value == b"value-" + record.key[4:]


def test_unknown_topic_fails_after_max_block(fake: FakeBroker) -> None:
    with Producer(bootstrap_servers=_bootstrap(fake), max_block_ms=200) as producer:
        with pytest.raises(UnknownTopicOrPartitionError):
            producer.send("missing", b"x")
        fake.add_topic("t", 1)
        with pytest.raises(UnknownTopicOrPartitionError):
            producer.send("t", b"x", partition=5).result(timeout=1)


def test_send_after_close_is_illegal(fake: FakeBroker) -> None:
    producer = Producer(bootstrap_servers=_bootstrap(fake))
    producer.close()
    with pytest.raises(IllegalStateError):
        producer.send("t", b"x")


def test_offset_out_of_range_applies_reset(fake: FakeBroker) -> None:
    fake.add_topic("t", 1)
    tp = TopicPartition("t", 0)
    with Producer(bootstrap_servers=_bootstrap(fake)) as producer:
        producer.send_bulk("t", [b"a", b"b", b"c"], partition=0).result(timeout=10)
    with Consumer(bootstrap_servers=_bootstrap(fake), auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 99)
        records: list[Any] = []
        for _ in range(50):
            records.extend(consumer.poll(timeout_ms=100))
            if len(records) == 3:
                break
        assert [r.value for r in records] == [b"a", b"b", b"c"]
        assert consumer.position(tp) == 3
    with Consumer(bootstrap_servers=_bootstrap(fake), auto_offset_reset="none") as consumer:
        consumer.assign([tp])
        with pytest.raises(IllegalStateError):
            consumer.poll(timeout_ms=10)
        consumer.seek(tp, 99)
        with pytest.raises(OffsetOutOfRangeError):
            for _ in range(50):
                consumer.poll(timeout_ms=100)


def test_consumer_latest_and_seek_to_beginning(fake: FakeBroker) -> None:
    fake.add_topic("t", 1)
    tp = TopicPartition("t", 0)
    with Producer(bootstrap_servers=_bootstrap(fake)) as producer:
        producer.send_bulk("t", [b"old"], partition=0).result(timeout=10)
        with Consumer(bootstrap_servers=_bootstrap(fake)) as consumer:
            consumer.assign([tp])
            assert consumer.position(tp) == 1
            producer.send("t", b"new").result(timeout=10)
            assert [r.value for r in consumer.poll(timeout_ms=2000)] == [b"new"]
            consumer.seek_to_beginning()
            got: list[bytes | None] = []
            for _ in range(50):
                got.extend(r.value for r in consumer.poll(timeout_ms=100))
                if len(got) == 2:
                    break
            assert got == [b"old", b"new"]
            assert consumer.end_offsets([tp]) == {tp: 2}
            assert consumer.beginning_offsets([tp]) == {tp: 0}


def test_admin_against_fake_broker(fake: FakeBroker) -> None:
    with AdminClient(bootstrap_servers=_bootstrap(fake)) as admin:
        results = admin.create_topics([NewTopic("a", 2), NewTopic("b", 1)])
        assert {name: f.result() for name, f in results.items()} == {"a": None, "b": None}
        again = admin.create_topics([NewTopic("a", 2)])
        with pytest.raises(TopicAlreadyExistsError):
            again["a"].result()
        assert admin.list_topics() == ["a", "b"]
        (description,) = admin.describe_topics(["a"])
        assert [p.partition for p in description.partitions] == [0, 1]
        assert description.partitions[0].leader == 1
        assert description.partitions[0].isr == (1,)
        assert description.configs["retention.ms"] == "604800000"
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.describe_topics(["nope"])
        offsets = admin.list_offsets(
            {TopicPartition("a", 0): "earliest", TopicPartition("a", 1): "latest"}
        )
        assert offsets[TopicPartition("a", 0)].offset == 0
        with pytest.raises(InvalidRequestError):
            admin.list_offsets({TopicPartition("a", 0): "first"})  # type: ignore[dict-item]
        deleted = admin.delete_topics(["b", "zz"])
        assert deleted["b"].result() is None
        with pytest.raises(UnknownTopicOrPartitionError):
            deleted["zz"].result()


def test_unreachable_bootstrap_is_a_network_error() -> None:
    with (
        AdminClient(
            bootstrap_servers="127.0.0.1:1", default_api_timeout_ms=300, request_timeout_ms=200
        ) as admin,
        pytest.raises(NetworkError),
    ):
        admin.list_topics()


def test_consumer_iteration_and_prefetch(fake: FakeBroker) -> None:
    fake.add_topic("t", 2)
    values = [f"v{i}".encode() for i in range(3000)]
    with Producer(bootstrap_servers=_bootstrap(fake)) as producer:
        producer.send_bulk("t", values, partition=0).result(timeout=10)
        producer.send_bulk("t", values, partition=1).result(timeout=10)
    config = {
        "bootstrap.servers": _bootstrap(fake),
        "auto.offset.reset": "earliest",
        "max.poll.records": 100,
        "max.partition.fetch.bytes": 4096,
    }
    with Consumer(config) as consumer:
        consumer.assign([TopicPartition("t", 0), TopicPartition("t", 1)])
        assert consumer.assignment() == {TopicPartition("t", 0), TopicPartition("t", 1)}
        got = list(itertools.islice(consumer, 6000))
        assert consumer.position(TopicPartition("t", 0)) == 3000
        assert consumer.highwater(TopicPartition("t", 1)) == 3000
    for partition in (0, 1):
        assert [r.value for r in got if r.partition == partition] == values
    with pytest.raises(IllegalStateError):
        consumer.poll(timeout_ms=0)
    assert list(consumer) == []


def test_a_quiet_topic_sees_added_partitions_while_a_busy_one_keeps_the_metadata_young(
    fake: FakeBroker,
) -> None:
    fake.add_topic("busy", 1)
    fake.add_topic("quiet", 1)
    config = {"bootstrap.servers": _bootstrap(fake), "metadata.max.age.ms": 200, "linger.ms": 0}
    with Producer(config) as producer:
        producer.send("quiet", b"first").result(timeout=10)
        fake.add_topic("quiet", 2)
        seen: list[list[int]] = []

        def quiet_grew() -> bool:
            # The busy topic's sends keep refreshing (only) what has queued batches.
            producer.send("busy", b"tick").result(timeout=10)
            seen.append(producer.partitions_for("quiet"))
            return seen[-1] == [0, 1]

        for _ in range(2000):
            if quiet_grew():
                break
        assert seen[-1] == [0, 1], "the quiet topic kept its old partition count"
        assert producer.send("quiet", b"new", partition=1).result(timeout=10).partition == 1


def test_a_producer_that_only_sends_synchronously_sees_added_partitions(
    fake: FakeBroker,
) -> None:
    # Each of these sends leaves from the caller's thread while the sender waits: the
    # metadata must still age and be refreshed without a lookup of the caller's own.
    fake.add_topic("t", 1)
    config = {"bootstrap.servers": _bootstrap(fake), "metadata.max.age.ms": 200, "linger.ms": 0}
    with Producer(config) as producer:
        assert producer.send("t", b"first").result(timeout=10).partition == 0
        fake.add_topic("t", 2)
        partitions = set()
        for _ in range(2000):
            partitions.add(producer.send("t", b"tick").result(timeout=10).partition)
            if 1 in partitions:
                break
    assert partitions == {0, 1}


def test_an_explicit_partition_beyond_the_known_count_waits_for_metadata(
    fake: FakeBroker,
) -> None:
    fake.add_topic("t", 1)
    with Producer(bootstrap_servers=_bootstrap(fake), linger_ms=0) as producer:
        producer.send("t", b"first").result(timeout=10)
        fake.add_topic("t", 2)
        # metadata.max.age.ms (5 min) has not passed: the send itself looks the topic up.
        assert producer.send("t", b"new", partition=1).result(timeout=10).partition == 1
    with (
        Producer(bootstrap_servers=_bootstrap(fake), max_block_ms=300) as producer,
        pytest.raises(UnknownTopicOrPartitionError),
    ):
        producer.send("t", b"nowhere", partition=5).result(timeout=10)
