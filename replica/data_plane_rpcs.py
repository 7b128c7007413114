"""The data plane of the broker's client API: Produce, Fetch and ListOffsets.

Record data is never decoded on the produce or fetch path: the partition validates produced
batches by header and CRC (:meth:`~replica.partition.Partition.append_produced`), gives them
offsets in place and appends them; fetches hand back log bytes. These methods translate
protobuf into partition calls and back; per-partition failures are answered with Kafka's
error codes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

import grpc

from lograft.protocol.batch_header import iter_headers
from lograft.protocol.errors import (
    InvalidRequestError,
    InvalidRequiredAcksError,
    InvalidTxnStateError,
    InvariantError,
    KafkaStorageError,
    LograftError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
)
from lograft.protocol.records import decode_records
from lograft.protocol.wire import broker_pb2 as pb
from replica.broker_rpcs import BrokerRpcs, error_fields
from replica.outcomes import outcomes
from replica.partition import LeaderAppend, Partition
from replica.replication import DivergingEpoch

__all__ = ["DataPlaneRpcs"]

log = logging.getLogger(__name__)


READ_COMMITTED = 1
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
MAX_FETCH_WAIT_MS = 60_000
MAX_PRODUCE_TIMEOUT_MS = 300_000


async def _acked_within(
    partition: Partition, appended: LeaderAppend, acks: int, timeout_s: float
) -> None:
    async with asyncio.timeout(timeout_s):
        await partition.wait_acked(appended.required_offset, acks, appended.leader_epoch)


def _fetch_budget(max_bytes: int) -> int:
    """A fetch's byte budget: its ``max_bytes``, or 50 MiB when it names none."""
    return max_bytes if max_bytes > 0 else 50 * 1024 * 1024


def _wanted(request: pb.FetchRequest) -> list[tuple[str, pb.FetchPartition]]:
    return [(topic.name, wanted) for topic in request.topics for wanted in topic.partitions]


async def _wait_for_data(partitions: list[Partition], timeout_s: float, replica: bool) -> None:
    """Wait until one of ``partitions`` may have more for the fetch, or ``timeout_s``."""
    # One future for every partition of the fetch: the first to move wakes this task
    # itself, a loop turn before asyncio.wait's callbacks would.
    waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    for partition in partitions:
        partition.add_data_waiter(waiter, replica=replica)
    try:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await waiter
    finally:
        for partition in partitions:
            partition.discard_waiter(waiter)
        waiter.cancel()


def _knows(wanted: pb.FetchPartition, high_watermark: int) -> bool:
    """Whether a follower's fetch says it knows ``high_watermark`` already (a sender that
    does not say what it knows is always told)."""
    return wanted.HasField("known_high_watermark") and wanted.known_high_watermark == high_watermark


def _set_high_watermark(
    result: pb.FetchPartitionResponse, partition: Partition, high_watermark: int
) -> None:
    result.high_watermark = high_watermark
    result.log_start_offset = partition.log.log_start_offset
    result.last_stable_offset = partition.last_stable_offset


class _FollowerAnswer:
    """A follower fetch's answer, built over its passes (a held fetch adds what moved)."""

    __slots__ = ("_entries", "_topics", "budget", "response", "total_bytes", "urgent")

    def __init__(self, max_bytes: int) -> None:
        self.response = pb.FetchResponse()
        self.budget = _fetch_budget(max_bytes)
        self.total_bytes = 0
        self.urgent = False
        """Whether the answer holds an error or a diverging epoch (sent without waiting)."""
        self._topics: dict[str, pb.FetchTopicResponse] = {}
        self._entries: dict[tuple[str, int], pb.FetchPartitionResponse] = {}

    def entry(self, topic: str, partition: int) -> pb.FetchPartitionResponse:
        """The answer's entry for one partition, added on first use."""
        result = self._entries.get((topic, partition))
        if result is None:
            topic_response = self._topics.get(topic)
            if topic_response is None:
                topic_response = self._topics[topic] = self.response.topics.add(name=topic)
            result = self._entries[(topic, partition)] = topic_response.partitions.add(
                partition=partition
            )
        return result


