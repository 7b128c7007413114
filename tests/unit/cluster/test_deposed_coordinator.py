"""A deposed coordinator answers nothing (issue 40, item 4).

Once a broker's metadata image says it no longer leads a partition of
``__consumer_offsets`` or ``__transaction_state`` at the leader epoch its coordinator was
loaded at, that coordinator answers every request ``NOT_COORDINATOR`` (or
``COORDINATOR_LOAD_IN_PROGRESS`` when the broker leads the partition again at a newer epoch
and reloads it), as Kafka's coordinators do. The check is made per request, in the same
step as the answer: the broker's own ``FindCoordinator`` already names the new leader then,
and a committed offset read from the old one could be older than one the new leader took
(the Spark sink decides from such a read whether a batch was written).

A real :class:`KRaftBroker` (node 1) runs here with its real coordinators, partitions and
logs, behind the real gRPC servicer; a scripted controller answers its controller calls and
the metadata image is fed through the real state machine, so the test decides when the
leadership moves. Clients call the servicer directly (as gRPC does), one request at a time
each, while the leadership of both internal partitions moves to node 2.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import grpc
import pytest

from cluster.kraft_broker import KRaftBroker
from controller.quorum.metadata_machine import MetadataStateMachine
from lograft.metadata import (
    Listener,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
)
from lograft.protocol.errors import (
    CoordinatorLoadInProgressError,
    NotCoordinatorError,
    RequestTimedOutError,
)
from lograft.protocol.topic_config import LogConfig
from lograft.protocol.wire import broker_pb2 as pb
from lograft.protocol.wire import broker_pb2_grpc as pb_grpc
from lograft.protocol.wire import controller_pb2 as cpb
from replica.broker_rpcs import BrokerEndpoint
from replica.broker_service import BrokerService
from replica.group_service import OFFSETS_TOPIC
from replica.log_manager import LogManager
from replica.txn_service import TRANSACTION_STATE_TOPIC
from tests.unit.broker_fixtures import WAIT_S, Image, now_ms

OFFSETS_ID = uuid.UUID(int=1)
TXN_STATE_ID = uuid.UUID(int=2)
EVENTS_ID = uuid.UUID(int=3)
EVENTS = "events"
GROUP = "readers"  # a member commits its offsets and heartbeats
TXN_GROUP = "pipeline"  # offsets committed inside the transaction of TXN_ID
TXN_ID = "pipeline-0"
NODE_2_PORT = 9
"""Where node 2 would listen: only named in answers, never called."""
ROUNDS_BEFORE = 3
ROUNDS_AFTER = 5
REFUSED = {NotCoordinatorError.code, CoordinatorLoadInProgressError.code}


def _registration(broker_id: int, epoch: int, port: int) -> RegisterBrokerRecord:
    return RegisterBrokerRecord(
        broker_id,
        uuid.UUID(int=broker_id),
        epoch,
        (Listener("PLAINTEXT", "127.0.0.1", port),),
        fenced=False,
    )


SESSION_MS = 3000
"""The session each answered heartbeat grants (the broker's lease)."""


@dataclass
class ScriptedController:
    """Registers node 1, takes its heartbeats, hands out producer ids."""

    image: Image
    port: int
    next_producer_id: int = 1000
    reachable: bool = True
    """False: every call times out, as from a broker cut off from the controller."""

    async def call(
        self, method: str, request: Any, timeout_s: float = 0.0, *, movable: bool = False
    ) -> Any:
        if not self.reachable:
            raise RequestTimedOutError(f"{method} to the controller timed out")
        if method == "RegisterBroker":
            self.image.commit(_registration(1, 5, self.port))
            return cpb.RegisterBrokerResponse(broker_epoch=5)
        if method == "BrokerHeartbeat":
            return cpb.BrokerHeartbeatResponse(
                is_caught_up=True,
                is_fenced=False,
                should_shut_down=request.want_shut_down,
                session_timeout_ms=0 if request.want_shut_down else SESSION_MS,
            )
        if method == "AllocateProducerIds":
            start, self.next_producer_id = self.next_producer_id, self.next_producer_id + 100
            return cpb.AllocateProducerIdsResponse(producer_id_start=start, producer_id_len=100)
        raise AssertionError(f"unexpected controller call {method}")

    async def close(self) -> None:
        pass


class _Driver:
    @dataclass(frozen=True)
    class _Status:
        leader_id: int = 9

    def status(self) -> _Status:
        return self._Status()


async def _eventually(condition: Callable[[], Awaitable[bool]], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not await condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


@dataclass
class Node:
    broker: KRaftBroker
    service: BrokerService
    image: Image
    controller: ScriptedController


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    # The transaction side calls coordinators over gRPC (KIP-890 verification), itself too.
    server = grpc.aio.server()
    port = server.add_insecure_port("127.0.0.1:0")
    machine = MetadataStateMachine()
    image = Image(machine)
    # Node 1 leads every partition; node 2 (registered, never running here) is out of sync.
    image.commit(
        _registration(2, 7, NODE_2_PORT),
        *(
            record
            for name, topic_id in (
                (OFFSETS_TOPIC, OFFSETS_ID),
                (TRANSACTION_STATE_TOPIC, TXN_STATE_ID),
                (EVENTS, EVENTS_ID),
            )
            for record in (
                TopicRecord(name, topic_id),
                PartitionRecord(topic_id, 0, replicas=(2, 1), isr=(1,), leader=1),
            )
        ),
    )
    logs = LogManager(tmp_path, LogConfig(), now_ms)
    logs.open(load_topics=False)
    endpoint = BrokerEndpoint(1, "127.0.0.1", port)
    controller = ScriptedController(image, port)
    broker = KRaftBroker(
        endpoint,
        "cluster",
        logs,
        machine,
        cast(Any, _Driver()),
        cast(Any, controller),
    )
    service = BrokerService(
        logs,
        endpoint,
        "cluster",
        now_ms,
        broker,
        groups=broker.groups,
        transactions=broker.transactions,
    )
    pb_grpc.add_BrokerServicer_to_server(service, server)
    await server.start()
    await broker.start()
    try:
        yield Node(broker, service, image, controller)
    finally:
        await broker.stop()
        await server.stop(None)
        logs.close()


def _offsets(offset: int) -> list[pb.OffsetCommitTopic]:
    return [
        pb.OffsetCommitTopic(
            name=EVENTS, partitions=[pb.OffsetCommitPartition(partition=0, committed_offset=offset)]
        )
    ]


@dataclass
class Clients:
    """The requests of the stream, once the group has a member and the transaction is open."""

    node: Node
    member_id: str = ""
    member_epoch: int = 0
    producer_id: int = -1
    producer_epoch: int = -1
    answers: list[tuple[str, bool, int]] = field(default_factory=list)
    """(request, sent after the move, error code) of every answer."""

    async def setup(self) -> None:
        service = self.node.service

        async def coordinators_ready() -> bool:
            fetched = await service.OffsetFetch(pb.OffsetFetchRequest(group_id=GROUP), None)
            described = await service.DescribeTransactions(
                pb.DescribeTransactionsRequest(transactional_ids=[TXN_ID]), None
            )
            return fetched.error_code == 0 and described.transactions[0].error_code not in REFUSED

        await _eventually(coordinators_ready, "both coordinators loaded")
        joined = await service.ConsumerGroupHeartbeat(
            pb.ConsumerGroupHeartbeatRequest(
                group_id=GROUP,
                member_epoch=0,
                rebalance_timeout_ms=60_000,
                subscribed_topic_names=pb.SubscribedTopics(names=[EVENTS]),
            ),
            None,
        )
        assert joined.error_code == 0, joined
        self.member_id, self.member_epoch = joined.member_id, joined.member_epoch
        initialised = await service.InitProducerId(
            pb.InitProducerIdRequest(transactional_id=TXN_ID, transaction_timeout_ms=60_000), None
        )
        assert initialised.error_code == 0, initialised
        self.producer_id, self.producer_epoch = (
            initialised.producer_id,
            initialised.producer_epoch,
        )
        added = await service.AddOffsetsToTxn(
            pb.AddOffsetsToTxnRequest(
                transactional_id=TXN_ID,
                producer_id=self.producer_id,
                producer_epoch=self.producer_epoch,
                group_id=TXN_GROUP,
            ),
            None,
        )
        assert added.error_code == 0, added

    async def offset_commit(self, offset: int) -> int:
        response = await self.node.service.OffsetCommit(
            pb.OffsetCommitRequest(
                group_id=GROUP,
                member_id=self.member_id,
                member_epoch=self.member_epoch,
                topics=_offsets(offset),
            ),
            None,
        )
        codes = [p.error_code for t in response.topics for p in t.partitions]
        return response.error_code or next((c for c in codes if c), 0)

    async def offset_fetch(self, offset: int) -> int:
        response = await self.node.service.OffsetFetch(
            pb.OffsetFetchRequest(group_id=GROUP, require_stable=True), None
        )
        return response.error_code

    async def heartbeat(self, offset: int) -> int:
        response = await self.node.service.ConsumerGroupHeartbeat(
            pb.ConsumerGroupHeartbeatRequest(
                group_id=GROUP, member_id=self.member_id, member_epoch=self.member_epoch
            ),
            None,
        )
        if response.error_code == 0:
            self.member_epoch = response.member_epoch
        return response.error_code

    async def txn_offset_commit(self, offset: int) -> int:
        response = await self.node.service.TxnOffsetCommit(
            pb.TxnOffsetCommitRequest(
                transactional_id=TXN_ID,
                group_id=TXN_GROUP,
                producer_id=self.producer_id,
                producer_epoch=self.producer_epoch,
                member_epoch=-1,
                topics=_offsets(offset),
            ),
            None,
        )
        codes = [p.error_code for t in response.topics for p in t.partitions]
        return response.error_code or next((c for c in codes if c), 0)

    async def describe_transaction(self, offset: int) -> int:
        response = await self.node.service.DescribeTransactions(
            pb.DescribeTransactionsRequest(transactional_ids=[TXN_ID]), None
        )
        return response.transactions[0].error_code

    async def verify_partition(self, offset: int) -> int:
        """What a partition leader asks the transaction coordinator (KIP-890)."""
        response = await self.node.service.AddPartitionsToTxn(
            pb.AddPartitionsToTxnRequest(
                transactional_id=TXN_ID,
                producer_id=self.producer_id,
                producer_epoch=self.producer_epoch,
                topics=[pb.TopicPartitions(topic=OFFSETS_TOPIC, partitions=[0])],
                verify_only=True,
            ),
            None,
        )
        return response.error_code

    def requests(self) -> dict[str, Callable[[int], Awaitable[int]]]:
        return {
            "OffsetFetch": self.offset_fetch,
            "ConsumerGroupHeartbeat": self.heartbeat,
            "DescribeTransactions": self.describe_transaction,
            "AddPartitionsToTxn(verify_only)": self.verify_partition,
            "OffsetCommit": self.offset_commit,
            "TxnOffsetCommit": self.txn_offset_commit,
        }


async def _coordinator_of(node: Node, key: str, key_type: int) -> int:
    found = await node.service.FindCoordinator(
        pb.FindCoordinatorRequest(group_id=key, key_type=key_type), None
    )
    assert found.error_code == 0, found
    return int(found.node_id)


async def test_a_deposed_coordinator_answers_nothing_once_its_image_names_another_leader(
    node: Node,
) -> None:
    clients = Clients(node)
    await clients.setup()
    moved = False
    warmed_up: set[str] = set()
    all_warmed_up = asyncio.Event()

    async def client(name: str, request: Callable[[int], Awaitable[int]]) -> None:
        sent_after = 0
        offset = 0
        while sent_after < ROUNDS_AFTER:
            offset += 1
            after = moved
            code = await request(offset)
            clients.answers.append((name, after, code))
            sent_after += after
            if offset == ROUNDS_BEFORE:
                warmed_up.add(name)
                if warmed_up == set(clients.requests()):
                    all_warmed_up.set()
            await asyncio.sleep(0)  # one request at a time, each client after the other

    async def move_leadership() -> None:
        nonlocal moved
        await all_warmed_up.wait()
        # The controller moves both partitions to node 2 (a preferred-leader election: node
        # 2 is back in sync). Node 1 applies the record here and runs on: requests already
        # on their way are handled in the loop turns that follow, the first ones before
        # the broker gets round to acting on the record.
        node.image.commit(
            PartitionChangeRecord(OFFSETS_ID, 0, leader=2, isr=(1, 2)),
            PartitionChangeRecord(TXN_STATE_ID, 0, leader=2, isr=(1, 2)),
        )
        moved = True
        for name, request in clients.requests().items():  # one of each, arriving at once
            clients.answers.append((name, True, await request(0)))

    await asyncio.gather(
        move_leadership(), *(client(name, call) for name, call in clients.requests().items())
    )

    # Node 1's own answers name node 2 as the coordinator of both keys ...
    assert await _coordinator_of(node, GROUP, 0) == 2
    assert await _coordinator_of(node, TXN_ID, 1) == 2
    # ... each request had its answers before the move ...
    before = {name for name, after, code in clients.answers if not after and code == 0}
    assert before == set(clients.requests()), clients.answers
    # ... and after it, none: every request sent once node 1 had lost the partitions was
    # refused, so that the client asks FindCoordinator again.
    answered_after = [(name, code) for name, after, code in clients.answers if after]
    assert answered_after and all(code in REFUSED for _, code in answered_after), str(
        answered_after
    )


async def test_a_broker_that_leads_again_at_a_newer_epoch_answers_from_a_reloaded_coordinator(
    node: Node,
) -> None:
    clients = Clients(node)
    await clients.setup()
    assert await clients.offset_commit(42) == 0
    # The partitions go to node 2 and come back to node 1 (two leader epochs later) before
    # node 1 acts on either change: its coordinators were loaded for a leadership that is
    # over, and what node 2 wrote meanwhile would be in the log only.
    node.image.commit(
        PartitionChangeRecord(OFFSETS_ID, 0, leader=2, isr=(1, 2)),
        PartitionChangeRecord(TXN_STATE_ID, 0, leader=2, isr=(1, 2)),
        PartitionChangeRecord(OFFSETS_ID, 0, leader=1, isr=(1, 2)),
        PartitionChangeRecord(TXN_STATE_ID, 0, leader=1, isr=(1, 2)),
    )
    assert await clients.offset_fetch(0) == CoordinatorLoadInProgressError.code
    assert await clients.describe_transaction(0) == CoordinatorLoadInProgressError.code

    async def reloaded() -> bool:
        return await clients.offset_fetch(0) == 0 and await clients.describe_transaction(0) == 0

    await _eventually(reloaded, "the coordinators loaded again")
    fetched = await node.service.OffsetFetch(pb.OffsetFetchRequest(group_id=GROUP), None)
    assert [(p.partition, p.committed_offset) for t in fetched.topics for p in t.partitions] == [
        (0, 42)
    ]


async def test_a_broker_cut_off_from_the_controller_stops_answering_once_its_session_may_end(
    node: Node,
) -> None:
    """Its image still names it leader of both partitions, but the controller may fence it
    once the session of its last answered heartbeat ends, and move them."""
    clients = Clients(node)
    await clients.setup()
    assert await clients.offset_commit(7) == 0
    node.controller.reachable = False
    requests = clients.requests()

    async def all_refused() -> bool:
        codes = [await request(0) for request in requests.values()]
        return all(code == NotCoordinatorError.code for code in codes)

    await _eventually(all_refused, "every coordinator request refused")
    # Its own FindCoordinator still names it: only a new image could say otherwise.
    assert await _coordinator_of(node, GROUP, 0) == 1
    node.controller.reachable = True

    async def answering() -> bool:
        return await clients.offset_fetch(0) == 0 and await clients.describe_transaction(0) == 0

    await _eventually(answering, "answers again once a heartbeat is answered")


async def test_a_commit_whose_completion_meets_a_lapsed_lease_completes_once_it_holds_again(
    node: Node,
) -> None:
    """The markers are written, but the broker's lease has lapsed (the controller did not
    answer for a while) when the coordinator records them: the partition never moved, so no
    other coordinator will restart the job. It must complete it once the lease holds again,
    not leave the transaction preparing (its id answered CONCURRENT_TRANSACTIONS)."""
    clients = Clients(node)
    await clients.setup()
    service = node.service
    peers = node.broker.transactions._peers
    real_write = peers.write_markers
    markers_sent = asyncio.Event()
    release = asyncio.Event()

    async def held_write(job: Any, partitions: Any) -> Any:
        markers_sent.set()
        await release.wait()
        return await real_write(job, partitions)

    transactions = node.broker.transactions
    real_complete = transactions._complete_job
    refused_once = asyncio.Event()

    async def watched_complete(*args: Any) -> bool:
        done = await real_complete(*args)
        if not done:
            refused_once.set()
        return done

    peers.write_markers = held_write  # type: ignore[method-assign]
    transactions._complete_job = watched_complete  # type: ignore[method-assign]
    ended = await service.EndTxn(
        pb.EndTxnRequest(
            transactional_id=TXN_ID,
            producer_id=clients.producer_id,
            producer_epoch=clients.producer_epoch,
            committed=True,
        ),
        None,
    )
    assert ended.error_code == 0, ended
    async with asyncio.timeout(WAIT_S):
        await markers_sent.wait()
    node.controller.reachable = False

    async def lapsed() -> bool:
        return await clients.describe_transaction(0) == NotCoordinatorError.code

    await _eventually(lapsed, "the broker's lease to lapse")
    release.set()
    async with asyncio.timeout(WAIT_S):
        await refused_once.wait()  # the job met the lapsed lease: it waits, not gives up
    node.controller.reachable = True

    async def completed() -> bool:
        described = await service.DescribeTransactions(
            pb.DescribeTransactionsRequest(transactional_ids=[TXN_ID]), None
        )
        return described.transactions[0].state == "CompleteCommit"

    await _eventually(completed, "the transaction to complete")
