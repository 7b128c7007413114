"""Typed errors, one class per Kafka error code, shared by the broker and the clients.

Every error carries Kafka's name (``error_name``), its numeric ``code`` as Kafka's protocol
defines it, and whether a client may retry the operation (``retriable``). Brokers answer with
the code; clients turn a code back into the matching exception with :func:`error_for_code`.
"""

# Over 600 lines: one class per Kafka error code, and the code table that maps them back.
from __future__ import annotations

from typing import ClassVar

__all__ = [
    "BatchNotCommittedError",
    "BrokerIdNotRegisteredError",
    "BrokerNotAvailableError",
    "ClusterAuthorizationFailedError",
    "ConcurrentTransactionsError",
    "CoordinatorLoadInProgressError",
    "CoordinatorNotAvailableError",
    "CorruptMessageError",
    "DuplicateBrokerRegistrationError",
    "DuplicateSequenceNumberError",
    "ElectionNotNeededError",
    "EligibleLeadersNotAvailableError",
    "FencedLeaderEpochError",
    "FencedMemberEpochError",
    "GroupAuthorizationFailedError",
    "GroupIdNotFoundError",
    "GroupMaxSizeReachedError",
    "GroupNotEmptyError",
    "GroupSubscribedToTopicError",
    "IllegalGenerationError",
    "IllegalStateError",
    "InconsistentClusterIdError",
    "IneligibleReplicaError",
    "InvalidConfigError",
    "InvalidGroupIdError",
    "InvalidPartitionsError",
    "InvalidProducerEpochError",
    "InvalidProducerIdMappingError",
    "InvalidRecordError",
    "InvalidReplicaAssignmentError",
    "InvalidReplicationFactorError",
    "InvalidRequestError",
    "InvalidRequiredAcksError",
    "InvalidSessionTimeoutError",
    "InvalidTimestampError",
    "InvalidTopicError",
    "InvalidTransactionTimeoutError",
    "InvalidTxnStateError",
    "InvalidUpdateVersionError",
    "InvariantError",
    "KafkaStorageError",
    "LeaderNotAvailableError",
    "LograftError",
    "MessageTooLargeError",
    "NetworkError",
    "NotControllerError",
    "NotCoordinatorError",
    "NotEnoughReplicasAfterAppendError",
    "NotEnoughReplicasError",
    "NotLeaderOrFollowerError",
    "OffsetMetadataTooLargeError",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceNumberError",
    "PolicyViolationError",
    "PreferredLeaderNotAvailableError",
    "ProducerFencedError",
    "RebalanceInProgressError",
    "RecordListTooLargeError",
    "RequestTimedOutError",
    "StaleBrokerEpochError",
    "StaleMemberEpochError",
    "TopicAlreadyExistsError",
    "TransactionAbortableError",
    "TransactionAbortedError",
    "TransactionCoordinatorFencedError",
    "TransactionalIdAuthorizationFailedError",
    "TransactionalIdNotFoundError",
    "UnassignedPartitionError",
    "UnknownLeaderEpochError",
    "UnknownMemberIdError",
    "UnknownProducerIdError",
    "UnknownServerError",
    "UnknownTopicIdError",
    "UnknownTopicOrPartitionError",
    "UnstableOffsetCommitError",
    "UnsupportedAssignorError",
    "UnsupportedCompressionTypeError",
    "UnsupportedVersionError",
    "error_for_code",
    "error_type_named",
]


class InvariantError(Exception):
    """A safety invariant is broken: the node must halt with the state that broke it.

    Deliberately *outside* the :class:`LograftError` tree: it has no error code, so no
    ``except LograftError`` in a request handler can turn a corrupted state into a reply.
    The node process halts on it (Kafka's ``Exit.halt``, etcd's panic; see
    :mod:`cluster.halt`). Each pure core raises its own subclass
    (``ReplicationInvariantError``, ``RaftInvariantError``, ``GroupInvariantError``,
    ``TxnInvariantError``, ``ProducerStateInvariantError``, ``SequencerInvariantError``,
    ``MetadataInvariantError``) so the log line says which rule broke.
    """


class LograftError(Exception):
    """Base of every lograft error that may travel over the wire (it has a Kafka code)."""

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


class InvalidReplicaAssignmentError(LograftError):
    """A manual replica assignment is not valid (wrong size, repeated or unknown broker)."""

    code = 39
    error_name = "INVALID_REPLICA_ASSIGNMENT"


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


class NotEnoughReplicasError(LograftError):
    """Fewer in-sync replicas than ``min.insync.replicas``; nothing was appended."""

    code = 19
    error_name = "NOT_ENOUGH_REPLICAS"
    retriable = True


