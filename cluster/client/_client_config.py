"""Client configuration: the ``ConfigDef`` tables, their value parsers and ``resolve_config``.

:func:`resolve_config` checks a client's configuration (Kafka names such as
``bootstrap.servers``) against a table of :class:`ConfigDef` and raises
``InvalidConfigError`` for an unknown name or a bad value. Keyword overrides may spell the
names with underscores (``linger_ms=10``). ``COMMON_CONFIGS`` are the configs every client
takes; each client's table adds its own. This module reads no environment variable: the
default bootstrap list is the three nodes of a local cluster (``lograft cluster up``) or of
the repository's docker-compose cluster, ``127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094``;
``LOGRAFT_BOOTSTRAP`` is read by the CLI only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from lograft.protocol.errors import InvalidConfigError, LograftError

__all__ = [
    "COMMON_CONFIGS",
    "DEFAULT_BOOTSTRAP_SERVERS",
    "DEFAULT_CONNECTION_SETUP_TIMEOUT_MS",
    "ConfigDef",
    "a_string",
    "boolean",
    "bootstrap_servers",
    "int_at_least",
    "one_of",
    "optional_string",
    "parse_bootstrap_servers",
    "resolve_config",
]

log = logging.getLogger(__name__)

DEFAULT_BOOTSTRAP_SERVERS = "127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094"
"""Where clients look for a cluster when ``bootstrap.servers`` is not given: the three nodes
of ``lograft cluster up`` and of the docker-compose cluster; any one that answers will do."""

DEFAULT_CONNECTION_SETUP_TIMEOUT_MS = 3000
"""``socket.connection.setup.timeout.ms``: how long a broker may take to accept a connection
(Kafka's default is 10 s; a few seconds tell a dead address from a slow cluster sooner)."""


@dataclass(frozen=True, slots=True)
class ConfigDef:
    """One client config: its Kafka name, default and parser (which raises ``ValueError``)."""

    name: str
    default: object
    parse: Callable[[object], object]
    doc: str


def int_at_least(low: int) -> Callable[[object], object]:
    """A parser for integers ``>= low``; accepts ints and decimal strings, not bools."""

    def parse(value: object) -> object:
        if isinstance(value, bool):
            raise ValueError("expected an integer, got a bool")
        if isinstance(value, int):
            number = value
        elif isinstance(value, str):
            number = int(value.strip())
        else:
            raise ValueError(f"expected an integer, got {type(value).__name__}")
        if number < low:
            raise ValueError(f"must be at least {low}")
        return number

    return parse


def boolean(value: object) -> object:
    """A config parser: ``True``/``False`` or the strings ``true``/``false``."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError("expected true or false")


def one_of(*choices: str) -> Callable[[object], object]:
    """A parser for one of ``choices`` (case-insensitive)."""

    def parse(value: object) -> object:
        if not isinstance(value, str) or value.strip().lower() not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return value.strip().lower()

    return parse


def a_string(value: object) -> object:
    """A parser for a string."""
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {type(value).__name__}")
    return value


def optional_string(value: object) -> object:
    """A parser for a string or ``None``."""
    return None if value is None else a_string(value)


def bootstrap_servers(value: object) -> object:
    """A parser for ``bootstrap.servers``: ``host:port,host:port`` (or a list of those)."""
    if isinstance(value, (list, tuple)):
        value = ",".join(str(v) for v in value)
    if not isinstance(value, str):
        raise ValueError(f"expected 'host:port,...', got {type(value).__name__}")
    parse_bootstrap_servers(value)
    return value


COMMON_CONFIGS: tuple[ConfigDef, ...] = (
    ConfigDef(
        "bootstrap.servers",
        DEFAULT_BOOTSTRAP_SERVERS,
        bootstrap_servers,
        "host:port pairs of brokers to ask for cluster metadata, comma separated; any one "
        "that answers will do",
    ),
    ConfigDef("client.id", "lograft-python", a_string, "a name for this client in server logs"),
    ConfigDef("request.timeout.ms", 30000, int_at_least(1), "how long to wait for one response"),
    ConfigDef("retry.backoff.ms", 100, int_at_least(0), "pause before retrying a failed request"),
    ConfigDef(
        "socket.connection.setup.timeout.ms",
        DEFAULT_CONNECTION_SETUP_TIMEOUT_MS,
        int_at_least(1),
        "how long to wait for a broker to accept a connection before trying the next one; "
        "when no bootstrap server or known broker connects, a call fails after this long "
        "with NETWORK_EXCEPTION naming each address and why",
    ),
    ConfigDef(
        "metadata.max.age.ms",
        300000,
        int_at_least(0),
        "refresh cached metadata at least this often",
    ),
)
"""The configs every client takes (producer, consumer, admin); each client's table adds more."""


def resolve_config(
    kind: str,
    defs: Sequence[ConfigDef],
    config: Mapping[str, object] | None,
    overrides: Mapping[str, object],
) -> dict[str, object]:
    """Check and complete a client configuration.

    ``config`` uses Kafka's names; ``overrides`` (keyword arguments) may use underscores for
    dots and win over ``config``. Returns every name of ``defs`` with its parsed value.
    Raises ``InvalidConfigError`` naming the client ``kind`` for an unknown name or a bad value.
    """
    by_name = {d.name: d for d in defs}
    given: dict[str, object] = {}
    for name, value in (config or {}).items():
        given[str(name)] = value
    for name, value in overrides.items():
        given[name.replace("_", ".")] = value
    resolved: dict[str, object] = {}
    for name, value in given.items():
        definition = by_name.get(name)
        if definition is None:
            raise InvalidConfigError(f"unknown {kind} config {name!r}")
        try:
            resolved[name] = definition.parse(value)
        except (ValueError, LograftError) as exc:
            raise InvalidConfigError(f"{kind} config {name}={value!r}: {exc}") from None
    for definition in defs:
        resolved.setdefault(definition.name, definition.default)
    return resolved


def parse_bootstrap_servers(servers: str) -> list[tuple[str, int]]:
    """Parse ``"host:port,host:port"``; IPv6 hosts go in brackets (``[::1]:9092``)."""
    addresses: list[tuple[str, int]] = []
    for raw in servers.split(","):
        item = raw.strip()
        if not item:
            continue
        host, sep, port_text = item.rpartition(":")
        if not sep or not host:
            raise InvalidConfigError(f"bootstrap server {item!r} is not host:port")
        host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        try:
            port = int(port_text)
        except ValueError:
            raise InvalidConfigError(f"bootstrap server {item!r} has a bad port") from None
        if not 0 < port < 65536:
            raise InvalidConfigError(f"bootstrap server {item!r} has a bad port")
        addresses.append((host, port))
    if not addresses:
        raise InvalidConfigError("bootstrap.servers is empty")
    return addresses
