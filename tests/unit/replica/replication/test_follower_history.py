"""The real fetcher and partitions converge on a history the old fetcher never converged on.

Issue 10's history, replicas ordered [A, C, B], clean elections only. The old fetcher
truncated C to ``min(8, 10)`` and fetched ``(8, epoch 3)`` for ever; the follower core
walks back through C's own epoch cache (KIP-279) and truncates to 5. Everything here is
the broker's own code on real logs on disk: :class:`~replica.fetcher.ReplicaFetcher`
builds each fetch and performs each answer (``_request``/``_handle``), the leader's
:class:`~replica.broker_service.BrokerService` answers it (``Fetch``, not held); only the gRPC
hop between them is left out.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import grpc
import pytest

from lograft.protocol.batch_header import validate_batches
from lograft.protocol.records import encode_batch
from lograft.protocol.topic_config import LogConfig
from lograft.protocol.topic_partition import TopicPartition
from replica.broker_service import BrokerEndpoint, BrokerService
from replica.fetcher import ReplicaFetcher
from replica.log_manager import LogManager
from replica.partition import Partition

TP = TopicPartition("t", 0)
A, B, C = 1, 2, 3
REPLICAS = (A, C, B)
MAX_ROUNDS = 20


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class Broker:
    """One broker: its log manager, its broker service, its copy of the partition."""

    node_id: int
    logs: LogManager
    service: BrokerService

    @property
    def partition(self) -> Partition:
        return self.logs.partitions[TP]

    def content(self) -> bytes:
        """The whole log, byte for byte as stored (offsets and leader epochs included)."""
        return self.partition.log.read(0, 1 << 24)


class Cluster:
    """Three brokers in one event loop; leadership is set as the controller would."""

    def __init__(self, root: Path) -> None:
        self.brokers: dict[int, Broker] = {}
        for node_id in REPLICAS:
            logs = LogManager(root / f"node-{node_id}", LogConfig(), _now_ms)
            logs.open(load_topics=False)
            logs.adopt_partition(logs.open_partition(TP, "topic-id", {}))
            endpoint = BrokerEndpoint(node_id, "127.0.0.1", 0)
            self.brokers[node_id] = Broker(
                node_id, logs, BrokerService(logs, endpoint, "cluster", _now_ms)
            )
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self.truncations: list[tuple[int, int]] = []

    def close(self) -> None:
        for broker in self.brokers.values():
            broker.logs.close()

    def lead(self, leader: int, epoch: int, isr: tuple[int, ...]) -> None:
        """``leader`` leads at ``epoch``; brokers in ``followers`` follow it."""
        self.brokers[leader].partition.become_leader(
            replica_id=leader,
            replicas=REPLICAS,
            isr=isr,
            leader_epoch=epoch,
            partition_epoch=epoch,
            now_ms=_now_ms(),
        )

    def follow(self, follower: int, leader: int, epoch: int) -> None:
        self.brokers[follower].partition.become_follower(
            epoch, replica_id=follower, leader_id=leader
        )
        fetcher = ReplicaFetcher(
            follower, leader, "127.0.0.1:1", self.brokers[follower].logs, _now_ms
        )
        fetcher.set_partitions({TP: epoch})
        self.fetchers[follower] = fetcher

    async def produce(self, leader: int, batches: list[list[bytes]], acks: int) -> None:
        partition = self.brokers[leader].partition
        for values in batches:
            data = bytearray(encode_batch(values))
            appended = partition.append_as_leader(
                data, validate_batches(data, 1 << 20), acks, _now_ms()
            )
            await partition.wait_flushed(appended.required_offset)

    async def fetch(self, follower: int) -> None:
        """One replica fetch of ``follower`` from its leader, answered and performed."""
        fetcher = self.fetchers[follower]
        before = self.brokers[follower].partition.log_end_offset
        request, sent, _ = fetcher._request()
        assert request is not None, f"broker {follower} has nothing to fetch"
        request.max_wait_ms = 0  # answered from one pass: nothing here waits for more
        context = cast(grpc.aio.ServicerContext, None)
        response = await self.brokers[fetcher.source_id].service.Fetch(request, context)
        await fetcher._handle(response, sent)
        after = self.brokers[follower].partition.log_end_offset
        if after < before:
            self.truncations.append((follower, after))

    async def catch_up(self, *followers: int) -> None:
        """Fetch until each follower's fetch offset equals the leader's log end, twice
        over (the second fetch tells the leader how far it got)."""
        for follower in followers:
            leader = self.brokers[self.fetchers[follower].source_id].partition
            for _ in range(MAX_ROUNDS):
                await self.fetch(follower)
                if self.brokers[follower].partition.log_end_offset == leader.log_end_offset:
                    await self.fetch(follower)
                    break
            else:
                pytest.fail(f"broker {follower} did not catch up in {MAX_ROUNDS} fetches")


def _epochs(broker: Broker) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in broker.partition.log.leader_epoch_cache.entries]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    made = Cluster(tmp_path)
    yield made
    made.close()


async def test_the_issue_10_history_converges_byte_for_byte(cluster: Cluster) -> None:
    # 1. C leads epoch 1 and writes 0-4 with acks=all; A and B catch up.
    cluster.lead(C, 1, REPLICAS)
    cluster.follow(A, C, 1)
    cluster.follow(B, C, 1)
    await cluster.produce(C, [[b"e1-%d" % i for i in range(5)]], acks=-1)
    await cluster.catch_up(A, B)
    assert cluster.brokers[C].partition.high_watermark == 5

    # 2. A leads epoch 2 (preferred leader) and writes 5-7 with acks=1; B copies them, C
    #    stalls (it stays in the ISR: it does not fetch at all).
    cluster.lead(A, 2, REPLICAS)
    cluster.follow(C, A, 2)
    cluster.follow(B, A, 2)
    await cluster.produce(A, [[b"e2-5", b"e2-6", b"e2-7"]], acks=1)
    await cluster.catch_up(B)
    assert cluster.brokers[B].partition.log_end_offset == 8

    # 3. A is fenced; C leads epoch 3 and writes 5-9, one record per batch, before B fetches.
    cluster.lead(C, 3, (C, B))
    cluster.follow(B, C, 3)
    await cluster.produce(C, [[b"e3-%d" % i] for i in range(5, 10)], acks=1)

    # 4. C is fenced; B leads epoch 4 and writes 8-9.
    cluster.lead(B, 4, (B,))
    await cluster.produce(B, [[b"e4-8", b"e4-9"]], acks=1)
    assert _epochs(cluster.brokers[B]) == [(1, 0), (2, 5), (4, 8)]
    assert _epochs(cluster.brokers[C]) == [(1, 0), (3, 5)]

    # 5. C and A return as followers of B.
    cluster.follow(C, B, 4)
    cluster.follow(A, B, 4)
    await cluster.catch_up(C, A)

    # KIP-279: C walked back to the end of epoch 1 (offset 5), not to min(8, 10).
    assert cluster.truncations[0] == (C, 5)
    leader = cluster.brokers[B].content()
    assert cluster.brokers[C].content() == leader
    assert cluster.brokers[A].content() == leader
    assert cluster.brokers[B].partition.log_end_offset == 10
