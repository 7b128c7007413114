"""Exactly-once read-process-write with lograft transactions (docs/transactions.md).

Reads ``--input`` as a member of ``--group`` (``read_committed``), upper-cases each value
and writes it to ``--output``; the records written and the input offsets consumed commit
in one transaction, so after any crash a restarted copy (same ``--transactional-id``)
resumes exactly where the last commit left off: every input record is in the output once.

    python docs/examples/exactly_once.py --bootstrap 127.0.0.1:9092 \\
        --input orders --output orders-upper --group upper --transactional-id upper-0

It stops after ``--idle-s`` seconds without input. The tests run it, and kill it.
"""

from __future__ import annotations

import argparse
import logging
import time

from cluster.client import Consumer, Producer, TopicPartition

log = logging.getLogger("exactly_once")


def run(
    bootstrap: str,
    source: str,
    sink: str,
    group: str,
    transactional_id: str,
    idle_s: float,
    records_per_transaction: int = 500,
    pause_s: float = 0.0,
    session_timeout_ms: int = 10_000,
) -> int:
    """Process until ``idle_s`` pass without input; returns how many records it committed.

    An error ends the run (the transaction is aborted): restart it, and the new copy goes
    on from the last committed offsets. ``pause_s`` stands for work done per transaction.
    """
    consumer = Consumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        isolation_level="read_committed",  # never process another transaction's aborted data
        enable_auto_commit=False,  # offsets commit with the output, in the transaction
        auto_offset_reset="earliest",
        max_poll_records=records_per_transaction,
        # A copy that died keeps its partitions this long; its successor waits for them.
        session_timeout_ms=session_timeout_ms,
    )
    producer = Producer(bootstrap_servers=bootstrap, transactional_id=transactional_id)
    producer.init_transactions()  # fences an older copy; aborts what it left open
    consumer.subscribe([source])
    committed = 0
    last_input = time.monotonic()
    try:
        while time.monotonic() - last_input < idle_s:
            records = consumer.poll(timeout_ms=200)
            if not consumer.assignment():
                last_input = time.monotonic()  # idle only counts with partitions to read
            if not records:
                continue
            last_input = time.monotonic()
            with producer.transaction():  # commits at the end of the block, aborts on error
                for record in records:
                    value = (record.value or b"").upper()
                    producer.send(sink, value, key=record.key)
                positions = {
                    tp: consumer.position(tp)
                    for tp in {TopicPartition(r.topic, r.partition) for r in records}
                }
                producer.send_offsets_to_transaction(positions, consumer.group_metadata())
                time.sleep(pause_s)
            committed += len(records)
            log.info("committed records=%d total=%d", len(records), committed)
    finally:
        producer.close()
        consumer.close()
    return committed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--transactional-id", required=True)
    parser.add_argument("--idle-s", type=float, default=5.0)
    parser.add_argument("--records-per-transaction", type=int, default=500)
    parser.add_argument("--pause-ms", type=int, default=0)
    parser.add_argument("--session-timeout-ms", type=int, default=10_000)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    total = run(
        args.bootstrap,
        args.input,
        args.output,
        args.group,
        args.transactional_id,
        args.idle_s,
        args.records_per_transaction,
        args.pause_ms / 1000.0,
        args.session_timeout_ms,
    )
    print(f"committed {total} records")


if __name__ == "__main__":
    main()
