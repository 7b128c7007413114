"""The data source's options: which go to lograft's clients and which the source or sink reads.

Spark's Kafka connector passes ``kafka.``-prefixed options to its Kafka clients
(``kafka.bootstrap.servers``); this data source accepts those and the same client settings
without the prefix (``bootstrap.servers``, ``linger.ms``). A name is a client setting if the
client's config table has it (``PRODUCER_CONFIGS`` for the sink, ``CONSUMER_CONFIGS`` for the
source); with the prefix it must be one, so a misspelt ``kafka.`` option fails the query
instead of being dropped. Anything else is the data source's own option (``topic``,
``subscribe``, ``startingOffsets``...) and is read by name, case-insensitively as Spark does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from cluster.client._client_config import ConfigDef, resolve_config
from lograft.protocol.errors import InvalidConfigError, LograftError

__all__ = [
    "CLIENT_PREFIX",
    "client_config",
    "option",
    "option_int",
    "settings_for",
]


CLIENT_PREFIX: Final = "kafka."
"""Options with this prefix are client settings with the prefix removed (Spark's spelling)."""


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(name).lower(): str(value) for name, value in options.items()}


def client_config(
    options: Mapping[str, str],
    defs: tuple[ConfigDef[Any], ...],
    kind: str,
    *,
    fixed: Mapping[str, object] | None = None,
) -> dict[str, object]:
    """The client settings among ``options``, checked against ``defs``.

    ``kind`` names the client in errors (``producer``); ``fixed`` are settings the data
    source needs whatever the user gave (the sink's ``enable.idempotence``), and a user
    option that contradicts one raises ``InvalidConfigError``. Returns the settings as
    given (names and values), ready for the client's constructor, which fills defaults.
    """
    known = {d.name.lower(): d.name for d in defs}
    chosen: dict[str, object] = {}
    for name, value in _lower(options).items():
        if name.startswith(CLIENT_PREFIX):
            bare = name[len(CLIENT_PREFIX) :]
            if bare not in known:
                raise InvalidConfigError(f"option {name!r}: unknown {kind} config {bare!r}")
            chosen[known[bare]] = value
        elif name in known:
            chosen[known[name]] = value
    by_name = {d.name: d for d in defs}
    for name, needed in (fixed or {}).items():
        given = chosen.get(name)
        if given is not None and _parsed(by_name[name], given) != _parsed(by_name[name], needed):
            raise InvalidConfigError(
                f"option {name}={given!r}: the lograft data source needs {name}={needed!r}"
            )
        chosen[name] = needed
    # Validate now, on the driver, so a bad option fails the query before any task runs.
    resolve_config(kind, defs, chosen, {})
    return chosen


def settings_for(config: Mapping[str, object], defs: Sequence[ConfigDef[Any]]) -> dict[str, object]:
    """The settings of ``config`` (one client's) that a client of ``defs`` takes too: how
    the sink's progress reader and the source's admin client get the user's servers,
    timeouts and client id."""
    names = {d.name for d in defs}
    return {name: value for name, value in config.items() if name in names}


def _parsed(definition: ConfigDef[Any], value: object) -> object:
    try:
        return definition.parse(value)
    except (ValueError, LograftError):
        return value  # resolve_config names the bad value


def option(options: Mapping[str, str], name: str, default: str | None = None) -> str | None:
    """The data source option ``name`` (case-insensitive), or ``default``."""
    return _lower(options).get(name.lower(), default)


def option_int(options: Mapping[str, str], name: str, minimum: int) -> int | None:
    """An integer option of at least ``minimum``, or ``None`` if it was not given."""
    text = option(options, name)
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        raise InvalidConfigError(f"option {name}={text!r}: not an integer") from None
    if value < minimum:
        raise InvalidConfigError(f"option {name}={value}: must be at least {minimum}")
    return value
