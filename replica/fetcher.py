"""Replica fetchers: followers pull from partition leaders, one fetcher per source broker.

A fetcher long-polls its leader with one Fetch for every partition it follows there,
carrying each partition's fetch offset (the local log end), the epoch of its last batch and
the leader epoch it believes in. Data is appended with the leader's offsets and epochs;
a diverging-epoch answer truncates the local log first (KIP-101/320), logged as a warning.

Runs on the node's event loop; disk flushes go through the partition's group commit.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import grpc

from cluster.errors import LograftError
from cluster.wire import broker_pb2 as pb
from cluster.wire import broker_pb2_grpc as pb_grpc
from replica.batch_header import check_stored_batch, iter_headers
from replica.log_manager import LogManager
from replica.partition import Partition
from replica.topic_partition import TopicPartition

__all__ = ["FollowedPartition", "ReplicaFetcher", "ReplicaFetcherManager"]

log = logging.getLogger(__name__)

FETCH_MAX_WAIT_MS = 500
FETCH_MAX_BYTES = 8 * 1024 * 1024
PARTITION_MAX_BYTES = 1024 * 1024
RETRY_BACKOFF_S = 0.2
RPC_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class FollowedPartition:
    """A partition this broker follows: its leader and the leader epoch."""

    leader_id: int
    leader_epoch: int


class ReplicaFetcher:
    """Fetches every partition this broker follows from one leader broker."""

    def __init__(
        self,
        node_id: int,
        source_id: int,
        address: str,
        logs: LogManager,
        now_ms: Callable[[], int],
    ) -> None:
        self.node_id = node_id
        self.source_id = source_id
        self.address = address
        self._logs = logs
        self._now_ms = now_ms
        self.partitions: dict[TopicPartition, int] = {}
        self._channel = grpc.aio.insecure_channel(
            address, options=[("grpc.max_receive_message_length", 2 * FETCH_MAX_BYTES)]
        )
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"fetcher-{self.source_id}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self._channel.close()

    async def _run(self) -> None:
        stub = pb_grpc.BrokerStub(self._channel)
        while True:
            request = self._request()
            if request is None:
                await asyncio.sleep(RETRY_BACKOFF_S)
                continue
            try:
                response = await stub.Fetch(request, timeout=RPC_TIMEOUT_S)
            except grpc.aio.AioRpcError as exc:
                log.debug("replica fetch failed source=%d code=%s", self.source_id, exc.code().name)
                await asyncio.sleep(RETRY_BACKOFF_S)
                continue
            try:
                progressed = await self._handle(response)
            except LograftError as exc:
                log.error("replica fetch handling failed source=%d error=%s", self.source_id, exc)
                progressed = False
            except Exception:
                # A bug must not silently end replication from this source: log, back off.
                log.exception("replica fetch handling crashed source=%d", self.source_id)
                progressed = False
            if not progressed:
                await asyncio.sleep(RETRY_BACKOFF_S)

    def _request(self) -> pb.FetchRequest | None:
        topics: dict[str, list[pb.FetchPartition]] = {}
        for tp, epoch in self.partitions.items():
            partition = self._logs.partitions.get(tp)
            if partition is None or partition.is_leader:
                continue
            topics.setdefault(tp.topic, []).append(
                pb.FetchPartition(
                    partition=tp.partition,
                    fetch_offset=partition.log.log_end_offset,
                    partition_max_bytes=PARTITION_MAX_BYTES,
                    current_leader_epoch=epoch,
                    last_fetched_epoch=partition.log.latest_epoch,
                )
            )
        if not topics:
            return None
        return pb.FetchRequest(
            replica_id=self.node_id,
            max_wait_ms=FETCH_MAX_WAIT_MS,
            min_bytes=1,
            max_bytes=FETCH_MAX_BYTES,
            topics=[pb.FetchTopic(name=name, partitions=parts) for name, parts in topics.items()],
        )

    async def _handle(self, response: pb.FetchResponse) -> bool:
        """Truncate or append each partition, flush them all at once, then take the HWs.

        The flushes of all partitions run together (one fdatasync each, in parallel): the
        next fetch, which tells the leader how far this replica got, waits for them.
        """
        progressed = False
        appended: list[tuple[Partition, int]] = []
        unchanged: list[tuple[Partition, int]] = []
        for topic in response.topics:
            for result in topic.partitions:
                tp = TopicPartition(topic.name, result.partition)
                partition = self._logs.partitions.get(tp)
                if partition is None or partition.is_leader or tp not in self.partitions:
                    continue
                if result.error_code:
                    continue  # a leader change: the metadata image will re-point us
                try:
                    if result.HasField("diverging_epoch"):
                        self._truncate(partition, result.diverging_epoch)
                        progressed = True
                        continue
                    if result.records and self._append(partition, result.records):
                        appended.append((partition, result.high_watermark))
                        continue
                except LograftError as exc:
                    log.error("replica append failed partition=%s error=%s", tp, exc)
                    continue
                unchanged.append((partition, result.high_watermark))
        if appended:
            await asyncio.gather(*(partition.flush_now() for partition, _ in appended))
            progressed = True
        for partition, high_watermark in appended + unchanged:
            partition.set_follower_high_watermark(high_watermark)
        return progressed

    @staticmethod
    def _truncate(partition: Partition, diverging: pb.EpochEndOffset) -> None:
        local = partition.log
        end = diverging.end_offset
        target = min(end, local.log_end_offset) if end >= 0 else partition.high_watermark
        log.warning(
            "truncating diverged follower log partition=%s from=%d to=%d leader_epoch=%d",
            partition.topic_partition,
            local.log_end_offset,
            target,
            diverging.epoch,
        )
        partition.truncate_to(target)

    def _append(self, partition: Partition, records: bytes) -> bool:
        """Append the whole batches of a fetch answer; False if it held none."""
        data = bytearray(records)
        headers = list(iter_headers(data))
        if not headers:
            return False
        complete = headers[-1].position + headers[-1].size
        del data[complete:]
        for header in headers:
            check_stored_batch(data, header)
        partition.append_as_follower(data, headers, self._now_ms())
        return True


class ReplicaFetcherManager:
    """One :class:`ReplicaFetcher` per leader broker this broker follows partitions of."""

    def __init__(self, node_id: int, logs: LogManager, now_ms: Callable[[], int]) -> None:
        self._node_id = node_id
        self._logs = logs
        self._now_ms = now_ms
        self._fetchers: dict[int, ReplicaFetcher] = {}

    async def update(
        self, followed: Mapping[TopicPartition, FollowedPartition], addresses: Mapping[int, str]
    ) -> None:
        """Point fetchers at the current leaders; stop fetchers with nothing left to fetch."""
        by_source: dict[int, dict[TopicPartition, int]] = {}
        for tp, state in followed.items():
            if state.leader_id in addresses:
                by_source.setdefault(state.leader_id, {})[tp] = state.leader_epoch
        for source_id in list(self._fetchers):
            fetcher = self._fetchers[source_id]
            if source_id not in by_source or fetcher.address != addresses.get(source_id):
                del self._fetchers[source_id]
                await fetcher.stop()
        for source_id, partitions in by_source.items():
            existing = self._fetchers.get(source_id)
            if existing is None:
                existing = ReplicaFetcher(
                    self._node_id, source_id, addresses[source_id], self._logs, self._now_ms
                )
                self._fetchers[source_id] = existing
                existing.start()
            existing.partitions = partitions

    async def stop(self) -> None:
        for fetcher in self._fetchers.values():
            await fetcher.stop()
        self._fetchers.clear()
