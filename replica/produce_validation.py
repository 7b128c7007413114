"""What a leader checks in a producer's bytes before it appends them, pure.

Batches are validated by header and CRC (:func:`~lograft.protocol.batch_header.validate_batches`),
may not claim attribute bits only the broker sets, and a compressed batch must decompress
to its record count. Records are decoded on one path only: a compacted topic refuses a
record without a key, as Kafka does. The first failure raises its typed error and nothing
is appended; the caller (:meth:`replica.partition.Partition.append_produced`) appends the
batches whose headers come back.
"""

from __future__ import annotations

from lograft.protocol.batch_header import BatchHeader, check_produced_attributes, validate_batches
from lograft.protocol.errors import InvalidRecordError
from lograft.protocol.records import check_compressed_records, decode_records
from lograft.protocol.topic_config import LogConfig
from lograft.protocol.topic_partition import TopicPartition

__all__ = ["validate_produced"]


def validate_produced(
    records: bytes | bytearray | memoryview, config: LogConfig, topic_partition: TopicPartition
) -> list[BatchHeader]:
    """The headers of the batches a producer sent to ``topic_partition``, in order.

    Raises ``CorruptMessageError``, ``MessageTooLargeError`` (a batch above
    ``max.message.bytes``), ``UnsupportedCompressionTypeError`` or ``InvalidRecordError``
    (a broker-only attribute bit; a keyless record in a compacted topic).
    """
    headers = validate_batches(records, config.max_message_bytes)
    for header in headers:
        check_produced_attributes(header)
        if header.compression:
            check_compressed_records(records, header)
        if config.compact:
            # Kafka's rule; the only produce path that decodes records (compacted only).
            for record in decode_records(records, header):
                if record.key is None:
                    raise InvalidRecordError(
                        f"compacted topic cannot accept a record without a key in "
                        f"{topic_partition} (offset delta "
                        f"{record.offset - header.base_offset})"
                    )
    return headers
