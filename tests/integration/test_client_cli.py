"""The Python client and the ``lograft`` CLI against a real node process on 127.0.0.1."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from cluster.client import (
    AdminClient,
    Consumer,
    ConsumerRecord,
    NewTopic,
    Producer,
    TopicPartition,
    partition_for_key,
)
from lograft.protocol.errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError
from tests.integration.nodes import NodeProcess
from tests.integration.quorum import QuorumCluster

pytestmark = pytest.mark.integration

CLI_TIMEOUT_S = 60.0
CONSUME_TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    process = NodeProcess(data_dir=tmp_path_factory.mktemp("client-cli-node") / "data")
    process.start()
    try:
        yield process
    finally:
        process.stop()


def _create(node: NodeProcess, name: str, partitions: int) -> None:
    with AdminClient(bootstrap_servers=node.address) as admin:
        admin.create_topics([NewTopic(name, partitions)])[name].result()


def _consume_all(
    node: NodeProcess, topic: str, partitions: int, expected: int
) -> list[ConsumerRecord]:
    records: list[ConsumerRecord] = []
    config = {"bootstrap.servers": node.address, "auto.offset.reset": "earliest"}
    with Consumer(config) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while len(records) < expected and time.monotonic() < deadline:
            records.extend(consumer.poll(timeout_ms=200))
    return records


def _by_partition(records: list[ConsumerRecord]) -> dict[int, list[ConsumerRecord]]:
    grouped: dict[int, list[ConsumerRecord]] = {}
    for record in records:
        grouped.setdefault(record.partition, []).append(record)
    return grouped


def _cli(
    node: NodeProcess | str, *args: str, stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    bootstrap = node if isinstance(node, str) else node.address
    env = dict(os.environ, LOGRAFT_BOOTSTRAP=bootstrap)
    env.pop("LOGRAFT_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "cluster.cli", *args],
        input=stdin,
        capture_output=True,
        env=env,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )


# ---- the client -----------------------------------------------------------------------------


def test_keyed_and_unkeyed_round_trip(node: NodeProcess) -> None:
    _create(node, "events", 3)
    with AdminClient(bootstrap_servers=node.address) as admin:
        again = admin.create_topics([NewTopic("events", 3)])
        with pytest.raises(TopicAlreadyExistsError):
            again["events"].result()
        assert "events" in admin.list_topics()
    with Producer(bootstrap_servers=node.address, linger_ms=2) as producer:
        keyed = [
            (producer.send("events", f"kv{i}".encode(), key=f"key-{i % 17}".encode()), i)
            for i in range(300)
        ]
        unkeyed = [
            (producer.send("events", f"uv{i}".encode(), headers=[("n", str(i).encode())]), i)
            for i in range(300)
        ]
        producer.flush(timeout=30)
    sent: dict[int, list[tuple[int, bytes]]] = {}
    for future, i in keyed:
        meta = future.result(timeout=0)
        assert meta.partition == partition_for_key(f"key-{i % 17}".encode(), 3)
        sent.setdefault(meta.partition, []).append((meta.offset, f"kv{i}".encode()))
    for future, i in unkeyed:
        meta = future.result(timeout=0)
        sent.setdefault(meta.partition, []).append((meta.offset, f"uv{i}".encode()))
    consumed = _by_partition(_consume_all(node, "events", 3, 600))
    assert sum(len(v) for v in consumed.values()) == 600
    for partition, items in consumed.items():
        expected = sorted(sent[partition])
        assert [(r.offset, r.value) for r in items] == expected
        for record in items:
            if record.value is not None and record.value.startswith(b"kv"):
                assert record.key is not None
                assert record.partition == partition_for_key(record.key, 3)
            else:
                assert record.key is None
                assert record.headers == (("n", record.value[2:] if record.value else b""),)
    # keys keep their per-key order
    for partition, items in consumed.items():
        by_key: dict[bytes, list[int]] = {}
        for record in items:
            if record.key is not None:
                by_key.setdefault(record.key, []).append(
                    int(record.value[2:] if record.value else 0)
                )
        assert all(values == sorted(values) for values in by_key.values()), partition


def test_bulk_round_trip(node: NodeProcess) -> None:
    _create(node, "bulk", 2)
    values = [i.to_bytes(4, "big") * 25 for i in range(60_000)]
    with Producer(bootstrap_servers=node.address) as producer:
        result = producer.send_bulk("bulk", values).result(timeout=60)
        keys: list[bytes | None] = [f"k{i % 50}".encode() for i in range(2_000)]
        keyed_values = [f"keyed-{i}".encode() for i in range(2_000)]
        producer.send_bulk("bulk", keyed_values, keys=keys).result(timeout=60)
    assert result.record_count == len(values)
    expected: dict[int, list[tuple[int, bytes]]] = {}
    for index, value in enumerate(values):
        partition, offset = result.offset_of(index)
        expected.setdefault(partition, []).append((offset, value))
    consumed = _by_partition(_consume_all(node, "bulk", 2, len(values) + 2_000))
    for partition, items in consumed.items():
        unkeyed = [(r.offset, r.value) for r in items if r.key is None]
        assert unkeyed == sorted(expected.get(partition, []))
        for record in items:
            if record.key is not None:
                assert record.partition == partition_for_key(record.key, 2)
    assert sum(len(v) for v in consumed.values()) == len(values) + 2_000
    with AdminClient(bootstrap_servers=node.address) as admin:
        ends = admin.list_offsets({TopicPartition("bulk", p): "latest" for p in range(2)})
        starts = admin.list_offsets({TopicPartition("bulk", p): "earliest" for p in range(2)})
    assert sum(r.offset for r in ends.values()) == len(values) + 2_000
    assert all(r.offset == 0 for r in starts.values())


def test_consumer_positions(node: NodeProcess) -> None:
    _create(node, "positions", 1)
    tp = TopicPartition("positions", 0)
    with Producer(bootstrap_servers=node.address) as producer:
        producer.send_bulk("positions", [b"a", b"b", b"c"]).result(timeout=30)
        with Consumer(bootstrap_servers=node.address) as consumer:
            consumer.assign([tp])
            assert consumer.position(tp) == 3  # auto.offset.reset=latest
            producer.send("positions", b"d").result(timeout=30)
            got: list[bytes | None] = []
            for _ in range(50):
                got.extend(r.value for r in consumer.poll(timeout_ms=200))
                if got:
                    break
            assert got == [b"d"]
            consumer.seek(tp, 1)
            got = []
            for _ in range(50):
                got.extend(r.value for r in consumer.poll(timeout_ms=200))
                if len(got) >= 3:
                    break
            assert got == [b"b", b"c", b"d"]


# ---- the CLI --------------------------------------------------------------------------------


def test_cli_topics(node: NodeProcess) -> None:
    created = _cli(
        node, "topics", "create", "clitopic", "--partitions", "2", "--config", "retention.ms=60000"
    )
    assert created.returncode == 0, created.stderr
    listed = _cli(node, "topics", "list")
    assert listed.returncode == 0, listed.stderr
    assert "clitopic" in listed.stdout.decode().split()
    described = _cli(node, "topics", "describe", "clitopic")
    assert described.returncode == 0, described.stderr
    text = described.stdout.decode()
    assert "PartitionCount: 2" in text
    assert "retention.ms=60000" in text
    assert "Partition: 1\tLeader: 1" in text
    duplicate = _cli(node, "topics", "create", "clitopic", "--partitions", "2")
    assert duplicate.returncode == 1
    assert duplicate.stderr.decode().startswith("lograft: TOPIC_ALREADY_EXISTS")
    deleted = _cli(node, "topics", "delete", "clitopic")
    assert deleted.returncode == 0, deleted.stderr
    assert "clitopic" not in _cli(node, "topics", "list").stdout.decode().split()
    missing = _cli(node, "topics", "describe", "clitopic")
    assert missing.returncode == 1
    assert b"UNKNOWN_TOPIC_OR_PARTITION" in missing.stderr
    assert b"Traceback" not in missing.stderr
    with (
        AdminClient(bootstrap_servers=node.address) as admin,
        pytest.raises(UnknownTopicOrPartitionError),
    ):
        admin.describe_topics(["clitopic"])


def test_cli_produce_and_consume(node: NodeProcess) -> None:
    _create(node, "lines", 1)
    lines = [f"line {i}" for i in range(25)]
    produced = _cli(node, "produce", "lines", stdin="\n".join(lines).encode() + b"\n")
    assert produced.returncode == 0, produced.stderr
    consumed = _cli(
        node,
        "consume",
        "lines",
        "--from-beginning",
        "--max-messages",
        "25",
        "--timeout-ms",
        "20000",
    )
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.decode().splitlines() == lines

    keyed = _cli(
        node, "produce", "lines", "--key-separator", ":", "--acks", "1", stdin=b"k1:v1\nk2:v2\n"
    )
    assert keyed.returncode == 0, keyed.stderr
    tail = _cli(
        node,
        "consume",
        "lines",
        "--partition",
        "0",
        "--offset",
        "25",
        "--max-messages",
        "2",
        "--print-key",
        "--timeout-ms",
        "20000",
    )
    assert tail.returncode == 0, tail.stderr
    assert tail.stdout.decode().splitlines() == ["k1\tv1", "k2\tv2"]


def _perf_produce(
    node: NodeProcess, records: int, size: int, *extra: str
) -> subprocess.CompletedProcess[bytes]:
    return _cli(
        node,
        "perf",
        "produce",
        "--topic",
        "perf",
        "--num-records",
        str(records),
        "--record-size",
        str(size),
        "--json",
        *extra,
    )


def test_cli_perf(node: NodeProcess) -> None:
    _create(node, "perf", 1)
    for extra in ([], ["--bulk"]):
        run = _perf_produce(node, 2000, 100, *extra)
        assert run.returncode == 0, run.stderr
        assert b'"records_per_sec"' in run.stdout
        assert b'"latency_ms_p99"' in run.stdout
    consume = _cli(node, "perf", "consume", "--topic", "perf", "--messages", "4000", "--json")
    assert consume.returncode == 0, consume.stderr
    assert b'"records": 4000' in consume.stdout
    # A record the producer refuses fails the run with its error, not a figure.
    too_large = _perf_produce(node, 3, 2 * 1024 * 1024)
    assert too_large.returncode != 0
    assert b"MESSAGE_TOO_LARGE" in too_large.stderr
    assert b"records_per_sec" not in too_large.stdout


def _json_lines(output: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in output.decode().splitlines()]


def test_cli_json_lines_round_trip(node: NodeProcess) -> None:
    _create(node, "jsonl", 2)
    sent: list[dict[str, Any]] = [
        {"key": "user-1", "value": "hello", "headers": {"trace": "t1"}, "partition": 0},
        {"key": None, "value": "caf\u00e9 \u2603", "partition": 1},
        {
            "key": base64.b64encode(b"\xff\x00").decode(),
            "key_encoding": "base64",
            "value": base64.b64encode(b"\x80binary").decode(),
            "value_encoding": "base64",
            "headers": [
                {"key": "h", "value": "1"},
                {"key": "h", "value": "2"},
                {"key": "raw", "value": "/w==", "value_encoding": "base64"},
                {"key": "none", "value": None},
            ],
            "partition": 0,
            "timestamp": 1_600_000_000_000,
        },
        {"key": "tombstone", "value": None, "partition": 1},
    ]
    lines = "\n".join(json.dumps(doc) for doc in sent).encode() + b"\n"
    produced = _cli(node, "produce", "jsonl", "--format", "json", "--keep-partition", stdin=lines)
    assert produced.returncode == 0, produced.stderr
    consumed = _cli(
        node, "consume", "jsonl", "--from-beginning", "--format", "json",
        "--max-messages", "4", "--timeout-ms", "20000",
    )  # fmt: skip
    assert consumed.returncode == 0, consumed.stderr
    got = sorted(_json_lines(consumed.stdout), key=lambda d: (d["partition"], d["offset"]))
    assert [(d["partition"], d["offset"]) for d in got] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    by_key = {(d["key"], d.get("key_encoding")): d for d in got}
    hello = by_key[("user-1", None)]
    assert (hello["topic"], hello["value"]) == ("jsonl", "hello")
    assert hello["headers"] == [{"key": "trace", "value": "t1"}]
    assert by_key[(None, None)]["value"] == "caf\u00e9 \u2603"
    binary = by_key[("/wA=", "base64")]
    assert base64.b64decode(binary["value"]) == b"\x80binary"
    assert binary["value_encoding"] == "base64"
    assert binary["timestamp"] == 1_600_000_000_000
    assert binary["headers"] == sent[2]["headers"]
    assert by_key[("tombstone", None)]["value"] is None
    # What consume printed produces the same records again (topic and offset are ignored).
    again = _cli(
        node, "produce", "jsonl", "--format", "json", "--keep-partition", stdin=consumed.stdout
    )
    assert again.returncode == 0, again.stderr
    copy = _cli(
        node, "consume", "jsonl", "--partition", "0", "--offset", "2", "--format", "json",
        "--max-messages", "2", "--timeout-ms", "20000",
    )  # fmt: skip
    assert copy.returncode == 0, copy.stderr
    for original, repeated in zip(got[:2], _json_lines(copy.stdout), strict=True):
        assert {**repeated, "offset": original["offset"]} == original
    # Without --keep-partition the line's partition (here one the topic lacks) is ignored:
    # the record goes where its key hashes, at once.
    moved = _cli(
        node, "produce", "jsonl", "--format", "json",
        stdin=b'{"key": "user-1", "value": "moved", "partition": 7}\n',
    )  # fmt: skip
    assert moved.returncode == 0, moved.stderr
    home = partition_for_key(b"user-1", 2)
    landed = _cli(
        node, "consume", "jsonl", "--partition", str(home), "--offset", "4", "--format", "json",
        "--max-messages", "1", "--timeout-ms", "20000",
    )  # fmt: skip
    assert [d["value"] for d in _json_lines(landed.stdout)] == ["moved"], landed.stderr
    bad = _cli(node, "produce", "jsonl", "--format", "json", stdin=b'{"value": "ok"}\n{oops}\n')
    assert bad.returncode == 1
    assert bad.stderr.decode().startswith("lograft: INVALID_REQUEST: line 2: not JSON")


def test_cli_perf_e2e(node: NodeProcess) -> None:
    run = _cli(node, "perf", "e2e", "--topic", "e2e", "--num-records", "50", "--json")
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)  # one clean object: nothing else on stdout
    assert (summary["records"], summary["acks"], summary["partition"]) == (50, "all", 0)
    assert 0 < summary["latency_ms_p50"] <= summary["latency_ms_p99"] <= summary["latency_ms_max"]
    assert b"Created topic e2e" in run.stderr


def test_cli_consume_group_continues_where_the_last_run_committed(
    grouped: QuorumCluster,
) -> None:
    assert grouped.create_topic(grouped.nodes[1], "grouped-lines", 2, 3) == 0
    with Producer({"bootstrap.servers": grouped.bootstrap, "acks": "all"}) as producer:
        for n in range(30):
            producer.send("grouped-lines", f"{n}".encode(), partition=n % 2)
        producer.flush(timeout=30)

    def run(count: int) -> list[dict[str, Any]]:
        result = _cli(
            grouped.bootstrap, "consume", "grouped-lines", "--group", "cli-readers",
            "--from-beginning", "--format", "json", "--max-messages", str(count),
            "--timeout-ms", "30000",
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert f"Processed a total of {count} messages" in result.stderr.decode()
        return _json_lines(result.stdout)

    first, second = run(12), run(18)
    for partition in (0, 1):
        offsets = [d["offset"] for d in first + second if d["partition"] == partition]
        # Disjoint, in order, and nothing skipped: the second run starts at what the first
        # one committed, which is exactly what it printed.
        assert offsets == list(range(15)), (partition, offsets)
    assert sorted(int(d["value"]) for d in first + second) == list(range(30))
