"""Typed errors, one class per Kafka error code, shared by the broker and the clients.

Every error carries Kafka's name (``error_name``), its numeric ``code`` as Kafka's protocol
defines it, and whether a client may retry the operation (``retriable``). Brokers answer with
the code; clients turn a code back into the matching exception with :func:`error_for_code`.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "BrokerNotAvailableError",
    "CorruptMessageError",
    "IllegalStateError",
    "InvalidConfigError",
    "InvalidPartitionsError",
    "InvalidReplicationFactorError",
    "InvalidRequestError",
    "InvalidRequiredAcksError",
    "InvalidTimestampError",
    "InvalidTopicError",
    "KafkaStorageError",
    "LeaderNotAvailableError",
    "LograftError",
    "MessageTooLargeError",
    "NetworkError",
    "NotLeaderOrFollowerError",
    "OffsetOutOfRangeError",
    "RecordListTooLargeError",
    "RequestTimedOutError",
    "TopicAlreadyExistsError",
    "UnknownServerError",
    "UnknownTopicOrPartitionError",
    "UnsupportedCompressionTypeError",
    "error_for_code",
]


class LograftError(Exception):
    """Base of every lograft error."""

    code: ClassVar[int] = -1
    error_name: ClassVar[str] = "UNKNOWN_SERVER_ERROR"
    retriable: ClassVar[bool] = False

    def __init__(self, message: str = "") -> None:
        super().__init__(f"{self.error_name}: {message}" if message else self.error_name)
        self.message = message


class UnknownServerError(LograftError):
    """The server failed in a way it did not expect."""

    code = -1
    error_name = "UNKNOWN_SERVER_ERROR"


class OffsetOutOfRangeError(LograftError):
    """The requested offset is below the log start offset or above the log end offset."""

    code = 1
    error_name = "OFFSET_OUT_OF_RANGE"


class CorruptMessageError(LograftError):
    """A record batch failed validation (magic, CRC, length, offset deltas, record count)."""

    code = 2
    error_name = "CORRUPT_MESSAGE"
    retriable = True


class UnknownTopicOrPartitionError(LograftError):
    """This server does not host this topic-partition."""

    code = 3
    error_name = "UNKNOWN_TOPIC_OR_PARTITION"
    retriable = True


class LeaderNotAvailableError(LograftError):
    """The partition has no leader right now (an election is in progress)."""

    code = 5
    error_name = "LEADER_NOT_AVAILABLE"
    retriable = True


class NotLeaderOrFollowerError(LograftError):
    """This broker is not the leader (or a follower) of the partition."""

    code = 6
    error_name = "NOT_LEADER_OR_FOLLOWER"
    retriable = True


class RequestTimedOutError(LograftError):
    """The request did not complete within its timeout."""

    code = 7
    error_name = "REQUEST_TIMED_OUT"
    retriable = True


class BrokerNotAvailableError(LograftError):
    """The broker cannot be reached."""

    code = 8
    error_name = "BROKER_NOT_AVAILABLE"
    retriable = True


class MessageTooLargeError(LograftError):
    """A record batch is larger than the topic's ``max.message.bytes``."""

    code = 10
    error_name = "MESSAGE_TOO_LARGE"


class NetworkError(LograftError):
    """The connection failed before a response arrived."""

    code = 13
    error_name = "NETWORK_EXCEPTION"
    retriable = True


class InvalidTopicError(LograftError):
    """The topic name is not valid."""

    code = 17
    error_name = "INVALID_TOPIC_EXCEPTION"


class RecordListTooLargeError(LograftError):
    """The request is larger than the broker accepts (``socket.request.max.bytes``)."""

    code = 18
    error_name = "RECORD_LIST_TOO_LARGE"


class InvalidRequiredAcksError(LograftError):
    """``acks`` must be 0, 1 or -1 (all)."""

    code = 21
    error_name = "INVALID_REQUIRED_ACKS"


class InvalidTimestampError(LograftError):
    """A timestamp is out of the accepted range."""

    code = 32
    error_name = "INVALID_TIMESTAMP"


class TopicAlreadyExistsError(LograftError):
    """A topic with this name exists."""

    code = 36
    error_name = "TOPIC_ALREADY_EXISTS"


class InvalidPartitionsError(LograftError):
    """The number of partitions is not valid."""

    code = 37
    error_name = "INVALID_PARTITIONS"


class InvalidReplicationFactorError(LograftError):
    """The replication factor is not valid, or there are too few brokers for it."""

    code = 38
    error_name = "INVALID_REPLICATION_FACTOR"


class InvalidConfigError(LograftError):
    """A configuration name is unknown or its value has the wrong type or range."""

    code = 40
    error_name = "INVALID_CONFIG"


class InvalidRequestError(LograftError):
    """The request is malformed."""

    code = 42
    error_name = "INVALID_REQUEST"


class KafkaStorageError(LograftError):
    """The log directory failed (I/O error)."""

    code = 56
    error_name = "KAFKA_STORAGE_ERROR"
    retriable = True


class UnsupportedCompressionTypeError(LograftError):
    """The compression codec is not one of none, gzip, snappy, lz4, zstd."""

    code = 76
    error_name = "UNSUPPORTED_COMPRESSION_TYPE"


class IllegalStateError(LograftError):
    """A client was used in a way its state does not allow (e.g. after ``close``)."""

    code = -2
    error_name = "ILLEGAL_STATE"


_BY_CODE: dict[int, type[LograftError]] = {
    cls.code: cls
    for cls in (
        UnknownServerError,
        OffsetOutOfRangeError,
        CorruptMessageError,
        UnknownTopicOrPartitionError,
        LeaderNotAvailableError,
        NotLeaderOrFollowerError,
        RequestTimedOutError,
        BrokerNotAvailableError,
        MessageTooLargeError,
        NetworkError,
        InvalidTopicError,
        RecordListTooLargeError,
        InvalidRequiredAcksError,
        InvalidTimestampError,
        TopicAlreadyExistsError,
        InvalidPartitionsError,
        InvalidReplicationFactorError,
        InvalidConfigError,
        InvalidRequestError,
        KafkaStorageError,
        UnsupportedCompressionTypeError,
    )
}


def error_for_code(code: int, message: str = "") -> LograftError:
    """Return the exception for a Kafka error code (``UnknownServerError`` for unknown codes)."""
    cls = _BY_CODE.get(code, UnknownServerError)
    return cls(message)
