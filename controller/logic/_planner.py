"""Leader and ISR changes planned on top of an image, turned into PartitionChange records.

One decision may touch a partition several times (fencing two brokers that share it); the
planner keeps the pending leader and ISR per partition and emits one PartitionChange per
partition at the end, so epochs move once per decision, exactly as replay will compute.

Election rules (Kafka's, KIP-841): the leader is the first ISR member, in replica order,
that is active (registered, unfenced, not in controlled shutdown). A broker leaving is
removed from the ISR unless it is the last member: the ISR never becomes empty, because the
last member is the one replica known to hold every committed record. With no active ISR
member the partition goes offline (leader -1), unless the topic enables unclean leader
election, which takes the first active replica and resets the ISR to it.
"""

from __future__ import annotations

import uuid

from lograft.metadata.image import MetadataImage, TopicImage
from lograft.metadata.records import NO_LEADER, PartitionChangeRecord
from lograft.metadata.topic_configs import unclean_leader_election_enabled
from lograft.protocol.topic_partition import TopicPartition

__all__ = ["PartitionPlanner"]

_Key = tuple[uuid.UUID, int]


class PartitionPlanner:
    """Pending leader/ISR changes over an image. Transient, single-threaded."""

    def __init__(self, image: MetadataImage) -> None:
        self._image = image
        self._pending: dict[_Key, tuple[int, tuple[int, ...]]] = {}
        self._inactive: set[int] = set()
        self._active: set[int] = set()
        # Partitions whose planned leader came from an unclean election.
        self._unclean: dict[_Key, TopicPartition] = {}

    def is_active(self, broker_id: int) -> bool:
        """Whether the broker may lead or be in an ISR, counting changes planned so far."""
        if broker_id in self._inactive:
            return False
        if broker_id in self._active:
            return True
        broker = self._image.broker(broker_id)
        return broker is not None and broker.active

    def current(self, topic: TopicImage, partition_id: int) -> tuple[int, tuple[int, ...]]:
        """``(leader, isr)`` of a partition with the changes planned so far."""
        pending = self._pending.get((topic.topic_id, partition_id))
        if pending is not None:
            return pending
        state = topic.partitions[partition_id]
        return state.leader, state.isr

    def set(
        self,
        topic: TopicImage,
        partition_id: int,
        leader: int,
        isr: tuple[int, ...],
        *,
        unclean: bool = False,
    ) -> None:
        """Plan ``leader`` and ``isr`` for a partition (``unclean``: leader not from the ISR)."""
        key = (topic.topic_id, partition_id)
        if unclean:
            self._unclean[key] = TopicPartition(topic.name, partition_id)
        elif leader != self.current(topic, partition_id)[0]:
            # A clean election replaced an unclean pick made earlier in this decision.
            self._unclean.pop(key, None)
        self._pending[key] = (leader, isr)

    def _elect(
        self,
        topic: TopicImage,
        partition_id: int,
        isr: tuple[int, ...],
        *,
        allow_unclean: bool,
    ) -> tuple[int, tuple[int, ...], bool]:
        """``(leader, isr, unclean)`` for a partition whose ISR will be ``isr``."""
        replicas = topic.partitions[partition_id].replicas
        for broker_id in replicas:
            if broker_id in isr and self.is_active(broker_id):
                return broker_id, isr, False
        if allow_unclean and unclean_leader_election_enabled(self._image, topic.name):
            for broker_id in replicas:
                if self.is_active(broker_id):
                    return broker_id, (broker_id,), True
        return NO_LEADER, isr, False

    def remove_broker(self, broker_id: int, *, allow_unclean: bool = True) -> None:
        """Plan the departure of a broker (fenced, shutting down, re-registered, removed).

        Every partition it leads gets a new leader; it leaves every ISR it is not the last
        member of. ``allow_unclean=False`` for controlled shutdown, which never loses data.
        """
        self._inactive.add(broker_id)
        self._active.discard(broker_id)
        for topic, partition_id, state in self._image.iter_partitions():
            if broker_id not in state.replicas:
                continue
            leader, isr = self.current(topic, partition_id)
            new_isr = isr
            if broker_id in isr and len(isr) > 1:
                new_isr = tuple(b for b in isr if b != broker_id)
            new_leader, unclean = leader, False
            if leader == broker_id:
                new_leader, new_isr, unclean = self._elect(
                    topic, partition_id, new_isr, allow_unclean=allow_unclean
                )
            if (new_leader, new_isr) != (leader, isr):
                self.set(topic, partition_id, new_leader, new_isr, unclean=unclean)

    def add_broker(self, broker_id: int) -> None:
        """Plan the return of a broker (unfenced): offline partitions it can lead get it."""
        self._active.add(broker_id)
        self._inactive.discard(broker_id)
        for topic, partition_id, state in self._image.iter_partitions():
            if broker_id not in state.replicas:
                continue
            leader, isr = self.current(topic, partition_id)
            if leader != NO_LEADER:
                continue
            new_leader, new_isr, unclean = self._elect(topic, partition_id, isr, allow_unclean=True)
            if new_leader != NO_LEADER:
                self.set(topic, partition_id, new_leader, new_isr, unclean=unclean)

    def records(self) -> list[PartitionChangeRecord]:
        """One PartitionChange per partition whose leader or ISR differs from the image."""
        records: list[PartitionChangeRecord] = []
        for (topic_id, partition_id), (leader, isr) in self._pending.items():
            state = self._image.partition(topic_id, partition_id)
            if state is None:  # pragma: no cover - keys come from the image
                raise AssertionError(f"planned a change of unknown partition {topic_id}")
            change = PartitionChangeRecord(
                topic_id=topic_id,
                partition_id=partition_id,
                leader=None if leader == state.leader else leader,
                isr=None if isr == state.isr else isr,
            )
            if change.leader is None and change.isr is None:
                continue
            # The record must rebuild exactly what was planned; merge() also checks the
            # invariants, so a planning bug raises here instead of being committed.
            merged = state.merge(change)
            if (merged.leader, merged.isr) != (leader, isr):  # pragma: no cover
                raise AssertionError(f"planned {(leader, isr)}, record gives {merged}")
            records.append(change)
        return records

    def unclean_elections(self) -> tuple[TopicPartition, ...]:
        """Partitions given a leader from outside their ISR, for loud logging."""
        return tuple(self._unclean.values())
