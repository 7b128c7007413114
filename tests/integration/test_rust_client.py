"""The Rust client (``clients/rust``, issue 42 item 3) against real node processes.

The crate is built once per run (``make rust-client`` builds it first, so here cargo only
checks it is fresh) and its ``lograft-rs`` binary is driven as a subprocess:

* admin: a topic created and described through the Rust client, as the cluster sees it;
* an idempotent ``acks=all`` producer whose every acknowledged record a Python consumer
  and the Rust consumer (from an offset) read back where the producer was told it went;
* two Rust members of one consumer group share a topic's partitions (KIP-848), read every
  record once and commit offsets the Python ``AdminClient`` sees;
* a ``kill -9`` of a partition leader in the middle of an idempotent ``acks=all`` stream:
  every acknowledged record is in the log exactly once, at the offset it was acknowledged at.

Every wait is on a process's output or the cluster's state, bounded by a deadline.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest

from cluster.client import AdminClient, Consumer, TopicPartition
from cluster.client.partitioner import partition_for_key
from tests.integration.nodes import NodeProcess, wait_until
from tests.integration.quorum import CLUSTER_TIMEOUT_S, QuorumCluster

pytestmark = pytest.mark.integration

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
CRATE = ROOT / "clients" / "rust"
#: The profile ``make rust-client`` builds (the test then finds it fresh): a cold debug build
#: took 41 s on the 2-core machine, a release one 81 s; these tests run as fast on either.
PROFILE = "debug"
BUILD_TIMEOUT_S = 1800.0
RUN_TIMEOUT_S = 180.0
READ_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def rust_cli() -> Path:
    """The ``lograft-rs`` binary, built (or found fresh) by cargo."""
    cargo = shutil.which("cargo") or str(Path.home() / ".cargo" / "bin" / "cargo")
    if not Path(cargo).exists():
        if os.environ.get("LOGRAFT_REQUIRE_RUST"):
            raise AssertionError("LOGRAFT_REQUIRE_RUST is set and cargo is not installed")
        pytest.skip("cargo is not installed (the Rust client is not built)")
    command = [cargo, "build", "--locked", "--bin", "lograft-rs"]
    if PROFILE == "release":
        command.append("--release")
    started = time.monotonic()
    subprocess.run(command, cwd=CRATE, check=True, timeout=BUILD_TIMEOUT_S)
    logger.info("cargo build took %.1f s", time.monotonic() - started)
    return CRATE / "target" / PROFILE / "lograft-rs"


def run_cli(cli: Path, *args: str, timeout_s: float = RUN_TIMEOUT_S) -> list[str]:
    """Run ``lograft-rs`` to completion; its stdout lines (it must exit 0)."""
    done = subprocess.run(
        [str(cli), *args], capture_output=True, text=True, timeout=timeout_s, check=False
    )
    assert done.returncode == 0, f"lograft-rs {args[0]} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout.splitlines()


class LiveProcess:
    """A ``lograft-rs`` process whose stdout lines are collected as they come."""

    def __init__(self, cli: Path, *args: str) -> None:
        self.args = args
        self.process = subprocess.Popen(
            [str(cli), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._stderr: list[str] = []
        self._cond = threading.Condition()
        self._readers = [
            threading.Thread(target=self._read, args=(self.process.stdout, self.lines)),
            threading.Thread(target=self._read, args=(self.process.stderr, self._stderr)),
        ]
        for reader in self._readers:
            reader.start()

    def _read(self, stream: IO[str] | None, into: list[str]) -> None:
        assert stream is not None
        for raw in stream:
            with self._cond:
                into.append(raw.rstrip("\n"))
                self._cond.notify_all()

    def snapshot(self) -> list[str]:
        with self._cond:
            return list(self.lines)

    def wait_for(self, condition: Callable[[list[str]], bool], timeout_s: float, what: str) -> None:
        """Wait until ``condition(lines so far)`` holds; fail if the process ends first."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not condition(self.lines):
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (self.process.poll() is not None and not self._alive()):
                    raise AssertionError(
                        f"lograft-rs {self.args[0]}: timed out waiting for {what}\n"
                        + "\n".join(self.lines[-20:] + self._stderr[-20:])
                    )
                self._cond.wait(min(remaining, 0.5))

    def _alive(self) -> bool:
        return any(reader.is_alive() for reader in self._readers)

    def finish(self, timeout_s: float = RUN_TIMEOUT_S, close_stdin: bool = True) -> list[str]:
        """Close stdin (the group consumer's signal to stop), wait for the exit; its lines."""
        if close_stdin and self.process.stdin is not None:
            self.process.stdin.close()
        try:
            code = self.process.wait(timeout=timeout_s)
        finally:
            self.kill()
        assert code == 0, f"lograft-rs {self.args[0]} exited {code}:\n" + "\n".join(
            self.lines[-20:] + self._stderr[-40:]
        )
        return self.snapshot()

    def kill(self) -> None:
        """SIGKILL the process (by its pid) if it still runs; close its pipes."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        for reader in self._readers:
            reader.join(timeout=10)
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None and not stream.closed:
                stream.close()


@dataclass(frozen=True)
class Ack:
    """One ``ACK <key> <partition> <offset>`` line."""

    key: str
    partition: int
    offset: int


def acks_of(lines: list[str]) -> list[Ack]:
    acks = []
    for line in lines:
        if line.startswith("ACK "):
            _, key, partition, offset = line.split()
            acks.append(Ack(key, int(partition), int(offset)))
    return acks


def read_back(bootstrap: str, topic: str, partitions: int) -> list[tuple[int, int, str]]:
    """Every record of ``topic`` as ``(partition, offset, key)``, read by a Python consumer
    up to the partitions' end offsets."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign(tps)
        ends = consumer.end_offsets(tps)
        found: list[tuple[int, int, str]] = []
        deadline = time.monotonic() + READ_TIMEOUT_S
        while not all(consumer.position(tp) >= ends[tp] for tp in tps):
            assert time.monotonic() < deadline, f"read {len(found)} records, ends {ends}"
            for record in consumer.poll(timeout_ms=200):
                assert record.key is not None
                found.append((record.partition, record.offset, record.key.decode()))
    return found


