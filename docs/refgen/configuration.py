"""``configuration.md``: every config, with its default and valid values, from the code.

The clients' ``ConfigDef`` tables (``COMMON_CONFIGS``, ``PRODUCER_CONFIGS``,
``CONSUMER_CONFIGS``, ``ADMIN_CONFIGS``), the topic configs (``TOPIC_CONFIGS`` with the
defaults of ``LogConfig``), the broker settings (``BROKER_TO_TOPIC_CONFIG``,
``NODE_CONFIGS``) and the command lines (:mod:`refgen.command_lines`).
"""

from __future__ import annotations

import inspect
import logging
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from cluster.client import _client_config, admin, consumer, producer
from lograft.protocol.compression import CompressionType
from lograft.protocol.node_config import BROKER_TO_TOPIC_CONFIG, NODE_CONFIGS
from lograft.protocol.topic_config import TOPIC_CONFIGS, LogConfig
from refgen.command_lines import command_lines
from refgen.container import container_environment
from refgen.markdown import GENERATED_NOTE, code_span, inline, summary, table
from refgen.values import show_default, show_text_default

__all__ = ["render_configuration"]

log = logging.getLogger(__name__)


_CLIENT_PARSERS: dict[str, str] = {
    "a_string": "string",
    "optional_string": "string, or unset (`None`)",
    "bootstrap_server_list": "`host:port[,host:port...]` (or a list)",
    "_acks": "`0`, `1`, `all` (same as `-1`)",
    "boolean": "`true` or `false`",
    "_compression": "one of " + ", ".join(f"`{c.kafka_name}`" for c in CompressionType),
}
"""Valid values of the clients' named parsers, by function name; closures are read from
their variables, and any other parser is described by its docstring or its error."""


class _Probe:
    """A value no parser accepts, to read a parser's error message."""


def _probe_rule(parse: Callable[[object], object]) -> str:
    """What a parser says it expected, from the ``ValueError`` it raises for a bad value."""
    try:
        parse(_Probe())
    except Exception as exc:  # any parser error describes the rule
        text = str(exc).strip()
        text = re.sub(r",? got \w+$", "", text)
        return re.sub(r"^(?:[\w.]+ )?(?:must be|expected) ", "", text)
    return ""


def _client_rule(parse: Callable[[object], object]) -> str:
    qualname = getattr(parse, "__qualname__", "")
    nonlocals = inspect.getclosurevars(parse).nonlocals
    if qualname.endswith("int_at_least.<locals>.parse") and "low" in nonlocals:
        return f"integer >= {nonlocals['low']}"
    if qualname.endswith("one_of.<locals>.parse") and "choices" in nonlocals:
        return "one of " + ", ".join(f"`{c}`" for c in nonlocals["choices"])
    known = _CLIENT_PARSERS.get(qualname)
    if known is not None:
        return known
    return summary(parse.__doc__) or _probe_rule(parse) or qualname


def _client_default(definition: _client_config.ConfigDef[Any]) -> str:
    qualname = getattr(definition.parse, "__qualname__", "")
    if qualname == "_compression" and isinstance(definition.default, int):
        return f"`{CompressionType(definition.default).kafka_name}`"
    if qualname == "_acks" and definition.default == -1:
        return "`all` (`-1`)"
    return show_default(definition.name, definition.default)


def _client_table(defs: Iterable[_client_config.ConfigDef[Any]]) -> list[str]:
    return table(
        ("name", "default", "valid values", "description"),
        (
            (
                code_span(d.name),
                _client_default(d),
                _client_rule(d.parse),
                inline(d.doc),
            )
            for d in defs
        ),
    )


def _own_configs(
    defs: Sequence[_client_config.ConfigDef[Any]], common: Sequence[_client_config.ConfigDef[Any]]
) -> list[_client_config.ConfigDef[Any]]:
    """The entries of ``defs`` that are not a plain copy of a common one."""
    shared = {(d.name, repr(d.default), d.doc) for d in common}
    return [d for d in defs if (d.name, repr(d.default), d.doc) not in shared]


