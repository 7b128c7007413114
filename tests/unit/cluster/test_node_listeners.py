"""Named listeners (Kafka's listeners, advertised.listeners, inter.broker.listener.name), the
node's settings by Kafka name (``lograft node --config``), and the health verdict."""

from __future__ import annotations

import io
import json
import logging
import socket
import uuid
from pathlib import Path

import pytest

from cluster.node import _parse_args, node_settings
from cluster.node_health import assess, health_main
from controller.logic import BrokerRegistrationRequest, register_broker
from controller.logic.configs import describe_broker_configs
from lograft.metadata import Listener, decode_snapshot, encode_snapshot
from lograft.protocol.errors import InvalidConfigError
from lograft.protocol.node_config import (
    BROKER_TO_TOPIC_CONFIG,
    IDENTITY_SETTINGS,
    NODE_CONFIGS,
    NodeConfig,
    NodeListener,
    node_setting_names,
    parse_listeners,
)
from lograft.protocol.wire import node_pb2 as npb
from tests.integration.nodes import free_port
from tests.unit.controller_fixtures import Cluster

# ---- listeners, advertised.listeners, inter.broker.listener.name ---------------------------


def test_a_listener_not_advertised_advertises_its_bind_address() -> None:
    listeners, inter_broker = parse_listeners("PLAINTEXT://127.0.0.1:9092")
    assert listeners == (NodeListener("PLAINTEXT", "127.0.0.1", 9092, "127.0.0.1", 9092),)
    assert inter_broker == "PLAINTEXT"
    assert listeners[0].bind_address == listeners[0].advertised_address == "127.0.0.1:9092"


def test_two_listeners_each_advertise_their_own_address() -> None:
    listeners, inter_broker = parse_listeners(
        "INTERNAL://0.0.0.0:19092, EXTERNAL://0.0.0.0:9092",
        "INTERNAL://lograft-1:19092,EXTERNAL://127.0.0.1:9092",
    )
    assert [(x.name, x.bind_address, x.advertised_address) for x in listeners] == [
        ("INTERNAL", "0.0.0.0:19092", "lograft-1:19092"),
        ("EXTERNAL", "0.0.0.0:9092", "127.0.0.1:9092"),
    ]
    assert inter_broker == "INTERNAL"  # the first listener, by default


def test_listener_names_are_case_insensitive_and_the_inter_broker_one_is_chosen() -> None:
    listeners, inter_broker = parse_listeners(
        "internal://127.0.0.1:19092,external://127.0.0.1:9092",
        "external://localhost:9092",
        "External",
    )
    assert [x.name for x in listeners] == ["INTERNAL", "EXTERNAL"]
    assert listeners[1].advertised_address == "localhost:9092"
    assert listeners[0].advertised_address == "127.0.0.1:19092"
    assert inter_broker == "EXTERNAL"


def test_ipv6_listeners_keep_their_brackets_in_addresses() -> None:
    (listener,), _ = parse_listeners("PLAINTEXT://[::1]:9092")
    assert listener.host == "::1"
    assert listener.bind_address == listener.advertised_address == "[::1]:9092"


def test_an_empty_host_binds_every_interface_and_must_be_advertised() -> None:
    (listener,), _ = parse_listeners("PLAINTEXT://:9092", "PLAINTEXT://broker-1:9092")
    assert listener.bind_address == "0.0.0.0:9092"
    assert listener.advertised_address == "broker-1:9092"


