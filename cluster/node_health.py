"""``lograft node health``: ask a node itself whether it is healthy; the service that answers.

Every listener of every node serves ``lograft.node.v1.Node/NodeHealth``
(:class:`NodeHealthService`): the node's id and roles, its broker epoch, whether this
process is fenced in the metadata image it has applied, how far it has applied the metadata
log against the high watermark it last learned, and the quorum leader it knows.

:func:`assess` decides, as Kafka decides a broker is ready to serve:

* a broker (in a quorum) is healthy when it is registered (has a broker epoch), unfenced in
  its own image, and caught up: it has applied the metadata log up to the high watermark it
  last learned;
* a node with the controller role is healthy only if it knows a quorum leader;
* a standalone broker (no quorum) is healthy once it answers.

``lograft node health [--bootstrap HOST:PORT] [--timeout-s S] [--json]`` (:func:`health_main`)
prints one line and exits 0 when healthy, 1 otherwise (unhealthy or unreachable), within its
timeout; a container's health check runs it against its own node::

    healthy: broker 1 registered (epoch 12), unfenced, metadata applied 140 of 140, leader 2
    unhealthy: broker 2 is fenced
    unhealthy: metadata applied 120 of 140
    unreachable: 127.0.0.1:9092 (connection refused)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from lograft.protocol.wire import node_pb2 as npb
from lograft.protocol.wire import node_pb2_grpc as npb_grpc

__all__ = [
    "DEFAULT_ADDRESS",
    "DEFAULT_TIMEOUT_S",
    "WATCH_INTERVAL_S",
    "HealthVerdict",
    "NodeHealthService",
    "StandardHealthService",
    "assess",
    "check_health",
    "health_main",
]

log = logging.getLogger(__name__)

DEFAULT_ADDRESS = "127.0.0.1:9092"
"""The node asked without ``--bootstrap``: port 9092 on the loopback, a local cluster's node 1."""
DEFAULT_TIMEOUT_S = 5.0
"""How long (s) to wait for the node's answer (``--timeout-s``) before calling it unreachable."""
WATCH_INTERVAL_S = 0.5
"""How often (s) a ``Health/Watch`` stream looks at the node's facts for a change."""


@dataclass(frozen=True, slots=True)
class HealthVerdict:
    """Whether a node is healthy, and the one line that says why."""

    healthy: bool
    reason: str
    """``healthy: ...``, ``unhealthy: ...`` or ``unreachable: ...``."""
    facts: npb.NodeHealthResponse | None = None
    """The node's answer; ``None`` when it did not answer."""


class NodeHealthService(npb_grpc.NodeServicer):  # type: ignore[misc]
    """The ``Node`` service of one listener: answers with ``facts()`` and its listener."""

    def __init__(self, facts: Callable[[], npb.NodeHealthResponse], listener: str) -> None:
        self._facts = facts
        self._listener = listener

    async def NodeHealth(
        self, request: npb.NodeHealthRequest, context: grpc.aio.ServicerContext
    ) -> npb.NodeHealthResponse:
        """What this node knows of itself now."""
        response = self._facts()
        response.listener = self._listener
        return response