@dataclass(frozen=True, slots=True)
class _Waiting:
    """A partition of a held follower fetch with nothing for the follower yet."""

    topic: str
    wanted: pb.FetchPartition
    partition: Partition

    def refresh_high_watermark(self, answer: _FollowerAnswer) -> None:
        """Tell the follower this idle partition's high watermark as it is now, unless it
        knows it already."""
        high_watermark = self.partition.high_watermark
        if not _knows(self.wanted, high_watermark):
            entry = answer.entry(self.topic, self.wanted.partition)
            _set_high_watermark(entry, self.partition, high_watermark)

    def moved(self) -> bool:
        """Whether a pass would find something new: records past the fetch offset, or the
        partition no longer led at the epoch the follower names."""
        partition = self.partition
        return (
            partition.log_end_offset > self.wanted.fetch_offset
            or not partition.is_leader
            or partition.leader_epoch != self.wanted.current_leader_epoch
        )


class DataPlaneRpcs(BrokerRpcs):
    """Produce, Fetch and ListOffsets, answered by the partitions this broker leads."""

    def _leader_partition(self, topic: str, index: int) -> Partition:
        partition = self._logs.partition(topic, index)
        if not partition.is_leader:
            raise NotLeaderOrFollowerError(
                f"{partition.topic_partition} is led by another broker "
                f"(leader epoch {partition.leader_epoch})"
            )
        return partition

    # ---- Produce ------------------------------------------------------------------------

    async def Produce(
        self, request: pb.ProduceRequest, context: grpc.aio.ServicerContext
    ) -> pb.ProduceResponse:
        """Append each partition's batches; answer after the append (and its fsync)."""
        if request.acks not in (0, 1, -1):
            error = InvalidRequiredAcksError(f"acks must be 0, 1 or -1, got {request.acks}")
            return pb.ProduceResponse(
                topics=[
                    pb.TopicProduceResponse(
                        name=topic.name,
                        partitions=[
                            pb.PartitionProduceResponse(
                                partition=p.partition, base_offset=-1, **error_fields(error)
                            )
                            for p in topic.partitions
                        ],
                    )
                    for topic in request.topics
                ]
            )
        timeout_s = min(max(request.timeout_ms, 0) or 30_000, MAX_PRODUCE_TIMEOUT_MS) / 1000
        pending: list[tuple[pb.PartitionProduceResponse, Partition, LeaderAppend]] = []
        response = pb.ProduceResponse()
        for topic in request.topics:
            topic_response = response.topics.add(name=topic.name)
            for data in topic.partitions:
                result = topic_response.partitions.add(partition=data.partition, base_offset=-1)
                try:
                    partition = self._leader_partition(topic.name, data.partition)
                    verified = (
                        await self._verify_transactions(
                            partition, data.records, request.transactional_id
                        )
                        if request.transactional_id
                        else frozenset()
                    )
                    appended = self._append(partition, data.records, request.acks, result, verified)
                except LograftError as exc:
                    result.error_code = exc.code
                    result.error_message = exc.message
                    continue
                if partition.needs_ack_wait(request.acks):
                    pending.append((result, partition, appended))
        if pending:
            await self._await_acks(pending, request.acks, timeout_s)
        return response

    async def _verify_transactions(
        self, partition: Partition, records: bytes, transactional_id: str
    ) -> frozenset[tuple[int, int]]:
        """The producers whose first transactional batch here the coordinator confirmed is
        in their open transaction (KIP-890); raises its refusal. Empty when no batch opens
        a transaction (only the first write of a transaction asks). Without a
        ``transactional_id`` the caller skips this: a transactional batch without its id is
        refused by the partition, as one not verified."""
        starting = partition.transactions_to_verify(records)
        if not starting:
            return starting
        if self._transactions is None:
            raise InvalidTxnStateError(
                f"a transactional batch for {partition.topic_partition} on a broker without "
                "a transaction coordinator (a standalone node)"
            )
        for producer_id, producer_epoch in starting:
            await self._transactions.verify_remote(
                transactional_id, producer_id, producer_epoch, partition.topic_partition
            )
        return starting

    def _append(
        self,
        partition: Partition,
        records: bytes,
        acks: int,
        result: pb.PartitionProduceResponse,
        verified: frozenset[tuple[int, int]] = frozenset(),
    ) -> LeaderAppend:
        """Append a producer's bytes to ``partition`` into ``result``; what acks wait for."""
        appended = partition.append_produced(records, acks, self._now_ms(), verified)
        result.base_offset = appended.batch_base_offsets[0]
        if len(appended.batch_base_offsets) > 1:
            result.batch_base_offsets.extend(appended.batch_base_offsets)
        result.log_append_time_ms = appended.log_append_time_ms
        result.log_start_offset = partition.log.log_start_offset
        return appended

    async def _await_acks(
        self,
        pending: list[tuple[pb.PartitionProduceResponse, Partition, LeaderAppend]],
        acks: int,
        timeout_s: float,
    ) -> None:
        """Wait for each partition's acks, as its ack rule says (``Partition.wait_acked``)."""
        failures = await outcomes(
            [
                _acked_within(partition, appended, acks, timeout_s)
                for _, partition, appended in pending
            ]
        )
        for (result, partition, _), outcome in zip(pending, failures, strict=True):
            if isinstance(outcome, InvariantError):
                raise outcome  # the node halts (cluster.halt); it is never answered
            if isinstance(outcome, BaseException):
                error: LograftError
                if isinstance(outcome, TimeoutError):
                    error = RequestTimedOutError(
                        "the records were not replicated and flushed within timeout_ms"
                    )
                elif isinstance(outcome, LograftError):
                    error = outcome
                else:
                    error = KafkaStorageError(f"flush failed: {outcome}")
                log.warning(
                    "produce not acknowledged partition=%s error=%s",
                    partition.topic_partition,
                    error.error_name,
                )
                result.error_code = error.code
                result.error_message = error.message
                result.base_offset = -1
                del result.batch_base_offsets[:]

    # ---- Fetch --------------------------------------------------------------------------

    async def Fetch(
        self, request: pb.FetchRequest, context: grpc.aio.ServicerContext
    ) -> pb.FetchResponse:
        """Read below the high watermark (the last stable offset for ``read_committed``);
        long-poll until ``min_bytes`` or ``max_wait_ms``."""
        max_wait_s = min(max(request.max_wait_ms, 0), MAX_FETCH_WAIT_MS) / 1000
        deadline = asyncio.get_running_loop().time() + max_wait_s
        if request.replica_id >= 0:
            return await self._fetch_for_follower(request, deadline)
        while True:
            response, total_bytes, partitions = self._read_all(request)
            remaining = deadline - asyncio.get_running_loop().time()
            if total_bytes >= max(request.min_bytes, 1) or remaining <= 0 or not partitions:
                return response
            await _wait_for_data(partitions, remaining, replica=False)

    async def _fetch_for_follower(
        self, request: pb.FetchRequest, deadline: float
    ) -> pb.FetchResponse:
        """A follower's fetch, held until a partition has records for it (or the wait ends).

        The first pass takes every partition's progress to its leader core; a pass after a
        wake-up looks again only at the partitions that moved (new records, or a role or
        epoch change): as in Kafka, a held fetch records the follower's progress once, when
        it arrives. When the fetch is answered after waiting, the partitions still idle get
        their high watermark as it is then (it moves without waking a follower's fetch). An
        error or a diverging epoch is answered at once (Kafka's DelayedFetch does the same):
        the follower must not wait out the fetch to learn that it has to act.
        """
        answer = _FollowerAnswer(request.max_bytes)
        waiting = self._read_for_follower(request.replica_id, _wanted(request), answer)
        min_bytes = max(request.min_bytes, 1)
        waited = False
        while True:
            remaining = deadline - asyncio.get_running_loop().time()
            if answer.total_bytes >= min_bytes or answer.urgent or remaining <= 0 or not waiting:
                if waited:
                    for still_idle in waiting:
                        still_idle.refresh_high_watermark(answer)
                return answer.response
            await _wait_for_data([w.partition for w in waiting], remaining, replica=True)
            waited = True
            idle: list[_Waiting] = []
            moved: list[tuple[str, pb.FetchPartition]] = []
            for w in waiting:
                if w.moved():
                    moved.append((w.topic, w.wanted))
                else:
                    idle.append(w)
            waiting = idle + self._read_for_follower(request.replica_id, moved, answer)

    def _read_all(self, request: pb.FetchRequest) -> tuple[pb.FetchResponse, int, list[Partition]]:
        """One pass over every partition of a consumer's ``request``: the answer as it
        stands now, its record bytes, and the partitions a held fetch would wait on."""
        response = pb.FetchResponse()
        read_committed = request.isolation_level == READ_COMMITTED
        budget = _fetch_budget(request.max_bytes)
        total_bytes = 0
        readable: list[Partition] = []
        for topic in request.topics:
            topic_response = response.topics.add(name=topic.name)
            for wanted in topic.partitions:
                result = topic_response.partitions.add(
                    partition=wanted.partition, high_watermark=-1, log_start_offset=-1
                )
                try:
                    partition = self._leader_partition(topic.name, wanted.partition)
                    high_watermark = partition.high_watermark
                    result.high_watermark = high_watermark
                    result.log_start_offset = partition.log.log_start_offset
                    result.last_stable_offset = partition.last_stable_offset
                    # What a consumer may read: below the high watermark, and with
                    # read_committed below the last stable offset as well.
                    visible = result.last_stable_offset if read_committed else high_watermark
                    if visible < wanted.fetch_offset <= partition.log.log_end_offset:
                        # Between what is visible and the log end: not readable yet.
                        readable.append(partition)
                        continue
                    limit = self._partition_limit(wanted, total_bytes, budget)
                    if limit <= 0:
                        readable.append(partition)
                        continue
                    data = partition.log.read(wanted.fetch_offset, limit, visible)
                except LograftError as exc:
                    result.error_code = exc.code
                    result.error_message = exc.message
                    continue
                result.records = data
                if read_committed and data:
                    for aborted in partition.aborted_transactions(wanted.fetch_offset, visible):
                        result.aborted_transactions.add(
                            producer_id=aborted.producer_id, first_offset=aborted.first_offset
                        )
                total_bytes += len(data)
                readable.append(partition)
        return response, total_bytes, readable

    def _read_for_follower(
        self,
        replica_id: int,
        wanted: list[tuple[str, pb.FetchPartition]],
        answer: _FollowerAnswer,
    ) -> list[_Waiting]:
        """Take each partition's progress to its leader core and add what it has for the
        follower to ``answer``; return the partitions the fetch may wait on.

        A follower reads past the high watermark (that is how it moves) once its epoch and
        its log's divergence are checked. A partition with nothing to tell it (no records,
        no error, no diverging epoch, and the high watermark it already knows) is left out
        of the answer: a follower with many partitions on this leader is answered, and
        parses, only the ones that moved (a protocol-level shortcut; its core would have
        done nothing with such an answer).
        """
        waiting: list[_Waiting] = []
        now_ms = self._interval_clock_ms()
        for topic, fetched in wanted:
            error: LograftError | None = None
            diverging: DivergingEpoch | None = None
            data = b""
            try:
                partition = self._leader_partition(topic, fetched.partition)
                decision = partition.on_follower_fetch(
                    replica_id,
                    fetched.fetch_offset,
                    fetched.last_fetched_epoch,
                    fetched.current_leader_epoch,
                    now_ms,
                )
                high_watermark = partition.high_watermark
                if isinstance(decision, DivergingEpoch):
                    diverging = decision
                else:
                    limit = self._partition_limit(fetched, answer.total_bytes, answer.budget)
                    if limit > 0:
                        data = partition.log.read(fetched.fetch_offset, limit, None)
                    waiting.append(_Waiting(topic, fetched, partition))
            except LograftError as exc:
                error = exc
            if not data and error is None and diverging is None and _knows(fetched, high_watermark):
                continue
            result = answer.entry(topic, fetched.partition)
            if error is not None or diverging is not None:
                answer.urgent = True
            if error is not None:
                result.high_watermark = -1
                result.log_start_offset = -1
                result.error_code = error.code
                result.error_message = error.message
                continue
            _set_high_watermark(result, partition, high_watermark)
            if diverging is not None:
                result.diverging_epoch.epoch = diverging.diverging.epoch
                result.diverging_epoch.end_offset = diverging.diverging.end_offset
                continue
            result.records = data
            answer.total_bytes += len(data)
        return waiting

    @staticmethod
    def _partition_limit(wanted: pb.FetchPartition, total_bytes: int, budget: int) -> int:
        """How many bytes one partition of a fetch may return (0: none this time)."""
        limit = wanted.partition_max_bytes or 1024 * 1024
        # Kafka's rule: the first batch is always returned whole, whatever the budget says,
        # so a batch larger than max_bytes cannot block a consumer.
        if total_bytes > 0:
            limit = min(limit, budget - total_bytes)
        return limit

    # ---- ListOffsets --------------------------------------------------------------------

    async def ListOffsets(
        self, request: pb.ListOffsetsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListOffsetsResponse:
        """Earliest (-2), latest (-1), max timestamp (-3), or the first offset at a time."""
        response = pb.ListOffsetsResponse()
        for topic in request.topics:
            topic_response = response.topics.add(name=topic.name)
            for wanted in topic.partitions:
                result = topic_response.partitions.add(
                    partition=wanted.partition, offset=-1, timestamp=-1
                )
                try:
                    partition = self._leader_partition(topic.name, wanted.partition)
                    offset, timestamp = self._offset_for(
                        partition, wanted.timestamp, request.isolation_level == READ_COMMITTED
                    )
                except LograftError as exc:
                    result.error_code = exc.code
                    result.error_message = exc.message
                    continue
                result.offset = offset
                result.timestamp = timestamp
                result.leader_epoch = partition.leader_epoch
        return response

    def _offset_for(
        self, partition: Partition, timestamp: int, read_committed: bool = False
    ) -> tuple[int, int]:
        if timestamp == EARLIEST_TIMESTAMP:
            return partition.log.log_start_offset, -1
        if timestamp == LATEST_TIMESTAMP:
            if read_committed:
                return partition.last_stable_offset, -1
            return partition.high_watermark, -1
        if timestamp == MAX_TIMESTAMP:
            found = partition.log.max_timestamp_offset()
            if found is None or found[0] >= partition.high_watermark:
                return -1, -1
            # The log knows the batch; the record is the first in it with that timestamp.
            return self._first_record_at_or_after(partition, found[0], found[1])
        if timestamp < 0:
            raise InvalidRequestError(f"timestamp {timestamp} is neither -1, -2, -3 nor >= 0")
        found = partition.log.offset_for_timestamp(timestamp)
        if found is None:
            return -1, -1
        return self._first_record_at_or_after(partition, found[0], timestamp)

    def _first_record_at_or_after(
        self, partition: Partition, batch_offset: int, timestamp: int
    ) -> tuple[int, int]:
        # The time index finds the batch; the record is found inside it (off the hot path),
        # or in a later batch, as Kafka's segment search does: a compacted batch may be
        # empty (kept for its producer) or have lost the record that made its timestamp.
        offset = batch_offset
        while offset < partition.high_watermark:
            data = partition.log.read(offset, 64 * 1024, partition.high_watermark)
            headers = list(iter_headers(data))
            if not headers:
                break
            for header in headers:
                if header.max_timestamp < timestamp or not header.records_count:
                    continue
                for record in decode_records(data, header):
                    if record.timestamp >= timestamp and record.offset >= batch_offset:
                        return record.offset, record.timestamp
            offset = headers[-1].next_offset
        return -1, -1
