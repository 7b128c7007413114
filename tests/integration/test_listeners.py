"""Named listeners with real processes, as in a docker-compose cluster, and `lograft node health`.

Each node has an INTERNAL listener (replication, the controller quorum; advertised as its bind
address 127.0.0.1:PORT) and an EXTERNAL one for clients, advertised as ``localhost:PORT``
where PORT is a port of a forwarder this test runs, as docker publishes a container's port on
the host. Every node is configured by Kafka names alone (``--config node.id=...``, no flags).
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from cluster.client import Producer
from lograft.protocol.wire import broker_pb2 as pb
from lograft.protocol.wire import broker_pb2_grpc as pb_grpc
from lograft.protocol.wire import controller_pb2 as cpb
from lograft.protocol.wire import controller_pb2_grpc as cpb_grpc
from tests.integration.nodes import NodeProcess, free_port, wait_until
from tests.integration.wire_helpers import fetch_all

pytestmark = pytest.mark.integration

TIMEOUT_S = 60.0
RPC_TIMEOUT_S = 5.0


class Forwarder:
    """A TCP port on 127.0.0.1 relaying every connection to another port (docker's ``-p``)."""

    def __init__(self, port: int, target_port: int) -> None:
        self.port = port
        self._target = target_port
        self._listener = socket.create_server(("127.0.0.1", port))
        self._sockets: list[socket.socket] = [self._listener]
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self._target))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        with self._lock:
            for sock in self._sockets:
                sock.close()


@dataclass
class ListenerNode(NodeProcess):
    """A node started with ``--config`` settings only; ``port`` is its INTERNAL listener."""

    external_port: int = field(default_factory=free_port)
    published_port: int = field(default_factory=free_port)

    def start(self, wait: bool = True) -> None:
        assert self.process is None or self.process.poll() is not None, "already running"
        command = [sys.executable, "-m", "cluster.node"]
        for name, value in self.configs.items():
            command += ["--config", f"{name}={value}"]
        with open(self.log_path, "ab") as log_file:
            self.process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT)
        if wait:
            self.wait_ready()


def _node(
    base: Path, node_id: int, voters: str, port: int = 0, configs: dict[str, str] | None = None
) -> ListenerNode:
    node = ListenerNode(
        data_dir=base / f"node-{node_id}", node_id=node_id, port=port or free_port()
    )
    node.configs = {
        "node.id": str(node_id),
        "log.dir": str(node.data_dir),
        "listeners": f"INTERNAL://127.0.0.1:{node.port},EXTERNAL://127.0.0.1:{node.external_port}",
        "advertised.listeners": f"EXTERNAL://localhost:{node.published_port}",
        "inter.broker.listener.name": "INTERNAL",
        "controller.quorum.voters": voters,
        "offsets.topic.num.partitions": "1",
        **(configs or {}),
    }
    return node


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[dict[int, ListenerNode]]:
    ports = {n: free_port() for n in (1, 2, 3)}
    voters = ",".join(f"{n}@127.0.0.1:{port}" for n, port in ports.items())
    started: dict[int, ListenerNode] = {}
    for node_id, port in ports.items():
        started[node_id] = _node(tmp_path, node_id, voters, port)
    try:
        for node in started.values():
            node.start(wait=False)
        for node in started.values():
            node.wait_ready()
        yield started
    finally:
        for node in started.values():
            node.kill()


def _metadata(address: str, topics: list[str] | None = None) -> pb.MetadataResponse | None:
    try:
        with grpc.insecure_channel(address) as channel:
            response: pb.MetadataResponse = pb_grpc.BrokerStub(channel).Metadata(
                pb.MetadataRequest(topics=topics or []), timeout=RPC_TIMEOUT_S
            )
            return response
    except grpc.RpcError:
        return None


def _brokers(address: str) -> dict[int, str]:
    metadata = _metadata(address)
    return {} if metadata is None else {b.node_id: f"{b.host}:{b.port}" for b in metadata.brokers}


def _health(address: str) -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, "-m", "cluster.node", "health", "--bootstrap", address],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return done.returncode, done.stdout