class NotEnoughReplicasAfterAppendError(LograftError):
    """Appended, but the ISR shrank below ``min.insync.replicas`` before it was replicated."""

    code = 20
    error_name = "NOT_ENOUGH_REPLICAS_AFTER_APPEND"
    retriable = True


class NotControllerError(LograftError):
    """This node is not the active controller."""

    code = 41
    error_name = "NOT_CONTROLLER"
    retriable = True


class PolicyViolationError(LograftError):
    """The request breaks a configured policy."""

    code = 44
    error_name = "POLICY_VIOLATION"


class OutOfOrderSequenceNumberError(LograftError):
    """A producer's batch sequence skipped ahead: an earlier batch is missing."""

    code = 45
    error_name = "OUT_OF_ORDER_SEQUENCE_NUMBER"


class DuplicateSequenceNumberError(LograftError):
    """A producer's batch sequence was already written."""

    code = 46
    error_name = "DUPLICATE_SEQUENCE_NUMBER"


class InvalidProducerEpochError(LograftError):
    """The producer epoch is older than the one the broker knows."""

    code = 47
    error_name = "INVALID_PRODUCER_EPOCH"


class UnknownProducerIdError(LograftError):
    """The broker has no state for this producer id."""

    code = 59
    error_name = "UNKNOWN_PRODUCER_ID"


class FencedLeaderEpochError(LograftError):
    """The leader epoch in the request is older than the broker's."""

    code = 74
    error_name = "FENCED_LEADER_EPOCH"
    retriable = True


class UnknownLeaderEpochError(LograftError):
    """The leader epoch in the request is newer than the broker's."""

    code = 75
    error_name = "UNKNOWN_LEADER_EPOCH"
    retriable = True


class StaleBrokerEpochError(LograftError):
    """The broker epoch does not match the current registration."""

    code = 77
    error_name = "STALE_BROKER_EPOCH"


class PreferredLeaderNotAvailableError(LograftError):
    """The preferred replica is not live and in sync."""

    code = 80
    error_name = "PREFERRED_LEADER_NOT_AVAILABLE"
    retriable = True


class EligibleLeadersNotAvailableError(LograftError):
    """No live in-sync replica can become leader."""

    code = 83
    error_name = "ELIGIBLE_LEADERS_NOT_AVAILABLE"
    retriable = True


class ElectionNotNeededError(LograftError):
    """The preferred replica already leads."""

    code = 84
    error_name = "ELECTION_NOT_NEEDED"


class InvalidRecordError(LograftError):
    """A record failed the broker's validation."""

    code = 87
    error_name = "INVALID_RECORD"


class ProducerFencedError(LograftError):
    """A newer producer with the same id has taken over."""

    code = 90
    error_name = "PRODUCER_FENCED"


class InvalidTxnStateError(LograftError):
    """The transaction is not in a state that allows this request (e.g. ending a transaction
    that never began, or committing one that is being aborted)."""

    code = 48
    error_name = "INVALID_TXN_STATE"


class InvalidProducerIdMappingError(LograftError):
    """The producer id is not the one the transactional id maps to."""

    code = 49
    error_name = "INVALID_PRODUCER_ID_MAPPING"


class InvalidTransactionTimeoutError(LograftError):
    """``transaction.timeout.ms`` is not above 0 or exceeds ``transaction.max.timeout.ms``."""

    code = 50
    error_name = "INVALID_TRANSACTION_TIMEOUT"


class ConcurrentTransactionsError(LograftError):
    """The previous transaction of this transactional id is still being completed: retry."""

    code = 51
    error_name = "CONCURRENT_TRANSACTIONS"
    retriable = True


class TransactionCoordinatorFencedError(LograftError):
    """A marker came from a transaction coordinator older than the last one seen."""

    code = 52
    error_name = "TRANSACTION_COORDINATOR_FENCED"


class TransactionalIdNotFoundError(LograftError):
    """No transaction coordinator holds state for this transactional id."""

    code = 105
    error_name = "TRANSACTIONAL_ID_NOT_FOUND"


class InvalidUpdateVersionError(LograftError):
    """The partition epoch in an AlterPartition is stale."""

    code = 95
    error_name = "INVALID_UPDATE_VERSION"


class UnknownTopicIdError(LograftError):
    """No topic has this id."""

    code = 100
    error_name = "UNKNOWN_TOPIC_ID"
    retriable = True


class DuplicateBrokerRegistrationError(LograftError):
    """Another live incarnation of this broker id is registered."""

    code = 101
    error_name = "DUPLICATE_BROKER_REGISTRATION"


