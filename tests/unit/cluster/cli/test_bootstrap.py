"""Reaching a cluster: bootstrap lists, unreachable addresses and the one-line error.

A client takes a list of bootstrap servers and uses any that answers. When none does
(refused, unresolvable, silent), a call fails at once with ``NoBrokersAvailableError``,
whose one-line message names every address and why, instead of retrying until its timeout.
The CLI's default bootstrap is the local cluster's nodes (``./data/cluster/cluster.json``),
else the three default ports. Servers here are in-process, on 127.0.0.1.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from cluster.cli import main
from cluster.cli._args import bootstrap_origin, default_bootstrap, local_cluster_bootstrap
from cluster.client import DEFAULT_BOOTSTRAP_SERVERS, AdminClient, NoBrokersAvailableError
from cluster.client._connection import Connections
from cluster.client._rpc_errors import describe_unavailable, map_rpc_error
from cluster.launcher import ClusterSpec, LocalCluster
from lograft.protocol.errors import LeaderNotAvailableError, NetworkError
from lograft.protocol.wire import broker_pb2 as pb
from lograft.protocol.wire import broker_pb2_grpc as pb_grpc

# ---- reasons ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("details", "reason"),
    [
        (
            "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:9092: "
            "Failed to connect to remote host: Connection refused",
            "connection refused",
        ),
        (
            "errors resolving nosuch.invalid:9092: [field:hostname lookup error:address "
            "lookup failed for nosuch.invalid:9092: Domain name not found]",
            "name not resolved",
        ),
        (
            "DNS resolution failed for broker:9092: C-ares status is not ARES_SUCCESS",
            "name not resolved",
        ),
        (
            "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:9092: "
            "connection attempt timed out before receiving SETTINGS frame",
            "timed out",
        ),
        ("Connection reset by peer", "connection reset"),
        ("Socket closed", "connection closed"),
        (
            "failed to connect to all addresses; last error: UNKNOWN: ipv4:10.0.0.1:9092: "
            "something new",
            "something new",
        ),
        ("", "unavailable"),
    ],
)
def test_unavailable_details_become_a_few_words(details: str, reason: str) -> None:
    assert describe_unavailable(details) == reason


class _RpcError(grpc.RpcError):  # type: ignore[misc]
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self._code = code
        self._details = details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


def test_unavailable_maps_to_the_reason_not_a_status_dump() -> None:
    error = map_rpc_error(
        _RpcError(
            grpc.StatusCode.UNAVAILABLE,
            "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: "
            "Failed to connect to remote host: Connection refused",
        )
    )
    assert type(error) is NetworkError
    assert str(error) == "NETWORK_EXCEPTION: connection refused"
    # A Kafka error named by the broker is still that error.
    named = map_rpc_error(_RpcError(grpc.StatusCode.UNAVAILABLE, "LEADER_NOT_AVAILABLE: electing"))
    assert type(named) is LeaderNotAvailableError


def test_no_brokers_error_is_one_line_not_retriable_network_error() -> None:
    error = NoBrokersAvailableError(
        [("127.0.0.1:9092", "connection refused"), ("broker:9093", "name not resolved")]
    )
    assert isinstance(error, NetworkError)
    assert not error.retriable
    assert str(error) == (
        "NETWORK_EXCEPTION: no broker answered: 127.0.0.1:9092 (connection refused), "
        "broker:9093 (name not resolved)"
    )
    assert error.failures == (
        ("127.0.0.1:9092", "connection refused"),
        ("broker:9093", "name not resolved"),
    )


# ---- addresses --------------------------------------------------------------------------------


def _refused_address() -> str:
    """A 127.0.0.1 port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"


