"""Replica fetchers: followers pull from partition leaders, one fetcher per source broker.

A shell around each followed partition's :class:`~replica.replication.FollowerState`: it
asks the core for the next fetch, turns it into one long-polled ``Fetch`` RPC for every
partition it follows on that leader, turns each partition's answer back into the core's
:class:`~replica.replication.FetchResponse`, and hands it to
:func:`replica.follower_fetch.handle_fetch_response` (the step the replication simulation
runs too), which lets the core decide and performs it on the partition. What is left here
is I/O and timing: flushing what was appended (all partitions of one answer together)
before publishing the high watermark and fetching again, delaying a partition whose
answer was an error until the back-off passes or the metadata image gives it a new leader
or epoch, and giving up a fetch the leader holds when the image adds a partition or an
epoch, so that the new one is asked for at once rather than after the fetch's max wait.

Runs on the node's event loop; disk flushes go through the partition's group commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from lograft.protocol.batch_header import check_stored_batch, iter_headers
from lograft.protocol.errors import InvariantError, LograftError, error_for_code
from lograft.protocol.framed.peer import PeerChannel
from lograft.protocol.topic_partition import TopicPartition
from lograft.protocol.wire import broker_pb2 as pb
from lograft.protocol.wire import broker_pb2_grpc as pb_grpc
from replica.follower_fetch import NextFetch, handle_fetch_response
from replica.log_manager import LogManager
from replica.outcomes import outcomes
from replica.partition import FetchedBatches, Partition
from replica.replication import EpochEndOffset, FetchRequest, FetchResponse, FollowerState

__all__ = ["FollowedPartition", "ReplicaFetcher", "ReplicaFetcherManager", "to_core_response"]

log = logging.getLogger(__name__)

FETCH_MAX_WAIT_MS = 1000
FETCH_MAX_BYTES = 8 * 1024 * 1024
PARTITION_MAX_BYTES = 1024 * 1024
RETRY_BACKOFF_S = 0.2
RPC_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class FollowedPartition:
    """A partition this broker follows: its leader and the leader epoch."""

    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class _Sent:
    """One partition of a fetch in flight: who asked, and what."""

    partition: Partition
    state: FollowerState
    request: FetchRequest


def to_core_response(
    result: pb.FetchPartitionResponse, sent: FetchRequest, received_ms: int
) -> FetchResponse[FetchedBatches]:
    """The core's view of one partition's answer to ``sent`` (untrusted bytes checked).

    The wire answer does not echo the request; the fetcher keeps one fetch in flight per
    leader, so the answer is to ``sent``. A trailing partial batch (the leader cut the
    answer at its size limit) is dropped; every whole batch's CRC is checked, and a bad
    one raises ``CorruptMessageError``.
    """
    epoch, offset = sent.current_leader_epoch, sent.fetch_offset
    empty = FetchedBatches(bytearray(), [], received_ms)
    if result.error_code:
        error = error_for_code(result.error_code, result.error_message)
        return FetchResponse(epoch, offset, result.high_watermark, empty, offset, None, error)
    if result.HasField("diverging_epoch"):
        diverging = EpochEndOffset(result.diverging_epoch.epoch, result.diverging_epoch.end_offset)
        return FetchResponse(epoch, offset, result.high_watermark, empty, offset, diverging)
    data = bytearray(result.records)
    headers = list(iter_headers(data))
    if not headers:
        return FetchResponse(epoch, offset, result.high_watermark, empty, offset)
    del data[headers[-1].position + headers[-1].size :]
    for header in headers:
        check_stored_batch(data, header)
    batches = FetchedBatches(data, headers, received_ms)
    return FetchResponse(epoch, offset, result.high_watermark, batches, headers[-1].next_offset)


async def _flush_together(partitions: list[Partition]) -> list[bool]:
    """Flush ``partitions`` together (one fdatasync each, in parallel); whether each one's
    flush succeeded. A failure is logged; a broken invariant propagates (the node halts)."""
    flushed = await outcomes([partition.flush_now() for partition in partitions])
    for partition, outcome in zip(partitions, flushed, strict=True):
        if isinstance(outcome, InvariantError):
            raise outcome
        if isinstance(outcome, BaseException):
            log.error(
                "replica flush failed partition=%s error=%r", partition.topic_partition, outcome
            )
    return [not isinstance(outcome, BaseException) for outcome in flushed]


class ReplicaFetcher:
    """Fetches every partition this broker follows from one leader broker."""

    def __init__(
        self,
        node_id: int,
        source_id: int,
        address: str,
        logs: LogManager,
        now_ms: Callable[[], int],
        fetch_max_wait_ms: int = FETCH_MAX_WAIT_MS,
    ) -> None:
        self.node_id = node_id
        self.source_id = source_id
        self.address = address
        self._logs = logs
        self._now_ms = now_ms
        self._fetch_max_wait_ms = fetch_max_wait_ms
        self.partitions: dict[TopicPartition, int] = {}
        # A partition whose answer was an error waits until this loop time, or until its
        # follower core is replaced (a new leader or epoch from the metadata image).
        self._delayed: dict[TopicPartition, tuple[FollowerState, float]] = {}
        self._failed_logs: set[TopicPartition] = set()
        """Partitions whose log failed or closed, reported once (no longer fetched)."""
        self._changed = asyncio.Event()
        self._channel = PeerChannel(
            address,
            pb_grpc.BrokerStub,
            max_message_bytes=2 * FETCH_MAX_BYTES,
            connect_timeout_s=RPC_TIMEOUT_S,
            grpc_options=[("grpc.max_receive_message_length", 2 * FETCH_MAX_BYTES)],
        )
        self._task: asyncio.Task[None] | None = None
        self._fetching = False
        """Whether :meth:`_run` is suspended on a Fetch call (the leader may hold it up to
        its max wait), or about to resume from it, and on nothing else."""
        self._giving_up = False
        """Whether :meth:`set_partitions` cancelled that call to ask again at once."""

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"fetcher-{self.source_id}")

    def set_partitions(self, partitions: dict[TopicPartition, int]) -> None:
        """Fetch these partitions (with the leader epochs the image gives) from now on.

        A partition or epoch the fetch in flight does not cover ends that fetch: its answer
        is not waited for, and the next fetch, with the new partition, is sent at once.
        Partitions only removed leave it running (their part of its answer is ignored).
        """
        added = any(self.partitions.get(tp) != epoch for tp, epoch in partitions.items())
        self.partitions = partitions
        self._changed.set()
        if added and self._fetching and not self._giving_up and self._task is not None:
            # While _fetching, the cancellation can only land on the call's await (never in
            # the middle of handling an answer); an answer that arrived meanwhile is dropped
            # and its records fetched again. The call runs in _run's own task rather than a
            # task of its own: a task per fetch costs a loop turn on every answer.
            self._giving_up = True
            self._task.cancel()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self._channel.close()

    async def _run(self) -> None:
        task = asyncio.current_task()
        assert task is not None
        while True:
            self._changed.clear()
            request, sent, unflushed = self._request()
            if unflushed:
                await self._flush_left_over(unflushed)
                continue  # ask again: this request left them out
            if request is None:
                await self._wait_for_work()
                continue
            response: pb.FetchResponse | LograftError | None
            self._fetching = True
            try:
                response = await self._channel.call("Fetch", request, RPC_TIMEOUT_S)
            except asyncio.CancelledError:
                if not self._giving_up or task.cancelling() > 1:
                    raise  # the fetcher is stopping
                task.uncancel()
                response = None  # given up for a new partition or epoch: ask again at once
            except LograftError as exc:
                response = exc
            finally:
                self._fetching = False
                self._giving_up = False
            if response is None:
                continue
            if isinstance(response, LograftError):
                log.debug(
                    "replica fetch failed source=%d error=%s", self.source_id, response.error_name
                )
                await asyncio.sleep(RETRY_BACKOFF_S)
                continue
            try:
                await self._handle(response, sent)
            except InvariantError:
                raise  # the node halts (cluster.halt)
            except Exception:
                # A bug must not silently end replication from this source: log, back off.
                log.exception("replica fetch handling crashed source=%d", self.source_id)
                await asyncio.sleep(RETRY_BACKOFF_S)

    async def _wait_for_work(self) -> None:
        """Sleep until a delayed partition is due or the followed partitions change."""
        loop = asyncio.get_running_loop()
        due = min((until for _, until in self._delayed.values()), default=None)
        timeout = RETRY_BACKOFF_S if due is None else max(due - loop.time(), 0.0)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._changed.wait()

    # Over 70 lines: one pass over the followed partitions, each rule for leaving one out in order.
    def _request(
        self,
    ) -> tuple[pb.FetchRequest | None, dict[TopicPartition, _Sent], list[Partition]]:
        """The next fetch (None: nothing to ask for now), what each partition of it asked,
        and the partitions left out because records they appended are not flushed yet.

        A fetch offset tells the leader that this replica has, on disk, everything below it
        (that is what an ``acks=all`` record waits for), so a partition is asked for only
        when its durable end (:attr:`~replica.partition.Partition.durable_end`) is its log
        end. Normally it is (:meth:`_handle` flushes before the next fetch); after a failed
        flush or a crash in the handling it is not, and the caller flushes it first. A log
        that failed (a failed ``fdatasync``: the kernel may have dropped what it held) is
        not fetched for at all: the leader stops counting this replica as caught up and
        takes it out of the ISR, as Kafka does when a log directory goes offline.
        """
        now = asyncio.get_running_loop().time()
        max_wait_ms = self._fetch_max_wait_ms
        topics: dict[str, list[pb.FetchPartition]] = {}
        sent: dict[TopicPartition, _Sent] = {}
        unflushed: list[Partition] = []
        for tp, epoch in self.partitions.items():
            partition = self._logs.partitions.get(tp)
            state = partition.follower_state if partition is not None else None
            if partition is None or state is None or state.leader_epoch != epoch:
                continue  # the image and the partition disagree for a moment: skip it
            delayed = self._delayed.get(tp)
            if delayed is not None:
                if delayed[0] is state and delayed[1] > now:
                    # Back when it is due: the fetch without it must not be held longer.
                    max_wait_ms = min(max_wait_ms, int((delayed[1] - now) * 1000) + 1)
                    continue
                del self._delayed[tp]
            partition_log = partition.log
            if partition_log.failed:
                if tp not in self._failed_logs:
                    self._failed_logs.add(tp)
                    log.warning(
                        "replica log failed or closed, not fetching partition=%s source=%d",
                        tp,
                        self.source_id,
                    )
                continue
            if partition.durable_end < partition_log.log_end_offset:
                unflushed.append(partition)
                continue
            core_request = state.fetch_request(
                partition.log_end_offset, partition.leader_epoch_cache
            )
            sent[tp] = _Sent(partition, state, core_request)
            topics.setdefault(tp.topic, []).append(
                pb.FetchPartition(
                    partition=tp.partition,
                    fetch_offset=core_request.fetch_offset,
                    partition_max_bytes=PARTITION_MAX_BYTES,
                    current_leader_epoch=core_request.current_leader_epoch,
                    last_fetched_epoch=core_request.last_fetched_epoch,
                    # The lower of the core's and the published one: after a flush that
                    # failed they differ, and the leader's answer then lets the next
                    # caught-up step publish it.
                    known_high_watermark=min(state.high_watermark, partition.high_watermark),
                )
            )
        if not topics:
            return None, sent, unflushed
        request = pb.FetchRequest(
            replica_id=self.node_id,
            max_wait_ms=max_wait_ms,
            min_bytes=1,
            max_bytes=FETCH_MAX_BYTES,
            topics=[pb.FetchTopic(name=name, partitions=parts) for name, parts in topics.items()],
        )
        return request, sent, unflushed

    async def _flush_left_over(self, unflushed: list[Partition]) -> None:
        """Flush what earlier answers appended and did not get to disk, before any fetch
        claims it; after a failure, wait out the back-off (a failed ``fdatasync`` has failed
        the log, which is then no longer fetched)."""
        if not all(await _flush_together(unflushed)):
            await asyncio.sleep(RETRY_BACKOFF_S)

    async def _handle(
        self, response: pb.FetchResponse, sent: Mapping[TopicPartition, _Sent]
    ) -> None:
        """Perform each partition's answer, flush the appended ones together, publish HWs.

        The flushes run together (one fdatasync each, in parallel): the next fetch, which
        tells the leader how far this replica got, waits for them. A partition the answer
        leaves out had nothing new (no records, and the high watermark this follower sent
        as known): its core would do nothing with it, so nothing is done.
        """
        received_ms = self._now_ms()
        appended: list[_Sent] = []
        for topic in response.topics:
            for result in topic.partitions:
                tp = TopicPartition(topic.name, result.partition)
                asked = sent.get(tp)
                if asked is None or asked.partition.follower_state is not asked.state:
                    continue  # not asked for, or its role changed while the fetch was out
                try:
                    answer = to_core_response(result, asked.request, received_ms)
                    if answer.error is not None:
                        log.debug("replica fetch error partition=%s error=%s", tp, answer.error)
                    step = handle_fetch_response(asked.state, asked.partition, answer)
                except LograftError as exc:
                    log.error("replica fetch answer failed partition=%s error=%s", tp, exc)
                    step = NextFetch.BACK_OFF
                if step is NextFetch.AFTER_FLUSH:
                    appended.append(asked)
                elif step is NextFetch.CAUGHT_UP:
                    asked.partition.publish_follower_high_watermark()
                elif step in (NextFetch.BACK_OFF, NextFetch.AWAIT_METADATA):
                    self._delay(tp, asked.state)
        if not appended:
            return
        flushed = await _flush_together([asked.partition for asked in appended])
        for done, ok in zip(appended, flushed, strict=True):
            if not ok:
                self._delay(done.partition.topic_partition, done.state)
            elif done.partition.follower_state is done.state:
                # Not if the role changed during the flush: the high watermark is another
                # fetcher's then, over records this flush may not have covered.
                done.partition.publish_follower_high_watermark()

    def _delay(self, tp: TopicPartition, state: FollowerState) -> None:
        until = asyncio.get_running_loop().time() + RETRY_BACKOFF_S
        self._delayed[tp] = (state, until)


class ReplicaFetcherManager:
    """One :class:`ReplicaFetcher` per leader broker this broker follows partitions of."""

    def __init__(
        self,
        node_id: int,
        logs: LogManager,
        now_ms: Callable[[], int],
        fetch_max_wait_ms: int = FETCH_MAX_WAIT_MS,
    ) -> None:
        self._node_id = node_id
        self._logs = logs
        self._now_ms = now_ms
        self._fetch_max_wait_ms = fetch_max_wait_ms
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
                    self._node_id,
                    source_id,
                    addresses[source_id],
                    self._logs,
                    self._now_ms,
                    self._fetch_max_wait_ms,
                )
                self._fetchers[source_id] = existing
                existing.start()
            existing.set_partitions(partitions)

    async def stop(self) -> None:
        for fetcher in self._fetchers.values():
            await fetcher.stop()
        self._fetchers.clear()