class BrokerIdNotRegisteredError(LograftError):
    """The broker id has no registration."""

    code = 102
    error_name = "BROKER_ID_NOT_REGISTERED"


class InconsistentClusterIdError(LograftError):
    """The request comes from a node of another cluster."""

    code = 104
    error_name = "INCONSISTENT_CLUSTER_ID"


class IneligibleReplicaError(LograftError):
    """A proposed ISR member is fenced, unknown or shutting down."""

    code = 107
    error_name = "INELIGIBLE_REPLICA"


class OffsetMetadataTooLargeError(LograftError):
    """The metadata string of an offset commit is longer than ``offset.metadata.max.bytes``."""

    code = 12
    error_name = "OFFSET_METADATA_TOO_LARGE"


class CoordinatorLoadInProgressError(LograftError):
    """The group coordinator is still loading its ``__consumer_offsets`` partition."""

    code = 14
    error_name = "COORDINATOR_LOAD_IN_PROGRESS"
    retriable = True


class CoordinatorNotAvailableError(LograftError):
    """No group coordinator is available (``__consumer_offsets`` has no leader yet)."""

    code = 15
    error_name = "COORDINATOR_NOT_AVAILABLE"
    retriable = True


class NotCoordinatorError(LograftError):
    """This broker is not the coordinator of the group: find the coordinator again."""

    code = 16
    error_name = "NOT_COORDINATOR"
    retriable = True


class IllegalGenerationError(LograftError):
    """The generation is not the group's (the classic protocol's name for a stale member).

    The KIP-848 coordinator answers ``FENCED_MEMBER_EPOCH`` or ``STALE_MEMBER_EPOCH``
    instead; the class exists so that the code maps back to a named error.
    """

    code = 22
    error_name = "ILLEGAL_GENERATION"


class InvalidGroupIdError(LograftError):
    """The group id is empty, too long or not printable."""

    code = 24
    error_name = "INVALID_GROUP_ID"


class UnknownMemberIdError(LograftError):
    """The group has no member with this id: the member must join again (member epoch 0)."""

    code = 25
    error_name = "UNKNOWN_MEMBER_ID"


class InvalidSessionTimeoutError(LograftError):
    """The requested ``session.timeout.ms`` is outside the broker's allowed range."""

    code = 26
    error_name = "INVALID_SESSION_TIMEOUT"


class GroupNotEmptyError(LograftError):
    """The group still has members, so it cannot be deleted or have its offsets reset."""

    code = 68
    error_name = "GROUP_NOT_EMPTY"


class GroupIdNotFoundError(LograftError):
    """The coordinator has no group with this id."""

    code = 69
    error_name = "GROUP_ID_NOT_FOUND"


class GroupSubscribedToTopicError(LograftError):
    """The group's members are subscribed to the topic: its offsets cannot be deleted."""

    code = 86
    error_name = "GROUP_SUBSCRIBED_TO_TOPIC"


class GroupMaxSizeReachedError(LograftError):
    """The group already has ``group.consumer.max.size`` members."""

    code = 81
    error_name = "GROUP_MAX_SIZE_REACHED"


class FencedMemberEpochError(LograftError):
    """The member epoch is not one the coordinator accepts: give up every partition and rejoin."""

    code = 110
    error_name = "FENCED_MEMBER_EPOCH"


class UnsupportedAssignorError(LograftError):
    """The server-side assignor named by the member is not one the coordinator offers."""

    code = 112
    error_name = "UNSUPPORTED_ASSIGNOR"


class StaleMemberEpochError(LograftError):
    """The member epoch of an offset commit is older than the member's current epoch.

    The member heartbeats to learn its current epoch and retries.
    """

    code = 113
    error_name = "STALE_MEMBER_EPOCH"


class UnassignedPartitionError(LograftError):
    """An offset commit names a partition that is not assigned to the committing member.

    The name and code are those KIP-1287 proposes for ``TxnOffsetCommit`` (Kafka's
    ``OffsetCommit`` does not check assignment); lograft answers it per partition for every
    member commit, so that only the partition's owner at the commit's epoch moves its offset.
    """

    code = 134
    error_name = "UNASSIGNED_PARTITION"


class IllegalStateError(LograftError):
    """A client was used in a way its state does not allow (e.g. after ``close``)."""

    code = -2
    error_name = "ILLEGAL_STATE"


class TransactionAbortedError(LograftError):
    """The record's transaction was aborted before the record was sent (client-side)."""

    code = -3
    error_name = "TRANSACTION_ABORTED"


