"""``lograft cluster status``: the controller quorum, the brokers and the partitions.

Asks every bootstrap address for DescribeQuorum at once and takes the first answer (in the
order given), then asks the active controller itself, which alone knows each voter's lag.
Partitions (leader, replicas, ISR) come from a Metadata answer; each partition's high
watermark from its leader (ListOffsets ``latest``, which a leader answers with its high
watermark). Connecting to an address takes ``DEFAULT_CONNECTION_SETUP_TIMEOUT_MS`` at most;
when no address answers, :func:`describe_cluster` raises ``NoBrokersAvailableError`` naming
each address and why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import grpc

from cluster.client import NoBrokersAvailableError
from cluster.client._client_config import DEFAULT_CONNECTION_SETUP_TIMEOUT_MS
from cluster.client._rpc_errors import describe_rpc_failure
from lograft.protocol.wire import broker_pb2 as pb
from lograft.protocol.wire import broker_pb2_grpc as pb_grpc
from lograft.protocol.wire import controller_pb2 as cpb
from lograft.protocol.wire import controller_pb2_grpc as cpb_grpc

__all__ = [
    "MAX_PARTITION_LINES",
    "broker_registrations",
    "describe_cluster",
    "readiness_problems",
    "render_status",
]

TIMEOUT_S = 5.0
MAX_PARTITION_LINES = 200
"""The text status lists this many partitions at most (``--json`` has them all)."""


_CHANNEL_OPTIONS = [
    # gRPC's connect timeout: a silent address fails after this, not after timeout_s.
    ("grpc.min_reconnect_backoff_ms", DEFAULT_CONNECTION_SETUP_TIMEOUT_MS),
]


def _channel(address: str) -> grpc.Channel:
    return grpc.insecure_channel(address, options=_CHANNEL_OPTIONS)


def _describe(address: str, timeout_s: float) -> cpb.DescribeQuorumResponse | None:
    try:
        return _first_describe([address], timeout_s)[1]
    except NoBrokersAvailableError:
        return None


def _first_describe(
    bootstrap: Sequence[str], timeout_s: float
) -> tuple[str, cpb.DescribeQuorumResponse]:
    """``(address, answer)`` of the first address (in order) that answers DescribeQuorum,
    all asked at once; ``NoBrokersAvailableError`` naming each address and why if none."""
    channels = [_channel(address) for address in bootstrap]
    try:
        calls = [
            cpb_grpc.ControllerStub(channel).DescribeQuorum.future(
                cpb.DescribeQuorumRequest(), timeout=timeout_s
            )
            for channel in channels
        ]
        failures: list[tuple[str, str]] = []
        for address, call in zip(bootstrap, calls, strict=True):
            try:
                answer: cpb.DescribeQuorumResponse = call.result()
            except grpc.RpcError as exc:
                reason = describe_rpc_failure(exc)
                if reason == "timed out":
                    reason = f"timed out after {DEFAULT_CONNECTION_SETUP_TIMEOUT_MS} ms"
                failures.append((address, reason))
                continue
            for other in calls:
                other.cancel()
            return address, answer
        raise NoBrokersAvailableError(failures)
    finally:
        for channel in channels:
            channel.close()


def broker_registrations(
    bootstrap: Sequence[str], timeout_s: float = TIMEOUT_S
) -> dict[int, tuple[int, bool]] | None:
    """``{broker id: (broker epoch, fenced)}`` as the first node that answers
    DescribeQuorum knows them; ``None`` when none answers."""
    try:
        _address, answer = _first_describe(bootstrap, timeout_s)
    except NoBrokersAvailableError:
        return None
    return {b.broker_id: (b.broker_epoch, b.fenced) for b in answer.brokers}


def readiness_problems(described: Mapping[str, Any]) -> list[str]:
    """Why a cluster described by :func:`describe_cluster` is not ready for clients (empty
    when it is): the quorum has no leader, no broker is registered, a broker is fenced, or a
    voter is not registered as a broker although every broker is a voter (nodes that are both
    controller and broker, as in docker-compose.yml and ``lograft cluster up``)."""
    quorum = described["quorum"]
    brokers = {b["node_id"]: b for b in described["brokers"]}
    voters = {v["node_id"] for v in quorum["voters"]}
    problems: list[str] = []
    if quorum["leader_id"] < 0:
        problems.append("the controller quorum has no leader")
    if not brokers:
        problems.append("no broker is registered")
    problems += [f"broker {i} is fenced" for i, b in sorted(brokers.items()) if b["fenced"]]
    if brokers and set(brokers) <= voters:
        problems += [
            f"node {i} is not registered as a broker" for i in sorted(voters - set(brokers))
        ]
    return problems


def describe_cluster(bootstrap: Sequence[str], timeout_s: float = TIMEOUT_S) -> dict[str, Any]:
    """The cluster as JSON-ready data; raises ``NoBrokersAvailableError`` (naming each address
    and why) if no address answers."""
    address, answer = _first_describe(bootstrap, timeout_s)
    partitions = _partitions(address, timeout_s)
    leader = next((b for b in answer.brokers if b.broker_id == answer.leader_id), None)
    if leader is not None:
        # Only the leader knows how far behind each voter is.
        answer = _describe(f"{leader.host}:{leader.port}", timeout_s) or answer
    return {
        "quorum": {
            "leader_id": answer.leader_id,
            "epoch": answer.leader_epoch,
            "high_watermark": answer.high_watermark,
            "voters": [
                {"node_id": v.replica_id, "log_end_offset": v.log_end_offset, "lag": v.lag}
                for v in answer.voters
            ],
            "observers": [
                {"node_id": o.replica_id, "log_end_offset": o.log_end_offset, "lag": o.lag}
                for o in answer.observers
            ],
        },
        "metadata_offset": answer.metadata_offset,
        "brokers": [
            {
                "node_id": b.broker_id,
                "broker_epoch": b.broker_epoch,
                "fenced": b.fenced,
                "in_controlled_shutdown": b.in_controlled_shutdown,
                "address": f"{b.host}:{b.port}",
            }
            for b in answer.brokers
        ],
        "offline_partitions": [f"{p.topic}-{p.partition}" for p in answer.offline_partitions],
        "partitions": partitions,
    }


def _partitions(address: str, timeout_s: float) -> list[dict[str, Any]]:
    """Every partition's leader, replicas and ISR, with the high watermark its leader reports."""
    try:
        with _channel(address) as channel:
            metadata = pb_grpc.BrokerStub(channel).Metadata(pb.MetadataRequest(), timeout=timeout_s)
    except grpc.RpcError:
        return []
    addresses = {b.node_id: f"{b.host}:{b.port}" for b in metadata.brokers}
    rows: dict[tuple[str, int], dict[str, Any]] = {}
    by_leader: dict[int, list[tuple[str, int]]] = {}
    for topic in metadata.topics:
        for partition in topic.partitions:
            rows[(topic.name, partition.partition)] = {
                "topic": topic.name,
                "partition": partition.partition,
                "leader": partition.leader_id,
                "leader_epoch": partition.leader_epoch,
                "replicas": list(partition.replica_nodes),
                "isr": list(partition.isr_nodes),
                "high_watermark": -1,
            }
            by_leader.setdefault(partition.leader_id, []).append((topic.name, partition.partition))
    for leader_id, owned in by_leader.items():
        if leader_id not in addresses:
            continue
        request = pb.ListOffsetsRequest()
        for name in sorted({t for t, _ in owned}):
            request.topics.add(
                name=name,
                partitions=[
                    pb.ListOffsetsPartition(partition=p, timestamp=-1)
                    for t, p in owned
                    if t == name
                ],
            )
        try:
            with _channel(addresses[leader_id]) as channel:
                answer = pb_grpc.BrokerStub(channel).ListOffsets(request, timeout=timeout_s)
        except grpc.RpcError:
            continue
        for topic in answer.topics:
            for result in topic.partitions:
                if result.error_code == 0:
                    rows[(topic.name, result.partition)]["high_watermark"] = result.offset
    return [rows[key] for key in sorted(rows)]


