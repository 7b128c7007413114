"""Kafka's own clients on lograft's port (issue 43: connect, discover, produce, consume).

kafka-python, which knows nothing of lograft, connects to a node's one port (the same that
serves gRPC and the framed protocol), negotiates versions with ApiVersions, reads the
brokers, topics and partitions from Metadata, produces keyed records idempotently with
``acks=all`` and reads them back from offsets; lograft's own client reads the same records,
each on the partition its own partitioner would have chosen. Raw frames show Kafka's
answers to what a client may get wrong: an ApiVersions of a version not served is answered
with version 0 and UNSUPPORTED_VERSION; an API not served, a body that does not decode and a
frame over the size limit close the connection; the node goes on serving.
"""

from __future__ import annotations

import os
import shutil
import socket
import struct
import subprocess
import threading
import warnings
from collections.abc import Iterator

import pytest

from cluster.client import AdminClient, Consumer, TopicPartition
from cluster.client.partitioner import partition_for_key
from lograft.protocol.kafka.codec import decode
from lograft.protocol.kafka.schema import message
from lograft.protocol.wire import broker_pb2_grpc as pb_grpc
from tests.integration.nodes import NodeProcess, wait_until
from tests.integration.quorum import QuorumCluster
from tests.integration.wire_helpers import create_topic

pytestmark = pytest.mark.integration

SOCKET_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 60.0


@pytest.fixture
def kafka_python() -> Iterator[object]:
    with warnings.catch_warnings():
        # kafka-python reads its JSON with importlib.resources.read_text, deprecated in 3.11.
        warnings.simplefilter("ignore", DeprecationWarning)
        import kafka

        yield kafka


def _frame(api_key: int, version: int, body: bytes = b"", client_id: bytes = b"raw") -> bytes:
    header = struct.pack(">hhih", api_key, version, 7, len(client_id)) + client_id
    if version >= 3 and api_key == 18:
        header += b"\x00"  # request header v2: no tagged fields
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def _exchange(address: str, data: bytes) -> bytes:
    """Send ``data``, read one answer frame; ``b""`` when the node closes the connection."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=SOCKET_TIMEOUT_S) as conn:
        conn.sendall(data)
        size_bytes = _read(conn, 4)
        if not size_bytes:
            return b""
        return _read(conn, struct.unpack(">i", size_bytes)[0])


def _read(conn: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = conn.recv(count - len(data))
        if not chunk:
            return b""
        data += chunk
    return data


def test_kafka_python_lists_topics_and_partitions_on_the_shared_port(
    node: NodeProcess, stub: pb_grpc.BrokerStub, kafka_python: object
) -> None:
    create_topic(stub, "kafka-visible", partitions=3)
    consumer = kafka_python.KafkaConsumer(bootstrap_servers=node.address)  # type: ignore[attr-defined]
    try:
        assert "kafka-visible" in consumer.topics()
        assert consumer.partitions_for_topic("kafka-visible") == {0, 1, 2}
    finally:
        consumer.close()
    admin = kafka_python.KafkaAdminClient(bootstrap_servers=node.address)  # type: ignore[attr-defined]
    try:
        cluster = admin.describe_cluster()
    finally:
        admin.close()
    host, port = node.address.rsplit(":", 1)
    assert [(b["broker_id"], b["host"], b["port"]) for b in cluster["brokers"]] == [
        (1, host, int(port))
    ]


def test_api_versions_lists_what_is_served_and_answers_a_newer_version_with_v0(
    node: NodeProcess,
) -> None:
    answer = _exchange(node.address, _frame(18, 0))
    (correlation_id,) = struct.unpack_from(">i", answer)
    assert correlation_id == 7
    body, _ = decode(message("ApiVersionsResponse"), 0, answer, 4)
    served = {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]}
    assert body["error_code"] == 0
    assert served[18] == (0, 4) and served[3] == (0, 12)

    newer = _exchange(node.address, _frame(18, 99))
    body, _ = decode(message("ApiVersionsResponse"), 0, newer, 4)
    assert body["error_code"] == 35  # UNSUPPORTED_VERSION, in the v0 shape every client reads
    assert {k["api_key"] for k in body["api_keys"]} == set(served)


@pytest.mark.parametrize(
    "data",
    [
        _frame(999, 0),  # an API key not served
        _frame(3, 99),  # a Metadata version not served
        _frame(3, 4, b"\x00\x00\x00\x05\x00\x01a"),  # Metadata naming 5 topics, one cut short
        struct.pack(">i", 2**30) + b"\x00\x12",  # a frame over socket.request.max.bytes
    ],
    ids=["unknown-api", "unknown-version", "truncated-body", "oversize-frame"],
)
def test_a_request_that_cannot_be_served_closes_the_connection_and_the_node_serves_on(
    node: NodeProcess, data: bytes
) -> None:
    assert _exchange(node.address, data) == b""
    answer = _exchange(node.address, _frame(18, 0))
    assert struct.unpack_from(">i", answer)[0] == 7


def test_kafka_python_produces_idempotently_and_both_clients_read_every_record_once(
    node: NodeProcess, stub: pb_grpc.BrokerStub, kafka_python: object
) -> None:
    create_topic(stub, "from-kafka", partitions=3)
    sent = {f"key-{n}".encode(): f"value-{n}".encode() for n in range(300)}
    producer = kafka_python.KafkaProducer(  # type: ignore[attr-defined]
        bootstrap_servers=node.address, acks="all", enable_idempotence=True
    )
    try:
        futures = [producer.send("from-kafka", key=k, value=v) for k, v in sent.items()]
        producer.flush(30)
        placed = {k: f.get(10).partition for k, f in zip(sent, futures, strict=True)}
    finally:
        producer.close()
    assert placed == {k: partition_for_key(k, 3) for k in sent}  # murmur2, as lograft's

    tps = [TopicPartition("from-kafka", p) for p in range(3)]
    with Consumer(bootstrap_servers=node.address, auto_offset_reset="earliest") as ours:
        ours.assign(tps)
        read: list[tuple[bytes | None, bytes | None, int]] = []
        wait_until(
            lambda: (
                bool(read.extend((r.key, r.value, r.partition) for r in ours.poll(200)))
                or len(read) >= len(sent)
            ),
            READ_TIMEOUT_S,
            "lograft's consumer to read what kafka-python wrote",
        )
    assert sorted(read) == sorted((k, v, placed[k]) for k, v in sent.items())

    theirs = kafka_python.KafkaConsumer(  # type: ignore[attr-defined]
        bootstrap_servers=node.address, auto_offset_reset="earliest", consumer_timeout_ms=5000
    )
    try:
        theirs.assign([kafka_python.TopicPartition("from-kafka", p) for p in range(3)])  # type: ignore[attr-defined]
        records = []
        wait_until(
            lambda: bool(records.extend(theirs)) or len(records) >= len(sent),
            READ_TIMEOUT_S,
            "kafka-python to read its records back",
        )
    finally:
        theirs.close()
    assert sorted((r.key, r.value) for r in records) == sorted(sent.items())


def test_a_client_that_pipelines_10000_requests_gets_every_answer_in_order(
    node: NodeProcess,
) -> None:
    count = 10_000
    frames = b"".join(
        _frame(18, 0)[:8] + struct.pack(">i", n) + _frame(18, 0)[12:] for n in range(count)
    )
    host, port = node.address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=SOCKET_TIMEOUT_S) as conn:
        sender = threading.Thread(target=conn.sendall, args=(frames,), daemon=True)
        sender.start()  # the node stops reading while we read nothing: sendall then waits
        # Meanwhile another client is served as usual.
        assert struct.unpack_from(">i", _exchange(node.address, _frame(18, 0)))[0] == 7
        correlation_ids = []
        for _ in range(count):
            size = struct.unpack(">i", _read(conn, 4))[0]
            correlation_ids.append(struct.unpack_from(">i", _read(conn, size))[0])
        sender.join(SOCKET_TIMEOUT_S)
    assert correlation_ids == list(range(count))


@pytest.fixture
def kcat() -> str:
    """Debian's kcat (``make test`` installs it); skips without it unless required."""
    path = shutil.which("kcat")
    if path is None:
        if os.environ.get("LOGRAFT_REQUIRE_KCAT") == "1":
            pytest.fail("LOGRAFT_REQUIRE_KCAT=1 but kcat is not installed")
        pytest.skip("kcat is not installed (make kafka-tools installs it)")
    return path


