"""ProduceRecords and FetchRecords: the data plane for clients without a RecordBatch codec.

A shell over Produce and Fetch (:mod:`replica.data_plane_rpcs`): ProduceRecords builds one
RecordBatch v2 from the request's records and answers what Produce answers for it, so acks,
``min.insync.replicas``, the partition's batch checks and idempotent sequencing are the same
rules, run once; FetchRecords runs a Fetch and decodes the batches it returned, dropping
transaction markers and, for ``READ_COMMITTED``, the records of aborted transactions, as a
Kafka consumer does. The per-record work here is the price of the simple path; Produce and
Fetch keep bytes as bytes.
"""

from __future__ import annotations

from typing import Any

import grpc

from lograft.protocol.batch_builder import CREATE_TIME, LOG_APPEND_TIME, RecordBatchBuilder
from lograft.protocol.batch_header import iter_headers
from lograft.protocol.control_records import AbortedBatchFilter
from lograft.protocol.errors import (
    InvalidRecordError,
    InvalidRequestError,
    LograftError,
    UnsupportedCompressionTypeError,
    error_for_code,
)
from lograft.protocol.record_codec import BatchSkip, decode_records, next_readable_batch
from lograft.protocol.wire import broker_pb2 as pb
from replica.data_plane_rpcs import DataPlaneRpcs
from replica.replication import check_current_leader_epoch

__all__ = ["RecordRpcs", "build_batch"]

READ_COMMITTED = 1
MAX_PRODUCER_EPOCH = 32767


def _error_fields(code: int, message: str) -> dict[str, Any]:
    """The error fields of a record-level answer for a Kafka error ``code`` (0: none)."""
    if not code:
        return {"error_code": 0, "error_name": "NONE", "retriable": False, "error_message": ""}
    error = error_for_code(code, message)
    return {
        "error_code": code,
        "error_name": error.error_name,
        "retriable": error.retriable,
        "error_message": message,
    }


def build_batch(request: pb.ProduceRecordsRequest, now_ms: int) -> bytes:
    """One RecordBatch v2 of the request's records, stamped with its producer sequence.

    A record without a timestamp gets ``now_ms``. Raises ``InvalidRecordError`` for a
    request without records or a record the batch cannot hold, and
    ``UnsupportedCompressionTypeError`` for an unknown codec.
    """
    if not request.records:
        raise InvalidRecordError("a ProduceRecords request needs at least one record")
    producer = request.producer if request.HasField("producer") else None
    if producer is not None and not (
        producer.producer_id >= 0
        and 0 <= producer.producer_epoch <= MAX_PRODUCER_EPOCH
        and producer.base_sequence >= 0
    ):
        # The batch header holds the epoch in 16 bits; InitProducerId never hands out more.
        raise InvalidRecordError(
            f"producer id {producer.producer_id}, epoch {producer.producer_epoch}, base "
            f"sequence {producer.base_sequence}: the id and sequence must not be negative "
            f"and the epoch must be 0..{MAX_PRODUCER_EPOCH}"
        )
    try:
        builder = RecordBatchBuilder(
            request.compression,
            producer_id=producer.producer_id if producer else -1,
            producer_epoch=producer.producer_epoch if producer else -1,
            base_sequence=producer.base_sequence if producer else -1,
        )
        for record in request.records:
            builder.append(
                record.value if record.HasField("value") else None,
                record.key if record.HasField("key") else None,
                record.timestamp_ms if record.HasField("timestamp_ms") else now_ms,
                [
                    (header.key, header.value if header.HasField("value") else None)
                    for header in record.headers
                ],
            )
        return builder.build()
    except UnsupportedCompressionTypeError:
        raise
    except ValueError as exc:
        raise InvalidRecordError(str(exc)) from None


def _decoded(
    records: bytes, offset: int, max_records: int, skip: BatchSkip | None
) -> tuple[list[pb.ConsumedRecord], int]:
    """The records of a Fetch answer from ``offset`` on (at most ``max_records``, 0: all)
    and the offset to fetch next."""
    consumed: list[pb.ConsumedRecord] = []
    position = 0
    while True:
        header, position = next_readable_batch(records, position, offset, skip)
        if header is None:
            break
        timestamp_type = LOG_APPEND_TIME if header.is_log_append_time else CREATE_TIME
        for record in decode_records(records, header):
            if record.offset < offset:
                continue
            consumed.append(
                pb.ConsumedRecord(
                    offset=record.offset,
                    timestamp_ms=record.timestamp,
                    key=record.key,
                    value=record.value,
                    headers=[pb.RecordHeader(key=k, value=v) for k, v in record.headers],
                    timestamp_type=timestamp_type,
                )
            )
            if len(consumed) == max_records:
                return consumed, record.offset + 1
    # Past every whole batch returned: markers and aborted records after the last record
    # are consumed too, or a reader would ask for them again forever.
    next_offset = offset
    for header in iter_headers(records):
        next_offset = max(next_offset, header.next_offset)
    return consumed, next_offset


