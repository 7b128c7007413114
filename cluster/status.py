"""``lograft cluster status``: the controller quorum, the brokers and the partitions.

Asks any reachable node for DescribeQuorum, then asks the active controller itself, which
alone knows each voter's lag. Partitions (leader, replicas, ISR) come from a Metadata
answer; each partition's high watermark from its leader (ListOffsets ``latest``, which a
leader answers with its high watermark).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc

from cluster.errors import BrokerNotAvailableError
from cluster.wire import broker_pb2 as pb
from cluster.wire import broker_pb2_grpc as pb_grpc
from cluster.wire import controller_pb2 as cpb
from cluster.wire import controller_pb2_grpc as cpb_grpc

__all__ = ["MAX_PARTITION_LINES", "broker_registrations", "describe_cluster", "render_status"]

TIMEOUT_S = 5.0
MAX_PARTITION_LINES = 200
"""The text status lists this many partitions at most (``--json`` has them all)."""


def _describe(address: str, timeout_s: float) -> cpb.DescribeQuorumResponse | None:
    try:
        with grpc.insecure_channel(address) as channel:
            response: cpb.DescribeQuorumResponse = cpb_grpc.ControllerStub(channel).DescribeQuorum(
                cpb.DescribeQuorumRequest(), timeout=timeout_s
            )
            return response
    except grpc.RpcError:
        return None


def broker_registrations(
    bootstrap: Sequence[str], timeout_s: float = TIMEOUT_S
) -> dict[int, tuple[int, bool]] | None:
    """``{broker id: (broker epoch, fenced)}`` as the first node that answers
    DescribeQuorum knows them; ``None`` when none answers."""
    for address in bootstrap:
        answer = _describe(address, timeout_s)
        if answer is not None:
            return {b.broker_id: (b.broker_epoch, b.fenced) for b in answer.brokers}
    return None


def describe_cluster(bootstrap: Sequence[str], timeout_s: float = TIMEOUT_S) -> dict[str, Any]:
    """The cluster as JSON-ready data; raises ``BrokerNotAvailableError`` if none answers."""
    answer = None
    for address in bootstrap:
        answer = _describe(address, timeout_s)
        if answer is not None:
            break
    if answer is None:
        raise BrokerNotAvailableError(f"no node answered DescribeQuorum at {list(bootstrap)}")
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
        with grpc.insecure_channel(address) as channel:
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
            with grpc.insecure_channel(addresses[leader_id]) as channel:
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
