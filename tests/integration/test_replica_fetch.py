"""Followers' fetches as the leader answers them: data past the HW, divergence, epochs."""

from __future__ import annotations

import grpc
import pytest

from lograft.protocol.errors import NotLeaderOrFollowerError, UnknownLeaderEpochError
from lograft.protocol.records import encode_batch, iter_records
from lograft.protocol.wire import broker_pb2 as pb
from lograft.protocol.wire import broker_pb2_grpc as pb_grpc
from tests.integration.nodes import wait_until
from tests.integration.quorum import QuorumCluster
from tests.integration.wire_helpers import TIMEOUT_S, fetch_once, produce

pytestmark = pytest.mark.integration


def _replica_fetch(
    stub: pb_grpc.BrokerStub,
    replica_id: int,
    fetch_offset: int,
    last_fetched_epoch: int,
    current_leader_epoch: int,
) -> pb.FetchPartitionResponse:
    response = _replica_fetch_answer(
        stub, replica_id, fetch_offset, last_fetched_epoch, current_leader_epoch, -1
    )
    result: pb.FetchPartitionResponse = response.topics[0].partitions[0]
    return result


def _replica_fetch_answer(
    stub: pb_grpc.BrokerStub,
    replica_id: int,
    fetch_offset: int,
    last_fetched_epoch: int,
    current_leader_epoch: int,
    known_high_watermark: int,
) -> pb.FetchResponse:
    response: pb.FetchResponse = stub.Fetch(
        pb.FetchRequest(
            replica_id=replica_id,
            max_wait_ms=0,
            min_bytes=1,
            max_bytes=1 << 20,
            topics=[
                pb.FetchTopic(
                    name="repl",
                    partitions=[
                        pb.FetchPartition(
                            partition=0,
                            fetch_offset=fetch_offset,
                            partition_max_bytes=1 << 20,
                            current_leader_epoch=current_leader_epoch,
                            last_fetched_epoch=last_fetched_epoch,
                            known_high_watermark=known_high_watermark,
                        )
                    ],
                )
            ],
        ),
        timeout=TIMEOUT_S,
    )
    return response


def test_leader_answers_follower_fetches(cluster: QuorumCluster) -> None:
    node = cluster.nodes[1]
    assert cluster.create_topic(node, "repl", 1, 3) == 0
    metadata = cluster.metadata(node, ["repl"])
    assert metadata is not None
    partition = metadata.topics[0].partitions[0]
    leader, epoch = partition.leader_id, partition.leader_epoch
    follower = next(r for r in partition.replica_nodes if r != leader)
    with grpc.insecure_channel(cluster.nodes[leader].address) as channel:
        stub = pb_grpc.BrokerStub(channel)
        wait_until(
            lambda: produce(stub, "repl", 0, encode_batch([b"a", b"b", b"c"])).error_code == 0,
            30,
            "the leader to accept a produce",
        )
        assert produce(stub, "repl", 0, encode_batch([b"d", b"e"])).error_code == 0

        everything = _replica_fetch(stub, follower, 0, -1, epoch)
        assert everything.error_code == 0 and not everything.HasField("diverging_epoch")
        assert [r.value for r in iter_records(everything.records)] == [b"a", b"b", b"c", b"d", b"e"]

        same_epoch = _replica_fetch(stub, follower, 3, epoch, epoch)
        assert not same_epoch.HasField("diverging_epoch")
        assert [r.value for r in iter_records(same_epoch.records, 3)] == [b"d", b"e"]

        # The follower holds records of this epoch the leader does not (written to an old
        # leader, never committed): truncate to where the epoch ends here (KIP-101).
        diverged = _replica_fetch(stub, follower, 7, epoch, epoch)
        assert diverged.HasField("diverging_epoch") and diverged.records == b""
        assert (diverged.diverging_epoch.epoch, diverged.diverging_epoch.end_offset) == (epoch, 5)
        # An epoch newer than any the leader knows is undefined, as in Kafka.
        unknown = _replica_fetch(stub, follower, 5, epoch + 3, epoch)
        assert (unknown.diverging_epoch.epoch, unknown.diverging_epoch.end_offset) == (-1, -1)

        ahead = _replica_fetch(stub, follower, 0, -1, epoch + 1)
        assert ahead.error_code == UnknownLeaderEpochError.code

        # A follower at the log end that knows the high watermark has nothing to learn: the
        # answer leaves its partition out. One that knows an older high watermark is told.
        wait_until(
            lambda: fetch_once(stub, "repl", 0, 0).high_watermark == 5,
            30,
            "the followers to commit the five records",
        )
        assert not _replica_fetch_answer(stub, follower, 5, epoch, epoch, 5).topics
        behind = _replica_fetch_answer(stub, follower, 5, epoch, epoch, 3)
        told = behind.topics[0].partitions[0]
        assert (told.error_code, told.high_watermark, told.records) == (0, 5, b"")
        # An error is never left out.
        fenced = _replica_fetch_answer(stub, follower, 5, epoch, epoch + 1, 5)
        assert fenced.topics[0].partitions[0].error_code == UnknownLeaderEpochError.code

    with grpc.insecure_channel(cluster.nodes[follower].address) as channel:
        follower_stub = pb_grpc.BrokerStub(channel)
        # Once the follower has opened its replica (just after the metadata reaches it), it
        # refuses to serve fetches as a leader would.
        wait_until(
            lambda: (
                _replica_fetch(follower_stub, leader, 0, -1, epoch).error_code
                == NotLeaderOrFollowerError.code
            ),
            30,
            "the follower to refuse a fetch as not the leader",
        )


