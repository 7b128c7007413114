"""Property tests: any sequence of controller decisions, committed and replayed, keeps the
metadata image's invariants.

A Hypothesis state machine drives one controller through random requests (registrations,
heartbeats with any flags, clock ticks that fence, topic creation and deletion, ISR changes
with right and wrong epochs, controlled shutdowns, preferred elections, producer-id blocks,
unregistrations). Refused requests must be refused with a typed Kafka error and change
nothing; accepted ones are committed through the codec. After every step: each partition's
leader is in its ISR or -1, the ISR is a non-empty subset of the replicas, leader and
partition epochs never decrease, and a snapshot round-trips; at the end, replaying the whole
log in one delta gives the same image.
"""

from __future__ import annotations

import random
import uuid
from typing import Any

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from controller.logic import (
    AlterPartitionRequest,
    BrokerHeartbeatManager,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    Decision,
    NewTopic,
    allocate_producer_ids,
    alter_partition,
    broker_heartbeat,
    create_topics,
    delete_topics,
    elect_preferred_leaders,
    fence_expired_brokers,
    register_broker,
    unregister_broker,
)
from lograft.metadata import (
    NO_LEADER,
    Listener,
    MetadataDelta,
    MetadataImage,
    MetadataRecord,
    decode_batch,
    decode_snapshot,
    encode_batch,
    encode_snapshot,
)
from lograft.protocol.errors import LograftError

BROKERS = st.integers(0, 4)
TOPICS = st.sampled_from(["a", "b", "c"])
# Mostly well-formed requests, so the machine gets deep; sometimes stale ones.
MOSTLY_FALSE = st.sampled_from([False, False, False, True])
MOSTLY_TRUE = st.sampled_from([True, True, True, False])


