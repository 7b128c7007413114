"""``lograft topics``: create, list, describe and delete topics (``kafka-topics``)."""

from __future__ import annotations

import argparse

from cluster.client import NewTopic

from ._args import Streams, admin_client, config_pair, positive

__all__ = ["register"]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``topics`` and its actions to the ``lograft`` parser."""
    topics = commands.add_parser("topics", help="create, list, describe and delete topics")
    topics.set_defaults(handler=run)
    topic_commands = topics.add_subparsers(dest="topics_command", required=True, metavar="ACTION")
    create = topic_commands.add_parser("create", help="create a topic")
    create.add_argument("name")
    create.add_argument("--partitions", type=positive, default=1)
    create.add_argument("--replication-factor", type=positive, default=1)
    create.add_argument(
        "--config",
        type=config_pair,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="topic config, e.g. retention.ms=60000 (repeatable)",
    )
    topic_commands.add_parser("list", help="list topic names")
    describe = topic_commands.add_parser("describe", help="partitions, leaders, ISR, configs")
    describe.add_argument("name", nargs="?")
    delete = topic_commands.add_parser("delete", help="delete a topic")
    delete.add_argument("name")


def run(args: argparse.Namespace, streams: Streams) -> int:
    """Run one ``topics`` action."""
    out = streams.stdout
    with admin_client(args) as admin:
        action = args.topics_command
        if action == "create":
            new = NewTopic(args.name, args.partitions, args.replication_factor, dict(args.config))
            admin.create_topics([new])[args.name].result()
            print(f"Created topic {args.name}.", file=out)
        elif action == "list":
            for name in admin.list_topics():
                print(name, file=out)
        elif action == "describe":
            for topic in admin.describe_topics([args.name] if args.name else None):
                replication = len(topic.partitions[0].replicas) if topic.partitions else 0
                configs = ",".join(f"{k}={v}" for k, v in sorted(topic.configs.items()))
                print(
                    f"Topic: {topic.name}\tPartitionCount: {len(topic.partitions)}\t"
                    f"ReplicationFactor: {replication}\tConfigs: {configs}",
                    file=out,
                )
                for p in topic.partitions:
                    print(
                        f"\tTopic: {topic.name}\tPartition: {p.partition}\tLeader: "
                        f"{p.leader if p.leader >= 0 else 'none'}\t"
                        f"Replicas: {','.join(map(str, p.replicas))}\t"
                        f"Isr: {','.join(map(str, p.isr))}",
                        file=out,
                    )
        elif action == "delete":
            admin.delete_topics([args.name])[args.name].result()
            print(f"Deleted topic {args.name}.", file=out)
    return 0
