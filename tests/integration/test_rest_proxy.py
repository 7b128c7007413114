"""``lograft rest-proxy`` as a real process in front of a real cluster, driven by ``curl``.

Issue 42's "Must show": curl produces 100 records through the proxy and a proxy consumer
instance in a group reads them all; it commits, and the committed offsets are visible
through the proxy and to the Python ``AdminClient``. Also: topics and partitions listed,
v2 produce, and Confluent's error shapes for bad JSON, an unknown topic, an oversize body,
an unknown consumer instance, and an instance that expired.

One cluster and one proxy serve the module (starting a cluster is most of the cost).
Nothing sleeps to synchronise: waits poll with deadlines.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cluster.client import AdminClient, TopicPartition
from tests.integration.nodes import free_port, wait_until
from tests.integration.quorum import QuorumCluster

pytestmark = pytest.mark.integration

CURL = "/usr/bin/curl"
JSON = "Content-Type: application/json"
V2 = "Content-Type: application/vnd.kafka.v2+json"
START_TIMEOUT_S = 30.0
READ_TIMEOUT_S = 60.0
MAX_BODY_BYTES = 65536
RECORDS = 100


@dataclass
class Proxy:
    """A running ``lograft rest-proxy`` process."""

    url: str
    process: subprocess.Popen[bytes]
    log_path: Path


def curl(*args: str, data: str | None = None) -> tuple[int, str]:
    """``(HTTP status, body)`` of one curl request; ``data`` is sent as the body."""
    command = [CURL, "-sS", "--max-time", "30", "-w", "\n%{http_code}", *args]
    if data is not None:
        command += ["--data-binary", "@-"]
    result = subprocess.run(
        command, input=data, capture_output=True, text=True, timeout=60, check=True
    )
    body, _, status = result.stdout.rpartition("\n")
    return int(status), body


def curl_json(*args: str, data: str | None = None) -> tuple[int, Any]:
    """As :func:`curl`, the body parsed (``None`` when empty)."""
    status, body = curl(*args, data=data)
    return status, json.loads(body) if body.strip() else None


def start_proxy(cluster: QuorumCluster, log_path: Path, *flags: str) -> Proxy:
    """``python -m cluster.cli rest-proxy`` on a free port; returns once it answers."""
    port = free_port()
    command = [sys.executable, "-m", "cluster.cli", "--bootstrap", cluster.bootstrap]
    command += ["--log-level", "INFO", "rest-proxy", "--listen", f"127.0.0.1:{port}", *flags]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    proxy = Proxy(f"http://127.0.0.1:{port}", process, log_path)

    def answers() -> bool:
        assert process.poll() is None, f"the proxy exited: {log_path.read_text()}"
        probe = subprocess.run(
            [CURL, "-s", "-o", "/dev/null", "-w", "%{http_code}", f"{proxy.url}/v3/clusters"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        return probe.stdout == "200"

    wait_until(answers, START_TIMEOUT_S, f"the proxy to answer (log: {log_path})")
    return proxy


def stop_proxy(proxy: Proxy) -> None:
    """SIGTERM (the proxy closes its consumers and producer), SIGKILL if it hangs."""
    proxy.process.terminate()
    try:
        proxy.process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proxy.process.kill()
        proxy.process.wait()


@pytest.fixture(scope="module")
def proxy(
    shared_grouped: QuorumCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Proxy]:
    log_path = tmp_path_factory.mktemp("rest-proxy") / "rest-proxy.log"
    running = start_proxy(shared_grouped, log_path, "--max-body-bytes", str(MAX_BODY_BYTES))
    try:
        yield running
    finally:
        stop_proxy(running)


@pytest.fixture(scope="module")
def cluster_id(proxy: Proxy) -> str:
    status, listing = curl_json(f"{proxy.url}/v3/clusters")
    assert status == 200 and listing["kind"] == "KafkaClusterList"
    return str(listing["data"][0]["cluster_id"])


def create_topic(proxy: Proxy, cluster_id: str, name: str, partitions: int) -> dict[str, Any]:
    body = {"topic_name": name, "partitions_count": partitions, "replication_factor": 3}
    status, topic = curl_json(
        "-X", "POST", "-H", JSON, f"{proxy.url}/v3/clusters/{cluster_id}/topics",
        data=json.dumps(body),
    )  # fmt: skip
    assert status == 201, topic
    return dict(topic)


def produce_100_with_one_curl(proxy: Proxy, cluster_id: str, topic: str) -> list[dict[str, Any]]:
    """100 single-record v3 POSTs, one curl process (``--next`` between requests)."""
    url = f"{proxy.url}/v3/clusters/{cluster_id}/topics/{topic}/records"
    args: list[str] = []
    for i in range(RECORDS):
        record = {"key": {"type": "JSON", "data": f"key-{i}"}, "value": {"data": {"n": i}}}
        args += ["-w", "\n%{http_code}\n", "-X", "POST", "-H", JSON]
        args += ["--data-binary", json.dumps(record), url]
        if i < RECORDS - 1:
            args.append("--next")
    result = subprocess.run(
        [CURL, "-sS", *args], capture_output=True, text=True, timeout=120, check=True
    )
    lines = result.stdout.splitlines()
    assert len(lines) == 2 * RECORDS, result.stdout[-2000:]
    assert lines[1::2] == ["200"] * RECORDS
    return [json.loads(line) for line in lines[0::2]]


def read_all(base_uri: str, expected: int) -> list[dict[str, Any]]:
    """Records GETs until ``expected`` records came back (bounded by a deadline)."""
    records: list[dict[str, Any]] = []
    deadline = time.monotonic() + READ_TIMEOUT_S
    accept = "Accept: application/vnd.kafka.json.v2+json"
    while len(records) < expected:
        assert time.monotonic() < deadline, f"read {len(records)} of {expected} records"
        status, batch = curl_json("-H", accept, f"{base_uri}/records?timeout=1000")
        assert status == 200, batch
        records += batch
    return records


def test_curl_produces_100_records_and_a_consumer_instance_reads_them_all(
    shared_grouped: QuorumCluster, proxy: Proxy, cluster_id: str
) -> None:
    create_topic(proxy, cluster_id, "events", 3)
    reports = produce_100_with_one_curl(proxy, cluster_id, "events")
    assert all(r["error_code"] == 200 and r["topic_name"] == "events" for r in reports)
    assert all(r["key"]["type"] == "JSON" and r["value"]["type"] == "JSON" for r in reports)
    ends: dict[int, int] = {}
    for report in reports:
        ends[report["partition_id"]] = max(
            ends.get(report["partition_id"], 0), report["offset"] + 1
        )
    assert sum(ends.values()) == RECORDS  # offsets 0..n-1 per partition, none skipped

    status, created = curl_json(
        "-X", "POST", "-H", V2, f"{proxy.url}/consumers/readers",
        data='{"name": "r1", "format": "json", "auto.offset.reset": "earliest", '
        '"auto.commit.enable": "false"}',
    )  # fmt: skip
    assert status == 200 and created["instance_id"] == "r1", created
    base_uri = created["base_uri"]
    assert base_uri == f"{proxy.url}/consumers/readers/instances/r1"
    status, _ = curl_json(
        "-X", "POST", "-H", V2, f"{base_uri}/subscription", data='{"topics": ["events"]}'
    )  # fmt: skip
    assert status == 204

    records = read_all(base_uri, RECORDS)
    assert sorted(r["value"]["n"] for r in records) == list(range(RECORDS))
    assert all(r["key"] == f"key-{r['value']['n']}" for r in records)
    by_report = {(r["partition_id"], r["offset"]) for r in reports}
    assert {(r["partition"], r["offset"]) for r in records} == by_report

    status, _ = curl_json("-X", "POST", "-H", V2, f"{base_uri}/offsets")  # all consumed
    assert status == 204
    status, committed = curl_json(
        "-X", "GET", "-H", V2, f"{base_uri}/offsets",
        data=json.dumps({"partitions": [{"topic": "events", "partition": p} for p in range(3)]}),
    )  # fmt: skip
    assert status == 200
    assert {o["partition"]: o["offset"] for o in committed["offsets"]} == ends
    with AdminClient(bootstrap_servers=shared_grouped.bootstrap) as admin:
        offsets = admin.list_consumer_group_offsets("readers")
    assert {tp.partition: o.offset for tp, o in offsets.items() if o is not None} == ends
    assert set(offsets) == {TopicPartition("events", p) for p in range(3)}

    status, assigned = curl_json(f"{base_uri}/assignments")
    assert status == 200 and len(assigned["partitions"]) == 3
    status, _ = curl_json("-X", "DELETE", base_uri)
    assert status == 204


def test_topics_and_partitions_are_listed(proxy: Proxy, cluster_id: str) -> None:
    create_topic(proxy, cluster_id, "listed", 2)
    cluster_url = f"{proxy.url}/v3/clusters/{cluster_id}"
    status, cluster = curl_json(cluster_url)
    assert status == 200 and cluster["kind"] == "KafkaCluster"
    assert cluster["topics"]["related"] == f"{cluster_url}/topics"
    status, topics = curl_json(f"{cluster_url}/topics")
    assert status == 200 and topics["kind"] == "KafkaTopicList"
    listed = {t["topic_name"]: t for t in topics["data"]}
    assert listed["listed"]["partitions_count"] == 2
    assert listed["listed"]["replication_factor"] == 3
    assert listed["listed"]["is_internal"] is False
    status, topic = curl_json(f"{cluster_url}/topics/listed")
    assert status == 200 and topic == listed["listed"]
    status, partitions = curl_json(f"{cluster_url}/topics/listed/partitions")
    assert status == 200 and partitions["kind"] == "KafkaPartitionList"
    assert [p["partition_id"] for p in partitions["data"]] == [0, 1]
    status, partition = curl_json(f"{cluster_url}/topics/listed/partitions/1")
    assert status == 200 and partition == partitions["data"][1]
    assert partition["leader"]["related"].startswith(f"{cluster_url}/topics/listed/partitions/1/")

    # v2 produce, and the v3 streamed form (concatenated objects, one report each).
    status, produced = curl_json(
        "-X", "POST", "-H", "Content-Type: application/vnd.kafka.json.v2+json",
        f"{proxy.url}/topics/listed",
        data='{"records": [{"value": {"a": 1}, "partition": 1}, {"key": "k", "value": 2}]}',
    )  # fmt: skip
    assert status == 200, produced
    assert [o["error_code"] for o in produced["offsets"]] == [None, None]
    assert produced["offsets"][0]["partition"] == 1
    status, body = curl(
        "-X", "POST", "-H", JSON, f"{cluster_url}/topics/listed/records",
        data='{"value": {"type": "STRING", "data": "s"}}\n'
        '{"value": {"type": "BINARY", "data": "not base64!"}}{"partition_id": 0}',
    )  # fmt: skip
    assert status == 200
    codes = [json.loads(line)["error_code"] for line in body.splitlines()]
    assert codes == [200, 422, 200]


def test_errors_have_confluents_shapes(proxy: Proxy, cluster_id: str) -> None:
    records = f"{proxy.url}/v3/clusters/{cluster_id}/topics/events/records"
    status, error = curl_json("-X", "POST", "-H", JSON, records, data='{"value": ')
    assert status == 400 and error["error_code"] == 400 and "JSON" in error["message"]

    unknown = f"{proxy.url}/v3/clusters/{cluster_id}/topics/no-such-topic/records"
    status, error = curl_json("-X", "POST", "-H", JSON, unknown, data='{"value": {"data": 1}}')
    assert (status, error["error_code"]) == (404, 404), error
    status, error = curl_json(
        "-X", "POST", "-H", V2, f"{proxy.url}/topics/no-such-topic",
        data='{"records": [{"value": "eA=="}]}',
    )  # fmt: skip
    assert (status, error["error_code"]) == (404, 40401), error

    oversize = json.dumps({"value": {"type": "STRING", "data": "x" * MAX_BODY_BYTES}})
    status, error = curl_json("-X", "POST", "-H", JSON, records, data=oversize)
    assert (status, error["error_code"]) == (413, 413), error

    status, error = curl_json("-X", "POST", records, data='{"value": {"data": 1}}')  # form type
    assert (status, error["error_code"]) == (415, 415), error

    status, error = curl_json(f"{proxy.url}/consumers/readers/instances/ghost/records")
    assert (status, error["error_code"]) == (404, 40403), error
    assert error["message"] == "Consumer instance not found."

    status, error = curl_json(f"{proxy.url}/v3/clusters/not-this-one/topics")
    assert (status, error["error_code"]) == (404, 404), error

    create_topic(proxy, cluster_id, "shapes", 1)
    records = f"{proxy.url}/v3/clusters/{cluster_id}/topics/shapes/records"
    before_1970 = '{"value": {"data": 1}, "timestamp": "1969-12-31T23:59:59Z"}'
    status, error = curl_json("-X", "POST", "-H", JSON, records, data=before_1970)
    assert (status, error["error_code"]) == (400, 400), error

    # Past the limit on records in one body: refused before any of them is written.
    status, error = curl_json("-X", "POST", "-H", JSON, records, data="{}" * 10_001)
    assert (status, error["error_code"]) == (400, 400), error
    assert "10000" in error["message"]


def test_an_idle_consumer_instance_expires(shared_grouped: QuorumCluster, tmp_path: Path) -> None:
    short = start_proxy(
        shared_grouped, tmp_path / "rest-proxy.log", "--consumer-instance-timeout-ms", "300"
    )
    try:
        status, created = curl_json(
            "-X", "POST", "-H", V2, f"{short.url}/consumers/idle", data='{"name": "i1"}'
        )  # fmt: skip
        assert status == 200, created
        # Watched in the proxy's log: a request to the instance would count as using it.
        wait_until(
            lambda: "instance=i1 reason=expired" in short.log_path.read_text(),
            30,
            "the idle instance to expire",
        )
        status, answer = curl_json(f"{created['base_uri']}/subscription")
        assert (status, answer["error_code"]) == (404, 40403), answer
    finally:
        stop_proxy(short)
