"""``lograft topics``: create, list, describe, alter and delete topics (``kafka-topics``)."""

from __future__ import annotations

import argparse

from cluster.client import NewPartitions, NewTopic

from ._args import Streams, admin_client, config_pair, positive

__all__ = ["register"]

_EPILOG = """\
examples:
  lograft topics create orders --partitions 3 --replication-factor 3 --config retention.ms=86400000
  lograft topics list
  lograft topics describe orders
  lograft topics alter orders --partitions 6
  lograft topics delete orders

Topic configs are changed with `lograft configs alter --topic NAME --add-config k=v`.
"""

_CREATE_EPILOG = """\
examples:
  lograft topics create orders --partitions 3 --replication-factor 3
  lograft topics create audit --replication-factor 3 --config min.insync.replicas=2 \\
      --config retention.ms=604800000
"""

_DESCRIBE_EPILOG = """\
examples:
  lograft topics describe            # every topic
  lograft topics describe orders     # one line per partition:
      Topic: orders  Partition: 0  Leader: 2  Replicas: 2,3,1  Isr: 2,3,1
"""

_ALTER_EPILOG = """\
examples:
  lograft topics alter orders --partitions 6     # 3 -> 6 partitions

The count can only grow. New partitions get the topic's replication factor, placed and led
like a new topic's; producers and consumers see them at their next metadata refresh
(metadata.max.age.ms). Keys then hash over more partitions: a key's new records may go to
another partition than its old ones.
"""

_DELETE_EPILOG = """\
examples:
  lograft topics delete orders
"""


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``topics`` and its actions to the ``lograft`` parser."""
    topics = commands.add_parser(
        "topics", help="create, list, describe, alter and delete topics", epilog=_EPILOG
    )
    topics.set_defaults(handler=run)
    topic_commands = topics.add_subparsers(dest="topics_command", required=True, metavar="ACTION")
    create = topic_commands.add_parser("create", help="create a topic", epilog=_CREATE_EPILOG)
    create.add_argument("name")
    # As Kafka's kafka-topics.sh since KIP-464: unset means the cluster's num.partitions and
    # default.replication.factor (-1 in CreateTopics), not 1.
    create.add_argument(
        "--partitions",
        type=positive,
        default=-1,
        help="partition count (default: the cluster's num.partitions)",
    )
    create.add_argument(
        "--replication-factor",
        type=positive,
        default=-1,
        help="replicas of each partition (default: the cluster's default.replication.factor)",
    )
    create.add_argument(
        "--config",
        type=config_pair,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="topic config, e.g. retention.ms=60000 (repeatable)",
    )
    topic_commands.add_parser("list", help="list topic names")
    describe = topic_commands.add_parser(
        "describe", help="partitions, leaders, ISR, configs", epilog=_DESCRIBE_EPILOG
    )
    describe.add_argument("name", nargs="?")
    alter = topic_commands.add_parser(
        "alter",
        help="add partitions to a topic (kafka-topics --alter)",
        description="Grow a topic to more partitions.",
        epilog=_ALTER_EPILOG,
    )
    alter.add_argument("name")
    alter.add_argument(
        "--partitions",
        type=positive,
        required=True,
        help="the new total number of partitions (larger than the current one)",
    )
    delete = topic_commands.add_parser("delete", help="delete a topic", epilog=_DELETE_EPILOG)
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
        elif action == "alter":
            grown = {args.name: NewPartitions(args.partitions)}
            admin.create_partitions(grown)[args.name].result()
            print(
                f"Altered topic {args.name}: {args.partitions} partitions. Keyed records may "
                "now map to other partitions.",
                file=out,
            )
        elif action == "delete":
            admin.delete_topics([args.name])[args.name].result()
            print(f"Deleted topic {args.name}.", file=out)
    return 0
