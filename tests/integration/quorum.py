"""A three-node combined-mode cluster of real processes for integration tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import grpc

from cluster.node_health import check_health
from lograft.protocol.wire import broker_pb2 as pb
from lograft.protocol.wire import broker_pb2_grpc as pb_grpc
from lograft.protocol.wire import controller_pb2 as cpb
from lograft.protocol.wire import controller_pb2_grpc as cpb_grpc
from tests.integration.nodes import NodeProcess, free_consecutive_ports, wait_until

RPC_TIMEOUT_S = 5.0
CLUSTER_TIMEOUT_S = 60.0
# Few partitions of __consumer_offsets keep a group test's cluster quick to set up.
OFFSETS_PARTITIONS = 3


@dataclass
class QuorumCluster:
    """Nodes 1..n, each broker and controller, voters of one quorum.

    With ``dedicated_controller``, nodes 1..n are brokers only and node n+1 is the quorum's
    only voter (controller only): brokers can then be lost without losing the controller.
    """

    base_dir: Path
    size: int = 3
    racks: dict[int, str] = field(default_factory=dict)
    configs: dict[str, str] = field(default_factory=dict)
    dedicated_controller: bool = False
    nodes: dict[int, NodeProcess] = field(default_factory=dict)

    def __post_init__(self) -> None:
        count = self.size + (1 if self.dedicated_controller else 0)
        # One range of distinct ports: three separate picks of a free port returned the same
        # one twice (a node then failed to start on "address already in use").
        base = free_consecutive_ports(count)
        ports = {n: base + n - 1 for n in range(1, count + 1)}
        voter_ids = [count] if self.dedicated_controller else list(ports)
        voters = ",".join(f"{n}@127.0.0.1:{ports[n]}" for n in voter_ids)
        for node_id, port in ports.items():
            roles: list[str] = []
            if self.dedicated_controller:
                role = "controller" if node_id in voter_ids else "broker"
                roles = ["--process-roles", role]
            self.nodes[node_id] = NodeProcess(
                data_dir=self.base_dir / f"node-{node_id}",
                node_id=node_id,
                port=port,
                configs=dict(self.configs),
                extra_args=["--controller-quorum-voters", voters]
                + roles
                + (["--rack", self.racks[node_id]] if node_id in self.racks else []),
            )

    def start(self) -> None:
        for node in self.nodes.values():
            node.start(wait=False)
        wait_until(self.healthy, CLUSTER_TIMEOUT_S, "a healthy cluster")

    def stop(self) -> None:
        for node in self.nodes.values():
            node.kill()

    @property
    def broker_ids(self) -> list[int]:
        """Nodes with the broker role."""
        return list(range(1, self.size + 1))

    @property
    def bootstrap(self) -> str:
        """``bootstrap.servers`` for clients: every broker."""
        return ",".join(self.nodes[n].address for n in self.broker_ids)

    def alive(self) -> list[NodeProcess]:
        return [n for n in self.nodes.values() if n.process and n.process.poll() is None]

    def alive_brokers(self) -> list[NodeProcess]:
        return [n for n in self.alive() if n.node_id in self.broker_ids]

    def describe_quorum(self, node: NodeProcess) -> cpb.DescribeQuorumResponse | None:
        try:
            with grpc.insecure_channel(node.address) as channel:
                response: cpb.DescribeQuorumResponse = cpb_grpc.ControllerStub(
                    channel
                ).DescribeQuorum(cpb.DescribeQuorumRequest(), timeout=RPC_TIMEOUT_S)
                return response
        except grpc.RpcError:
            return None

    def metadata(
        self, node: NodeProcess, topics: list[str] | None = None
    ) -> pb.MetadataResponse | None:
        try:
            with grpc.insecure_channel(node.address) as channel:
                response: pb.MetadataResponse = pb_grpc.BrokerStub(channel).Metadata(
                    pb.MetadataRequest(topics=topics or []), timeout=RPC_TIMEOUT_S
                )
                return response
        except grpc.RpcError:
            return None

    def healthy(self) -> bool:
        """Every live broker answers, knows a controller, lists every live broker, and says
        itself it is healthy (registered, unfenced, metadata applied: what ``cluster up``
        waits for). Metadata alone can list a broker its controller does not count yet, and
        a topic created then cannot place three replicas."""
        live = {n.node_id for n in self.alive_brokers()}
        for node in self.alive_brokers():
            metadata = self.metadata(node)
            if metadata is None or metadata.controller_id < 0:
                return False
            if {b.node_id for b in metadata.brokers} != live:
                return False
            if not check_health(node.address, RPC_TIMEOUT_S).healthy:
                return False
        return True

    def active_controller(self) -> int:
        for node in self.alive():
            answer = self.describe_quorum(node)
            if answer is not None and answer.leader_id >= 0:
                return answer.leader_id
        return -1

    def create_topic(
        self,
        node: NodeProcess,
        name: str,
        partitions: int,
        rf: int,
        configs: dict[str, str] | None = None,
    ) -> int:
        """CreateTopics through ``node``; returns the error code (0: created)."""
        with grpc.insecure_channel(node.address) as channel:
            response = pb_grpc.BrokerStub(channel).CreateTopics(
                pb.CreateTopicsRequest(
                    topics=[
                        pb.CreatableTopic(
                            name=name,
                            num_partitions=partitions,
                            replication_factor=rf,
                            configs=configs or {},
                        )
                    ]
                ),
                timeout=30,
            )
        return int(response.topics[0].error_code)

    def leaders(self, node: NodeProcess, topic: str) -> dict[int, int]:
        metadata = self.metadata(node, [topic])
        if metadata is None or metadata.topics[0].error_code:
            return {}
        return {p.partition: p.leader_id for p in metadata.topics[0].partitions}
