"""Consumer groups against three real nodes: what a user relies on.

The coordinator's broker dies and the group goes on with its committed offsets; a consumer
that crashes between processing and committing loses nothing (at least once); bad input
gets a typed error.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from cluster.client import AdminClient, Consumer, Producer, TopicPartition
from lograft.protocol.errors import (
    FencedMemberEpochError,
    GroupIdNotFoundError,
    InvalidConfigError,
    InvalidRequestError,
    InvalidSessionTimeoutError,
    StaleMemberEpochError,
    UnassignedPartitionError,
    UnknownMemberIdError,
)
from lograft.protocol.wire import broker_pb2 as pb
from lograft.protocol.wire import broker_pb2_grpc as pb_grpc
from tests.integration.nodes import NodeProcess, wait_until
from tests.integration.quorum import CLUSTER_TIMEOUT_S, QuorumCluster
from tests.integration.wire_helpers import TIMEOUT_S

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def _coordinator(cluster: QuorumCluster, group_id: str) -> int:
    """The node every live broker names as ``group_id``'s coordinator (once they agree)."""
    answers: set[int] = set()

    def agreed() -> bool:
        answers.clear()
        for node in cluster.alive_brokers():
            try:
                with grpc.insecure_channel(node.address) as channel:
                    found = pb_grpc.BrokerStub(channel).FindCoordinator(
                        pb.FindCoordinatorRequest(group_id=group_id), timeout=TIMEOUT_S
                    )
            except grpc.RpcError:
                return False
            if found.error_code:
                return False
            answers.add(found.node_id)
        alive = {n.node_id for n in cluster.alive_brokers()}
        return len(answers) == 1 and answers <= alive

    wait_until(agreed, CLUSTER_TIMEOUT_S, f"the brokers to agree on {group_id}'s coordinator")
    return answers.pop()


def _produce(cluster: QuorumCluster, topic: str, values: range, partitions: int) -> None:
    with Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"}) as producer:
        for n in values:
            producer.send(topic, f"{n}".encode(), partition=n % partitions)


def _read(consumer: Consumer, seen: list[int], until: int) -> bool:
    seen.extend(int(r.value) for r in consumer.poll(timeout_ms=100) if r.value is not None)
    return len(seen) >= until


