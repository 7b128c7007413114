"""The Raft driver over real gRPC on 127.0.0.1: election, replication, failover, observers."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable, Sequence

import grpc
import pytest

from controller.quorum.driver import RaftDriver, RaftTransport
from controller.raft import Entry, EntryKind, MemoryStorage, RaftConfig, Ready, Role, Snapshot
from lograft.protocol.errors import NotControllerError
from lograft.protocol.wire import raft_pb2 as pb
from lograft.protocol.wire import raft_pb2_grpc as pb_grpc

pytestmark = pytest.mark.integration

CLUSTER_ID = "raft-driver-test"
WAIT_S = 30.0


class RecordingMachine:
    """Keeps the data of every applied entry."""

    def __init__(self) -> None:
        self.applied: list[bytes] = []

    def apply(self, entries: Sequence[Entry]) -> None:
        self.applied.extend(e.data for e in entries if e.kind is EntryKind.DATA)

    def restore(self, snapshot: Snapshot) -> None:
        raise AssertionError("no snapshots in this test")

    def snapshot_image(self) -> tuple[int, bytes] | None:
        return None


class SyncedMemoryStorage(MemoryStorage):
    """MemoryStorage with the driver's write hook (durability is not under test here)."""


class Cluster:
    """Drivers on their own gRPC servers; ``until`` waits on their progress, never a timer."""

    def __init__(self) -> None:
        self.drivers: dict[int, RaftDriver] = {}
        self.machines: dict[int, RecordingMachine] = {}
        self.servers: list[grpc.aio.Server] = []
        self.changed = asyncio.Condition()

    def _notify(self, ready: Ready) -> None:
        async def wake() -> None:
            async with self.changed:
                self.changed.notify_all()

        asyncio.get_running_loop().create_task(wake())

    async def until(self, predicate: Callable[[], bool]) -> None:
        async with self.changed:
            await asyncio.wait_for(self.changed.wait_for(predicate), WAIT_S)

    async def start(self, voters: list[int], observers: list[int]) -> None:
        ports: dict[int, int] = {}
        for node_id in voters + observers:
            server = grpc.aio.server()
            ports[node_id] = server.add_insecure_port("127.0.0.1:0")
            self.servers.append(server)
        addresses = {n: f"127.0.0.1:{ports[n]}" for n in voters}
        for index, node_id in enumerate(voters + observers):
            machine = RecordingMachine()
            driver = RaftDriver(
                RaftConfig(
                    node_id,
                    CLUSTER_ID,
                    frozenset(voters),
                    election_timeout_ticks=6,
                    fetch_max_wait_ticks=3,  # long poll, as nodes do: held calls included
                ),
                SyncedMemoryStorage(),
                RaftTransport(node_id, addresses),
                machine,
                random.Random(node_id),
                tick_ms=50,
                on_ready=self._notify,
            )
            pb_grpc.add_RaftServicer_to_server(driver, self.servers[index])
            self.drivers[node_id] = driver
            self.machines[node_id] = machine
        for server in self.servers:
            await server.start()
        for driver in self.drivers.values():
            await driver.start()

    def leader(self, among: Sequence[int] | None = None) -> RaftDriver | None:
        leaders = [
            d
            for n, d in self.drivers.items()
            if (among is None or n in among) and d.status().role is Role.LEADER
        ]
        return leaders[0] if len(leaders) == 1 else None

    async def stop(self) -> None:
        for driver in self.drivers.values():
            await driver.stop()
        for server in self.servers:
            await server.stop(None)


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    running = Cluster()
    await running.start(voters=[1, 2, 3], observers=[4])
    try:
        yield running
    finally:
        await running.stop()


async def test_elects_replicates_and_fails_over(cluster: Cluster) -> None:
    await cluster.until(lambda: cluster.leader() is not None)
    leader = cluster.leader()
    assert leader is not None
    first = [f"entry-{n}".encode() for n in range(20)]
    offsets = await asyncio.gather(*(leader.propose(data) for data in first))
    assert offsets == sorted(offsets)
    await cluster.until(lambda: all(m.applied == first for m in cluster.machines.values()))

    # Cut the leader off from everyone: the others elect a new one and go on.
    old = leader.config.node_id
    rest = [n for n in (1, 2, 3) if n != old]
    for node_id, driver in cluster.drivers.items():
        if node_id == old:
            driver.transport.blocked.update(n for n in cluster.drivers if n != old)
        else:
            driver.transport.blocked.add(old)
    await cluster.until(lambda: cluster.leader(rest) is not None)
    new_leader = cluster.leader(rest)
    assert new_leader is not None and new_leader.status().epoch > leader.status().epoch
    follower = next(n for n in rest if n != new_leader.config.node_id)
    with pytest.raises(NotControllerError):
        await cluster.drivers[follower].propose(b"followers refuse proposals")
    await new_leader.propose(b"after failover")
    expected = [*first, b"after failover"]
    await cluster.until(lambda: all(cluster.machines[n].applied == expected for n in [*rest, 4]))
    # Heal: the old leader steps down (check-quorum) and catches up.
    for driver in cluster.drivers.values():
        driver.transport.blocked.clear()
    await cluster.until(lambda: cluster.machines[old].applied == expected)
    assert cluster.drivers[4].status().role is Role.OBSERVER


async def test_malformed_and_foreign_messages_change_nothing(cluster: Cluster) -> None:
    await cluster.until(lambda: cluster.leader() is not None)
    leader = cluster.leader()
    assert leader is not None
    before = leader.status()
    address = leader.transport.addresses[leader.config.node_id]
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.RaftStub(channel)
        empty = await stub.Step(pb.RaftEnvelope(cluster_id=CLUSTER_ID, src=2, dst=1, epoch=1))
        assert "no message" in empty.rejected
        negative = pb.RaftEnvelope(cluster_id=CLUSTER_ID, src=2, dst=1, epoch=1)
        negative.fetch_request.fetch_offset = -5
        assert "negative" in (await stub.Step(negative)).rejected
        foreign = pb.RaftEnvelope(cluster_id="another-cluster", src=2, dst=1, epoch=99)
        foreign.vote_request.log_end_offset = 10**6
        foreign.vote_request.last_epoch = 99
        reply = await stub.Step(foreign)
        assert reply.rejected.startswith("INCONSISTENT_CLUSTER_ID")
        assert not reply.messages
        stale = pb.RaftEnvelope(cluster_id=CLUSTER_ID, src=2, dst=1, epoch=0)
        stale.begin_quorum_epoch.SetInParent()
        stale_reply = await stub.Step(stale)
        # A stale leader is told the current epoch (and who leads) so it steps down.
        answers = [m for m in stale_reply.messages if m.epoch == before.epoch]
        assert answers or stale_reply.rejected
    after = leader.status()
    assert (after.role, after.epoch, after.leader_id) == (
        before.role,
        before.epoch,
        before.leader_id,
    )