def test_followers_copy_the_leader_and_take_over_with_its_data(cluster: QuorumCluster) -> None:
    node = cluster.nodes[1]
    assert cluster.create_topic(node, "repl", 1, 3) == 0
    leader = cluster.leaders(node, "repl")[0]
    values = [f"v{n}".encode() for n in range(200)]
    with grpc.insecure_channel(cluster.nodes[leader].address) as channel:
        stub = pb_grpc.BrokerStub(channel)
        wait_until(
            lambda: produce(stub, "repl", 0, encode_batch(values[:100])).error_code == 0,
            30,
            "the leader to accept a produce",
        )
        assert produce(stub, "repl", 0, encode_batch(values[100:])).error_code == 0
    followers = [n for n in cluster.nodes if n != leader]
    segment_files = {
        n: cluster.nodes[n].data_dir / "repl-0" / "00000000000000000000.log" for n in cluster.nodes
    }

    def replicated() -> bool:
        sizes = {n: p.stat().st_size if p.exists() else -1 for n, p in segment_files.items()}
        return len(set(sizes.values())) == 1

    wait_until(replicated, 30, "the followers to hold the leader's log")
    leader_bytes = segment_files[leader].read_bytes()
    assert all(segment_files[n].read_bytes() == leader_bytes for n in followers)
    cluster.nodes[leader].kill()
    survivor = cluster.nodes[followers[0]]
    wait_until(
        lambda: cluster.leaders(survivor, "repl").get(0, leader) not in (leader, -1),
        60,
        "a new leader",
    )
    new_leader = cluster.nodes[cluster.leaders(survivor, "repl")[0]]
    with grpc.insecure_channel(new_leader.address) as channel:
        stub = pb_grpc.BrokerStub(channel)
        got: list[bytes] = []

        def read_all() -> bool:
            got.clear()
            result = (
                stub.Fetch(
                    pb.FetchRequest(
                        replica_id=-1,
                        max_wait_ms=0,
                        min_bytes=1,
                        max_bytes=1 << 20,
                        topics=[
                            pb.FetchTopic(
                                name="repl",
                                partitions=[
                                    pb.FetchPartition(
                                        partition=0, fetch_offset=0, partition_max_bytes=1 << 20
                                    )
                                ],
                            )
                        ],
                    ),
                    timeout=TIMEOUT_S,
                )
                .topics[0]
                .partitions[0]
            )
            got.extend(r.value for r in iter_records(result.records) if r.value is not None)
            return result.error_code == 0 and len(got) == len(values)

        wait_until(read_all, 30, "the new leader to serve the data")
        assert got == values
