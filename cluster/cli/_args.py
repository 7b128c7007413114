"""Argument types, the client config file and client factories shared by the commands.

Where a client config comes from, strongest first (as Kafka's tools)::

    command-line flags (--bootstrap, --acks, --group, ...)
    --producer-property / --consumer-property NAME=VALUE
    the config file: --config FILE (alias --command-config), else $LOGRAFT_CONFIG
    $LOGRAFT_BOOTSTRAP (bootstrap.servers only)
    the local cluster: the nodes in ./data/cluster/cluster.json (bootstrap.servers only)
    the defaults (bootstrap.servers 127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094, the three
    nodes of `lograft cluster up` and of the docker-compose cluster)

The config file holds Java-properties lines: ``name=value`` (or ``name: value``), comments
starting with ``#`` or ``!``, blank lines, a trailing backslash to continue a line. Every name
must be a config of the producer, the consumer or the admin client; each client gets the names
it knows. A bad name or value is an ``InvalidConfigError`` naming the file and the line.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal, Never, TextIO

from tqdm import tqdm

from cluster.client import DEFAULT_BOOTSTRAP_SERVERS, AdminClient
from cluster.client.admin import ADMIN_CONFIGS
from cluster.client.consumer import CONSUMER_CONFIGS
from cluster.client.producer import PRODUCER_CONFIGS
from cluster.launcher.local_cluster import LocalCluster
from cluster.launcher.spec import CLUSTER_FILE, DEFAULT_DATA_DIR
from lograft.protocol.errors import InvalidConfigError, LograftError

__all__ = [
    "BOOTSTRAP_ENV",
    "CONFIG_ENV",
    "MAX_CONFIG_FILE_BYTES",
    "ClientConfigFile",
    "ClientKind",
    "ConfigEntry",
    "Streams",
    "acks",
    "admin_client",
    "bootstrap_origin",
    "client_config_file",
    "client_properties",
    "config_pair",
    "default_bootstrap",
    "load_client_config",
    "local_cluster_bootstrap",
    "non_negative",
    "offset",
    "parse_properties",
    "positive",
    "progress_bar",
    "resolve_bootstrap",
    "separator",
]

log = logging.getLogger(__name__)

BOOTSTRAP_ENV = "LOGRAFT_BOOTSTRAP"
"""The environment variable naming ``bootstrap.servers`` when no flag or config file does."""
CONFIG_ENV = "LOGRAFT_CONFIG"
"""The environment variable naming the client config file when ``--config`` is not given."""
MAX_CONFIG_FILE_BYTES = 1024 * 1024
"""A config file is a few lines; anything larger is refused rather than read."""

ClientKind = Literal["producer", "consumer", "admin"]
"""Which client a set of configs is for."""

_CONFIG_DEFS = {"producer": PRODUCER_CONFIGS, "consumer": CONSUMER_CONFIGS, "admin": ADMIN_CONFIGS}
_NAMES_BY_KIND: dict[str, frozenset[str]] = {
    kind: frozenset(d.name for d in defs) for kind, defs in _CONFIG_DEFS.items()
}
_PARSERS = {d.name: d.parse for defs in _CONFIG_DEFS.values() for d in defs}
_COMMON_NAMES = frozenset.intersection(*_NAMES_BY_KIND.values())


@dataclass(frozen=True, slots=True)
class Streams:
    """Where a command reads and writes: stdin as bytes, stdout as text and bytes, stderr."""

    stdin: BinaryIO
    stdout: TextIO
    stdout_bytes: BinaryIO
    stderr: TextIO


def local_cluster_bootstrap(data_dir: Path = DEFAULT_DATA_DIR) -> str | None:
    """Every node of the local cluster recorded in ``data_dir/cluster.json`` (relative to the
    working directory, as ``lograft cluster`` finds it), or ``None`` when there is none.

    An unreadable ``cluster.json`` counts as none (logged at WARNING).
    """
    if not (data_dir / CLUSTER_FILE).is_file():
        return None
    try:
        return LocalCluster.load(data_dir).bootstrap
    except LograftError as exc:
        log.warning("local cluster file ignored path=%s error=%s", data_dir / CLUSTER_FILE, exc)
        return None


def default_bootstrap() -> str:
    """``LOGRAFT_BOOTSTRAP`` if set and not empty, else the nodes of the local cluster in
    ``./data/cluster`` (its ``cluster.json``), else ``DEFAULT_BOOTSTRAP_SERVERS``
    (``127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094``)."""
    return (
        os.environ.get(BOOTSTRAP_ENV, "").strip()
        or local_cluster_bootstrap()
        or DEFAULT_BOOTSTRAP_SERVERS
    )


def bootstrap_origin(args: argparse.Namespace) -> str:
    """Where the command's ``bootstrap.servers`` came from, for error messages: ``--bootstrap``,
    a ``--*-property``, ``config file PATH``, ``$LOGRAFT_BOOTSTRAP``,
    ``./data/cluster/cluster.json`` or ``the default`` (in :func:`client_properties`'s order)."""
    if getattr(args, "bootstrap_flag", None) or (
        not hasattr(args, "bootstrap_flag") and getattr(args, "bootstrap", None)
    ):
        return "--bootstrap"
    for flag in ("producer_property", "consumer_property"):
        if any(name == "bootstrap.servers" for name, _ in getattr(args, flag, None) or ()):
            return "--" + flag.replace("_", "-")
    try:
        config = client_config_file(args)
    except LograftError:
        config = None
    if config is not None and config.get("bootstrap.servers"):
        return f"config file {config.path}"
    if os.environ.get(BOOTSTRAP_ENV, "").strip():
        return f"${BOOTSTRAP_ENV}"
    if local_cluster_bootstrap() is not None:
        return f"./{DEFAULT_DATA_DIR / CLUSTER_FILE}"
    return "the default"


# ---- argument types --------------------------------------------------------------------------


def config_pair(text: str) -> tuple[str, str]:
    """``NAME=VALUE`` → ``(name, value)``."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name.strip(), value.strip()


def positive(text: str) -> int:
    """An integer above zero."""
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def non_negative(text: str) -> int:
    """An integer at or above zero."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def separator(text: str) -> str:
    """A key separator: any text but the empty string (nothing to split at)."""
    if not text:
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def acks(text: str) -> str:
    """``all``, ``-1``, ``0`` or ``1``."""
    if text.strip().lower() not in ("all", "-1", "0", "1"):
        raise argparse.ArgumentTypeError(f"acks must be all, -1, 0 or 1, got {text!r}")
    return text.strip().lower()


def offset(text: str) -> str | int:
    """``earliest``, ``latest`` or an offset at or above zero."""
    lowered = text.strip().lower()
    if lowered in ("earliest", "latest"):
        return lowered
    return non_negative(text)


# ---- the config file -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One ``name=value`` of a config file, with the line it starts on."""

    name: str
    value: str
    line: int


@dataclass(frozen=True, slots=True)
class ClientConfigFile:
    """A checked client config file: its path and its entries (a later name wins)."""

    path: str
    entries: tuple[ConfigEntry, ...]

    def for_client(self, kind: ClientKind | None) -> dict[str, str]:
        """The entries that client knows (``None``: the names every client knows)."""
        known = _NAMES_BY_KIND[kind] if kind is not None else _COMMON_NAMES
        return {e.name: e.value for e in self.entries if e.name in known}

    def get(self, name: str) -> str | None:
        """The value of ``name`` (the last one given), or ``None``."""
        found = [e.value for e in self.entries if e.name == name]
        return found[-1] if found else None


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str) -> str:
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\\" and index + 1 < len(text):
            index += 1
            out.append(_ESCAPES.get(text[index], text[index]))
        else:
            out.append(char)
        index += 1
    return "".join(out)