def test_kcat_lists_produces_10000_lines_with_acks_all_and_reads_each_once(
    node: NodeProcess, stub: pb_grpc.BrokerStub, kcat: str
) -> None:
    create_topic(stub, "lines", partitions=3)
    listed = subprocess.run(
        [kcat, "-b", node.address, "-L"], capture_output=True, text=True, timeout=60, check=True
    )
    assert 'topic "lines" with 3 partitions' in listed.stdout
    lines = [f"line-{n}" for n in range(10_000)]
    subprocess.run(
        [kcat, "-b", node.address, "-P", "-t", "lines", "-X", "acks=all"],
        input="\n".join(lines) + "\n",
        text=True,
        timeout=120,
        check=True,
    )
    consumed = subprocess.run(
        [kcat, "-b", node.address, "-C", "-t", "lines", "-o", "beginning", "-e", "-q"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert sorted(consumed.stdout.splitlines()) == sorted(lines)


def test_kafka_python_commits_offsets_that_lograft_reads_and_the_reverse(
    grouped: QuorumCluster, kafka_python: object
) -> None:
    assert grouped.create_topic(grouped.nodes[1], "committed", 2, 3) == 0
    wait_until(
        lambda: (
            all(n >= 0 for n in grouped.leaders(grouped.nodes[1], "committed").values())
            and len(grouped.leaders(grouped.nodes[1], "committed")) == 2
        ),
        READ_TIMEOUT_S,
        "leaders for committed",
    )
    kafka = kafka_python
    tps = [kafka.TopicPartition("committed", p) for p in range(2)]  # type: ignore[attr-defined]
    consumer = kafka.KafkaConsumer(  # type: ignore[attr-defined]
        bootstrap_servers=grouped.bootstrap, group_id="kafka-readers", enable_auto_commit=False
    )
    try:
        consumer.assign(tps)
        consumer.commit(
            {tps[0]: kafka.OffsetAndMetadata(7, "", -1), tps[1]: kafka.OffsetAndMetadata(3, "", -1)}
        )  # type: ignore[attr-defined]
        assert [consumer.committed(tp) for tp in tps] == [7, 3]
    finally:
        consumer.close()
    with AdminClient(bootstrap_servers=grouped.bootstrap) as admin:
        offsets = admin.list_consumer_group_offsets("kafka-readers")
    assert {tp.partition: o.offset for tp, o in offsets.items()} == {0: 7, 1: 3}
