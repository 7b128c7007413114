"""Reading and writing a coordinator's internal-topic partition (``__consumer_offsets``,
``__transaction_state``): the replay at load, the ``acks=all`` append before an answer, and
the leader epoch at which this broker leads the partition now.

Both coordinators keep their state as keyed records in a compacted partition they lead; the
shells here share how those records are read back, how new ones are made durable, and what
each request's leadership check (:mod:`replica.coordinator_leadership`) is given.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeVar

from lograft.protocol.batch_builder import RecordBatchBuilder
from lograft.protocol.batch_header import (
    BatchHeader,
    check_stored_batch,
    iter_headers,
    validate_batches,
)
from lograft.protocol.errors import CoordinatorLoadInProgressError, NotCoordinatorError
from lograft.protocol.record_codec import decode_records
from lograft.protocol.records import Record, encode_batch
from lograft.protocol.topic_partition import TopicPartition
from replica.partition import Partition

__all__ = [
    "APPEND_TIMEOUT_S",
    "ImageLeaderEpoch",
    "append_acks_all",
    "append_transactional_acks_all",
    "iter_log_batches",
    "iter_log_records",
    "leader_epoch_here",
    "may_answer",
]

ImageLeaderEpoch = Callable[[TopicPartition], int | None]
"""The leader epoch at which the broker's applied metadata image has it lead a partition
(``None``: another broker or nobody leads it there)."""

APPEND_TIMEOUT_S = 30.0
"""How long a coordinator waits for its records to reach every in-sync replica."""
_READ_CHUNK = 4 * 1024 * 1024


def iter_log_batches(partition: Partition) -> Iterator[tuple[BatchHeader, bytes]]:
    """Every batch of the partition's log, oldest first: its header and the bytes its
    ``position`` indexes (CRC-checked).

    Reads up to the log end, not the high watermark: a coordinator loads as its
    partition's new leader, whose log the controller chose because it holds every acked
    record. Must not run while the log is appended to (the load holds the slot's lock).
    """
    offset = partition.log.log_start_offset
    end = partition.log.log_end_offset
    while offset < end:
        data = partition.log.read(offset, _READ_CHUNK)
        headers = list(iter_headers(data))
        # By batch ends, not record offsets: a compacted log has holes and even batches
        # without records, which must not end the replay early.
        next_offset = max((h.next_offset for h in headers), default=offset)
        if next_offset <= offset:
            return
        for header in headers:
            if header.next_offset <= offset:
                continue
            check_stored_batch(data, header)
            yield header, data
        offset = next_offset


def iter_log_records(partition: Partition) -> Iterator[Record]:
    """Every data record of the partition's log, oldest first (control batches skipped)."""
    for header, data in iter_log_batches(partition):
        if not header.is_control and header.records_count:
            yield from decode_records(data, header)


async def append_acks_all(
    partition: Partition, pairs: Sequence[tuple[bytes, bytes | None]], now_ms: int
) -> None:
    """Append ``(key, value)`` records as one batch and wait until every in-sync replica
    holds them (``acks=all``); raises the partition's typed error or ``TimeoutError``."""
    if not pairs:
        return
    data = bytearray(encode_batch([v for _, v in pairs], [k for k, _ in pairs]))
    headers = validate_batches(data, max(len(data), partition.log.config.max_message_bytes))
    appended = partition.append_as_leader(data, headers, -1, now_ms)
    async with asyncio.timeout(APPEND_TIMEOUT_S):
        await partition.wait_acked(appended.required_offset, -1, appended.leader_epoch)


async def append_transactional_acks_all(
    partition: Partition,
    pairs: Sequence[tuple[bytes, bytes | None]],
    producer_id: int,
    producer_epoch: int,
    now_ms: int,
) -> None:
    """Append ``(key, value)`` records as one transactional batch of the producer (a
    ``TxnOffsetCommit``: they count once its commit marker follows) and wait for
    ``acks=all``. Written as the coordinator: the producer's epoch is checked, its
    sequence is not (Kafka's ``AppendOrigin.COORDINATOR``)."""
    builder = RecordBatchBuilder(
        producer_id=producer_id, producer_epoch=producer_epoch, is_transactional=True
    )
    for key, value in pairs:
        builder.append(key=key, value=value, timestamp_ms=now_ms)
    data = bytearray(builder.build())
    headers = validate_batches(data, max(len(data), partition.log.config.max_message_bytes))
    required_offset = partition.append_as_coordinator(data, headers, now_ms)
    leader_epoch = partition.leader_epoch  # the append's: nothing ran in between
    async with asyncio.timeout(APPEND_TIMEOUT_S):
        await partition.wait_acked(required_offset, -1, leader_epoch)


def leader_epoch_here(
    partition: Partition | None, image_leader_epoch: ImageLeaderEpoch | None
) -> int | None:
    """The leader epoch at which this broker leads ``partition`` now; ``None`` if it does
    not (or does not host it).

    Its replica must lead, and so must the broker's applied metadata image when
    ``image_leader_epoch`` is given: the image is applied as soon as the record is
    committed, and the replica changes role only when the broker gets round to acting on
    it (the broker's ``FindCoordinator`` answers from the image meanwhile). An image
    newer than the replica's role counts with its newer epoch.
    """
    if partition is None or not partition.is_leader:
        return None
    if image_leader_epoch is None:
        return partition.leader_epoch
    in_image = image_leader_epoch(partition.topic_partition)
    if in_image is None:
        return None
    return max(in_image, partition.leader_epoch)


_Slot = TypeVar("_Slot")


def may_answer(
    slots: Iterable[tuple[int, _Slot]], check: Callable[[int, _Slot], None], topic: str
) -> list[_Slot]:
    """The slots (by partition) whose coordinators may answer now, for a listing; raises
    ``COORDINATOR_LOAD_IN_PROGRESS`` while one is loading, as Kafka answers (a listing
    without that partition would look complete but is not). ``check`` is the shell's
    leadership check; partitions this broker no longer leads are left out."""
    answering: list[_Slot] = []
    loading: list[int] = []
    for index, slot in slots:
        try:
            check(index, slot)
        except CoordinatorLoadInProgressError:
            loading.append(index)
        except NotCoordinatorError:
            continue
        else:
            answering.append(slot)
    if loading:
        raise CoordinatorLoadInProgressError(
            f"{topic} partitions {','.join(map(str, loading))} are loading"
        )
    return answering
