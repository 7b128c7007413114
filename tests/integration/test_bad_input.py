"""Bad input gets a typed error and leaves the log exactly as it was."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import crc32c
import grpc
import pytest

from lograft.protocol.errors import (
    CorruptMessageError,
    InvalidRequiredAcksError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from lograft.protocol.records import encode_batch
from lograft.protocol.wire import broker_pb2 as pb
from lograft.protocol.wire import broker_pb2_grpc as pb_grpc
from tests.integration.nodes import NodeProcess
from tests.integration.wire_helpers import create_topic, fetch_all, fetch_once, list_offset, produce

pytestmark = pytest.mark.integration

REQUEST_LIMIT = 2 * 1024 * 1024
GOOD = [f"good-{n}".encode() for n in range(50)]


@pytest.fixture(scope="module")
def limited_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    node = NodeProcess(
        data_dir=Path(tmp_path_factory.mktemp("bad-input")) / "node-1",
        configs={"socket.request.max.bytes": str(REQUEST_LIMIT), "message.max.bytes": "65536"},
    )
    node.start()
    try:
        yield node
    finally:
        node.kill()


@pytest.fixture
def topic(
    limited_node: NodeProcess, request: pytest.FixtureRequest
) -> Iterator[tuple[pb_grpc.BrokerStub, str]]:
    """A fresh topic holding GOOD, and a stub; checks after the test that it is unchanged."""
    name = request.node.name.replace("[", "-").replace("]", "")[:200]
    with grpc.insecure_channel(
        limited_node.address, options=[("grpc.max_send_message_length", 64 << 20)]
    ) as channel:
        stub = pb_grpc.BrokerStub(channel)
        create_topic(stub, name)
        assert produce(stub, name, 0, encode_batch(GOOD)).error_code == 0
        yield stub, name
        assert [r.value for r in fetch_all(stub, name, 0)] == GOOD, "the log changed"
        assert list_offset(stub, name, 0, -1) == len(GOOD)


def _corrupt_crc(batch: bytes) -> bytes:
    broken = bytearray(batch)
    broken[-1] ^= 0xFF
    return bytes(broken)


def _empty_batch() -> bytes:
    batch = bytearray(encode_batch([b"x"]))
    struct.pack_into(">i", batch, 57, 0)  # recordsCount = 0
    return bytes(batch)


BAD_RECORDS = {
    "corrupt-crc": _corrupt_crc(encode_batch([b"a", b"b"])),
    "truncated-batch": encode_batch([b"a" * 100] * 5)[:-7],
    "header-only-fragment": encode_batch([b"a"])[:30],
    "empty-record-set": b"",
    "zero-record-batch": _empty_batch(),
    "garbage": b"\x00\x01garbage" * 20,
    "second-batch-corrupt": encode_batch([b"ok"]) + _corrupt_crc(encode_batch([b"bad"])),
}


@pytest.mark.parametrize("case", sorted(BAD_RECORDS))
def test_invalid_batches_are_corrupt_message(
    topic: tuple[pb_grpc.BrokerStub, str], case: str
) -> None:
    stub, name = topic
    result = produce(stub, name, 0, BAD_RECORDS[case])
    assert result.error_code == CorruptMessageError.code, result
    assert result.base_offset == -1


def test_batch_over_max_message_bytes(topic: tuple[pb_grpc.BrokerStub, str]) -> None:
    stub, name = topic
    result = produce(stub, name, 0, encode_batch([b"x" * 1024] * 100))
    assert result.error_code == MessageTooLargeError.code, result


def test_request_over_the_size_limit_is_refused(topic: tuple[pb_grpc.BrokerStub, str]) -> None:
    stub, name = topic
    oversized = b"".join(encode_batch([b"y" * 1000] * 60) for _ in range(50))
    assert len(oversized) > REQUEST_LIMIT
    with pytest.raises(grpc.RpcError) as raised:
        produce(stub, name, 0, oversized)
    assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_unknown_topic_and_partition(topic: tuple[pb_grpc.BrokerStub, str]) -> None:
    stub, name = topic
    batch = encode_batch([b"lost"])
    assert produce(stub, "no-such-topic", 0, batch).error_code == UnknownTopicOrPartitionError.code
    assert produce(stub, name, 7, batch).error_code == UnknownTopicOrPartitionError.code
    assert produce(stub, name, -1, batch).error_code == UnknownTopicOrPartitionError.code
    assert fetch_once(stub, name, 3, 0).error_code == UnknownTopicOrPartitionError.code
    metadata = stub.Metadata(pb.MetadataRequest(topics=["no-such-topic"]), timeout=10)
    assert metadata.topics[0].error_code == UnknownTopicOrPartitionError.code


@pytest.mark.parametrize("offset", [-1, -100, len(GOOD) + 1, 1 << 40])
def test_out_of_range_fetch_offsets(topic: tuple[pb_grpc.BrokerStub, str], offset: int) -> None:
    stub, name = topic
    result = fetch_once(stub, name, 0, offset)
    assert result.error_code == OffsetOutOfRangeError.code, result
    assert result.records == b""
    assert result.high_watermark == len(GOOD)


def test_fetch_at_log_end_is_empty_not_an_error(topic: tuple[pb_grpc.BrokerStub, str]) -> None:
    stub, name = topic
    result = fetch_once(stub, name, 0, len(GOOD))
    assert result.error_code == 0 and result.records == b""


def test_invalid_acks(topic: tuple[pb_grpc.BrokerStub, str]) -> None:
    stub, name = topic
    result = produce(stub, name, 0, encode_batch([b"z"]), acks=2)
    assert result.error_code == InvalidRequiredAcksError.code


def test_compressed_batch_lying_about_its_record_count(
    topic: tuple[pb_grpc.BrokerStub, str],
) -> None:
    stub, name = topic
    forged = bytearray(encode_batch([b"tiny"], compression=1))
    struct.pack_into(">i", forged, 23, 2**31 - 2)  # lastOffsetDelta
    struct.pack_into(">i", forged, 57, 2**31 - 1)  # recordsCount
    struct.pack_into(">I", forged, 17, crc32c.crc32c(bytes(forged[21:])))
    result = produce(stub, name, 0, bytes(forged))
    assert result.error_code == CorruptMessageError.code, result


def test_consumer_stops_at_a_corrupt_stored_batch_and_skips_nothing(tmp_path: Path) -> None:
    """A batch damaged on disk: poll returns what precedes it, then raises until a seek."""
    from cluster.client import Consumer, TopicPartition

    node = NodeProcess(data_dir=tmp_path / "node-1")
    node.start()
    try:
        with grpc.insecure_channel(node.address) as channel:
            stub = pb_grpc.BrokerStub(channel)
            create_topic(stub, "rot")
            for name in ("a", "b", "c"):
                values = [f"{name}{n}".encode() for n in range(3)]
                assert produce(stub, "rot", 0, encode_batch(values)).error_code == 0
        assert node.stop() == 0
        segment = next((node.data_dir / "rot-0").glob("*.log"))
        data = bytearray(segment.read_bytes())
        second_batch = len(data) // 3
        data[second_batch + 70] ^= 0xFF  # inside batch b's records: its CRC no longer holds
        segment.write_bytes(bytes(data))
        node.start()
        tp = TopicPartition("rot", 0)
        with Consumer(
            {"bootstrap.servers": node.address, "auto.offset.reset": "earliest"}
        ) as consumer:
            consumer.assign([tp])
            seen = []
            for _ in range(20):
                try:
                    seen.extend(r.value for r in consumer.poll(timeout_ms=500))
                except CorruptMessageError:
                    break
            else:
                pytest.fail("poll never raised CorruptMessageError")
            assert seen == [b"a0", b"a1", b"a2"]
            assert consumer.position(tp) == 3
            with pytest.raises(CorruptMessageError):
                for _ in range(20):
                    consumer.poll(timeout_ms=500)
            consumer.seek(tp, 6)
            rest = []
            for _ in range(20):
                rest.extend(r.value for r in consumer.poll(timeout_ms=500))
                if len(rest) >= 3:
                    break
            assert rest == [b"c0", b"c1", b"c2"]
    finally:
        node.kill()