class StandardHealthService(health_pb2_grpc.HealthServicer):  # type: ignore[misc]
    """gRPC's standard ``grpc.health.v1.Health/Check`` for tools that know no lograft proto.

    ``SERVING`` when :func:`assess` finds the node healthy, else ``NOT_SERVING``; the service
    name is ``""`` (the node) or one of ``services``, those this listener serves, and any other
    is ``NOT_FOUND`` (as gRPC's health protocol says). ``Watch`` streams the status at once and
    again each time it changes, ``SERVICE_UNKNOWN`` for a service not served (the protocol's
    answer there, the stream kept open); the node's facts are looked at every
    :data:`WATCH_INTERVAL_S`, since health is derived from them rather than set by events.
    """

    def __init__(
        self, facts: Callable[[], npb.NodeHealthResponse], services: frozenset[str]
    ) -> None:
        self._facts = facts
        self._services = services

    async def Check(
        self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext
    ) -> health_pb2.HealthCheckResponse:
        """Whether the node (or one of its services) serves now."""
        if request.service and request.service not in self._services:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service!r}")
        return health_pb2.HealthCheckResponse(status=self._status())

    async def Watch(
        self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[health_pb2.HealthCheckResponse]:
        """The status now, then each change, until the client goes away."""
        served = not request.service or request.service in self._services
        last: int | None = None
        while True:
            status = self._status() if served else health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
            if status != last:
                yield health_pb2.HealthCheckResponse(status=status)
                last = status
            await asyncio.sleep(WATCH_INTERVAL_S)

    def _status(self) -> int:
        if assess(self._facts()).healthy:
            return int(health_pb2.HealthCheckResponse.SERVING)
        return int(health_pb2.HealthCheckResponse.NOT_SERVING)


def assess(facts: npb.NodeHealthResponse) -> HealthVerdict:
    """Decide from a node's own answer whether it is healthy (see the module docstring)."""
    node_id = facts.node_id
    roles = set(facts.roles)
    if not facts.in_quorum:
        return HealthVerdict(True, f"healthy: standalone broker {node_id}", facts)
    applied, high_watermark = facts.metadata_applied_offset, facts.metadata_high_watermark
    if "broker" in roles:
        if facts.broker_epoch < 0:
            return HealthVerdict(
                False, f"unhealthy: broker {node_id} is not registered with the controller", facts
            )
        if facts.fenced:
            return HealthVerdict(False, f"unhealthy: broker {node_id} is fenced", facts)
        if applied < high_watermark:
            return HealthVerdict(
                False, f"unhealthy: metadata applied {applied} of {high_watermark}", facts
            )
    if "controller" in roles and facts.quorum_leader_id < 0:
        return HealthVerdict(
            False, f"unhealthy: controller {node_id} knows no quorum leader", facts
        )
    if "broker" in roles:
        state = f"broker {node_id} registered (epoch {facts.broker_epoch}), unfenced"
    else:
        state = f"controller {node_id}"
    leader = f"leader {facts.quorum_leader_id}" if facts.quorum_leader_id >= 0 else "no leader"
    return HealthVerdict(
        True,
        f"healthy: {state}, metadata applied {applied} of {high_watermark}, {leader}",
        facts,
    )


def _unreachable(address: str, error: grpc.RpcError, timeout_s: float) -> str:
    code = error.code() if isinstance(error, grpc.Call) else None
    details = (error.details() if isinstance(error, grpc.Call) else "") or ""
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        why = f"no answer within {timeout_s:g} s"
    elif code == grpc.StatusCode.UNIMPLEMENTED:
        return (
            f"unhealthy: {address} does not answer NodeHealth (not a lograft node, or an older one)"
        )
    elif "connection refused" in details.lower():
        why = "connection refused"
    elif any(hint in details.lower() for hint in ("dns", "resolv", "lookup", "not known")):
        why = "unknown host"
    else:
        name = code.name if code is not None else "error"
        first_line = details.strip().splitlines()[0] if details.strip() else ""
        why = f"{name.lower()}: {first_line}" if first_line else name.lower()
    return f"unreachable: {address} ({why})"


def check_health(
    address: str = DEFAULT_ADDRESS, timeout_s: float = DEFAULT_TIMEOUT_S
) -> HealthVerdict:
    """Ask the node at ``address`` (``host:port``) and decide; never waits past ``timeout_s``."""
    try:
        with grpc.insecure_channel(address) as channel:
            facts: npb.NodeHealthResponse = npb_grpc.NodeStub(channel).NodeHealth(
                npb.NodeHealthRequest(), timeout=timeout_s
            )
    except grpc.RpcError as exc:
        return HealthVerdict(False, _unreachable(address, exc, timeout_s))
    return assess(facts)


def _facts_dict(facts: npb.NodeHealthResponse) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for field in facts.DESCRIPTOR.fields:
        value = getattr(facts, field.name)
        fields[field.name] = value if isinstance(value, bool | int | str) else list(value)
    return fields


def _parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="lograft node health",
        description="Ask a running node whether it is healthy: registered, unfenced and "
        "caught up with the metadata log (a broker), knowing a quorum leader (a controller). "
        "Prints one line; exits 0 when healthy, 1 when not or when the node does not answer.",
    )
    parser.add_argument(
        "--bootstrap",
        default=DEFAULT_ADDRESS,
        metavar="HOST:PORT",
        help="the node to ask, on any of its listeners (default %(default)s)",
    )
    parser.add_argument(
        "--timeout-s",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        help="give up (unreachable) after this many seconds (default %(default)s)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the node's answer and the verdict as JSON"
    )
    return parser.parse_args(argv)


def health_main(argv: Sequence[str], out: TextIO | None = None) -> int:
    """Entry point of ``lograft node health``; returns the exit code (0 healthy, 1 not)."""
    args = _parse_args(argv)
    stream = out if out is not None else sys.stdout
    verdict = check_health(args.bootstrap, max(args.timeout_s, 0.001))
    if args.json:
        document = {
            "address": args.bootstrap,
            "healthy": verdict.healthy,
            "reason": verdict.reason,
            "node": _facts_dict(verdict.facts) if verdict.facts is not None else None,
        }
        stream.write(json.dumps(document, sort_keys=True) + "\n")
    else:
        stream.write(verdict.reason + "\n")
    stream.flush()
    return 0 if verdict.healthy else 1
