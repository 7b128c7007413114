"""A tiny in-memory controller driver shared by the controller and metadata tests.

(It lives in a ``test_`` module because only such files belong to this change; it holds no
tests itself.) ``Cluster.commit`` plays the part of the Raft log: it encodes a decision's
records as a log entry, decodes them as a follower would and replays them at the next
offset, so every test also exercises the codec.
"""

from __future__ import annotations

import random
import uuid
from typing import TypeVar

from controller.logic import (
    BrokerHeartbeatManager,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    Decision,
    NewTopic,
    broker_heartbeat,
    create_topics,
    register_broker,
)
from lograft.metadata import (
    Listener,
    MetadataImage,
    PartitionRegistration,
    TopicImage,
    decode_batch,
    encode_batch,
)

R = TypeVar("R")


class Cluster:
    """An image, a log offset, a heartbeat manager, a clock and a seeded random."""

    def __init__(self, seed: int = 0, session_timeout_ms: int = 9000) -> None:
        self.image = MetadataImage.empty()
        self.offset = 0
        self.now_ms = 1_000_000
        self.rng = random.Random(seed)
        self.heartbeats = BrokerHeartbeatManager(session_timeout_ms)
        self.incarnations: dict[int, uuid.UUID] = {}
        self.epochs: dict[int, int] = {}

    def commit(self, decision: Decision[R]) -> R:
        """Append the decision's records as one entry, replay it, return the result."""
        if decision.records:
            self.offset += 1
            records = decode_batch(encode_batch(decision.records))
            assert tuple(records) == decision.records
            self.image = self.image.apply_batch(records, self.offset, epoch=1)
        return decision.result

    def register(self, broker_id: int, rack: str | None = None, *, unfence: bool = True) -> int:
        """Register a new incarnation of ``broker_id`` (and unfence it); its epoch."""
        incarnation = uuid.UUID(int=self.rng.getrandbits(128), version=4)
        self.incarnations[broker_id] = incarnation
        request = BrokerRegistrationRequest(
            broker_id, incarnation, (Listener("PLAINTEXT", "127.0.0.1", 9092 + broker_id),), rack
        )
        result = self.commit(register_broker(self.image, request, self.heartbeats, self.now_ms))
        self.epochs[broker_id] = result.broker_epoch
        if unfence:
            self.heartbeat(broker_id)
        return result.broker_epoch

    def heartbeat(self, broker_id: int, **kwargs: bool) -> object:
        """A heartbeat of a caught-up broker, committed."""
        request = BrokerHeartbeatRequest(
            broker_id, self.epochs[broker_id], self.image.offset, **kwargs
        )
        return self.commit(broker_heartbeat(self.image, request, self.heartbeats, self.now_ms))

    def create(
        self, name: str, partitions: int, rf: int, configs: dict[str, str] | None = None
    ) -> TopicImage:
        """Create a topic (it must succeed) and return it."""
        results = self.commit(
            create_topics(self.image, [NewTopic(name, partitions, rf, configs or {})], self.rng)
        )
        assert results[0].error is None, results[0].error
        topic = self.image.topic(name)
        assert topic is not None
        return topic

    def state(self, name: str, partition: int = 0) -> PartitionRegistration:
        """The committed state of one partition."""
        topic = self.image.topic(name)
        assert topic is not None
        return topic.partitions[partition]
