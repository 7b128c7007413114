"""Metadata records, the metadata image they build, and their bytes (pure: no I/O, no clock).

``records`` defines the typed records of the metadata log, ``image`` the image they build
when replayed (:class:`MetadataImage`, :class:`MetadataDelta`), ``codec`` their protobuf
encoding for log entries and snapshots.
"""

from lograft.metadata.codec import (
    decode_batch,
    decode_record,
    decode_snapshot,
    encode_batch,
    encode_record,
    encode_snapshot,
)
from lograft.metadata.errors import CorruptMetadataError, MetadataInvariantError
from lograft.metadata.image import (
    BrokerRegistration,
    ConfigResource,
    MetadataDelta,
    MetadataImage,
    PartitionRegistration,
    TopicImage,
)
from lograft.metadata.records import (
    NO_LEADER,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    ConfigResourceType,
    FenceBrokerRecord,
    Listener,
    MetadataRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)

__all__ = [
    "NO_LEADER",
    "BrokerRegistration",
    "BrokerRegistrationChangeRecord",
    "ConfigRecord",
    "ConfigResource",
    "ConfigResourceType",
    "CorruptMetadataError",
    "FenceBrokerRecord",
    "Listener",
    "MetadataDelta",
    "MetadataImage",
    "MetadataInvariantError",
    "MetadataRecord",
    "NoOpRecord",
    "PartitionChangeRecord",
    "PartitionRecord",
    "PartitionRegistration",
    "ProducerIdsRecord",
    "RegisterBrokerRecord",
    "RemoveTopicRecord",
    "TopicImage",
    "TopicRecord",
    "UnfenceBrokerRecord",
    "UnregisterBrokerRecord",
    "decode_batch",
    "decode_record",
    "decode_snapshot",
    "encode_batch",
    "encode_record",
    "encode_snapshot",
]