def _ends_with_continuation(line: str) -> bool:
    """An odd number of trailing backslashes: the last one joins the next line."""
    stripped = line.rstrip("\\")
    return (len(line) - len(stripped)) % 2 == 1


def _split_key(line: str) -> tuple[str, str]:
    """Key and value of a logical line: the key ends at the first unescaped ``=``, ``:`` or
    whitespace (Java's ``Properties.load``)."""
    index = 0
    while index < len(line):
        char = line[index]
        if char == "\\":
            index += 2
            continue
        if char in "=: \t\f":
            break
        index += 1
    key = line[:index]
    rest = line[index:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return _unescape(key), _unescape(rest).rstrip()


def parse_properties(text: str, source: str = "<config>") -> list[ConfigEntry]:
    """Java-properties lines → entries, in order; raises ``InvalidConfigError`` for a line
    without a name (``source`` names the file in the message)."""
    entries: list[ConfigEntry] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        start = index + 1
        line = lines[index].lstrip(" \t\f")
        index += 1
        if not line or line[0] in "#!":
            continue
        while _ends_with_continuation(line) and index < len(lines):
            line = line[:-1] + lines[index].lstrip(" \t\f")
            index += 1
        if _ends_with_continuation(line):
            line = line[:-1]
        name, value = _split_key(line)
        if not name:
            raise InvalidConfigError(f"{source}:{start}: expected name=value, got {line!r}")
        entries.append(ConfigEntry(name, value, start))
    return entries


def load_client_config(path: str) -> ClientConfigFile:
    """Read and check a client config file.

    Raises ``InvalidConfigError`` (with the file and line) when it cannot be read, is larger
    than ``MAX_CONFIG_FILE_BYTES``, is not UTF-8, or names a config no client has or gives
    one a bad value.
    """
    try:
        with open(path, "rb") as stream:
            data = stream.read(MAX_CONFIG_FILE_BYTES + 1)
    except OSError as exc:
        raise InvalidConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    if len(data) > MAX_CONFIG_FILE_BYTES:
        raise InvalidConfigError(f"config file {path} is larger than {MAX_CONFIG_FILE_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidConfigError(f"config file {path} is not UTF-8 text: {exc}") from None
    entries = parse_properties(text, path)
    for entry in entries:
        parse = _PARSERS.get(entry.name)
        if parse is None:
            raise InvalidConfigError(
                f"{path}:{entry.line}: unknown client config {entry.name!r} (not a producer, "
                "consumer or admin client config)"
            )
        try:
            parse(entry.value)
        except (ValueError, LograftError) as exc:
            raise InvalidConfigError(
                f"{path}:{entry.line}: {entry.name}={entry.value!r}: {exc}"
            ) from None
    return ClientConfigFile(path, tuple(entries))


def client_config_file(args: argparse.Namespace) -> ClientConfigFile | None:
    """The command's config file (``--config``, else ``$LOGRAFT_CONFIG``), read once."""
    cached = getattr(args, "_client_config_file", None)
    if isinstance(cached, ClientConfigFile):
        return cached
    path = getattr(args, "command_config", None) or os.environ.get(CONFIG_ENV, "").strip()
    if not path:
        return None
    loaded = load_client_config(path)
    args._client_config_file = loaded
    return loaded


def resolve_bootstrap(args: argparse.Namespace) -> str:
    """``--bootstrap``, else the config file's ``bootstrap.servers``, else the environment,
    else the default."""
    flag = getattr(args, "bootstrap_flag", None) or getattr(args, "bootstrap", None)
    if flag:
        return str(flag)
    config = client_config_file(args)
    from_file = config.get("bootstrap.servers") if config is not None else None
    return from_file or default_bootstrap()


def _layered(
    args: argparse.Namespace,
    kind: ClientKind | None,
    defaults: Mapping[str, object],
    extra: Iterable[tuple[str, str]],
) -> dict[str, object]:
    config: dict[str, object] = {"bootstrap.servers": default_bootstrap(), **defaults}
    file = client_config_file(args)
    if file is not None:
        config.update(file.for_client(kind))
    config.update(dict(extra))
    # An explicit --bootstrap beats everything; `bootstrap_flag` is set by `main` (a
    # namespace built by parse_args alone only has `bootstrap`, which is then the flag).
    flag = (
        getattr(args, "bootstrap_flag", None)
        if hasattr(args, "bootstrap_flag")
        else getattr(args, "bootstrap", None)
    )
    if flag:
        config["bootstrap.servers"] = flag
    return config


def client_properties(
    args: argparse.Namespace,
    extra: Sequence[tuple[str, str]] = (),
    *,
    kind: ClientKind | None = None,
) -> dict[str, object]:
    """Configs of a command's client: defaults, the config file, then ``extra``
    (``--*-property``) on top, and ``--bootstrap`` over all.

    ``kind`` picks the config file's entries that client knows; without it, only the names
    every client knows (``bootstrap.servers``, ``client.id``, timeouts).
    """
    defaults: dict[str, object] = {
        "client.id": "lograft-cli",
        "request.timeout.ms": min(30000, args.api_timeout_ms),
    }
    return _layered(args, kind, defaults, extra)


def admin_client(args: argparse.Namespace) -> AdminClient:
    """An ``AdminClient`` for the command's bootstrap, config file and ``--api-timeout-ms``."""
    config = client_properties(args, kind="admin")
    config.setdefault("default.api.timeout.ms", args.api_timeout_ms)
    return AdminClient(config)


# ---- progress --------------------------------------------------------------------------------


def progress_bar(
    stream: TextIO,
    *,
    total: float | None,
    desc: str,
    unit: str = "records",
    unit_scale: bool = False,
    delay_s: float = 0.0,
    enabled: bool = True,
) -> tqdm[Never]:
    """A ``tqdm`` bar on ``stream`` (stderr), drawn only when that is a terminal.

    Disabled bars accept every call and draw nothing, so callers need no branches; a bar
    never writes to stdout, which keeps ``--json`` output one clean object.
    """
    try:
        interactive = stream.isatty()
    except (AttributeError, ValueError):
        interactive = False
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        unit_scale=unit_scale,
        file=stream,
        disable=not (enabled and interactive),
        delay=delay_s,
        leave=False,
        dynamic_ncols=True,
    )
