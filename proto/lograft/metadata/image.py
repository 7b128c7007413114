"""The metadata image: the cluster's metadata at one offset of the metadata log.

The image is the state machine of the metadata log. It only ever changes by replaying
committed records, in log order, through a :class:`MetadataDelta`::

    delta = MetadataDelta(image)
    for record in batch:
        delta.replay(record, offset, epoch)
    image = delta.apply()

A delta copies what a record touches once (the broker table, or one topic's partition
table), so replaying ``n`` records costs O(n) plus one copy per touched topic, not O(n^2):
replaying a 10 000-partition topic is one copy of nothing and 10 000 inserts. The image
itself is never mutated: every mapping it exposes is a read-only view, and ``apply``
returns a new image that shares the untouched parts with the old one.

Replay checks every invariant (ISR non-empty and within the replicas, leader in the ISR or
-1, epochs never decrease, references to known brokers and topics) and raises
:class:`~lograft.metadata.errors.MetadataInvariantError` when one would break: a
committed record that breaks one is a controller bug, and the node must stop.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from lograft.metadata.errors import MetadataInvariantError
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
from lograft.protocol.topic_partition import TopicPartition

__all__ = [
    "BrokerRegistration",
    "ConfigResource",
    "MetadataDelta",
    "MetadataImage",
    "PartitionRegistration",
    "TopicImage",
]

_EMPTY: Mapping[object, object] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """One registered broker incarnation and its state."""

    broker_id: int
    incarnation_id: uuid.UUID
    broker_epoch: int
    listeners: tuple[Listener, ...]
    rack: str | None
    fenced: bool
    in_controlled_shutdown: bool
    registration_offset: int
    """Offset of the log entry that registered this incarnation; the broker is unfenced
    once its fetched metadata offset reaches it (it has seen its own registration)."""

    @property
    def active(self) -> bool:
        """May lead partitions, join ISRs and receive new replicas (Kafka's ``isActive``)."""
        return not self.fenced and not self.in_controlled_shutdown

    def listener(self, name: str | None) -> Listener | None:
        """The registered listener called ``name`` (``None``: the first registered one);
        ``None`` when the broker has no listener of that name."""
        if name is None:
            return self.listeners[0] if self.listeners else None
        return next((x for x in self.listeners if x.name == name), None)


@dataclass(frozen=True, slots=True)
class PartitionRegistration:
    """The state of one partition: replicas, ISR, leader and epochs."""

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int

    def merge(self, change: PartitionChangeRecord) -> PartitionRegistration:
        """The state after ``change``: partition epoch + 1, leader epoch + 1 if a leader is set.

        Raises ``MetadataInvariantError`` if the result breaks an invariant.
        """
        merged = PartitionRegistration(
            replicas=self.replicas,
            isr=self.isr if change.isr is None else change.isr,
            leader=self.leader if change.leader is None else change.leader,
            leader_epoch=self.leader_epoch + (0 if change.leader is None else 1),
            partition_epoch=self.partition_epoch + 1,
        )
        merged.check()
        return merged

    def check(self) -> None:
        """Raise ``MetadataInvariantError`` unless the partition state is consistent."""
        replicas = self.replicas
        if not replicas:
            raise MetadataInvariantError("a partition needs at least one replica")
        if len(set(replicas)) != len(replicas) or min(replicas) < 0:
            raise MetadataInvariantError(f"replicas {replicas} must be distinct broker ids >= 0")
        if not self.isr:
            raise MetadataInvariantError("the ISR must never be empty")
        if len(set(self.isr)) != len(self.isr) or not set(self.isr) <= set(replicas):
            raise MetadataInvariantError(
                f"ISR {self.isr} must be distinct members of the replicas {replicas}"
            )
        if self.leader != NO_LEADER and self.leader not in self.isr:
            raise MetadataInvariantError(f"leader {self.leader} is not in the ISR {self.isr}")
        if self.leader_epoch < 0 or self.partition_epoch < 0:
            raise MetadataInvariantError("leader and partition epochs must be >= 0")


@dataclass(frozen=True, slots=True)
class TopicImage:
    """A topic: its name, id and partitions (by partition id)."""

    name: str
    topic_id: uuid.UUID
    partitions: Mapping[int, PartitionRegistration]


@dataclass(frozen=True, slots=True)
class ConfigResource:
    """What a config belongs to: a topic by name, or a broker by id ("" = cluster default)."""

    resource_type: ConfigResourceType
    name: str


@dataclass(frozen=True, slots=True)
class MetadataImage:
    """The cluster metadata after replaying the log up to ``offset`` (entry term ``epoch``).

    Build one with :meth:`empty` and :meth:`apply` / :meth:`apply_batch` (or a
    :class:`MetadataDelta` for many records), or from a snapshot. The mappings are read-only.
    """

    offset: int
    """Offset of the last log entry replayed; -1 when nothing was."""
    epoch: int
    """Raft epoch (term) of that entry; -1 when nothing was replayed."""
    brokers: Mapping[int, BrokerRegistration]
    topics: Mapping[uuid.UUID, TopicImage]
    """Topics by topic id."""
    topics_by_name: Mapping[str, TopicImage]
    configs: Mapping[ConfigResource, Mapping[str, str]]
    next_producer_id: int
    """First producer id of the next block handed out; survives controller failover."""
    last_broker_epoch: int
    """Largest broker epoch ever assigned; the next registration gets a larger one."""

    @staticmethod
    def empty() -> MetadataImage:
        """The image before any record."""
        return MetadataImage(
            offset=-1,
            epoch=-1,
            brokers=MappingProxyType({}),
            topics=MappingProxyType({}),
            topics_by_name=MappingProxyType({}),
            configs=MappingProxyType({}),
            next_producer_id=0,
            last_broker_epoch=0,
        )

    def apply(self, record: MetadataRecord, offset: int, epoch: int | None = None) -> MetadataImage:
        """The image after replaying one record at ``offset`` (``epoch`` defaults to ours)."""
        return self.apply_batch((record,), offset, epoch)

    def apply_batch(
        self, records: Iterable[MetadataRecord], offset: int, epoch: int | None = None
    ) -> MetadataImage:
        """The image after replaying the records of one log entry, all at ``offset``."""
        delta = MetadataDelta(self)
        delta.advance(offset, epoch)
        for record in records:
            delta.replay(record, offset, epoch)
        return delta.apply()

    # ---- queries -----------------------------------------------------------------------

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        """The registration of ``broker_id``, or None."""
        return self.brokers.get(broker_id)

    def active_brokers(self) -> list[BrokerRegistration]:
        """Unfenced brokers not in controlled shutdown, by id: where replicas may go."""
        return [b for _, b in sorted(self.brokers.items()) if b.active]

    def unfenced_brokers(self) -> list[BrokerRegistration]:
        """Unfenced brokers (including those in controlled shutdown), by id."""
        return [b for _, b in sorted(self.brokers.items()) if not b.fenced]

    def fenced_brokers(self) -> list[BrokerRegistration]:
        """Fenced brokers, by id."""
        return [b for _, b in sorted(self.brokers.items()) if b.fenced]

    def topic(self, name: str) -> TopicImage | None:
        """The topic called ``name``, or None."""
        return self.topics_by_name.get(name)

    def partition(self, topic_id: uuid.UUID, partition_id: int) -> PartitionRegistration | None:
        """The state of one partition, or None."""
        topic = self.topics.get(topic_id)
        return None if topic is None else topic.partitions.get(partition_id)

    def iter_partitions(self) -> Iterator[tuple[TopicImage, int, PartitionRegistration]]:
        """Every partition as ``(topic, partition_id, state)``, topics in creation order."""
        for topic in self.topics.values():
            for partition_id, state in topic.partitions.items():
                yield topic, partition_id, state

    def partition_count(self) -> int:
        """Number of partitions of all topics."""
        return sum(len(t.partitions) for t in self.topics.values())

    def partitions_led_by(self, broker_id: int) -> list[TopicPartition]:
        """Partitions whose leader is ``broker_id``."""
        return [
            TopicPartition(t.name, p) for t, p, s in self.iter_partitions() if s.leader == broker_id
        ]

    def partitions_with_replica(self, broker_id: int) -> list[TopicPartition]:
        """Partitions that have a replica on ``broker_id``."""
        return [
            TopicPartition(t.name, p)
            for t, p, s in self.iter_partitions()
            if broker_id in s.replicas
        ]

    def leaderless_partitions(self) -> list[TopicPartition]:
        """Partitions with no leader (offline)."""
        return [
            TopicPartition(t.name, p) for t, p, s in self.iter_partitions() if s.leader == NO_LEADER
        ]

    def topic_configs(self, topic_name: str) -> Mapping[str, str]:
        """The config overrides of a topic (empty when none)."""
        found = self.configs.get(ConfigResource(ConfigResourceType.TOPIC, topic_name))
        return found if found is not None else MappingProxyType({})


class _TopicBuilder:
    """A topic being changed by a delta; copies the base partition table on first write."""

    __slots__ = ("_base", "_own", "name", "topic_id")

    def __init__(
        self, name: str, topic_id: uuid.UUID, base: Mapping[int, PartitionRegistration]
    ) -> None:
        self.name = name
        self.topic_id = topic_id
        self._base = base
        self._own: dict[int, PartitionRegistration] | None = None

    @property
    def partitions(self) -> Mapping[int, PartitionRegistration]:
        return self._own if self._own is not None else self._base

    def writable(self) -> dict[int, PartitionRegistration]:
        if self._own is None:
            self._own = dict(self._base)
        return self._own

    def build(self) -> TopicImage:
        parts = self._base if self._own is None else MappingProxyType(self._own)
        return TopicImage(self.name, self.topic_id, parts)


class MetadataDelta:
    """Records replayed on top of an image; :meth:`apply` makes the next image.

    Not thread-safe, and single use: after :meth:`apply` the delta refuses more records
    (the new image shares its tables).
    """

    def __init__(self, image: MetadataImage) -> None:
        self._image = image
        self._offset = image.offset
        self._epoch = image.epoch
        self._brokers: dict[int, BrokerRegistration] | None = None
        # Changed topics by id; None marks a topic removed in this delta.
        self._topics: dict[uuid.UUID, _TopicBuilder | None] = {}
        # Changed name -> id bindings; None marks a name freed in this delta.
        self._names: dict[str, uuid.UUID | None] = {}
        # Changed config tables; an empty table is dropped from the image.
        self._configs: dict[ConfigResource, dict[str, str]] = {}
        self._next_producer_id = image.next_producer_id
        self._last_broker_epoch = image.last_broker_epoch
        self._applied = False

    @property
    def image(self) -> MetadataImage:
        """The image this delta started from."""
        return self._image

    @property
    def offset(self) -> int:
        """The offset of the last record (or :meth:`advance`) replayed so far."""
        return self._offset

    # ---- reads of the state as of the records replayed so far ---------------------------

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        """A broker as of the records replayed so far."""
        table = self._brokers if self._brokers is not None else self._image.brokers
        return table.get(broker_id)

    def topic_id(self, name: str) -> uuid.UUID | None:
        """The id of the topic called ``name`` as of the records replayed so far."""
        if name in self._names:
            return self._names[name]
        topic = self._image.topics_by_name.get(name)
        return None if topic is None else topic.topic_id

    def _topic(self, topic_id: uuid.UUID) -> _TopicBuilder | None:
        if topic_id in self._topics:
            return self._topics[topic_id]
        base = self._image.topics.get(topic_id)
        if base is None:
            return None
        builder = _TopicBuilder(base.name, topic_id, base.partitions)
        self._topics[topic_id] = builder
        return builder

    def _known_topic(self, topic_id: uuid.UUID, what: str) -> _TopicBuilder:
        topic = self._topic(topic_id)
        if topic is None:
            raise MetadataInvariantError(f"{what}: unknown topic id {topic_id}")
        return topic

    def _writable_brokers(self) -> dict[int, BrokerRegistration]:
        if self._brokers is None:
            self._brokers = dict(self._image.brokers)
        return self._brokers

    def _known_broker(self, broker_id: int, broker_epoch: int, what: str) -> BrokerRegistration:
        broker = self.broker(broker_id)
        if broker is None:
            raise MetadataInvariantError(f"{what}: broker {broker_id} is not registered")
        if broker.broker_epoch != broker_epoch:
            raise MetadataInvariantError(
                f"{what}: broker {broker_id} has epoch {broker.broker_epoch}, "
                f"the record has {broker_epoch}"
            )
        return broker

    def _writable_config(self, resource: ConfigResource) -> dict[str, str]:
        current = self._configs.get(resource)
        if current is None:
            current = dict(self._image.configs.get(resource, _EMPTY))  # type: ignore[arg-type]
            self._configs[resource] = current
        return current

    # ---- replay --------------------------------------------------------------------------

    def advance(self, offset: int, epoch: int | None = None) -> None:
        """Move to ``offset`` (and ``epoch``) without a record, e.g. for an empty entry."""
        if self._applied:
            raise MetadataInvariantError("this delta was applied already")
        if offset < self._offset:
            raise MetadataInvariantError(f"offset {offset} is behind the image's {self._offset}")
        if epoch is not None:
            if epoch < self._epoch:
                raise MetadataInvariantError(f"epoch {epoch} is behind the image's {self._epoch}")
            self._epoch = epoch
        self._offset = offset

    def replay(self, record: MetadataRecord, offset: int, epoch: int | None = None) -> None:
        """Replay one committed record found at ``offset``; raises on a broken invariant."""
        self.advance(offset, epoch)
        match record:
            case RegisterBrokerRecord():
                self._register(record, offset)
            case UnregisterBrokerRecord(broker_id=bid, broker_epoch=be):
                self._known_broker(bid, be, "UnregisterBroker")
                del self._writable_brokers()[bid]
            case FenceBrokerRecord(broker_id=bid, broker_epoch=be):
                broker = self._known_broker(bid, be, "FenceBroker")
                self._writable_brokers()[bid] = replace(broker, fenced=True)
            case UnfenceBrokerRecord(broker_id=bid, broker_epoch=be):
                broker = self._known_broker(bid, be, "UnfenceBroker")
                self._writable_brokers()[bid] = replace(broker, fenced=False)
            case BrokerRegistrationChangeRecord(broker_id=bid, broker_epoch=be):
                broker = self._known_broker(bid, be, "BrokerRegistrationChange")
                self._writable_brokers()[bid] = replace(
                    broker,
                    fenced=broker.fenced if record.fenced is None else record.fenced,
                    in_controlled_shutdown=(
                        broker.in_controlled_shutdown
                        if record.in_controlled_shutdown is None
                        else record.in_controlled_shutdown
                    ),
                )
            case TopicRecord():
                self._create_topic(record)
            case PartitionRecord():
                self._create_partition(record)
            case PartitionChangeRecord():
                topic = self._known_topic(record.topic_id, "PartitionChange")
                current = topic.partitions.get(record.partition_id)
                if current is None:
                    raise MetadataInvariantError(
                        f"PartitionChange: {topic.name} has no partition {record.partition_id}"
                    )
                topic.writable()[record.partition_id] = current.merge(record)
            case RemoveTopicRecord():
                topic = self._known_topic(record.topic_id, "RemoveTopic")
                self._topics[record.topic_id] = None
                self._names[topic.name] = None
                # Kafka drops a deleted topic's configs with it: a new topic of the same
                # name must not inherit them.
                resource = ConfigResource(ConfigResourceType.TOPIC, topic.name)
                if resource in self._configs or resource in self._image.configs:
                    self._configs[resource] = {}
            case ConfigRecord():
                self._config(record)
            case ProducerIdsRecord():
                if record.next_producer_id <= self._next_producer_id:
                    raise MetadataInvariantError(
                        f"ProducerIds: next producer id {record.next_producer_id} does not "
                        f"advance past {self._next_producer_id}"
                    )
                self._next_producer_id = record.next_producer_id
            case NoOpRecord():
                pass
            case _:  # pragma: no cover - the union above is exhaustive
                raise MetadataInvariantError(f"not a metadata record: {record!r}")

    def _register(self, record: RegisterBrokerRecord, offset: int) -> None:
        if record.broker_id < 0:
            raise MetadataInvariantError(f"RegisterBroker: broker id {record.broker_id} < 0")
        previous = self.broker(record.broker_id)
        if previous is not None and record.broker_epoch <= previous.broker_epoch:
            raise MetadataInvariantError(
                f"RegisterBroker: broker {record.broker_id} epoch {record.broker_epoch} does "
                f"not advance past {previous.broker_epoch}"
            )
        self._writable_brokers()[record.broker_id] = BrokerRegistration(
            broker_id=record.broker_id,
            incarnation_id=record.incarnation_id,
            broker_epoch=record.broker_epoch,
            listeners=record.listeners,
            rack=record.rack,
            fenced=record.fenced,
            in_controlled_shutdown=record.in_controlled_shutdown,
            registration_offset=offset,
        )
        self._last_broker_epoch = max(self._last_broker_epoch, record.broker_epoch)

    def _create_topic(self, record: TopicRecord) -> None:
        if not record.name:
            raise MetadataInvariantError("Topic: empty topic name")
        if self.topic_id(record.name) is not None:
            raise MetadataInvariantError(f"Topic: a topic called {record.name!r} exists")
        if self._topic(record.topic_id) is not None or record.topic_id.int == 0:
            raise MetadataInvariantError(f"Topic: topic id {record.topic_id} is in use or zero")
        self._topics[record.topic_id] = _TopicBuilder(record.name, record.topic_id, _EMPTY)  # type: ignore[arg-type]
        self._names[record.name] = record.topic_id

    def _create_partition(self, record: PartitionRecord) -> None:
        topic = self._known_topic(record.topic_id, "Partition")
        if record.partition_id < 0 or record.partition_id in topic.partitions:
            raise MetadataInvariantError(
                f"Partition: {topic.name}-{record.partition_id} exists or has a negative id"
            )
        state = PartitionRegistration(
            replicas=record.replicas,
            isr=record.isr,
            leader=record.leader,
            leader_epoch=record.leader_epoch,
            partition_epoch=record.partition_epoch,
        )
        state.check()
        topic.writable()[record.partition_id] = state

    def _config(self, record: ConfigRecord) -> None:
        if (
            record.resource_type is ConfigResourceType.TOPIC
            and self.topic_id(record.resource_name) is None
        ):
            raise MetadataInvariantError(f"Config: no topic called {record.resource_name!r}")
        if not record.name:
            raise MetadataInvariantError("Config: empty config name")
        table = self._writable_config(ConfigResource(record.resource_type, record.resource_name))
        if record.value is None:
            table.pop(record.name, None)
        else:
            table[record.name] = record.value

    # ---- result --------------------------------------------------------------------------

    def apply(self) -> MetadataImage:
        """The image with every replayed record; the delta cannot be used afterwards."""
        if self._applied:
            raise MetadataInvariantError("this delta was applied already")
        self._applied = True
        base = self._image
        brokers = base.brokers if self._brokers is None else MappingProxyType(self._brokers)
        topics: Mapping[uuid.UUID, TopicImage] = base.topics
        by_name: Mapping[str, TopicImage] = base.topics_by_name
        if self._topics:
            new_topics = dict(base.topics)
            new_names = dict(base.topics_by_name)
            # Removals first: a topic deleted and re-created under the same name in one
            # delta must end up bound to the new id.
            for name, bound in self._names.items():
                if bound is None:
                    new_names.pop(name, None)
            for topic_id, builder in self._topics.items():
                if builder is None:
                    new_topics.pop(topic_id, None)
            for topic_id, builder in self._topics.items():
                if builder is not None:
                    topic = builder.build()
                    new_topics[topic_id] = topic
                    new_names[topic.name] = topic
            topics = MappingProxyType(new_topics)
            by_name = MappingProxyType(new_names)
        configs: Mapping[ConfigResource, Mapping[str, str]] = base.configs
        if self._configs:
            new_configs = dict(base.configs)
            for resource, table in self._configs.items():
                if table:
                    new_configs[resource] = MappingProxyType(table)
                else:
                    new_configs.pop(resource, None)
            configs = MappingProxyType(new_configs)
        return MetadataImage(
            offset=self._offset,
            epoch=self._epoch,
            brokers=brokers,
            topics=topics,
            topics_by_name=by_name,
            configs=configs,
            next_producer_id=self._next_producer_id,
            last_broker_epoch=self._last_broker_epoch,
        )
