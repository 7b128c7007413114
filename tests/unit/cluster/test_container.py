"""The container entrypoint's environment mapping (cluster/container.py)."""

from __future__ import annotations

import pytest

from cluster.container import (
    CONTAINER_DEFAULTS,
    container_settings,
    env_name,
    health_address,
    node_command,
)
from lograft.protocol.errors import InvalidConfigError
from lograft.protocol.node_config import node_setting_names


def test_every_node_setting_has_one_environment_variable() -> None:
    names = node_setting_names()
    variables = {env_name(name) for name in names}
    assert len(variables) == len(names), "two settings map to the same variable"
    for kafka_name in ("node.id", "controller.quorum.voters", "advertised.listeners"):
        assert kafka_name in names
    assert env_name("controller.quorum.voters") == "LOGRAFT_CONTROLLER_QUORUM_VOTERS"


def test_container_defaults_are_node_settings() -> None:
    assert set(CONTAINER_DEFAULTS) <= set(node_setting_names())


def test_environment_overrides_defaults() -> None:
    settings = container_settings(
        {
            "LOGRAFT_NODE_ID": "2",
            "LOGRAFT_MIN_INSYNC_REPLICAS": "2",
            "LOGRAFT_ADVERTISED_LISTENERS": "",  # empty counts as unset
            "LOGRAFT_LOG_LEVEL": "DEBUG",
            "PATH": "/usr/bin",
        },
        hostname="lograft-2",
    )
    assert settings["node.id"] == "2"
    assert settings["min.insync.replicas"] == "2"
    assert settings["advertised.listeners"] == (
        "INTERNAL://lograft-2:19092,EXTERNAL://127.0.0.1:9092"
    )
    assert settings["controller.quorum.voters"] == "1@lograft-2:19092"
    assert "log.level" not in settings


def test_a_misspelt_variable_stops_the_container() -> None:
    with pytest.raises(InvalidConfigError, match=r"LOGRAFT_MIN_INSYNC_REPLICA \(did you mean"):
        container_settings({"LOGRAFT_MIN_INSYNC_REPLICA": "2"}, hostname="h")


def test_node_command_passes_every_setting_by_name() -> None:
    command = node_command({"node.id": "3", "log.dir": "/data"}, "INFO")
    assert command[1:3] == ["-m", "cluster.node"]
    assert command[5:7] == ["--config", "node.id=3"]
    assert command[7:9] == ["--config", "log.dir=/data"]


def test_health_asks_the_first_listener_on_loopback() -> None:
    assert health_address({"listeners": "INTERNAL://0.0.0.0:19092,EXTERNAL://:9092"}) == (
        "127.0.0.1:19092"
    )
    with pytest.raises(InvalidConfigError):
        health_address({"listeners": "INTERNAL://nohost"})


def test_an_unadvertised_wildcard_listener_is_advertised_as_the_hostname() -> None:
    settings = container_settings(
        {"LOGRAFT_ADVERTISED_LISTENERS": "EXTERNAL://127.0.0.1:29092"}, hostname="box"
    )
    assert settings["advertised.listeners"] == ("EXTERNAL://127.0.0.1:29092,INTERNAL://box:19092")
