"""Client configuration: typed config values, their ``ConfigDef`` tables and parsers.

Each client's configuration is a frozen dataclass (:class:`ClientConfig` and its subclasses,
``ProducerConfig`` and the others): one typed field per config, declared with
:func:`setting`, which carries the config's Kafka name, default, parser and doc. A
client's table of :class:`ConfigDef` (``COMMON_CONFIGS``, ``PRODUCER_CONFIGS``, ...) is
derived from its fields, so a config is defined once. :meth:`ClientConfig.resolve` checks a
configuration given with Kafka's names (``bootstrap.servers``) and raises
``InvalidConfigError`` for an unknown name or a bad value; keyword overrides may spell the
names with underscores (``linger_ms=10``). The value it returns is typed: code reads
``config.linger_ms`` as an ``int``, not a ``dict[str, object]`` entry narrowed at each use.

This module reads no environment variable: the default bootstrap list is the three nodes of
a local cluster (``lograft cluster up``) or of the repository's docker-compose cluster,
``127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094``; ``LOGRAFT_BOOTSTRAP`` is read by the CLI
only.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Self, TypeVar

from lograft.protocol.errors import InvalidConfigError, LograftError

__all__ = [
    "COMMON_CONFIGS",
    "DEFAULT_BOOTSTRAP_SERVERS",
    "DEFAULT_CONNECTION_SETUP_TIMEOUT_MS",
    "ClientConfig",
    "ConfigDef",
    "a_string",
    "boolean",
    "bootstrap_server_list",
    "given_config",
    "int_at_least",
    "one_of",
    "optional_string",
    "parse_bootstrap_servers",
    "resolve_config",
    "setting",
]

log = logging.getLogger(__name__)

DEFAULT_BOOTSTRAP_SERVERS = "127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094"
"""Where clients look for a cluster when ``bootstrap.servers`` is not given: the three nodes
of ``lograft cluster up`` and of the docker-compose cluster; any one that answers will do."""

DEFAULT_CONNECTION_SETUP_TIMEOUT_MS = 3000
"""``socket.connection.setup.timeout.ms``: how long a broker may take to accept a connection
(Kafka's default is 10 s; a few seconds tell a dead address from a slow cluster sooner)."""


T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ConfigDef(Generic[T]):
    """One client config: its Kafka name, default and parser (which raises ``ValueError``)."""

    name: str
    default: T
    parse: Callable[[object], T]
    doc: str


def int_at_least(low: int) -> Callable[[object], int]:
    """A parser for integers ``>= low``; accepts ints and decimal strings, not bools."""

    def parse(value: object) -> int:
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


def boolean(value: object) -> bool:
    """A config parser: ``True``/``False`` or the strings ``true``/``false``."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError("expected true or false")


def one_of(*choices: str) -> Callable[[object], str]:
    """A parser for one of ``choices`` (case-insensitive)."""

    def parse(value: object) -> str:
        if not isinstance(value, str) or value.strip().lower() not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return value.strip().lower()

    return parse


def a_string(value: object) -> str:
    """A parser for a string."""
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {type(value).__name__}")
    return value


def optional_string(value: object) -> str | None:
    """A parser for a string or ``None``."""
    return None if value is None else a_string(value)


def bootstrap_server_list(value: object) -> str:
    """A parser for ``bootstrap.servers``: ``host:port,host:port`` (or a list of those)."""
    if isinstance(value, (list, tuple)):
        value = ",".join(str(v) for v in value)
    if not isinstance(value, str):
        raise ValueError(f"expected 'host:port,...', got {type(value).__name__}")
    parse_bootstrap_servers(value)
    return value


_DEFINITION = "lograft.config"
"""The key of a config field's metadata that holds its :class:`ConfigDef`."""


def setting(name: str, default: T, parse: Callable[[object], T], doc: str) -> T:
    """A field of a :class:`ClientConfig`: the config's Kafka ``name``, default, parser, doc.

    Typed as its value so that the dataclass field keeps the parser's type.
    """
    definition = ConfigDef(name, default, parse, doc)
    return dataclasses.field(default=default, metadata={_DEFINITION: definition})


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """The configs every client takes (producer, consumer, admin), parsed and typed.

    Subclasses add their own fields with :func:`setting`. ``config["client.id"]`` reads a
    value by its Kafka name, as the configuration was given.
    """

    KIND: ClassVar[str] = "client"
    """The client's name in error messages (``unknown producer config 'x'``)."""

    bootstrap_servers: str = setting(
        "bootstrap.servers",
        DEFAULT_BOOTSTRAP_SERVERS,
        bootstrap_server_list,
        "host:port pairs of brokers to ask for cluster metadata, comma separated; any one "
        "that answers will do",
    )
    client_id: str = setting(
        "client.id", "lograft-python", a_string, "a name for this client in server logs"
    )
    request_timeout_ms: int = setting(
        "request.timeout.ms", 30000, int_at_least(1), "how long to wait for one response"
    )
    retry_backoff_ms: int = setting(
        "retry.backoff.ms", 100, int_at_least(0), "pause before retrying a failed request"
    )
    socket_connection_setup_timeout_ms: int = setting(
        "socket.connection.setup.timeout.ms",
        DEFAULT_CONNECTION_SETUP_TIMEOUT_MS,
        int_at_least(1),
        "how long to wait for a broker to accept a connection before trying the next one; "
        "when no bootstrap server or known broker connects, a call fails after this long "
        "with NETWORK_EXCEPTION naming each address and why",
    )
    metadata_max_age_ms: int = setting(
        "metadata.max.age.ms",
        300000,
        int_at_least(0),
        "refresh cached metadata at least this often",
    )

    @classmethod
    def definitions(cls) -> tuple[ConfigDef[Any], ...]:
        """The table of every config this client takes, in declaration order."""
        return tuple(definition for _, definition in _fields(cls))

    @classmethod
    def resolve(cls, config: Mapping[str, object] | None, overrides: Mapping[str, object]) -> Self:
        """Check and complete a configuration given by Kafka names (see :func:`resolve_config`)."""
        resolved = resolve_config(cls.KIND, cls.definitions(), config, overrides)
        values: dict[str, Any] = {
            attribute: resolved[definition.name] for attribute, definition in _fields(cls)
        }
        return cls(**values)

    def __getitem__(self, name: str) -> object:
        """The value of the config with Kafka name ``name`` (``KeyError`` if there is none)."""
        for attribute, definition in _fields(type(self)):
            if definition.name == name:
                return getattr(self, attribute)
        raise KeyError(name)

    def as_dict(self) -> dict[str, object]:
        """Every config by its Kafka name."""
        return {
            definition.name: getattr(self, attribute)
            for attribute, definition in _fields(type(self))
        }


def _fields(config_type: type[ClientConfig]) -> list[tuple[str, ConfigDef[Any]]]:
    """Each field of a config class with its definition."""
    return [(field.name, field.metadata[_DEFINITION]) for field in dataclasses.fields(config_type)]


COMMON_CONFIGS: tuple[ConfigDef[Any], ...] = ClientConfig.definitions()
"""The configs every client takes (producer, consumer, admin); each client's table adds more."""


def given_config(
    config: Mapping[str, object] | None, overrides: Mapping[str, object]
) -> dict[str, object]:
    """The configs the caller set, by Kafka name: ``config``, then ``overrides`` (keyword
    arguments, underscores for dots), which win."""
    given = {str(name): value for name, value in (config or {}).items()}
    given.update((name.replace("_", "."), value) for name, value in overrides.items())
    return given


def resolve_config(
    kind: str,
    defs: Sequence[ConfigDef[Any]],
    config: Mapping[str, object] | None,
    overrides: Mapping[str, object],
) -> dict[str, object]:
    """Check and complete a client configuration.

    ``config`` uses Kafka's names; ``overrides`` (keyword arguments) may use underscores for
    dots and win over ``config``. Returns every name of ``defs`` with its parsed value.
    Raises ``InvalidConfigError`` naming the client ``kind`` for an unknown name or a bad value.
    """
    by_name = {d.name: d for d in defs}
    resolved: dict[str, object] = {}
    for name, value in given_config(config, overrides).items():
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