def committed_and_ends(
    bootstrap: str, group: str, topic: str, partitions: int
) -> tuple[dict[TopicPartition, int | None], dict[TopicPartition, int]]:
    """The group's committed offsets (Python ``AdminClient``) and the partitions' ends."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    with Consumer(bootstrap_servers=bootstrap) as consumer:
        ends = consumer.end_offsets(tps)
    admin = AdminClient(bootstrap_servers=bootstrap)
    try:
        committed = admin.list_consumer_group_offsets(group, tps)
    finally:
        admin.close()
    return {tp: (c.offset if c else None) for tp, c in committed.items()}, ends


def create_topic(cli: Path, cluster: QuorumCluster, topic: str, partitions: int) -> None:
    lines = run_cli(
        cli,
        "create-topic",
        "--bootstrap",
        cluster.bootstrap,
        "--topic",
        topic,
        "--partitions",
        str(partitions),
        "--replication-factor",
        "3",
    )
    assert lines == [f"CREATED {topic} {partitions}"]


def leaders_seen_by(
    cluster: QuorumCluster, node: NodeProcess, topic: str, partitions: int
) -> dict[int, int]:
    """Each partition's leader as ``node`` reports it, once it does for every partition: a
    topic just created may not be applied on ``node`` yet (no topic, or no leader)."""
    seen: dict[int, int] = {}

    def every_partition_led() -> bool:
        seen.clear()
        seen.update(cluster.leaders(node, topic))
        return sorted(seen) == list(range(partitions)) and all(
            leader >= 0 for leader in seen.values()
        )

    wait_until(
        every_partition_led,
        CLUSTER_TIMEOUT_S,
        f"node {node.node_id} to report a leader for every partition of {topic}",
    )
    return dict(seen)


def any_alive(cluster: QuorumCluster) -> NodeProcess:
    return cluster.alive_brokers()[0]


def test_admin_creates_and_describes_a_topic(rust_cli: Path, shared_grouped: QuorumCluster) -> None:
    create_topic(rust_cli, shared_grouped, "rs-admin", 3)
    described = run_cli(
        rust_cli, "describe", "--bootstrap", shared_grouped.bootstrap, "--topic", "rs-admin"
    )
    assert described[0] == "TOPIC rs-admin PARTITIONS 3"
    leaders = leaders_seen_by(shared_grouped, shared_grouped.nodes[1], "rs-admin", 3)
    for line in described[1:]:
        fields = line.split()
        partition, leader, replicas = int(fields[1]), int(fields[3]), fields[7].split(",")
        assert sorted(int(r) for r in replicas) == [1, 2, 3]
        # A leader moves only on a failure, and these nodes all run.
        assert leader == leaders[partition]
    listed = run_cli(rust_cli, "list-topics", "--bootstrap", shared_grouped.bootstrap)
    assert "rs-admin" in listed
    # Creating it again is Kafka's TOPIC_ALREADY_EXISTS.
    again = subprocess.run(
        [
            str(rust_cli),
            "create-topic",
            "--bootstrap",
            shared_grouped.bootstrap,
            "--topic",
            "rs-admin",
        ],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert again.returncode == 1 and "TOPIC_ALREADY_EXISTS" in again.stderr


def test_idempotent_produce_then_consume_from_an_offset(
    rust_cli: Path, shared_grouped: QuorumCluster
) -> None:
    topic, partitions, count = "rs-produce", 3, 60
    create_topic(rust_cli, shared_grouped, topic, partitions)
    lines = run_cli(
        rust_cli,
        "produce",
        "--bootstrap",
        shared_grouped.bootstrap,
        "--topic",
        topic,
        "--count",
        str(count),
        "--idempotent",
        "--acks",
        "all",
        "--concurrency",
        "8",
    )
    acks = acks_of(lines)
    assert len(acks) == count
    # Kafka's partitioner: the Python client's murmur2 puts each key on the same partition.
    for ack in acks:
        assert ack.partition == partition_for_key(ack.key.encode(), partitions)
    found = read_back(shared_grouped.bootstrap, topic, partitions)
    assert sorted(found) == sorted((a.partition, a.offset, a.key) for a in acks)

    # The Rust consumer from an offset of the fullest partition: exactly the records after it.
    busiest = Counter(a.partition for a in acks).most_common(1)[0][0]
    mine = sorted((a.offset, a.key) for a in acks if a.partition == busiest)
    start = mine[len(mine) // 2][0]
    expected = [(o, k) for o, k in mine if o >= start]
    consumed = run_cli(
        rust_cli,
        "consume",
        "--bootstrap",
        shared_grouped.bootstrap,
        "--topic",
        topic,
        "--partition",
        str(busiest),
        "--offset",
        str(start),
        "--count",
        str(len(expected)),
    )
    got = [(int(f[2]), f[3]) for f in (line.split() for line in consumed) if f[0] == "REC"]
    assert got == expected


def _assignment(lines: list[str]) -> set[str]:
    """The partitions a group-consume process last said it owns."""
    owned: set[str] = set()
    for line in lines:
        if line.startswith("ASSIGNED"):
            parts = line.split(maxsplit=1)
            owned = set(parts[1].split(",")) if len(parts) > 1 else set()
    return owned


def _keys_read(lines: list[str]) -> list[str]:
    return [line.split()[3] for line in lines if line.startswith("REC ")]


def test_two_rust_members_share_a_group_and_commit(
    rust_cli: Path, shared_grouped: QuorumCluster
) -> None:
    topic, partitions, group = "rs-group", 4, "rs-readers"
    create_topic(rust_cli, shared_grouped, topic, partitions)
    everything = {f"{topic}-{p}" for p in range(partitions)}
    member = [
        "group-consume",
        "--bootstrap",
        shared_grouped.bootstrap,
        "--group",
        group,
        "--topic",
        topic,
    ]
    first = LiveProcess(rust_cli, *member)
    second: LiveProcess | None = None
    try:
        first.wait_for(lambda ls: _assignment(ls) == everything, READ_TIMEOUT_S, "all partitions")
        second = LiveProcess(rust_cli, *member)
        a, b = first, second

        def shared(_: list[str]) -> bool:
            # A member prints its assignment after each poll: the first one's line about
            # the partitions it released may come a poll after the second's.
            mine, theirs = _assignment(a.snapshot()), _assignment(b.snapshot())
            return bool(mine) and bool(theirs) and not mine & theirs and mine | theirs == everything

        second.wait_for(shared, READ_TIMEOUT_S, "the partitions shared by both members")

        # Records for every partition, produced once both members hold their share.
        keys = [f"g-{i}" for i in range(40)]
        assert {partition_for_key(k.encode(), partitions) for k in keys} == set(range(partitions))
        run_cli(
            rust_cli,
            "produce",
            "--bootstrap",
            shared_grouped.bootstrap,
            "--topic",
            topic,
            "--count",
            "40",
            "--key-prefix",
            "g",
            "--idempotent",
            "--concurrency",
            "4",
        )
        wait_until(
            lambda: len(_keys_read(a.snapshot()) + _keys_read(b.snapshot())) >= len(keys),
            READ_TIMEOUT_S,
            "both members to read every record",
        )
        first_lines, second_lines = first.finish(), second.finish()
    finally:
        first.kill()
        if second is not None:
            second.kill()
    read_first, read_second = _keys_read(first_lines), _keys_read(second_lines)
    assert sorted(read_first + read_second) == sorted(keys), "every record once"
    assert read_first and read_second, "each member read its share"
    assert "LEFT" in first_lines and "LEFT" in second_lines

    # The committed offsets are the partitions' ends, as the Python admin client sees them.
    committed, ends = committed_and_ends(shared_grouped.bootstrap, group, topic, partitions)
    assert committed == ends


def test_leader_kill_during_idempotent_produce_writes_each_record_once(
    rust_cli: Path, cluster: QuorumCluster
) -> None:
    topic, partitions, count = "rs-kill", 3, 3000
    create_topic(rust_cli, cluster, topic, partitions)
    leaders = leaders_seen_by(cluster, cluster.nodes[1], topic, partitions)
    victim_id = leaders[0]
    victim_partitions = {p for p, leader in leaders.items() if leader == victim_id}
    producer = LiveProcess(
        rust_cli,
        "produce",
        "--bootstrap",
        cluster.bootstrap,
        "--topic",
        topic,
        "--count",
        str(count),
        "--idempotent",
        "--acks",
        "all",
        "--concurrency",
        "2",
    )
    try:
        # Mid-stream: once the victim's partitions have acknowledged records.
        producer.wait_for(
            lambda ls: sum(a.partition in victim_partitions for a in acks_of(ls)) >= 50,
            READ_TIMEOUT_S,
            "acknowledged records on the leader to kill",
        )
        cluster.nodes[victim_id].kill()
        acked_before_kill = len(acks_of(producer.snapshot()))
        lines = producer.finish()
    finally:
        producer.kill()
    acks = acks_of(lines)
    assert len(acks) == count, [line for line in lines if not line.startswith("ACK")][:10]
    after_kill = acks[acked_before_kill:]
    assert any(a.partition in victim_partitions for a in after_kill), (
        "records of the killed leader's partitions were acknowledged after the kill"
    )
    survivor = any_alive(cluster)
    wait_until(
        lambda: all(
            leader not in (-1, victim_id) for leader in cluster.leaders(survivor, topic).values()
        ),
        CLUSTER_TIMEOUT_S,
        "new leaders",
    )
    found = read_back(",".join(n.address for n in cluster.alive_brokers()), topic, partitions)
    keys = Counter(key for _, _, key in found)
    duplicates = {k: n for k, n in keys.items() if n > 1}
    assert not duplicates, f"records written twice: {sorted(duplicates)[:10]}"
    assert set(keys) == {a.key for a in acks}, "every acknowledged record is in the log"
    assert sorted(found) == sorted((a.partition, a.offset, a.key) for a in acks), (
        "each record at the offset it was acknowledged at"
    )