@pytest.mark.parametrize(
    ("listeners", "advertised", "inter_broker", "setting", "message"),
    [
        ("", "", "", "listeners", "at least one"),
        ("127.0.0.1:9092", "", "", "listeners", "is not NAME://HOST:PORT"),
        ("PLAINTEXT://127.0.0.1", "", "", "listeners", "is not NAME://HOST:PORT"),
        ("PLAINTEXT://127.0.0.1:port", "", "", "listeners", "needs a port"),
        ("PLAINTEXT://127.0.0.1:70000", "", "", "listeners", "needs a port"),
        ("PLAIN TEXT://127.0.0.1:9092", "", "", "listeners", "is not NAME://HOST:PORT"),
        ("A://127.0.0.1:1,a://127.0.0.1:2", "", "", "listeners", "A is given twice"),
        ("A://127.0.0.1:1,B://127.0.0.2:1", "", "", "listeners", "both listen on port 1"),
        ("A://127.0.0.1:1", "B://h:1", "", "advertised.listeners", "B is not one of listeners"),
        ("A://127.0.0.1:1", "A://h:1,A://h:2", "", "advertised.listeners", "A is given twice"),
        ("A://127.0.0.1:1", "A://h", "", "advertised.listeners", "is not NAME://HOST:PORT"),
        ("A://0.0.0.0:1", "", "", "advertised.listeners", "clients cannot dial"),
        ("A://127.0.0.1:1", "A://0.0.0.0:1", "", "advertised.listeners", "clients can dial"),
        ("A://127.0.0.1:1", "A://h:0", "", "advertised.listeners", "clients can dial"),
        ("A://127.0.0.1:1", "", "B", "inter.broker.listener.name", "B is not one of"),
    ],
)
def test_bad_listener_settings_are_refused_naming_the_setting(
    listeners: str, advertised: str, inter_broker: str, setting: str, message: str
) -> None:
    with pytest.raises(InvalidConfigError) as caught:
        parse_listeners(listeners, advertised, inter_broker)
    assert caught.value.message.startswith(f"{setting}: ")
    assert message in caught.value.message


def test_port_zero_listeners_advertise_the_port_they_bind() -> None:
    listeners, _ = parse_listeners("A://127.0.0.1:0,B://127.0.0.1:0")
    assert [x.advertised_port for x in listeners] == [0, 0]


# ---- every setting by Kafka name -------------------------------------------------------------


def test_node_setting_names_list_every_setting_once_with_one_line() -> None:
    names = node_setting_names()
    assert set(names) == set(IDENTITY_SETTINGS) | set(BROKER_TO_TOPIC_CONFIG) | set(NODE_CONFIGS)
    for name in (
        "node.id",
        "log.dir",
        "log.dirs",
        "listeners",
        "advertised.listeners",
        "inter.broker.listener.name",
        "process.roles",
        "controller.quorum.voters",
        "cluster.id",
        "broker.rack",
        "min.insync.replicas",
        "default.replication.factor",
    ):
        assert name in names
    assert all(text.strip() and "\n" not in text for text in names.values())


def test_a_node_is_configured_by_kafka_names_alone() -> None:
    config = NodeConfig.from_settings(
        {
            "node.id": "2",
            "log.dir": "/var/lib/lograft/data",
            "listeners": "INTERNAL://0.0.0.0:19092,EXTERNAL://0.0.0.0:9092",
            "advertised.listeners": "INTERNAL://lograft-2:19092,EXTERNAL://127.0.0.1:9093",
            "inter.broker.listener.name": "INTERNAL",
            "process.roles": "broker,controller",
            "controller.quorum.voters": "1@lograft-1:19092,2@lograft-2:19092,3@lograft-3:19092",
            "cluster.id": "abc",
            "broker.rack": "r2",
            "min.insync.replicas": "2",
            "default.replication.factor": "3",
        },
        Path,
    )
    assert (config.node_id, config.data_dir) == (2, Path("/var/lib/lograft/data"))
    assert config.inter_broker_listener.advertised_address == "lograft-2:19092"
    assert [x.advertised_address for x in config.listeners] == [
        "lograft-2:19092",
        "127.0.0.1:9093",
    ]
    assert config.process_roles == {"broker", "controller"}
    assert config.quorum_voters == {
        1: "lograft-1:19092",
        2: "lograft-2:19092",
        3: "lograft-3:19092",
    }
    assert (config.cluster_id, config.rack) == ("abc", "r2")
    assert config.log_defaults.min_insync_replicas == 2
    assert config.default_replication_factor == 3