class BatchNotCommittedError(LograftError):
    """The Spark sink could not commit a micro-batch's transaction for a Spark partition
    (a newer attempt fenced it, or it was aborted): the query fails, and on restart
    Spark writes the batch again (client-side)."""

    code = -4
    error_name = "BATCH_NOT_COMMITTED"


class TransactionAbortableError(LograftError):
    """The transaction failed; abort it, and the producer can go on with the next one."""

    code = 120
    error_name = "TRANSACTION_ABORTABLE"


class UnsupportedVersionError(LograftError):
    """The broker does not support the request, its version, or a feature it asks for."""

    code = 35
    error_name = "UNSUPPORTED_VERSION"


class ClusterAuthorizationFailedError(LograftError):
    """The client may not perform a cluster action (e.g. idempotent writes, Kafka's
    ``IDEMPOTENT_WRITE`` on the cluster)."""

    code = 31
    error_name = "CLUSTER_AUTHORIZATION_FAILED"


class TransactionalIdAuthorizationFailedError(LograftError):
    """The client may not use this ``transactional.id``."""

    code = 53
    error_name = "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"


class RebalanceInProgressError(LograftError):
    """The group is rebalancing (classic protocol); rejoin."""

    code = 27
    error_name = "REBALANCE_IN_PROGRESS"


class GroupAuthorizationFailedError(LograftError):
    """The client may not use this group."""

    code = 30
    error_name = "GROUP_AUTHORIZATION_FAILED"


class UnstableOffsetCommitError(LograftError):
    """A transactional commit of these offsets is pending: ask again."""

    code = 88
    error_name = "UNSTABLE_OFFSET_COMMIT"
    retriable = True


_BY_CODE: dict[int, type[LograftError]] = {
    cls.code: cls
    for cls in (
        UnknownServerError,
        RebalanceInProgressError,
        GroupAuthorizationFailedError,
        UnstableOffsetCommitError,
        UnsupportedVersionError,
        ClusterAuthorizationFailedError,
        TransactionalIdAuthorizationFailedError,
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
        InvalidReplicaAssignmentError,
        InvalidConfigError,
        InvalidRequestError,
        KafkaStorageError,
        UnsupportedCompressionTypeError,
        NotEnoughReplicasError,
        NotEnoughReplicasAfterAppendError,
        NotControllerError,
        PolicyViolationError,
        OutOfOrderSequenceNumberError,
        DuplicateSequenceNumberError,
        InvalidProducerEpochError,
        UnknownProducerIdError,
        FencedLeaderEpochError,
        UnknownLeaderEpochError,
        StaleBrokerEpochError,
        PreferredLeaderNotAvailableError,
        EligibleLeadersNotAvailableError,
        ElectionNotNeededError,
        InvalidRecordError,
        ProducerFencedError,
        InvalidTxnStateError,
        InvalidProducerIdMappingError,
        InvalidTransactionTimeoutError,
        ConcurrentTransactionsError,
        TransactionCoordinatorFencedError,
        TransactionalIdNotFoundError,
        TransactionAbortableError,
        InvalidUpdateVersionError,
        UnknownTopicIdError,
        DuplicateBrokerRegistrationError,
        BrokerIdNotRegisteredError,
        InconsistentClusterIdError,
        IneligibleReplicaError,
        OffsetMetadataTooLargeError,
        CoordinatorLoadInProgressError,
        CoordinatorNotAvailableError,
        NotCoordinatorError,
        IllegalGenerationError,
        InvalidGroupIdError,
        UnknownMemberIdError,
        InvalidSessionTimeoutError,
        GroupNotEmptyError,
        GroupIdNotFoundError,
        GroupSubscribedToTopicError,
        GroupMaxSizeReachedError,
        FencedMemberEpochError,
        UnsupportedAssignorError,
        StaleMemberEpochError,
        UnassignedPartitionError,
    )
}


def error_for_code(code: int, message: str = "") -> LograftError:
    """Return the exception for a Kafka error code (``UnknownServerError`` for unknown codes)."""
    cls = _BY_CODE.get(code, UnknownServerError)
    return cls(message)


def error_type_named(name: str) -> type[LograftError] | None:
    """The exception class for a Kafka error name (``NOT_LEADER_OR_FOLLOWER``), if any."""
    return _BY_NAME.get(name)


_BY_NAME: dict[str, type[LograftError]] = {
    cls.error_name: cls
    for cls in (globals()[name] for name in __all__)
    if isinstance(cls, type) and issubclass(cls, LograftError) and cls is not LograftError
}