def render_status(status: dict[str, Any]) -> str:
    """The status as the text ``lograft cluster status`` prints."""
    quorum = status["quorum"]
    lines = [
        f"Quorum: leader {quorum['leader_id']}  epoch {quorum['epoch']}  "
        f"high watermark {quorum['high_watermark']}",
    ]
    for voter in quorum["voters"]:
        role = "leader" if voter["node_id"] == quorum["leader_id"] else "voter"
        lag = "0" if role == "leader" else "?" if voter["lag"] < 0 else str(voter["lag"])
        lines.append(f"  {role:<7} {voter['node_id']:<4} lag {lag}")
    for observer in quorum["observers"]:
        lines.append(f"  observer {observer['node_id']:<4} lag {observer['lag']}")
    lines.append("Brokers:")
    for broker in status["brokers"]:
        state = "fenced" if broker["fenced"] else "unfenced"
        if broker["in_controlled_shutdown"]:
            state += ", shutting down"
        lines.append(
            f"  {broker['node_id']:<4} {broker['address']:<21} epoch {broker['broker_epoch']:<4} "
            f"{state}"
        )
    offline = status["offline_partitions"]
    lines.append(f"Partitions without a leader: {len(offline)}")
    lines.extend(f"  {name}" for name in offline[:50])
    if len(offline) > 50:
        lines.append(f"  ... and {len(offline) - 50} more")
    lines.extend(_render_partitions(status.get("partitions", [])))
    return "\n".join(lines)