class ControllerMachine(RuleBasedStateMachine):
    """One controller and the log it appends to."""

    def __init__(self) -> None:
        super().__init__()
        self.image = MetadataImage.empty()
        self.log: list[tuple[int, list[MetadataRecord]]] = []
        self.heartbeats = BrokerHeartbeatManager(9000)
        self.now_ms = 0
        self.rng = random.Random(0)
        self.epochs: dict[int, int] = {}
        self.high_epochs: dict[tuple[uuid.UUID, int], tuple[int, int]] = {}
        self.broker_epochs: dict[int, int] = {}
        self.next_producer_id = 0

    # ---- plumbing ------------------------------------------------------------------------

    def _commit(self, decision: Decision[Any]) -> Any:
        if decision.records:
            offset = self.image.offset + 1
            records = decode_batch(encode_batch(decision.records))
            self.image = self.image.apply_batch(records, offset, epoch=1)
            self.log.append((offset, records))
            for kind in sorted({type(r).__name__ for r in records}):
                event(f"committed {kind}")
        if decision.unclean_elections:
            event("unclean election")
        return decision.result

    def _try(self, make: Any) -> Any:
        before = self.image
        try:
            decision = make()
        except LograftError as error:
            event(f"refused {error.error_name}")
            assert self.image is before
            return None
        return self._commit(decision)

    def _epoch(self, broker_id: int, stale: bool) -> int:
        epoch = self.epochs.get(broker_id, 1)
        return epoch - 1 if stale else epoch

    # ---- rules ---------------------------------------------------------------------------

    @initialize(
        brokers=st.integers(1, 5),
        racks=st.booleans(),
        partitions=st.integers(1, 8),
        rf=st.integers(1, 3),
        unclean=st.booleans(),
    )
    def start(self, brokers: int, racks: bool, partitions: int, rf: int, unclean: bool) -> None:
        for broker_id in range(brokers):
            self.register(broker_id, f"r{broker_id % 2}" if racks else None, 1)
            self.heartbeat(broker_id, True, False, False, False)
        self.create("a", partitions, rf, unclean)

    @rule(
        broker_id=BROKERS, rack=st.sampled_from([None, "r1", "r2"]), incarnation=st.integers(1, 3)
    )
    def register(self, broker_id: int, rack: str | None, incarnation: int) -> None:
        request = BrokerRegistrationRequest(
            broker_id,
            uuid.UUID(int=broker_id * 100 + incarnation),
            (Listener("PLAINTEXT", "127.0.0.1", 9000 + broker_id),),
            rack,
        )
        result = self._try(
            lambda: register_broker(self.image, request, self.heartbeats, self.now_ms)
        )
        if result is not None:
            self.epochs[broker_id] = result.broker_epoch

    @rule(
        broker_id=BROKERS,
        caught_up=MOSTLY_TRUE,
        stale=MOSTLY_FALSE,
        want_fence=MOSTLY_FALSE,
        want_shut_down=MOSTLY_FALSE,
    )
    def heartbeat(
        self, broker_id: int, caught_up: bool, stale: bool, want_fence: bool, want_shut_down: bool
    ) -> None:
        request = BrokerHeartbeatRequest(
            broker_id,
            self._epoch(broker_id, stale),
            self.image.offset if caught_up else -1,
            want_fence=want_fence,
            want_shut_down=want_shut_down,
        )
        self._try(lambda: broker_heartbeat(self.image, request, self.heartbeats, self.now_ms))

    @rule(elapsed_ms=st.integers(0, 12_000))
    def tick(self, elapsed_ms: int) -> None:
        self.now_ms += elapsed_ms
        self._commit(fence_expired_brokers(self.image, self.heartbeats, self.now_ms))

    @rule(
        name=TOPICS,
        partitions=st.integers(0, 6),
        rf=st.integers(0, 4),
        unclean=st.booleans(),
    )
    def create(self, name: str, partitions: int, rf: int, unclean: bool) -> None:
        configs = {"unclean.leader.election.enable": "true"} if unclean else {}
        topic = NewTopic(name, partitions, rf, configs)
        self._commit(create_topics(self.image, [topic], self.rng))

    @rule(name=TOPICS)
    def delete(self, name: str) -> None:
        self._commit(delete_topics(self.image, [name]))

    @rule(
        pick=st.integers(0, 10_000),
        keep=st.lists(st.booleans(), min_size=4, max_size=4),
        epoch_skew=st.sampled_from([0, 0, 0, -1, 1]),
        version_skew=st.sampled_from([0, 0, 0, -1, 1]),
        from_follower=MOSTLY_FALSE,
    )
    def alter(
        self,
        pick: int,
        keep: list[bool],
        epoch_skew: int,
        version_skew: int,
        from_follower: bool,
    ) -> None:
        partitions = list(self.image.iter_partitions())
        if not partitions:
            return
        topic, partition, state = partitions[pick % len(partitions)]
        sender = state.replicas[-1] if from_follower else state.leader
        if sender == NO_LEADER:
            return
        new_isr = tuple(b for i, b in enumerate(state.replicas) if b == state.leader or keep[i % 4])
        request = AlterPartitionRequest(
            sender,
            self.epochs.get(sender, 0),
            topic.topic_id,
            partition,
            state.leader_epoch + epoch_skew,
            state.partition_epoch + version_skew,
            new_isr,
        )
        self._try(lambda: alter_partition(self.image, request))

    @rule(pick=st.integers(0, 10_000))
    def shrink_isr_to_leader(self, pick: int) -> None:
        # A well-formed AlterPartition leaving only the leader in sync: the set-up for
        # offline partitions and unclean elections when that leader goes.
        self.alter(pick, [False] * 4, 0, 0, False)

    @rule()
    def preferred(self) -> None:
        self._commit(elect_preferred_leaders(self.image))

    @rule(broker_id=BROKERS, stale=MOSTLY_FALSE)
    def producer_ids(self, broker_id: int, stale: bool) -> None:
        epoch = self._epoch(broker_id, stale)
        block = self._try(lambda: allocate_producer_ids(self.image, broker_id, epoch))
        if block is not None:
            assert block.first_producer_id >= self.next_producer_id
            self.next_producer_id = block.last_producer_id + 1

    @rule(broker_id=BROKERS)
    def unregister(self, broker_id: int) -> None:
        self._try(lambda: unregister_broker(self.image, broker_id, self.heartbeats))

    # ---- invariants ----------------------------------------------------------------------

    @invariant()
    def partitions_are_consistent(self) -> None:
        for topic, partition_id, state in self.image.iter_partitions():
            assert state.isr, "ISR never empty"
            assert set(state.isr) <= set(state.replicas), "ISR within replicas"
            assert state.leader == NO_LEADER or state.leader in state.isr
            if state.leader != NO_LEADER or len(state.isr) > 1:
                # Only the last member of an offline partition's ISR may be inactive.
                for broker_id in state.isr:
                    broker = self.image.brokers.get(broker_id)
                    assert broker is not None and broker.active, (broker_id, state)
            key = (topic.topic_id, partition_id)
            old = self.high_epochs.get(key, (0, 0))
            assert state.leader_epoch >= old[0] and state.partition_epoch >= old[1]
            self.high_epochs[key] = (state.leader_epoch, state.partition_epoch)

    @invariant()
    def brokers_and_producer_ids_only_move_forward(self) -> None:
        for broker_id, broker in self.image.brokers.items():
            assert broker.broker_epoch >= self.broker_epochs.get(broker_id, 0)
            self.broker_epochs[broker_id] = broker.broker_epoch
        assert self.image.next_producer_id >= self.next_producer_id

    @invariant()
    def snapshot_round_trips(self) -> None:
        assert decode_snapshot(encode_snapshot(self.image)) == self.image

    def teardown(self) -> None:
        # Replaying the whole log in one delta (how a restarting node recovers) gives the
        # same image as committing entry by entry.
        delta = MetadataDelta(MetadataImage.empty())
        for offset, records in self.log:
            delta.advance(offset, 1)
            for record in records:
                delta.replay(record, offset, 1)
        replayed = delta.apply()
        if self.log:
            assert replayed == self.image


ControllerMachine.TestCase.settings = settings(
    max_examples=300,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestControllerProperties = ControllerMachine.TestCase
