"""A broker acts on partitions only under a registration of its own incarnation (issue 12).

After a whole-cluster restart each broker replays a metadata image that names it leader of
partitions under the previous incarnation's registration, and the controller may refuse the
new registration for a while. A broker that led or proposed ISR changes from that image sent
AlterPartition with broker epoch -1 (``STALE_BROKER_EPOCH: broker 1 epoch -1 is not the
current 3``). As in Kafka, the broker neither leads nor follows before its registration is in
its image, never sends epoch -1, and sends an AlterPartition refused for a stale epoch again
once it has re-registered. A real :class:`KRaftBroker` runs here against a scripted
controller (:class:`ScriptedController`); the image is fed through the real state machine.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest

from cluster.kraft_broker import KRaftBroker
from controller.quorum.metadata_machine import MetadataStateMachine
from lograft.metadata import (
    ConfigRecord,
    ConfigResourceType,
    Listener,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
)
from lograft.protocol.errors import (
    LograftError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    StaleBrokerEpochError,
)
from lograft.protocol.records import encode_batch as encode_records
from lograft.protocol.topic_config import LogConfig
from lograft.protocol.topic_partition import TopicPartition
from lograft.protocol.wire import controller_pb2 as cpb
from replica.broker_rpcs import BrokerEndpoint
from replica.log_manager import LogManager
from replica.partition import Partition
from tests.unit.broker_fixtures import Image, eventually, now_ms

TP = TopicPartition("t", 0)
TOPIC_ID = uuid.UUID(int=7)


def _registration(broker_id: int, epoch: int, incarnation: int) -> RegisterBrokerRecord:
    return RegisterBrokerRecord(
        broker_id,
        uuid.UUID(int=incarnation),
        epoch,
        (Listener("PLAINTEXT", "127.0.0.1", 9000 + broker_id),),
        fenced=False,
    )


@dataclass
class ScriptedController:
    """Answers the broker's controller calls; records each request."""

    on_register: Callable[[int], None]
    """Called with the new epoch before the RegisterBroker answer (the commit)."""
    next_epoch: int = 5
    register_allowed: asyncio.Event = field(default_factory=asyncio.Event)
    stale_epochs: set[int] = field(default_factory=set)
    """Epochs the controller no longer accepts (the broker must re-register)."""
    calls: list[tuple[str, Any]] = field(default_factory=list)
    alter_partition_called: asyncio.Event = field(default_factory=asyncio.Event)

    async def call(
        self, method: str, request: Any, timeout_s: float = 0.0, *, movable: bool = False
    ) -> Any:
        self.calls.append((method, request))
        if method == "RegisterBroker":
            await self.register_allowed.wait()
            epoch = self.next_epoch
            self.next_epoch += 1
            self.on_register(epoch)
            return cpb.RegisterBrokerResponse(broker_epoch=epoch)
        if method == "BrokerHeartbeat":
            if request.broker_epoch in self.stale_epochs:
                return self._stale(cpb.BrokerHeartbeatResponse, request.broker_epoch)
            return cpb.BrokerHeartbeatResponse(
                is_caught_up=True,
                is_fenced=False,
                should_shut_down=request.want_shut_down,
                session_timeout_ms=0 if request.want_shut_down else 3000,
            )
        if method == "AlterPartition":
            self.alter_partition_called.set()
            if request.broker_epoch < 0 or request.broker_epoch in self.stale_epochs:
                return self._stale(cpb.AlterPartitionResponse, request.broker_epoch)
            return cpb.AlterPartitionResponse(
                leader_id=request.broker_id,
                leader_epoch=request.leader_epoch,
                partition_epoch=request.partition_epoch + 1,
                isr=list(request.new_isr),
            )
        raise AssertionError(f"unexpected controller call {method}")

    @staticmethod
    def _stale(response_type: Any, epoch: int) -> Any:
        error = StaleBrokerEpochError(f"broker 1 epoch {epoch} is not the current one")
        return response_type(error_code=error.code, error_message=error.message)

    def sent(self, method: str) -> list[Any]:
        return [request for name, request in self.calls if name == method]

    async def close(self) -> None:
        pass


class _Driver:
    """The Raft driver as far as the broker asks it here."""

    @dataclass(frozen=True)
    class _Status:
        leader_id: int = 9

    def status(self) -> _Status:
        return self._Status()