def _render_partitions(all_partitions: Sequence[dict[str, Any]]) -> list[str]:
    under = sum(1 for p in all_partitions if len(p["isr"]) < len(p["replicas"]))
    lines = [f"Partitions: {len(all_partitions)} ({under} under-replicated)"]
    # Internal topics (__consumer_offsets) are summed up in one line each, not listed: they
    # have many partitions and say little at a glance.
    internal: dict[str, list[dict[str, Any]]] = {}
    partitions = []
    for p in all_partitions:
        if p["topic"].startswith("__"):
            internal.setdefault(p["topic"], []).append(p)
        else:
            partitions.append(p)
    for topic, rows in sorted(internal.items()):
        without_leader = sum(1 for p in rows if p["leader"] < 0)
        short = sum(1 for p in rows if len(p["isr"]) < len(p["replicas"]))
        lines.append(
            f"  {topic}: {len(rows)} partitions, {without_leader} without a leader, "
            f"{short} under-replicated (--json lists them)"
        )
    if not partitions:
        return lines
    width = max(len("TOPIC"), *(len(p["topic"]) for p in partitions[:MAX_PARTITION_LINES]))
    lines.append(
        f"  {'TOPIC':<{width}} {'PART':>4} {'LEADER':>6} {'EPOCH':>5} "
        f"{'REPLICAS':<12} {'ISR':<12} HIGH WATERMARK"
    )
    for p in partitions[:MAX_PARTITION_LINES]:
        leader = "none" if p["leader"] < 0 else str(p["leader"])
        high_watermark = "?" if p["high_watermark"] < 0 else str(p["high_watermark"])
        lines.append(
            f"  {p['topic']:<{width}} {p['partition']:>4} {leader:>6} {p['leader_epoch']:>5} "
            f"{','.join(map(str, p['replicas'])):<12} {','.join(map(str, p['isr'])):<12} "
            f"{high_watermark}"
        )
    if len(partitions) > MAX_PARTITION_LINES:
        lines.append(f"  ... and {len(partitions) - MAX_PARTITION_LINES} more (--json lists all)")
    return lines