def test_defaults_without_listeners_are_one_plaintext_listener_on_9092() -> None:
    config = NodeConfig.from_settings({"node.id": "1", "log.dirs": "/data"}, Path)
    assert config.data_dir == Path("/data")
    assert [(x.name, x.bind_address) for x in config.listeners] == [("PLAINTEXT", "127.0.0.1:9092")]
    assert config.process_roles == {"broker"} and config.quorum_voters is None


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"log.dir": "/d"}, "node.id is required"),
        ({"node.id": "x", "log.dir": "/d"}, "node.id='x' is not an integer"),
        ({"node.id": "-1", "log.dir": "/d"}, "node.id must be >= 0"),
        ({"node.id": "1"}, "log.dir is required"),
        ({"node.id": "1", "log.dirs": "/a,/b"}, "log.dirs='/a,/b'"),
        ({"node.id": "1", "log.dir": "/a", "log.dirs": "/b"}, "disagree"),
        ({"node.id": "1", "log.dir": "/d", "node.idd": "1"}, "unknown node config 'node.idd'"),
        ({"node.id": "1", "log.dir": "/d", "listeners": "x"}, "listeners: "),
        ({"node.id": "1", "log.dir": "/d", "process.roles": "controller"}, "quorum.voters"),
        (
            {"node.id": "1", "log.dir": "/d", "broker.heartbeat.interval.ms": "3000"},
            "broker.heartbeat.interval.ms=3000 must be less than broker.session.timeout.ms=3000",
        ),
    ],
)
def test_bad_or_unknown_settings_are_refused(settings: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidConfigError) as caught:
        NodeConfig.from_settings(settings, Path)
    assert message in caught.value.message


def test_the_command_line_maps_configs_and_flags_win() -> None:
    args = _parse_args(
        [
            "--config",
            "node.id=1",
            "--config",
            "log.dirs=/config-dir",
            "--config",
            "broker.rack = r1",
            "--config",
            "controller.quorum.voters=1@h:1",
            "--node-id",
            "7",
            "--data-dir",
            "/flag-dir",
            "--rack",
            "r9",
        ]
    )
    settings = node_settings(args)
    assert settings["node.id"] == "7"
    assert settings["log.dir"] == "/flag-dir" and "log.dirs" not in settings
    assert settings["broker.rack"] == "r9"
    assert settings["controller.quorum.voters"] == "1@h:1"
    assert "listeners" not in settings  # the default listener


def test_listen_is_one_plaintext_listener_and_wins_over_listeners(
    caplog: pytest.LogCaptureFixture,
) -> None:
    args = _parse_args(
        [
            "--listen",
            "127.0.0.1:9093",
            "--advertised-host",
            "broker-1",
            "--config",
            "listeners=A://127.0.0.1:1",
        ]
    )
    with caplog.at_level(logging.WARNING):
        settings = node_settings(args)
    assert settings["listeners"] == "PLAINTEXT://127.0.0.1:9093"
    assert settings["advertised.listeners"] == "PLAINTEXT://broker-1:9093"
    assert "--listen wins over listeners" in caplog.text
    config = NodeConfig.from_settings({**settings, "node.id": "1", "log.dir": "/d"}, Path)
    assert [(x.name, x.bind_address, x.advertised_address) for x in config.listeners] == [
        ("PLAINTEXT", "127.0.0.1:9093", "broker-1:9093")
    ]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--config", "node.id"], "is not NAME=VALUE"),
        (["--listen", "nonsense"], "is not HOST:PORT"),
        (["--listen", "0.0.0.0:9092"], "give --advertised-host"),
        (["--advertised-host", "h", "--config", "listeners=A://h:1"], "goes with --listen"),
    ],
)
def test_bad_command_lines_are_refused(argv: list[str], message: str) -> None:
    with pytest.raises(InvalidConfigError) as caught:
        node_settings(_parse_args(argv))
    assert message in caught.value.message


def test_describe_configs_shows_every_listener(tmp_path: Path) -> None:
    config = NodeConfig.from_settings(
        {
            "node.id": "1",
            "log.dir": str(tmp_path),
            "listeners": "INTERNAL://0.0.0.0:19092,EXTERNAL://0.0.0.0:9092",
            "advertised.listeners": "INTERNAL://n1:19092,EXTERNAL://127.0.0.1:9092",
            "inter.broker.listener.name": "INTERNAL",
        },
        Path,
    )
    described = {d.name: d.value for d in describe_broker_configs(config)}
    assert described["listeners"] == "INTERNAL://0.0.0.0:19092,EXTERNAL://0.0.0.0:9092"
    assert described["advertised.listeners"] == "INTERNAL://n1:19092,EXTERNAL://127.0.0.1:9092"
    assert described["inter.broker.listener.name"] == "INTERNAL"