@dataclass
class Harness:
    broker: KRaftBroker
    image: Image
    controller: ScriptedController
    logs: LogManager

    def partition(self) -> Partition:
        return self.logs.partitions[TP]


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[Harness]:
    machine = MetadataStateMachine()
    image = Image(machine)
    # What node 1 replays after a whole-cluster restart: it leads t-0 under the previous
    # incarnation's registration (epoch 3); follower 2 is out of the ISR.
    image.commit(
        _registration(1, 3, incarnation=100),
        _registration(2, 4, incarnation=200),
        TopicRecord("t", TOPIC_ID),
        PartitionRecord(TOPIC_ID, 0, replicas=(1, 2), isr=(1,), leader=1),
        ConfigRecord(ConfigResourceType.TOPIC, "t", "min.insync.replicas", "2"),
    )

    def committed_registration(epoch: int) -> None:
        image.commit(_registration(1, epoch, incarnation=epoch))

    controller = ScriptedController(on_register=committed_registration)
    logs = LogManager(tmp_path, LogConfig(), now_ms)
    logs.open(load_topics=False)
    broker = KRaftBroker(
        BrokerEndpoint(1, "127.0.0.1", 9001),
        "cluster",
        logs,
        machine,
        cast(Any, _Driver()),
        cast(Any, controller),
    )
    await broker.start()
    yield Harness(broker, image, controller, logs)
    await broker.stop()
    logs.close()


def _follower_caught_up(partition: Partition) -> None:
    """Follower 2 fetches at the leader's log end: the leader proposes it into the ISR."""
    partition.on_follower_fetch(2, partition.log_end_offset, -1, partition.leader_epoch, now_ms())


def _admits_acks_all(partition: Partition) -> bool:
    try:
        partition.append_produced(bytes(encode_records([b"v"])), -1, now_ms())
    except NotEnoughReplicasError:
        return False
    return True


async def test_an_unregistered_broker_hosts_its_partitions_but_neither_leads_nor_proposes(
    harness: Harness,
) -> None:
    await eventually(lambda: TP in harness.logs.partitions, "t-0 opened")
    partition = harness.partition()
    assert not partition.is_leader
    with pytest.raises(NotLeaderOrFollowerError):
        _follower_caught_up(partition)
    with pytest.raises(NotLeaderOrFollowerError):
        partition.append_produced(bytes(encode_records([b"v"])), 1, now_ms())

    harness.controller.register_allowed.set()
    await eventually(lambda: partition.is_leader, "leadership once registered")
    assert harness.broker.broker_epoch == 5
    _follower_caught_up(partition)
    await eventually(lambda: _admits_acks_all(partition), "the ISR expansion committed")
    assert [r.broker_epoch for r in harness.controller.sent("AlterPartition")] == [5]


async def test_an_alter_partition_refused_for_a_stale_epoch_is_sent_again_once_re_registered(
    harness: Harness,
) -> None:
    controller = harness.controller
    controller.register_allowed.set()
    await eventually(
        lambda: TP in harness.logs.partitions and harness.partition().is_leader, "leadership"
    )
    partition = harness.partition()
    # The controller has lost this registration and holds the next one back for a while.
    controller.stale_epochs.add(5)
    controller.register_allowed.clear()
    _follower_caught_up(partition)
    await controller.alter_partition_called.wait()
    assert not _admits_acks_all(partition)
    await eventually(lambda: harness.broker.broker_epoch == -1, "the broker re-registering")
    # What the isr-expiration task does on each tick while the proposal is pending.
    partition.resend_pending_proposal()
    for _ in range(5):
        await asyncio.sleep(0)  # let any call it started reach the controller
    assert all(r.broker_epoch >= 0 for r in controller.sent("AlterPartition")), [
        r.broker_epoch for r in controller.sent("AlterPartition")
    ]

    controller.register_allowed.set()
    await eventually(lambda: _admits_acks_all(partition), "the ISR expansion committed")
    epochs = [r.broker_epoch for r in controller.sent("AlterPartition")]
    assert epochs[0] == 5 and epochs[-1] == 6, epochs
    assert all(epoch >= 0 for epoch in epochs), epochs


async def test_no_producer_id_block_is_asked_for_before_registration(harness: Harness) -> None:
    with pytest.raises(LograftError) as refused:
        await harness.broker.next_producer_id()
    assert refused.value.retriable, refused.value
    assert harness.controller.sent("AllocateProducerIds") == []