@pytest.fixture
def silent_address() -> Iterator[str]:
    """A port whose kernel accepts connections but where nobody ever speaks (HTTP/2 never
    starts): a blackholed broker as a client sees it."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield f"127.0.0.1:{listener.getsockname()[1]}"


class _Broker(pb_grpc.BrokerServicer):  # type: ignore[misc]
    """Answers Metadata with itself as the only broker, or with a Kafka error."""

    def __init__(self) -> None:
        self.port = 0
        self.error: str | None = None

    def Metadata(self, request: Any, context: Any) -> Any:
        if self.error is not None:
            context.abort(grpc.StatusCode.UNAVAILABLE, self.error)
        return pb.MetadataResponse(
            brokers=[pb.BrokerMetadata(node_id=1, host="127.0.0.1", port=self.port)],
            controller_id=1,
            cluster_id="test",
        )


@pytest.fixture
def broker() -> Iterator[_Broker]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    servicer = _Broker()
    pb_grpc.add_BrokerServicer_to_server(servicer, server)
    servicer.port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield servicer
    finally:
        server.stop(None)


def _connections(bootstrap: str) -> Connections:
    # Timeouts far beyond what the test takes: a call that waited them out would show.
    return Connections(bootstrap, request_timeout_ms=120000, connection_setup_timeout_ms=500)


def test_every_address_is_named_with_its_reason_in_order(silent_address: str) -> None:
    refused = _refused_address()
    conn = _connections(f"{refused},nosuch.invalid:9092,{silent_address}")
    try:
        with pytest.raises(NoBrokersAvailableError) as caught:
            conn.refresh_metadata()
    finally:
        conn.close()
    assert caught.value.failures == (
        (refused, "connection refused"),
        ("nosuch.invalid:9092", "name not resolved"),
        (silent_address, "timed out after 500 ms"),
    )
    assert len(str(caught.value).splitlines()) == 1


def test_any_bootstrap_server_that_answers_will_do(broker: _Broker, silent_address: str) -> None:
    conn = _connections(f"{_refused_address()},{silent_address},127.0.0.1:{broker.port}")
    try:
        metadata = conn.refresh_metadata()
    finally:
        conn.close()
    assert metadata.cluster_id == "test"
    assert list(metadata.brokers) == [1]


def test_a_broker_answering_an_error_is_not_a_dead_address(broker: _Broker) -> None:
    """An election in progress stays the retriable error callers retry."""
    broker.error = "LEADER_NOT_AVAILABLE: electing"
    conn = _connections(f"{_refused_address()},127.0.0.1:{broker.port}")
    try:
        with pytest.raises(LeaderNotAvailableError):
            conn.refresh_metadata()
    finally:
        conn.close()


def test_a_call_to_one_unreachable_broker_is_a_retriable_network_error() -> None:
    address = _refused_address()
    host, port = address.rsplit(":", 1)
    conn = _connections(address)
    try:
        with pytest.raises(NetworkError) as caught:
            conn.call_address(host, int(port), "Metadata", pb.MetadataRequest(), what="broker 3")
    finally:
        conn.close()
    assert caught.value.retriable
    assert str(caught.value) == f"NETWORK_EXCEPTION: broker 3 at {address}: connection refused"


def test_admin_call_gives_up_at_once_not_after_its_api_timeout() -> None:
    """default.api.timeout.ms is 10 minutes here: only giving up at once ends the call."""
    refused = _refused_address()
    with (
        AdminClient(bootstrap_servers=refused, default_api_timeout_ms=600000) as admin,
        pytest.raises(NoBrokersAvailableError, match=f"{refused} \\(connection refused\\)"),
    ):
        admin.list_topics()


# ---- the CLI's default bootstrap --------------------------------------------------------------


def test_cli_default_bootstrap_is_the_local_cluster_else_three_ports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LOGRAFT_BOOTSTRAP", raising=False)
    assert local_cluster_bootstrap() is None
    assert default_bootstrap() == DEFAULT_BOOTSTRAP_SERVERS
    assert DEFAULT_BOOTSTRAP_SERVERS == "127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094"

    LocalCluster(ClusterSpec(data_dir=Path("data/cluster"), nodes=2, base_port=29092)).save()
    assert default_bootstrap() == "127.0.0.1:29092,127.0.0.1:29093"
    monkeypatch.setenv("LOGRAFT_BOOTSTRAP", "10.0.0.5:9092")
    assert default_bootstrap() == "10.0.0.5:9092"
    monkeypatch.delenv("LOGRAFT_BOOTSTRAP")

    (tmp_path / "data" / "cluster" / "cluster.json").write_text("{not json")
    assert default_bootstrap() == DEFAULT_BOOTSTRAP_SERVERS


def test_cli_error_is_one_line_naming_addresses_and_where_they_came_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LOGRAFT_CONFIG", raising=False)
    first, second = _refused_address(), _refused_address()
    monkeypatch.setenv("LOGRAFT_BOOTSTRAP", f"{first},{second}")
    assert main(["topics", "list"]) == 1
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"lograft: NETWORK_EXCEPTION: no broker answered: {first} (connection refused), "
        f"{second} (connection refused) (bootstrap from $LOGRAFT_BOOTSTRAP)"
    ]

    assert main(["--bootstrap", first, "topics", "create", "t", "--partitions", "1"]) == 1
    err = capsys.readouterr().err
    assert err == f"lograft: NETWORK_EXCEPTION: no broker answered: {first} (connection refused)\n"


def test_bootstrap_origin_follows_the_precedence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cluster.cli import build_parser

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LOGRAFT_CONFIG", raising=False)
    monkeypatch.delenv("LOGRAFT_BOOTSTRAP", raising=False)
    parser = build_parser()
    assert bootstrap_origin(parser.parse_args(["topics", "list"])) == "the default"
    LocalCluster(ClusterSpec(data_dir=Path("data/cluster"), nodes=1, base_port=29092)).save()
    assert bootstrap_origin(parser.parse_args(["topics", "list"])) == "./data/cluster/cluster.json"
    monkeypatch.setenv("LOGRAFT_BOOTSTRAP", "h:1")
    assert bootstrap_origin(parser.parse_args(["topics", "list"])) == "$LOGRAFT_BOOTSTRAP"
    config = tmp_path / "c.properties"
    config.write_text("bootstrap.servers=f:1\n")
    args = parser.parse_args(["--config", str(config), "topics", "list"])
    assert bootstrap_origin(args) == f"config file {config}"
    args = parser.parse_args(["produce", "t", "--producer-property", "bootstrap.servers=p:1"])
    assert bootstrap_origin(args) == "--producer-property"
    assert bootstrap_origin(parser.parse_args(["--bootstrap", "b:1", "topics", "list"])) == (
        "--bootstrap"
    )