def _as_fetch(request: pb.FetchRecordsRequest) -> pb.FetchRequest:
    """The consumer Fetch of one partition that a FetchRecords request stands for."""
    return pb.FetchRequest(
        max_wait_ms=request.max_wait_ms,
        min_bytes=1,
        max_bytes=request.max_bytes,
        replica_id=-1,
        isolation_level=request.isolation_level,
        topics=[
            pb.FetchTopic(
                name=request.topic,
                partitions=[
                    pb.FetchPartition(
                        partition=request.partition,
                        fetch_offset=request.offset,
                        partition_max_bytes=request.max_bytes,
                        current_leader_epoch=-1,
                    )
                ],
            )
        ],
    )


class RecordRpcs(DataPlaneRpcs):
    """ProduceRecords and FetchRecords, over this broker's Produce and Fetch."""

    async def ProduceRecords(
        self, request: pb.ProduceRecordsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ProduceRecordsResponse:
        """Append the records as one batch to a partition this broker leads."""
        try:
            batch = build_batch(request, self._now_ms())
        except LograftError as exc:
            return pb.ProduceRecordsResponse(
                base_offset=-1, log_append_time_ms=-1, **_error_fields(exc.code, exc.message)
            )
        produced = await self.Produce(
            pb.ProduceRequest(
                acks=request.acks,
                timeout_ms=request.timeout_ms,
                topics=[
                    pb.TopicProduceData(
                        name=request.topic,
                        partitions=[
                            pb.PartitionProduceData(partition=request.partition, records=batch)
                        ],
                    )
                ],
            ),
            context,
        )
        answer = produced.topics[0].partitions[0]
        return pb.ProduceRecordsResponse(
            base_offset=answer.base_offset,
            log_append_time_ms=answer.log_append_time_ms,
            log_start_offset=answer.log_start_offset,
            **_error_fields(answer.error_code, answer.error_message),
        )

    async def FetchRecords(
        self, request: pb.FetchRecordsRequest, context: grpc.aio.ServicerContext
    ) -> pb.FetchRecordsResponse:
        """Read one partition's records from ``offset``, as Fetch would for a consumer."""
        if (
            request.max_records < 0
            or request.max_bytes < 0
            or request.isolation_level not in (0, 1)
        ):
            error = InvalidRequestError(
                "max_records and max_bytes must not be negative, isolation_level is 0 or 1"
            )
            return pb.FetchRecordsResponse(
                next_offset=request.offset, **_error_fields(error.code, error.message)
            )
        if request.HasField("current_leader_epoch"):
            try:
                partition = self._leader_partition(request.topic, request.partition)
                check_current_leader_epoch(
                    request.current_leader_epoch, partition.leader_epoch, "a FetchRecords"
                )
            except LograftError as exc:
                return pb.FetchRecordsResponse(
                    next_offset=request.offset, **_error_fields(exc.code, exc.message)
                )
        fetched = await self.Fetch(_as_fetch(request), context)
        answer = fetched.topics[0].partitions[0]
        response = pb.FetchRecordsResponse(
            next_offset=request.offset,
            high_watermark=answer.high_watermark,
            last_stable_offset=answer.last_stable_offset,
            log_start_offset=answer.log_start_offset,
            **_error_fields(answer.error_code, answer.error_message),
        )
        if answer.error_code or not answer.records:
            return response
        skip: BatchSkip | None = None
        if request.isolation_level == READ_COMMITTED:
            skip = AbortedBatchFilter(
                (aborted.producer_id, aborted.first_offset)
                for aborted in answer.aborted_transactions
            )
        try:
            records, response.next_offset = _decoded(
                answer.records, request.offset, request.max_records, skip
            )
        except LograftError as exc:
            # A stored batch that fails its CRC: the same error a consumer's own check gives.
            return pb.FetchRecordsResponse(
                next_offset=request.offset,
                high_watermark=answer.high_watermark,
                last_stable_offset=answer.last_stable_offset,
                log_start_offset=answer.log_start_offset,
                **_error_fields(exc.code, exc.message),
            )
        response.records.extend(records)
        return response
