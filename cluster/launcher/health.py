"""Whether a local cluster is healthy: each node's process state, its Metadata answer and
its own health verdict (``NodeHealth``).

Healthy means every node runs and answers Metadata, every answer lists every node as a
broker, every answer names an active controller, and every node says it is healthy
(:func:`health_problems`). The last matters after a restart: each node's metadata log still
lists the brokers as the earlier processes registered them, so Metadata looks complete
before the restarted brokers have registered again and been unfenced, and a topic created in
that window could not place three replicas.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from cluster.client._rpc_errors import describe_rpc_failure
from cluster.launcher.processes import is_alive, is_our_node, process_state, state_word
from cluster.launcher.spec import NodeRecord
from cluster.node_health import HealthVerdict, check_health
from lograft.protocol.wire import broker_pb2, broker_pb2_grpc

__all__ = [
    "MAX_METADATA_BYTES",
    "PROBE_TIMEOUT_S",
    "BrokerView",
    "ClusterStatus",
    "MetadataView",
    "NodeStatus",
    "health_problems",
    "node_status",
    "probe_metadata",
]

PROBE_TIMEOUT_S = 2.0
"""How long (s) one Metadata probe of a node may take; a slower node counts as not answering."""
MAX_METADATA_BYTES = 256 * 1024 * 1024
"""The largest Metadata answer a probe reads (gRPC's default limit is 4 MiB); the answer
lists every topic."""


# ---- metadata probes -----------------------------------------------------------------------


@dataclass(frozen=True)
class BrokerView:
    """One broker as a Metadata answer lists it."""

    node_id: int
    host: str
    port: int
    rack: str = ""

    def to_json(self) -> dict[str, Any]:
        """JSON form (``rack`` only when set)."""
        doc: dict[str, Any] = {"node_id": self.node_id, "host": self.host, "port": self.port}
        if self.rack:
            doc["rack"] = self.rack
        return doc


@dataclass(frozen=True)
class MetadataView:
    """What one node's Metadata answer says about the cluster."""

    cluster_id: str
    controller_id: int
    brokers: tuple[BrokerView, ...]
    topic_count: int

    @property
    def broker_ids(self) -> list[int]:
        """Sorted ids of the brokers listed."""
        return sorted(b.node_id for b in self.brokers)


def probe_metadata(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> MetadataView:
    """Ask the node at ``address`` for cluster metadata; raises ``grpc.RpcError``."""
    options = [("grpc.max_receive_message_length", MAX_METADATA_BYTES)]
    with grpc.insecure_channel(address, options=options) as channel:
        response = broker_pb2_grpc.BrokerStub(channel).Metadata(
            broker_pb2.MetadataRequest(), timeout=timeout_s
        )
    return MetadataView(
        cluster_id=str(response.cluster_id),
        controller_id=int(response.controller_id),
        brokers=tuple(
            BrokerView(int(b.node_id), str(b.host), int(b.port), str(b.rack))
            for b in response.brokers
        ),
        topic_count=len(response.topics),
    )


def _rpc_error_text(exc: grpc.RpcError) -> str:
    """Why a probe failed in a few words (``connection refused``), not a gRPC status dump."""
    return describe_rpc_failure(exc)


# ---- status --------------------------------------------------------------------------------


@dataclass
class NodeStatus:
    """One node's process state and, when it answered, its view of the cluster."""

    node: NodeRecord
    alive: bool
    state: str
    metadata: MetadataView | None = None
    error: str | None = None
    health: HealthVerdict | None = None
    """The node's own verdict (``NodeHealth``), asked once it answered Metadata."""

    def to_json(self) -> dict[str, Any]:
        """JSON form: the ``cluster.json`` entry plus liveness and the node's metadata view."""
        doc = self.node.to_json()
        doc.update(
            {
                "alive": self.alive,
                "state": self.state,
                "address": self.node.address,
                "reachable": self.metadata is not None,
                "error": self.error,
                "controller_id": self.metadata.controller_id if self.metadata else None,
                "brokers": self.metadata.broker_ids if self.metadata else None,
                "topics": self.metadata.topic_count if self.metadata else None,
                "health": self.health.reason if self.health else None,
            }
        )
        return doc


def node_status(node: NodeRecord, probe_timeout_s: float = PROBE_TIMEOUT_S) -> NodeStatus:
    """``node``'s process state and, when it runs and answers, its Metadata view and its own
    health verdict."""
    if node.pid is None or not is_alive(node.pid):
        return NodeStatus(node, False, "not running")
    if not is_our_node(node.pid, node.data_dir):
        stale = f"pid {node.pid} is another process now (stale pid)"
        return NodeStatus(node, False, "not running", error=stale)
    state = process_state(node.pid)
    try:
        metadata = probe_metadata(node.address, probe_timeout_s)
    except grpc.RpcError as exc:
        return NodeStatus(node, True, state_word(state), error=_rpc_error_text(exc))
    health = check_health(node.address, probe_timeout_s)
    return NodeStatus(node, True, state_word(state), metadata=metadata, health=health)


@dataclass
class ClusterStatus:
    """The cluster as ``lograft cluster status`` reports it."""

    data_dir: Path
    bootstrap: str
    nodes: list[NodeStatus]
    healthy: bool
    problems: list[str]

    @property
    def view(self) -> NodeStatus | None:
        """The first reachable node: the top-level fields come from its Metadata answer."""
        return next((n for n in self.nodes if n.metadata is not None), None)

    @property
    def controller_id(self) -> int | None:
        """The active controller as the first reachable node knows it (``-1``: none)."""
        view = self.view
        return view.metadata.controller_id if view and view.metadata else None

    @property
    def ready_count(self) -> int:
        """Nodes that run, answer Metadata listing every node, and know a controller."""
        expected = {n.node.node_id for n in self.nodes}
        return sum(
            1
            for n in self.nodes
            if n.alive
            and n.metadata is not None
            and expected <= set(n.metadata.broker_ids)
            and n.metadata.controller_id >= 0
        )

    def to_json(self) -> dict[str, Any]:
        """One JSON document: cluster-wide fields, then ``nodes``."""
        view = self.view
        metadata = view.metadata if view else None
        return {
            "data_dir": str(self.data_dir),
            "bootstrap": self.bootstrap,
            "healthy": self.healthy,
            "problems": self.problems,
            "metadata_from": view.node.node_id if view else None,
            "cluster_id": metadata.cluster_id if metadata else None,
            "controller_id": metadata.controller_id if metadata else None,
            "brokers": [b.to_json() for b in metadata.brokers] if metadata else [],
            "nodes": [n.to_json() for n in self.nodes],
        }


def health_problems(expected_ids: Sequence[int], nodes: Sequence[NodeStatus]) -> list[str]:
    """Why the cluster is not healthy (empty when it is).

    Healthy: every node runs and answers Metadata, every answer lists every expected broker
    id, every answer names an active controller (``controller_id >= 0``), and no node that
    was asked for its own verdict says it is unhealthy (not registered by this process,
    fenced, or behind on the metadata log).
    """
    problems = []
    expected = set(expected_ids)
    for status in nodes:
        node_id = status.node.node_id
        if not status.alive:
            problems.append(f"node {node_id} is not running")
        elif status.metadata is None:
            problems.append(f"node {node_id} does not answer Metadata ({status.error})")
        else:
            missing = sorted(expected - set(status.metadata.broker_ids))
            if missing:
                problems.append(
                    f"node {node_id} lists brokers {status.metadata.broker_ids}, missing {missing}"
                )
            if status.metadata.controller_id < 0:
                problems.append(f"node {node_id} knows no active controller")
            if status.health is not None and not status.health.healthy:
                problems.append(f"node {node_id}: {status.health.reason}")
    return problems
