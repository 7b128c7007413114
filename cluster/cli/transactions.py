"""``lograft transactions``: list and describe transactional ids, and end a hanging
transaction (Kafka's ``kafka-transactions.sh``: ``list``, ``describe``,
``force-terminate``)."""

from __future__ import annotations

import argparse
import json
import logging
import time
from typing import TextIO

from cluster.client import AdminClient, TransactionDescription

from ._args import Streams, admin_client
from ._group_actions import table

__all__ = ["register", "run"]

log = logging.getLogger(__name__)

DESCRIPTION = """\
Transactions, as Kafka's kafka-transactions.sh: list the transactional ids of the cluster
(each broker coordinates some), describe one (state, producer id and epoch, timeout, how
long the open transaction has run, the partitions it wrote), and force-terminate one: its
producer is fenced and its open transaction aborted, prepared (two-phase) or not, as a new
producer with the id would do. Transactions need a cluster with a controller quorum."""

EPILOG = """\
examples:
  lograft transactions list --state Ongoing
  lograft transactions describe --transactional-id orders-0
  lograft transactions force-terminate --transactional-id orders-0"""

STATES = (
    "Empty",
    "Ongoing",
    "PrepareCommit",
    "PrepareAbort",
    "CompleteCommit",
    "CompleteAbort",
)


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``transactions`` and its actions to the ``lograft`` parser."""
    raw = argparse.RawDescriptionHelpFormatter
    parser = commands.add_parser(
        "transactions",
        help="list and describe transactions; end a hanging one",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=raw,
    )
    parser.set_defaults(handler=run)
    actions = parser.add_subparsers(dest="transactions_command", required=True, metavar="ACTION")
    listing = actions.add_parser(
        "list", help="transactional ids, their producer ids and states", formatter_class=raw
    )
    listing.add_argument(
        "--state", action="append", choices=STATES, default=[], help="only ids in this state"
    )
    listing.add_argument("--json", action="store_true", help="print a JSON array")
    describe = actions.add_parser(
        "describe", help="one transactional id as its coordinator sees it", formatter_class=raw
    )
    describe.add_argument("--transactional-id", required=True)
    describe.add_argument("--json", action="store_true", help="print a JSON object")
    terminate = actions.add_parser(
        "force-terminate",
        help="fence the id's producer and abort its open transaction",
        formatter_class=raw,
    )
    terminate.add_argument("--transactional-id", required=True)


def run(args: argparse.Namespace, streams: Streams) -> int:
    """Run one ``transactions`` action."""
    with admin_client(args) as admin:
        action = args.transactions_command
        if action == "list":
            _list(admin, args, streams.stdout)
        elif action == "describe":
            _describe(admin, args, streams.stdout)
        elif action == "force-terminate":
            admin.force_terminate_transaction(args.transactional_id)
            print(
                f"transactional id {args.transactional_id}: producer fenced, open "
                "transaction aborted",
                file=streams.stdout,
            )
    return 0


def _list(admin: AdminClient, args: argparse.Namespace, out: TextIO) -> None:
    listings = admin.list_transactions(args.state)
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "transactional_id": t.transactional_id,
                        "producer_id": t.producer_id,
                        "state": t.state,
                    }
                    for t in listings
                ]
            ),
            file=out,
        )
        return
    rows = ((t.transactional_id, t.producer_id, t.state) for t in listings)
    for line in table(("TRANSACTIONAL-ID", "PRODUCER-ID", "STATE"), rows):
        print(line, file=out)


def _describe(admin: AdminClient, args: argparse.Namespace, out: TextIO) -> None:
    found: TransactionDescription = admin.describe_transactions([args.transactional_id])[
        args.transactional_id
    ]
    started = found.transaction_start_time_ms
    duration_ms = int(time.time() * 1000) - started if started >= 0 else None
    partitions = ",".join(f"{tp.topic}-{tp.partition}" for tp in sorted(found.partitions))
    if args.json:
        print(
            json.dumps(
                {
                    "transactional_id": found.transactional_id,
                    "coordinator_id": found.coordinator_id,
                    "state": found.state,
                    "producer_id": found.producer_id,
                    "producer_epoch": found.producer_epoch,
                    "transaction_timeout_ms": found.transaction_timeout_ms,
                    "transaction_start_time_ms": started if started >= 0 else None,
                    "transaction_duration_ms": duration_ms,
                    "topic_partitions": partitions.split(",") if partitions else [],
                    "two_phase": found.two_phase,
                }
            ),
            file=out,
        )
        return
    header = (
        "COORDINATOR-ID",
        "TRANSACTIONAL-ID",
        "PRODUCER-ID",
        "PRODUCER-EPOCH",
        "TRANSACTION-STATE",
        "TRANSACTION-TIMEOUT-MS",
        "CURRENT-TRANSACTION-START-TIME",
        "TRANSACTION-DURATION-MS",
        "TOPIC-PARTITIONS",
    )
    row = (
        found.coordinator_id,
        found.transactional_id,
        found.producer_id,
        found.producer_epoch,
        found.state,
        found.transaction_timeout_ms,
        started if started >= 0 else None,
        duration_ms,
        partitions or None,
    )
    for line in table(header, [row]):
        print(line, file=out)
