"""lograft's Python client: ``Producer``, ``Consumer`` and ``AdminClient`` (synchronous);
``AsyncProducer`` and ``AsyncConsumer`` for asyncio (:mod:`cluster.client.aio`).

Configuration uses Kafka's names (``bootstrap.servers``, ``acks``, ``linger.ms``,
``auto.offset.reset``, ...), given as a mapping or as keyword arguments with underscores::

    from cluster.client import Producer, Consumer, TopicPartition

    with Producer({"bootstrap.servers": "127.0.0.1:9092"}) as producer:
        producer.send("events", b"hello", key=b"user-1").result()

    with Consumer(bootstrap_servers="127.0.0.1:9092", auto_offset_reset="earliest") as c:
        c.assign([TopicPartition("events", 0)])
        records = c.poll(timeout_ms=1000)

    with Consumer(bootstrap_servers="127.0.0.1:9092", group_id="billing") as c:
        c.subscribe(["events"], on_assign=lambda consumer, partitions: print(partitions))
        for record in c:  # auto-commits what it has returned
            ...

Failures are the typed errors of :mod:`lograft.protocol.errors`, each with its Kafka name and a
``retriable`` flag. ``bootstrap.servers`` may list several brokers; any that answers will
do. When none of them (nor any broker known from metadata) can be reached, a call fails
within ``socket.connection.setup.timeout.ms`` with :class:`NoBrokersAvailableError` (a
``NetworkError``, not retriable), whose message names every address and why.
"""

from ._config_admin import (
    AlterConfigOp,
    AlterConfigOpType,
    ClusterDescription,
    Config,
    ConfigEntry,
    ConfigResource,
    ConfigResourceType,
    ConfigSource,
    ConfigSynonym,
    NewPartitions,
    Node,
)
from ._connection import DEFAULT_BOOTSTRAP_SERVERS, PartitionInfo, TopicPartition
from ._group_admin import MemberDescription
from ._rpc_errors import NoBrokersAvailableError
from .admin import (
    AdminClient,
    AdminConfig,
    ConsumerGroupDescription,
    ConsumerGroupListing,
    GroupPartitionLag,
    ListOffsetsResult,
    NewTopic,
    OffsetAndMetadata,
    OffsetSpec,
    TopicDescription,
    TransactionDescription,
    TransactionListing,
)
from .aio import AsyncConsumer, AsyncConsumerRebalanceListener, AsyncProducer
from .consumer import (
    Consumer,
    ConsumerBatch,
    ConsumerConfig,
    ConsumerGroupMetadata,
    ConsumerRebalanceListener,
    ConsumerRecord,
)
from .partitioner import StickyPartitioner, murmur2, partition_for_key
from .producer import (
    BulkBatch,
    BulkResult,
    PreparedTxnState,
    Producer,
    ProducerConfig,
    RecordFuture,
    RecordMetadata,
)

__all__ = [
    "DEFAULT_BOOTSTRAP_SERVERS",
    "AdminClient",
    "AdminConfig",
    "AlterConfigOp",
    "AlterConfigOpType",
    "AsyncConsumer",
    "AsyncConsumerRebalanceListener",
    "AsyncProducer",
    "BulkBatch",
    "BulkResult",
    "ClusterDescription",
    "Config",
    "ConfigEntry",
    "ConfigResource",
    "ConfigResourceType",
    "ConfigSource",
    "ConfigSynonym",
    "Consumer",
    "ConsumerBatch",
    "ConsumerConfig",
    "ConsumerGroupDescription",
    "ConsumerGroupListing",
    "ConsumerGroupMetadata",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "GroupPartitionLag",
    "ListOffsetsResult",
    "MemberDescription",
    "NewPartitions",
    "NewTopic",
    "NoBrokersAvailableError",
    "Node",
    "OffsetAndMetadata",
    "OffsetSpec",
    "PartitionInfo",
    "PreparedTxnState",
    "Producer",
    "ProducerConfig",
    "RecordFuture",
    "RecordMetadata",
    "StickyPartitioner",
    "TopicDescription",
    "TopicPartition",
    "TransactionDescription",
    "TransactionListing",
    "murmur2",
    "partition_for_key",
]