def _client_configs() -> list[str]:
    common = _client_config.COMMON_CONFIGS
    lines = [
        "## Client configs",
        "",
        "`Producer`, `Consumer` and `AdminClient` take a mapping with Kafka's names "
        '(`Producer({"bootstrap.servers": "127.0.0.1:9092", "linger.ms": 10})`) and/or '
        "keyword arguments with underscores for dots (`Producer(linger_ms=10)`; keywords "
        "win). An unknown name or a bad value raises `InvalidConfigError`. The CLI passes "
        "any of them with `--producer-property NAME=VALUE` / `--consumer-property NAME=VALUE`.",
        "",
        "### Every client (`COMMON_CONFIGS`)",
        "",
        *_client_table(common),
    ]
    sections = (
        ("Producer", "cluster.client.producer.PRODUCER_CONFIGS", producer.PRODUCER_CONFIGS),
        ("Consumer", "cluster.client.consumer.CONSUMER_CONFIGS", consumer.CONSUMER_CONFIGS),
        ("Admin client", "cluster.client.admin.ADMIN_CONFIGS", admin.ADMIN_CONFIGS),
    )
    for title, source, defs in sections:
        own = _own_configs(defs, common)
        lines += ["", f"### {title} (`{source}`)", ""]
        lines.append("The configs of every client, and:")
        lines.append("")
        lines += _client_table(own) if own else ["(none of its own)"]
    return lines


def _topic_configs() -> list[str]:
    defaults = LogConfig().to_topic_configs()
    broker_names: dict[str, list[str]] = {}
    for broker_name, topic_name in BROKER_TO_TOPIC_CONFIG.items():
        broker_names.setdefault(topic_name, []).append(broker_name)
    lines = [
        "## Topic configs (`lograft.protocol.topic_config.TOPIC_CONFIGS`)",
        "",
        "Set when a topic is created: `lograft topics create NAME --config NAME=VALUE`, or "
        '`NewTopic(name, partitions, configs={"retention.ms": "60000"})`. A topic that does not '
        "set one gets the broker default (last column, `lograft node --config`), else the "
        "default shown here. `lograft topics describe NAME` prints the values in effect.",
        "",
    ]
    lines += table(
        ("name", "default", "valid values", "broker default from", "description"),
        (
            (
                code_span(d.name),
                show_text_default(d.name, defaults[d.name]),
                d.rule,
                ", ".join(code_span(b) for b in broker_names.get(d.name, ())) or "—",
                inline(d.doc),
            )
            for d in TOPIC_CONFIGS.values()
        ),
    )
    return lines


def _broker_settings() -> list[str]:
    defaults = LogConfig().to_topic_configs()
    lines = [
        "## Broker settings",
        "",
        "Given to a node as `lograft node --config NAME=VALUE` (repeatable), or to every node "
        "of a local cluster as `lograft cluster up --config NAME=VALUE`. An unknown name or "
        "a bad value stops the node with `INVALID_CONFIG`.",
        "",
        "### Defaults of topic configs (`lograft.protocol.node_config.BROKER_TO_TOPIC_CONFIG`)",
        "",
        "Each sets the default of a topic config for every topic that does not set it.",
        "",
    ]
    rows = []
    for broker_name, topic_name in BROKER_TO_TOPIC_CONFIG.items():
        definition = TOPIC_CONFIGS[topic_name]
        rows.append(
            (
                code_span(broker_name),
                show_text_default(broker_name, defaults[topic_name]),
                definition.rule,
                code_span(topic_name),
                inline(definition.doc),
            )
        )
    lines += table(("name", "default", "valid values", "topic config", "description"), rows)
    lines += [
        "",
        "### Node settings (`lograft.protocol.node_config.NODE_CONFIGS`)",
        "",
    ]
    lines += table(
        ("name", "default", "valid values", "description"),
        (
            (
                code_span(name),
                show_default(name, default),
                "true or false" if isinstance(default, bool) else f"integer >= {minimum}",
                inline(doc),
            )
            for name, (default, minimum, doc) in NODE_CONFIGS.items()
        ),
    )
    return lines


def render_configuration() -> str:
    """The text of ``configuration.md``."""
    lines = [
        "# Configuration reference",
        "",
        GENERATED_NOTE.format(
            source="the config definitions in cluster/client, "
            "proto/lograft/protocol/topic_config.py, "
            "proto/lograft/protocol/node_config.py and the argument parsers"
        ),
        "",
        "Names are Apache Kafka's wherever Kafka has the setting. "
        "[For Kafka users](../for-kafka-users.md) lists where the defaults differ from "
        "Kafka's and why.",
        "",
        "- [Client configs](#client-configs)",
        "- [Topic configs](#topic-configs-replicalogconfigtopic_configs)",
        "- [Broker settings](#broker-settings)",
        "- [`lograft node` command line](#lograft-node-command-line-clusternode)",
        "- [`lograft` global options](#lograft-global-options-clustercli)",
        "",
    ]
    lines += _client_configs()
    lines += [""]
    lines += _topic_configs()
    lines += [""]
    lines += _broker_settings()
    lines += [""]
    lines += command_lines()
    lines += [""]
    lines += container_environment()
    return "\n".join(lines).rstrip() + "\n"