# ---- registration keeps every listener -------------------------------------------------------


def _register(cluster: Cluster, incarnation: int, listeners: tuple[Listener, ...]) -> int:
    request = BrokerRegistrationRequest(1, uuid.UUID(int=incarnation), listeners)
    return cluster.commit(
        register_broker(cluster.image, request, cluster.heartbeats, cluster.now_ms)
    ).broker_epoch


def test_the_image_keeps_every_listener_and_a_new_incarnation_replaces_them() -> None:
    cluster = Cluster()
    first = (Listener("INTERNAL", "n1", 19092), Listener("EXTERNAL", "127.0.0.1", 9092))
    epoch = _register(cluster, 10, first)
    broker = cluster.image.brokers[1]
    assert broker.listeners == first
    assert broker.listener("EXTERNAL") == first[1] and broker.listener("OTHER") is None
    assert broker.listener(None) == first[0]
    assert decode_snapshot(encode_snapshot(cluster.image)).brokers[1].listeners == first
    # A restart with other listeners is a new incarnation: registered again, new epoch.
    cluster.now_ms += 10_000
    second = (Listener("PLAINTEXT", "n1", 9092),)
    assert _register(cluster, 11, second) > epoch
    assert cluster.image.brokers[1].listeners == second


# ---- the health verdict ----------------------------------------------------------------------


def _facts(**fields: object) -> npb.NodeHealthResponse:
    base: dict[str, object] = {
        "node_id": 2,
        "roles": ["broker", "controller"],
        "in_quorum": True,
        "broker_epoch": 5,
        "fenced": False,
        "metadata_applied_offset": 140,
        "metadata_high_watermark": 140,
        "quorum_leader_id": 1,
    }
    base.update(fields)
    return npb.NodeHealthResponse(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fields", "healthy", "reason"),
    [
        ({}, True, "healthy: broker 2 registered (epoch 5), unfenced, metadata applied 140 of 140"),
        ({"broker_epoch": -1}, False, "unhealthy: broker 2 is not registered with the controller"),
        ({"fenced": True}, False, "unhealthy: broker 2 is fenced"),
        ({"metadata_applied_offset": 120}, False, "unhealthy: metadata applied 120 of 140"),
        ({"quorum_leader_id": -1}, False, "unhealthy: controller 2 knows no quorum leader"),
        (
            {"roles": ["controller"], "broker_epoch": -1, "fenced": True},
            True,
            "healthy: controller 2, metadata applied 140 of 140, leader 1",
        ),
        (
            {"roles": ["controller"], "quorum_leader_id": -1},
            False,
            "unhealthy: controller 2 knows no quorum leader",
        ),
        ({"in_quorum": False, "roles": ["broker"]}, True, "healthy: standalone broker 2"),
    ],
)
def test_health_verdicts(fields: dict[str, object], healthy: bool, reason: str) -> None:
    verdict = assess(_facts(**fields))
    assert verdict.healthy is healthy
    assert verdict.reason.startswith(reason)


def test_health_of_an_unreachable_node_is_one_line_and_exit_1() -> None:
    port = free_port()
    out = io.StringIO()
    assert health_main(["--bootstrap", f"127.0.0.1:{port}", "--timeout-s", "2"], out) == 1
    assert out.getvalue() == f"unreachable: 127.0.0.1:{port} (connection refused)\n"
    out = io.StringIO()
    assert health_main(["--bootstrap", f"127.0.0.1:{port}", "--json"], out) == 1
    document = json.loads(out.getvalue())
    assert document["healthy"] is False and document["node"] is None


def test_health_of_a_node_that_never_answers_ends_at_its_timeout() -> None:
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never speaks gRPC
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        out = io.StringIO()
        assert health_main(["--bootstrap", address, "--timeout-s", "0.5"], out) == 1
    assert out.getvalue() == f"unreachable: {address} (no answer within 0.5 s)\n"