# Over 70 lines: a test that walks each listener of each node in order.
def test_each_listener_answers_with_its_own_addresses_and_replication_uses_internal(
    nodes: dict[int, ListenerNode],
) -> None:
    internal = {n: f"127.0.0.1:{node.port}" for n, node in nodes.items()}
    external = {n: f"localhost:{node.published_port}" for n, node in nodes.items()}
    # Every node's metadata image holds the three registrations (each answers from its own).
    wait_until(
        lambda: all(_brokers(internal[n]) == internal for n in nodes),
        TIMEOUT_S,
        "three registered brokers in every node's image",
    )

    # The same node, asked on each of its listeners, names every broker on that listener.
    assert _brokers(f"127.0.0.1:{nodes[2].external_port}") == external
    assert _brokers(internal[2]) == internal
    with grpc.insecure_channel(f"127.0.0.1:{nodes[3].external_port}") as channel:
        cluster = pb_grpc.BrokerStub(channel).DescribeCluster(
            pb.DescribeClusterRequest(), timeout=RPC_TIMEOUT_S
        )
        quorum = cpb_grpc.ControllerStub(channel).DescribeQuorum(
            cpb.DescribeQuorumRequest(), timeout=RPC_TIMEOUT_S
        )
    assert {b.broker_id: f"{b.host}:{b.port}" for b in cluster.brokers} == external
    assert {b.broker_id: f"{b.host}:{b.port}" for b in quorum.brokers} == external

    # Nothing listens on the advertised EXTERNAL addresses yet: an RF 3 topic that needs all
    # three replicas in sync takes acks=all writes, so replication runs on INTERNAL.
    with grpc.insecure_channel(internal[1]) as channel:
        created = pb_grpc.BrokerStub(channel).CreateTopics(
            pb.CreateTopicsRequest(
                topics=[
                    pb.CreatableTopic(
                        name="orders",
                        num_partitions=1,
                        replication_factor=3,
                        configs={"min.insync.replicas": "3"},
                    )
                ]
            ),
            timeout=30,
        )
    assert created.topics[0].error_code == 0, created
    producer = Producer({"bootstrap.servers": internal[1], "acks": "all"})
    try:
        assert producer.send("orders", b"inside", partition=0).result(timeout=60).offset == 0
    finally:
        producer.close()

    # Clients outside reach the cluster through the published ports alone.
    forwarders = [Forwarder(node.published_port, node.external_port) for node in nodes.values()]
    try:
        producer = Producer({"bootstrap.servers": external[1], "acks": "all"})
        try:
            sent = [producer.send("orders", f"outside-{i}".encode(), partition=0) for i in range(5)]
            assert [f.result(timeout=60).offset for f in sent] == [1, 2, 3, 4, 5]
        finally:
            producer.close()
        metadata = _metadata(external[1], ["orders"])
        assert metadata is not None
        partition = metadata.topics[0].partitions[0]
        assert sorted(partition.isr_nodes) == [1, 2, 3]
        with grpc.insecure_channel(external[partition.leader_id]) as channel:
            values = [r.value for r in fetch_all(pb_grpc.BrokerStub(channel), "orders", 0)]
            assert values == [b"inside"] + [f"outside-{i}".encode() for i in range(5)]

            def coordinator() -> pb.FindCoordinatorResponse:
                answer: pb.FindCoordinatorResponse = pb_grpc.BrokerStub(channel).FindCoordinator(
                    pb.FindCoordinatorRequest(group_id="g"), timeout=RPC_TIMEOUT_S
                )
                return answer

            wait_until(lambda: coordinator().error_code == 0, TIMEOUT_S, "a group coordinator")
            found = coordinator()
            assert f"{found.host}:{found.port}" == external[found.node_id]
    finally:
        for forwarder in forwarders:
            forwarder.close()


def test_node_health_asks_the_node_itself(tmp_path: Path, nodes: dict[int, ListenerNode]) -> None:
    internal = {n: f"127.0.0.1:{node.port}" for n, node in nodes.items()}
    wait_until(lambda: _health(internal[1])[0] == 0, TIMEOUT_S, "node 1 healthy")
    code, line = _health(f"127.0.0.1:{nodes[1].external_port}")
    assert code == 0 and line.startswith("healthy: broker 1 registered (epoch "), line

    # A broker whose controller quorum cannot be reached never registers: it answers, unhealthy.
    lonely = _node(
        tmp_path,
        9,
        f"8@127.0.0.1:{free_port()}",
        configs={"process.roles": "broker"},
    )
    lonely.start()
    try:
        assert _health(lonely.address) == (
            1,
            "unhealthy: broker 9 is not registered with the controller\n",
        )
    finally:
        lonely.kill()

    nodes[3].kill()
    assert _health(internal[3]) == (1, f"unreachable: {internal[3]} (connection refused)\n")