def test_killing_the_coordinators_broker_moves_the_group_with_its_committed_offsets(
    grouped: QuorumCluster,
) -> None:
    assert grouped.create_topic(grouped.nodes[1], "payments", 3, 3) == 0
    _produce(grouped, "payments", range(300), 3)
    config = {
        "bootstrap.servers": grouped.bootstrap,
        "group.id": "ledger",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    everything = [TopicPartition("payments", p) for p in range(3)]
    seen: list[int] = []
    with Consumer(config) as consumer:
        consumer.subscribe(["payments"])
        wait_until(lambda: _read(consumer, seen, 300), CLUSTER_TIMEOUT_S, "300 records")
        assert consumer.commit() == {tp: 100 for tp in everything}
        first = _coordinator(grouped, "ledger")
        grouped.nodes[first].kill()
        second = _coordinator(grouped, "ledger")
        assert second != first

        # The same member goes on: new records, then a commit the new coordinator accepts.
        _produce(grouped, "payments", range(300, 390), 3)
        after_kill: list[int] = []
        wait_until(lambda: _read(consumer, after_kill, 90), CLUSTER_TIMEOUT_S, "the new records")
        assert sorted(after_kill) == list(range(300, 390)), "a record was skipped or repeated"
        assert consumer.commit() == {tp: 130 for tp in everything}

    # A new member of the group, after the failover, starts at the committed offsets.
    _produce(grouped, "payments", range(390, 420), 3)
    with Consumer(config) as successor:
        assert successor.committed(everything) == {tp: 130 for tp in everything}
        successor.subscribe(["payments"])
        resumed: list[int] = []
        wait_until(lambda: _read(successor, resumed, 30), CLUSTER_TIMEOUT_S, "the newest records")
        assert sorted(resumed) == list(range(390, 420))


# A worker that processes each batch (appends it to a file, flushed to the OS) and then
# commits — except that after ``commits`` commits it processes one more batch and dies
# with SIGKILL before committing it: a crash between processing and commit.
CRASHING_WORKER = """
import os, signal, sys
from cluster.client import Consumer
bootstrap, group, out_path, commits, auto = sys.argv[1:6]
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                     "auto.offset.reset": "earliest", "max.poll.records": 7,
                     "session.timeout.ms": 6000, "enable.auto.commit": auto == "auto",
                     "auto.commit.interval.ms": 50})
consumer.subscribe(["jobs"])
made = 0
with open(out_path, "a") as out:
    while True:
        records = consumer.poll(timeout_ms=200)
        if not records:
            continue
        for record in records:
            out.write(f"{record.partition} {record.offset} {record.value.decode()}\\n")
        out.flush()
        if made == int(commits):
            os.kill(os.getpid(), signal.SIGKILL)
        if auto != "auto":
            consumer.commit()
        made += 1
"""


@pytest.mark.parametrize("commit_mode", ["manual", "auto"])
def test_a_consumer_that_crashes_before_committing_is_followed_by_one_that_rereads(
    grouped: QuorumCluster, tmp_path: Path, commit_mode: str
) -> None:
    group = f"at-least-once-{commit_mode}"
    assert grouped.create_topic(grouped.nodes[1], "jobs", 2, 3) == 0
    _produce(grouped, "jobs", range(200), 2)
    processed_path = tmp_path / f"{commit_mode}.txt"
    mode = "auto" if commit_mode == "auto" else "manual"
    worker = subprocess.run(
        [
            sys.executable,
            "-c",
            CRASHING_WORKER,
            grouped.bootstrap,
            group,
            str(processed_path),
            "5",
            mode,
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=CLUSTER_TIMEOUT_S,
        check=False,
    )
    assert worker.returncode == -9, "the worker should have died by SIGKILL"
    processed = [line.split() for line in processed_path.read_text().splitlines()]
    assert processed, "the worker processed nothing"

    everything = [TopicPartition("jobs", p) for p in range(2)]
    config = {
        "bootstrap.servers": grouped.bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    with Consumer(config) as successor:
        committed = successor.committed(everything)
        successor.subscribe(["jobs"])
        # The dead member holds its partitions until session.timeout.ms (6 s) passes.
        reread: list[tuple[int, int, int]] = []

        def read_to_end() -> bool:
            for record in successor.poll(timeout_ms=200):
                assert record.value is not None
                reread.append((record.partition, record.offset, int(record.value)))
            return len(reread) >= 200 - sum(c or 0 for c in committed.values())

        wait_until(read_to_end, CLUSTER_TIMEOUT_S, "the successor to read to the end")

    for tp in everything:
        offsets = [offset for partition, offset, _ in reread if partition == tp.partition]
        # It starts exactly at the last commit: not later (a record would be skipped).
        assert offsets[0] == (committed[tp] or 0), f"{tp} did not resume at its commit"
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))
    done_by_worker = {int(value) for _, _, value in processed}
    done_by_successor = {value for _, _, value in reread}
    assert done_by_worker | done_by_successor == set(range(200)), "a record was skipped"
    # What the worker processed after its last commit is processed again: at least once.
    last_batch = {
        int(value)
        for partition, offset, value in processed
        if int(offset) >= (committed[TopicPartition("jobs", int(partition))] or 0)
    }
    assert last_batch, "the crash should have left processed but uncommitted records"
    assert last_batch <= done_by_successor


def _poll_for(consumer: Consumer, seconds: float) -> None:
    """Poll for up to ``seconds``, so that an error the coordinator sent surfaces."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        consumer.poll(timeout_ms=100)


def _member(cluster: QuorumCluster, group_id: str) -> tuple[str, int]:
    """A member id and its epoch, as the coordinator describes the group."""
    with grpc.insecure_channel(cluster.nodes[_coordinator(cluster, group_id)].address) as ch:
        described = pb_grpc.BrokerStub(ch).DescribeGroups(
            pb.DescribeGroupsRequest(group_ids=[group_id]), timeout=TIMEOUT_S
        )
    member = described.groups[0].members[0]
    return member.member_id, member.member_epoch


def _raw_commit(
    cluster: QuorumCluster, group_id: str, member_id: str, epoch: int, partition: int
) -> pb.OffsetCommitResponse:
    with grpc.insecure_channel(cluster.nodes[_coordinator(cluster, group_id)].address) as ch:
        response: pb.OffsetCommitResponse = pb_grpc.BrokerStub(ch).OffsetCommit(
            pb.OffsetCommitRequest(
                group_id=group_id,
                member_id=member_id,
                member_epoch=epoch,
                topics=[
                    pb.OffsetCommitTopic(
                        name="orders",
                        partitions=[
                            pb.OffsetCommitPartition(partition=partition, committed_offset=1)
                        ],
                    )
                ],
            ),
            timeout=TIMEOUT_S,
        )
    return response


def test_bad_group_input_gets_typed_errors(grouped: QuorumCluster) -> None:
    assert grouped.create_topic(grouped.nodes[1], "orders", 2, 3) == 0
    assert grouped.create_topic(grouped.nodes[1], "other", 1, 3) == 0
    base = {"bootstrap.servers": grouped.bootstrap, "auto.offset.reset": "earliest"}

    # Invalid configs: unknown name, wrong type, out of range — refused before any I/O.
    for bad in ({"group.idd": "x"}, {"session.timeout.ms": "soon"}, {"max.poll.records": 0}):
        with pytest.raises(InvalidConfigError) as refused:
            Consumer({**base, "group.id": "g", **bad})
        assert next(iter(bad)) in str(refused.value)
    # ... and one only the coordinator can judge: a session timeout below its minimum.
    with Consumer({**base, "group.id": "too-short", "session.timeout.ms": 1}) as short:
        short.subscribe(["orders"])
        with pytest.raises(InvalidSessionTimeoutError):
            _poll_for(short, CLUSTER_TIMEOUT_S)

    # Unknown group: a member epoch for a group the coordinator never saw.
    unknown = _raw_commit(grouped, "never-created", "member-x", 3, 0)
    assert unknown.error_code == GroupIdNotFoundError.code, unknown.error_message

    with Consumer({**base, "group.id": "billing", "enable.auto.commit": False}) as member:
        member.subscribe(["orders"])

        def owns_both() -> bool:
            member.poll(timeout_ms=100)
            return len(member.assignment()) == 2

        wait_until(owns_both, CLUSTER_TIMEOUT_S, "the member to own both partitions")
        # A commit for a partition this member does not own.
        with pytest.raises(UnassignedPartitionError):
            member.commit({TopicPartition("other", 0): 0})
        # Illegal generation (KIP-848: member epochs): newer than the coordinator's is
        # fenced, older is stale; an unknown member id is unknown.
        member_id, epoch = _member(grouped, "billing")
        fenced = _raw_commit(grouped, "billing", member_id, epoch + 5, 0)
        assert fenced.error_code == FencedMemberEpochError.code, fenced.error_message
        stale = _raw_commit(grouped, "billing", member_id, epoch - 1, 0)
        assert stale.error_code == StaleMemberEpochError.code, stale.error_message
        stranger = _raw_commit(grouped, "billing", "no-such-member", epoch, 0)
        assert stranger.error_code == UnknownMemberIdError.code, stranger.error_message
        # A commit from outside the group (assign(), no membership) while it has members.
        with Consumer({**base, "group.id": "billing"}) as outsider:
            outsider.assign([TopicPartition("orders", 0)])
            with pytest.raises(UnknownMemberIdError) as outside:
                outsider.commit({TopicPartition("orders", 0): 1})
            assert "without members" in str(outside.value)
        # None of these moved the group's committed offsets.
        assert member.committed([TopicPartition("orders", p) for p in range(2)]) == {
            TopicPartition("orders", p): None for p in range(2)
        }


def test_groups_on_a_standalone_node_fail_at_once_with_a_clear_error(node: NodeProcess) -> None:
    config = {"bootstrap.servers": node.address, "group.id": "alone"}
    with Consumer(config) as consumer:
        consumer.subscribe(["anything"])
        with pytest.raises(InvalidRequestError, match="controller quorum"):
            _poll_for(consumer, CLUSTER_TIMEOUT_S)
    with (
        AdminClient({"bootstrap.servers": node.address}) as admin,
        pytest.raises(InvalidRequestError, match="controller quorum"),
    ):
        admin.list_consumer_groups()
