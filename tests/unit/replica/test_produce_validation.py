"""What a leader checks in a producer's bytes (``validate_produced``), and the ack rule.

Each check raises its typed error before anything is appended; the partition's produce
entry (``Partition.append_produced``) appends nothing when one fails.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from lograft.protocol.batch_header import (
    ATTR_DELETE_HORIZON,
    ATTR_TRANSACTIONAL,
    batch_crc,
    parse_header,
)
from lograft.protocol.compression import CompressionType
from lograft.protocol.errors import CorruptMessageError, InvalidRecordError, MessageTooLargeError
from lograft.protocol.records import encode_batch
from lograft.protocol.topic_config import LogConfig
from lograft.protocol.topic_partition import TopicPartition
from replica.log.partition_log import PartitionLog
from replica.partition import Partition
from replica.produce_validation import validate_produced

TP = TopicPartition("t", 0)
DELETE = LogConfig()
COMPACT = LogConfig().with_overrides({"cleanup.policy": "compact"})


def _recrc(batch: bytearray) -> bytearray:
    batch[17:21] = batch_crc(batch, parse_header(batch)).to_bytes(4, "big")
    return batch


def test_well_formed_batches_come_back_as_their_headers_in_order() -> None:
    first = encode_batch([b"a", b"b"], [b"k1", b"k2"], timestamp_ms=5)
    second = encode_batch([b"c"], [b"k3"], compression=CompressionType.GZIP, timestamp_ms=6)
    headers = validate_produced(first + second, COMPACT, TP)
    assert [(h.position, h.records_count) for h in headers] == [(0, 2), (len(first), 1)]
    assert headers[1].compression == CompressionType.GZIP


def test_a_compacted_topic_refuses_a_record_without_a_key() -> None:
    batch = encode_batch([b"a", b"b"], [b"k", None])
    assert len(validate_produced(batch, DELETE, TP)) == 1, "any key will do on a delete topic"
    with pytest.raises(InvalidRecordError, match=r"without a key in t-0 \(offset delta 1\)"):
        validate_produced(batch, COMPACT, TP)


@pytest.mark.parametrize("bit", [ATTR_DELETE_HORIZON, ATTR_TRANSACTIONAL])
def test_a_batch_may_not_set_attribute_bits_only_the_broker_sets(bit: int) -> None:
    batch = bytearray(encode_batch([b"a"], [b"k"]))
    batch[21:23] = (parse_header(batch).attributes | bit).to_bytes(2, "big")
    with pytest.raises(InvalidRecordError, match="attributes"):
        validate_produced(_recrc(batch), DELETE, TP)


def test_a_compressed_batch_must_hold_the_records_it_claims() -> None:
    batch = bytearray(encode_batch([b"a", b"b"], compression=CompressionType.GZIP))
    batch[23:27] = (0).to_bytes(4, "big")  # lastOffsetDelta
    batch[57:61] = (1).to_bytes(4, "big")  # recordsCount: one of the two
    with pytest.raises(CorruptMessageError, match="claims 1 records"):
        validate_produced(_recrc(batch), DELETE, TP)


def test_size_and_crc_are_checked_against_the_topic_config() -> None:
    batch = encode_batch([b"x" * 200], [b"k"])
    small = DELETE.with_overrides({"max.message.bytes": "100"})
    with pytest.raises(MessageTooLargeError):
        validate_produced(batch, small, TP)
    corrupt = bytearray(batch)
    corrupt[-1] ^= 0xFF
    with pytest.raises(CorruptMessageError):
        validate_produced(corrupt, DELETE, TP)


def _leader(directory: Path, config: LogConfig) -> Partition:
    partition = Partition(TP, PartitionLog.open(directory, config, int(time.time() * 1000)))
    partition.lead_alone(1)
    return partition


def test_the_partition_validates_before_it_appends(tmp_path: Path) -> None:
    partition = _leader(tmp_path, COMPACT.with_overrides({"flush.policy": "interval"}))
    with pytest.raises(InvalidRecordError):
        partition.append_produced(encode_batch([b"a"], [None]), 1, 0)
    assert partition.log_end_offset == 0
    appended = partition.append_produced(encode_batch([b"a", b"b"], [b"k", b"k"]), 1, 0)
    assert appended.batch_base_offsets == (0,)
    assert appended.required_offset == partition.log_end_offset == 2


@pytest.mark.parametrize(
    ("flush_policy", "acks", "waits"),
    [
        ("interval", 0, False),
        ("interval", 1, False),
        ("interval", -1, True),
        ("fsync", 0, True),
        ("fsync", 1, True),
        ("fsync", -1, True),
    ],
)
def test_the_ack_rule(tmp_path: Path, flush_policy: str, acks: int, waits: bool) -> None:
    """Under fsync every produce waits for the flush; acks=-1 also for the high watermark."""
    config = LogConfig().with_overrides({"flush.policy": flush_policy})
    partition = _leader(tmp_path, config)
    assert partition.needs_ack_wait(acks) is waits
    appended = partition.append_produced(encode_batch([b"a"]), acks, 0)

    async def acked() -> None:
        await asyncio.wait_for(
            partition.wait_acked(appended.required_offset, acks, appended.leader_epoch), 5
        )

    asyncio.run(acked())
    if flush_policy == "fsync":
        assert partition.log.flushed_offset >= appended.required_offset
    assert partition.high_watermark == 1
