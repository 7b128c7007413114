"""``lograft configs``: describe and alter topic and broker configs (Kafka's ``kafka-configs``).

Argument parsing is pure (:func:`parse_add_config`, :func:`parse_delete_config`) so it is
tested without a cluster. Alters go through the controller quorum and take effect on the
brokers without a restart.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TextIO

from cluster.client import (
    AlterConfigOp,
    AlterConfigOpType,
    Config,
    ConfigEntry,
    ConfigResource,
    ConfigResourceType,
    ConfigSource,
)

from ._args import Streams, admin_client

__all__ = ["parse_add_config", "parse_delete_config", "register", "run"]

_EPILOG = """\
examples:
  lograft configs describe --topic orders            # the topic's own overrides
  lograft configs describe --topic orders --all      # every topic config and its source
  lograft configs describe --broker 1 --all          # a node's settings (read-only)
  lograft configs alter --topic orders --add-config retention.ms=3600000,min.insync.replicas=2
  lograft configs alter --topic orders --delete-config min.insync.replicas

Sources, as Kafka names them: DYNAMIC_TOPIC_CONFIG (the topic's override),
STATIC_BROKER_CONFIG (set on the node: lograft node --config log.retention.ms=...),
DEFAULT_CONFIG (the built-in default).
"""

_DESCRIBE_EPILOG = """\
examples:
  lograft configs describe --topic orders
  lograft configs describe --topic orders --all
  lograft configs describe --broker 2 --all
"""

_ALTER_EPILOG = """\
examples:
  lograft configs alter --topic orders --add-config retention.ms=3600000
  lograft configs alter --topic orders --add-config min.insync.replicas=2,segment.bytes=104857600
  lograft configs alter --topic orders --delete-config retention.ms,min.insync.replicas

Changes are validated like `topics create --config` (unknown names and bad values fail
with INVALID_CONFIG) and apply to the running brokers at once. Broker settings are static:
altering one fails with INVALID_CONFIG; set them on the node's command line instead.
"""


def parse_add_config(text: str) -> list[tuple[str, str]]:
    """``k1=v1,k2=[a,b],k3=v3`` → ``[(k1, v1), (k2, "a,b"), (k3, v3)]`` (Kafka's syntax:
    square brackets group a value that contains commas)."""
    pairs: list[tuple[str, str]] = []
    for item in _split_top_level(text):
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name:
            raise argparse.ArgumentTypeError(
                f"expected NAME=VALUE[,NAME=VALUE...], got {item.strip()!r} in {text!r}"
            )
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        pairs.append((name, value))
    if not pairs:
        raise argparse.ArgumentTypeError("expected NAME=VALUE[,NAME=VALUE...], got nothing")
    return pairs


def parse_delete_config(text: str) -> list[str]:
    """``k1,k2`` → ``[k1, k2]``."""
    names = [name.strip() for name in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"expected NAME[,NAME...], got {text!r}")
    return names


def _split_top_level(text: str) -> list[str]:
    items: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]":
            depth = max(0, depth - 1)
        if char == "," and depth == 0:
            items.append("".join(current))
            current = []
        else:
            current.append(char)
    items.append("".join(current))
    return [item for item in items if item.strip()]


def _broker_id(text: str) -> str:
    if not (text.isascii() and text.isdigit()):
        raise argparse.ArgumentTypeError(f"a broker id is a number >= 0, got {text!r}")
    return str(int(text))


def _add_entity(parser: argparse.ArgumentParser) -> None:
    entity = parser.add_mutually_exclusive_group(required=True)
    entity.add_argument("--topic", metavar="NAME", help="the topic whose configs to use")
    entity.add_argument(
        "--broker", metavar="ID", type=_broker_id, help="the broker (node id) whose settings to use"
    )


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``configs`` and its actions to the ``lograft`` parser."""
    configs = commands.add_parser(
        "configs",
        help="describe and alter topic and broker configs (kafka-configs)",
        description="Describe and alter topic configs (and describe brokers' settings).",
        epilog=_EPILOG,
    )
    configs.set_defaults(handler=run)
    actions = configs.add_subparsers(dest="configs_command", required=True, metavar="ACTION")
    describe = actions.add_parser(
        "describe",
        help="a topic's overrides (or, with --all, every config and its source)",
        description="Show a topic's config overrides, or with --all every config, its value "
        "and where it comes from.",
        epilog=_DESCRIBE_EPILOG,
    )
    _add_entity(describe)
    describe.add_argument(
        "--all",
        action="store_true",
        help="every config with its source, not only the dynamic overrides",
    )
    alter = actions.add_parser(
        "alter",
        help="set (--add-config) or remove (--delete-config) topic config overrides",
        description="Set or remove config overrides of a topic; brokers apply them at once.",
        epilog=_ALTER_EPILOG,
    )
    _add_entity(alter)
    alter.add_argument(
        "--add-config",
        type=parse_add_config,
        action="append",
        default=[],
        metavar="K=V[,K=V...]",
        help="configs to set, e.g. retention.ms=3600000,min.insync.replicas=2 (repeatable)",
    )
    alter.add_argument(
        "--delete-config",
        type=parse_delete_config,
        action="append",
        default=[],
        metavar="K[,K...]",
        help="overrides to remove (back to the broker default), e.g. retention.ms (repeatable)",
    )


def _resource(args: argparse.Namespace) -> ConfigResource:
    if args.topic is not None:
        return ConfigResource(ConfigResourceType.TOPIC, args.topic)
    return ConfigResource(ConfigResourceType.BROKER, args.broker)


def alter_ops(args: argparse.Namespace) -> list[AlterConfigOp]:
    """The operations ``configs alter`` sends: every SET, then every DELETE."""
    ops = [AlterConfigOp(name, value) for group in args.add_config for name, value in group]
    ops.extend(
        AlterConfigOp(name, op_type=AlterConfigOpType.DELETE)
        for group in args.delete_config
        for name in group
    )
    return ops


def run(args: argparse.Namespace, streams: Streams) -> int:
    """Run one ``configs`` action."""
    resource = _resource(args)
    entity = "topic" if resource.resource_type == ConfigResourceType.TOPIC else "broker"
    if args.configs_command == "alter":
        ops = alter_ops(args)
        if not ops:
            print(
                "lograft configs alter: give --add-config and/or --delete-config",
                file=streams.stderr,
            )
            return 2
        with admin_client(args) as admin:
            admin.incremental_alter_configs({resource: ops})[resource].result()
        print(f"Completed updating config for {entity} {resource.name}.", file=streams.stdout)
        return 0
    with admin_client(args) as admin:
        config = admin.describe_configs([resource], include_synonyms=True)[resource]
    _print_configs(config, entity, resource.name, args.all, streams.stdout)
    return 0


def _dynamic(entry: ConfigEntry) -> bool:
    return entry.source in (
        ConfigSource.DYNAMIC_TOPIC_CONFIG,
        ConfigSource.DYNAMIC_BROKER_CONFIG,
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
    )


def _print_configs(config: Config, entity: str, name: str, everything: bool, out: TextIO) -> None:
    # Kafka's kafka-configs format, so scripts written for it keep working.
    shown: Sequence[ConfigEntry] = [e for e in config.values() if everything or _dynamic(e)]
    heading = "All" if everything else "Dynamic"
    print(f"{heading} configs for {entity} {name} are:", file=out)
    for entry in shown:
        value = "null" if entry.value is None else entry.value
        synonyms = ", ".join(
            f"{s.source.name}:{s.name}={'null' if s.value is None else s.value}"
            for s in entry.synonyms
        )
        print(
            f"  {entry.name}={value} sensitive={str(entry.is_sensitive).lower()} "
            f"synonyms={{{synonyms}}}",
            file=out,
        )
