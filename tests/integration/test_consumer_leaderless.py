"""A consumer reads the partitions that have a leader while another has none.

As a user met it (issue 11): a topic with replication factor 1, one record on a partition
led by a running node, the node leading another partition killed (with one replica that
partition cannot fail over: it has no leader). ``lograft consume --from-beginning`` must
print the record rather than hang, and when it waits on, name the leaderless partition once
on stderr; a group member (``subscribe``) reads and commits the partitions with a leader
likewise, and reads the other one once its node is back. Real node processes started by
``lograft cluster up``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster.client import AdminClient, Consumer, ConsumerRecord, NewTopic, Producer, TopicPartition
from cluster.launcher import CLUSTER_FILE, LauncherError, LocalCluster
from tests.integration.nodes import free_consecutive_ports, wait_until

pytestmark = pytest.mark.integration

CLI_TIMEOUT_S = 120.0
WAIT_S = 60.0
TOPIC = "orders"
STALLED_LINE = "WARNING cluster.cli.consume partition {tp} has no leader; waiting for one"
"""A WARNING line of ``lograft consume`` after its time stamp."""


def _lograft(data_dir: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """``lograft ARGV`` as a user runs it, against the cluster in ``data_dir``."""
    env = dict(os.environ)
    env.pop("LOGRAFT_CONFIG", None)
    env["LOGRAFT_BOOTSTRAP"] = LocalCluster.load(data_dir).bootstrap
    return subprocess.run(
        [sys.executable, "-m", "cluster.cli", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )


def _ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    """A running three-node local cluster; stopped at teardown."""
    data = tmp_path / "cluster"
    base_port = free_consecutive_ports(3)
    try:
        _ok(_lograft_up(data, base_port))
        yield data
    finally:
        if (data / CLUSTER_FILE).exists():
            try:
                LocalCluster.load(data).down(timeout_s=10)
            except LauncherError as exc:
                pytest.fail(f"teardown could not stop the cluster: {exc}")


def _lograft_up(data: Path, base_port: int) -> subprocess.CompletedProcess[str]:
    command = ["cluster", "up", "--data-dir", str(data), "--base-port", str(base_port)]
    return subprocess.run(
        [sys.executable, "-m", "cluster.cli", *command],
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )


def _leaders(admin: AdminClient) -> dict[int, int]:
    """Partition → leader (-1: none) of the topic, as the cluster's metadata says now."""
    (description,) = admin.describe_topics([TOPIC])
    return {p.partition: p.leader for p in description.partitions}


def _poll_until(consumer: Consumer, count: int) -> list[ConsumerRecord]:
    """Poll until ``count`` records came (bounded by ``WAIT_S``); each poll waits for them."""
    records: list[ConsumerRecord] = []
    deadline = time.monotonic() + WAIT_S
    while len(records) < count:
        assert time.monotonic() < deadline, f"only {len(records)} of {count} records came"
        records.extend(consumer.poll(timeout_ms=500))
    return records


# Over 70 lines: a test that walks one scenario in order: leaders, then none.
def test_partitions_with_a_leader_are_read_while_one_has_none(data_dir: Path) -> None:
    cluster = LocalCluster.load(data_dir)
    bootstrap = cluster.bootstrap
    group = {
        "bootstrap.servers": bootstrap,
        "group.id": "billing",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    with AdminClient(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic(TOPIC, 3, replication_factor=1)])[TOPIC].result()
        wait_until(lambda: -1 not in _leaders(admin).values(), WAIT_S, "leaders of every partition")
        leaders = _leaders(admin)
        # The group's coordinator needs __consumer_offsets (three replicas): made now, while
        # every node runs.
        with Consumer(group) as consumer:
            assert consumer.committed([TopicPartition(TOPIC, 0)]) == {
                TopicPartition(TOPIC, 0): None
            }

        victim_partition = 0
        victim = leaders[victim_partition]
        down = sorted(p for p, node in leaders.items() if node == victim)
        up = sorted(p for p, node in leaders.items() if node != victim)
        assert up, f"every partition on one node: {leaders}"
        healthy = up[0]
        with Producer(bootstrap_servers=bootstrap, acks="all") as producer:
            producer.send(TOPIC, b"kept", partition=healthy).result(timeout=WAIT_S)

        cluster.kill(victim)
        wait_until(
            lambda: all(_leaders(admin)[p] == -1 for p in down),
            WAIT_S,
            f"the partitions of node {victim} ({down}) to have no leader",
        )

        # The record on a partition with a leader is printed; the command does not hang.
        consumed = _lograft(data_dir, "consume", TOPIC, "--from-beginning", "--max-messages", "1")
        assert _ok(consumed).stdout == "kept\n"

        # Waiting for more, the user is told what for: one line per leaderless partition,
        # however long it waits.
        waiting = _lograft(
            data_dir,
            *("consume", TOPIC, "--from-beginning", "--max-messages", "2"),
            *("--timeout-ms", "12000"),
        )
        assert _ok(waiting).stdout == "kept\n"
        lines = waiting.stderr.splitlines()
        warnings = [line.split(" ", 2)[2] for line in lines if " WARNING " in line]
        assert warnings == [
            f"{STALLED_LINE.format(tp=f'{TOPIC}-{p}')} (other partitions are read)" for p in down
        ], waiting.stderr
        assert lines[-1] == "Processed a total of 1 messages"

        # A group member: the record is read and committed while a partition has no leader.
        with Consumer(group) as consumer:
            consumer.subscribe([TOPIC])
            (record,) = _poll_until(consumer, 1)
            assert (record.partition, record.offset, record.value) == (healthy, 0, b"kept")
            assert consumer.assignment() == {TopicPartition(TOPIC, p) for p in leaders}
            # Commits cover the partitions with a position: what poll returned, or the end
            # of a partition with nothing to return; none for a partition without a leader.
            positions = {TopicPartition(TOPIC, p): int(p == healthy) for p in up}
            assert {tp: consumer.position(tp) for tp in positions} == positions
            assert consumer.commit() == positions

            # The node is back: the partition's position is found in the background, and
            # its record comes.
            cluster.restart(victim)
            wait_until(
                lambda: all(_leaders(admin)[p] == victim for p in down),
                WAIT_S,
                f"the partitions of node {victim} to be led again",
            )
            with Producer(bootstrap_servers=bootstrap, acks="all") as producer:
                producer.send(TOPIC, b"later", partition=victim_partition).result(timeout=WAIT_S)
            (later,) = _poll_until(consumer, 1)
            assert (later.partition, later.offset, later.value) == (victim_partition, 0, b"later")
            positions |= {TopicPartition(TOPIC, p): int(p == victim_partition) for p in down}
            assert {tp: consumer.position(tp) for tp in positions} == positions
            assert consumer.commit() == positions
