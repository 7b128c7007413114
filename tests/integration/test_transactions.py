"""Transactions against real node processes (issue 13's "Must show").

* commit and abort as ``read_committed`` and ``read_uncommitted`` readers see them;
* a zombie (an older producer of the same ``transactional.id``) is fenced: its writes and
  its commit are refused and none of its records reach a ``read_committed`` reader;
* read-process-write (``docs/examples/exactly_once.py``) across a ``kill -9`` of its process
  and of the transaction coordinator's broker: every input record is in the output exactly
  once, and the group's committed offsets are the input's end;
* KIP-939 prepared transactions: a process prepares and is killed; a second one completes
  the transaction, commit and abort alike.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from cluster.client import (
    AdminClient,
    AsyncProducer,
    Consumer,
    ConsumerGroupMetadata,
    PreparedTxnState,
    Producer,
    TopicPartition,
)
from lograft.protocol.errors import ProducerFencedError
from replica.txn import partition_for_transactional_id
from replica.txn_service import TRANSACTION_STATE_TOPIC
from tests.integration.nodes import wait_until
from tests.integration.quorum import CLUSTER_TIMEOUT_S, OFFSETS_PARTITIONS, QuorumCluster

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "exactly_once.py"
READ_TIMEOUT_S = 60.0


def _read_all(
    cluster: QuorumCluster, topic: str, partitions: int, isolation: str, expected: int
) -> list[bytes]:
    """Every value of ``topic`` a fresh consumer reads with ``isolation``, once it has read
    ``expected`` records and caught up with the partitions' ends."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    with Consumer(
        bootstrap_servers=cluster.bootstrap,
        isolation_level=isolation,
        auto_offset_reset="earliest",
    ) as consumer:
        consumer.assign(tps)
        values: list[bytes] = []
        deadline = time.monotonic() + READ_TIMEOUT_S
        while time.monotonic() < deadline:
            values += [r.value for r in consumer.poll(timeout_ms=200) if r.value is not None]
            if len(values) >= expected:
                ends = consumer.end_offsets(tps)
                if all(consumer.position(tp) >= ends[tp] for tp in tps):
                    break
        return values


def _topic(cluster: QuorumCluster, name: str, partitions: int) -> None:
    assert cluster.create_topic(cluster.nodes[1], name, partitions, 3) == 0
    wait_until(
        lambda: (
            len(cluster.leaders(cluster.nodes[1], name)) == partitions
            and all(leader >= 0 for leader in cluster.leaders(cluster.nodes[1], name).values())
        ),
        CLUSTER_TIMEOUT_S,
        f"leaders for {name}",
    )


def test_read_committed_sees_committed_transactions_only(grouped: QuorumCluster) -> None:
    _topic(grouped, "orders", 2)
    with Producer(bootstrap_servers=grouped.bootstrap, transactional_id="orders-tx") as producer:
        producer.init_transactions()
        with producer.transaction():
            for i in range(10):
                producer.send("orders", b"committed-%d" % i, key=b"k%d" % i)
        producer.begin_transaction()
        for i in range(5):
            producer.send("orders", b"aborted-%d" % i, key=b"k%d" % i)
        producer.flush()  # in the log, then aborted by the markers
        producer.abort_transaction()
        with pytest.raises(RuntimeError), producer.transaction():
            producer.send("orders", b"rolled-back", key=b"k0")
            raise RuntimeError("the block failed: the context manager aborts")
        with producer.transaction():
            producer.send("orders", b"committed-last", key=b"k1")

    committed = _read_all(grouped, "orders", 2, "read_committed", 11)
    assert sorted(committed) == sorted(
        [b"committed-%d" % i for i in range(10)] + [b"committed-last"]
    )
    everything = _read_all(grouped, "orders", 2, "read_uncommitted", 16)
    assert Counter(everything) >= Counter(committed + [b"aborted-%d" % i for i in range(5)])


def test_a_zombie_producer_is_fenced_and_its_records_stay_invisible(
    grouped: QuorumCluster,
) -> None:
    _topic(grouped, "payments", 1)
    zombie = Producer(bootstrap_servers=grouped.bootstrap, transactional_id="payments-tx")
    zombie.init_transactions()
    zombie.begin_transaction()
    zombie.send("payments", b"zombie-1")
    zombie.flush()  # written, in its open transaction

    with Producer(bootstrap_servers=grouped.bootstrap, transactional_id="payments-tx") as fresh:
        fresh.init_transactions()  # fences the zombie and aborts its open transaction
        with fresh.transaction():
            fresh.send("payments", b"fresh-1")

    zombie.send("payments", b"zombie-2")
    with pytest.raises(ProducerFencedError):
        zombie.commit_transaction()
    with pytest.raises(ProducerFencedError):
        zombie.begin_transaction()
    zombie.close()

    assert _read_all(grouped, "payments", 1, "read_committed", 1) == [b"fresh-1"]
    assert b"zombie-1" in _read_all(grouped, "payments", 1, "read_uncommitted", 2)


def test_a_producer_fenced_between_transactions_never_reports_a_commit(
    grouped: QuorumCluster,
) -> None:
    """Producer A commits, B of the same id initialises, A begins, sends and commits: A's
    partition is refused (PRODUCER_FENCED) and the commit raises, as do A's later calls."""
    _topic(grouped, "fenced", 1)
    first = Producer(bootstrap_servers=grouped.bootstrap, transactional_id="fenced-tx")
    first.init_transactions()
    with first.transaction():
        first.send("fenced", b"a-1")
    with Producer(bootstrap_servers=grouped.bootstrap, transactional_id="fenced-tx") as second:
        second.init_transactions()
        first.begin_transaction()
        lost = first.send("fenced", b"a-2")
        with pytest.raises(ProducerFencedError):
            first.commit_transaction()
        assert isinstance(lost.exception(timeout=READ_TIMEOUT_S), ProducerFencedError)
        with pytest.raises(ProducerFencedError):
            first.begin_transaction()
        with pytest.raises(ProducerFencedError):
            first.abort_transaction()
        first.close()
        with second.transaction():
            second.send("fenced", b"b-1")
    assert _read_all(grouped, "fenced", 1, "read_committed", 2) == [b"a-1", b"b-1"]


def _start_pipeline(cluster: QuorumCluster, log_path: Path) -> subprocess.Popen[bytes]:
    with open(log_path, "ab") as log_file:
        return subprocess.Popen(
            [
                sys.executable,
                str(EXAMPLE),
                "--bootstrap",
                cluster.bootstrap,
                "--input",
                "in",
                "--output",
                "out",
                "--group",
                "upper",
                "--transactional-id",
                "upper-0",
                "--idle-s",
                "8",
                "--records-per-transaction",
                "10",
                "--pause-ms",
                "50",
            ],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )


def _committed_count(cluster: QuorumCluster) -> int:
    return len(_read_all(cluster, "out", 3, "read_committed", 0))


def test_read_process_write_is_exactly_once_across_kills(
    grouped: QuorumCluster, tmp_path: Path
) -> None:
    _topic(grouped, "in", 3)
    _topic(grouped, "out", 3)
    count = 600
    inputs = [b"record-%04d" % i for i in range(count)]
    with Producer(bootstrap_servers=grouped.bootstrap, linger_ms=20) as producer:
        for value in inputs:
            producer.send("in", value, key=value)
    log_path = tmp_path / "pipeline.log"

    # 1. kill -9 the pipeline's process in the middle, and start it again.
    pipeline = _start_pipeline(grouped, log_path)
    wait_until(lambda: _committed_count(grouped) >= 100, CLUSTER_TIMEOUT_S, "some output")
    pipeline.kill()
    pipeline.wait()
    pipeline = _start_pipeline(grouped, log_path)

    # 2. kill -9 the broker coordinating its transactional id, and bring it back.
    index = partition_for_transactional_id("upper-0", OFFSETS_PARTITIONS)
    coordinator = grouped.leaders(grouped.nodes[1], TRANSACTION_STATE_TOPIC)[index]
    before = _committed_count(grouped)
    # The new copy gets the partitions once the dead one's session (10 s) expires.
    wait_until(
        lambda: _committed_count(grouped) > before, CLUSTER_TIMEOUT_S, "progress after restart"
    )
    grouped.nodes[coordinator].kill()
    survivor = next(n for n in grouped.alive_brokers())
    wait_until(
        lambda: (
            grouped.leaders(survivor, TRANSACTION_STATE_TOPIC).get(index, -1)
            not in (-1, coordinator)
        ),
        CLUSTER_TIMEOUT_S,
        "another broker to coordinate the transactional id",
    )
    grouped.nodes[coordinator].start()

    # 3. run it until the input is done (it stops when idle); a copy that gave up during
    # the failover is started again.
    for _ in range(3):
        try:
            pipeline.wait(timeout=CLUSTER_TIMEOUT_S * 3)
        except subprocess.TimeoutExpired:
            pipeline.kill()
            pipeline.wait()
        if _committed_count(grouped) >= count:
            break
        pipeline = _start_pipeline(grouped, log_path)
    else:
        pipeline.kill()

    output = _read_all(grouped, "out", 3, "read_committed", count)
    expected = Counter(value.upper() for value in inputs)
    assert Counter(output) == expected, log_path.read_text(errors="replace")[-4000:]
    with Consumer(bootstrap_servers=grouped.bootstrap, group_id="upper") as reader:
        tps = [TopicPartition("in", p) for p in range(3)]
        committed = reader.committed(tps)
        assert committed == reader.end_offsets(tps), "the group's offsets end at the input's end"


PREPARE_SCRIPT = """
import sys, time
from cluster.client import Producer
producer = Producer(
    bootstrap_servers=sys.argv[1],
    transactional_id=sys.argv[2],
    transaction_two_phase_commit_enable=True,
)
producer.init_transactions()
producer.begin_transaction()
for i in range(5):
    producer.send("prepared", b"%s-%d" % (sys.argv[2].encode(), i))
state = producer.prepare_transaction()
print(state, flush=True)
time.sleep(600)  # killed here: the prepared transaction stays open
"""


def _prepare_and_die(cluster: QuorumCluster, transactional_id: str) -> str:
    with subprocess.Popen(
        [sys.executable, "-c", PREPARE_SCRIPT, cluster.bootstrap, transactional_id],
        stdout=subprocess.PIPE,
        cwd=ROOT,
    ) as process:
        try:
            assert process.stdout is not None
            state = process.stdout.readline().decode().strip()
        finally:
            process.kill()  # kill -9 with the transaction prepared and open
            process.wait()
    assert state, "the preparing process printed its prepared state"
    return state


@pytest.mark.parametrize("commit", [True, False])
def test_a_prepared_transaction_is_completed_by_another_process(
    grouped: QuorumCluster, commit: bool
) -> None:
    _topic(grouped, "prepared", 1)
    transactional_id = f"prepared-{commit}"
    state = _prepare_and_die(grouped, transactional_id)
    assert _read_all(grouped, "prepared", 1, "read_committed", 0) == []

    with Producer(
        bootstrap_servers=grouped.bootstrap,
        transactional_id=transactional_id,
        transaction_two_phase_commit_enable=True,
    ) as second:
        second.init_transactions(keep_prepared_txn=True)
        prepared = PreparedTxnState.parse(state)
        if not commit:
            # A state that does not name the open transaction: it is aborted.
            prepared = PreparedTxnState(prepared.producer_id, prepared.producer_epoch + 7)
        second.complete_transaction(prepared)
        with second.transaction():
            second.send("prepared", b"after")

    expected = [b"%s-%d" % (transactional_id.encode(), i) for i in range(5)] if commit else []
    assert _read_all(grouped, "prepared", 1, "read_committed", len(expected) + 1) == [
        *expected,
        b"after",
    ]


def _cli(cluster: QuorumCluster, *args: str) -> str:
    env = dict(os.environ, LOGRAFT_BOOTSTRAP=cluster.bootstrap)
    env.pop("LOGRAFT_CONFIG", None)
    done = subprocess.run(
        [sys.executable, "-m", "cluster.cli", *args],
        capture_output=True,
        env=env,
        timeout=CLUSTER_TIMEOUT_S,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done.stdout.decode()


def test_the_cli_lists_describes_and_force_terminates_a_hanging_transaction(
    grouped: QuorumCluster,
) -> None:
    _topic(grouped, "ledger", 1)
    hanging = Producer(bootstrap_servers=grouped.bootstrap, transactional_id="ledger-tx")
    hanging.init_transactions()
    hanging.begin_transaction()
    hanging.send("ledger", b"never-committed")
    hanging.flush()

    listed = _cli(grouped, "transactions", "list", "--state", "Ongoing")
    assert "ledger-tx" in listed and "Ongoing" in listed
    described = json.loads(
        _cli(grouped, "transactions", "describe", "--transactional-id", "ledger-tx", "--json")
    )
    assert described["state"] == "Ongoing"
    assert described["topic_partitions"] == ["ledger-0"]
    # The open transaction holds the last stable offset (a read_committed reader's end) at
    # its first offset, while the high watermark is past its record.
    tp = TopicPartition("ledger", 0)
    with Consumer(bootstrap_servers=grouped.bootstrap, isolation_level="read_committed") as r:
        assert r.end_offsets([tp]) == {tp: 0}
    with Consumer(bootstrap_servers=grouped.bootstrap) as r:
        assert r.end_offsets([tp]) == {tp: 1}

    # It returns once the open transaction is aborted and the id has a new epoch.
    _cli(grouped, "transactions", "force-terminate", "--transactional-id", "ledger-tx")
    with AdminClient(bootstrap_servers=grouped.bootstrap) as admin:
        after = admin.describe_transactions(["ledger-tx"])["ledger-tx"]
    assert after.state == "Empty" and after.partitions == frozenset()
    assert after.producer_epoch > described["producer_epoch"]
    with pytest.raises(ProducerFencedError):
        hanging.commit_transaction()
    hanging.close()
    with Producer(bootstrap_servers=grouped.bootstrap, acks="all") as plain:
        plain.send("ledger", b"after").result(timeout=CLUSTER_TIMEOUT_S)
    assert _read_all(grouped, "ledger", 1, "read_committed", 1) == [b"after"]
    consumed = _cli(
        grouped,
        "consume",
        "ledger",
        "--from-beginning",
        "--isolation-level",
        "read_committed",
        "--max-messages",
        "1",
    )
    assert consumed == "after\n", "the aborted record is skipped by the CLI too"


def test_the_asyncio_producer_commits_and_aborts(grouped: QuorumCluster) -> None:
    _topic(grouped, "async-tx", 1)

    async def scenario() -> None:
        async with AsyncProducer(
            bootstrap_servers=grouped.bootstrap, transactional_id="async-tx"
        ) as producer:
            await producer.init_transactions()
            async with producer.transaction():
                await producer.send("async-tx", b"kept")
            with pytest.raises(RuntimeError):
                async with producer.transaction():
                    await producer.send("async-tx", b"dropped")
                    await producer.flush()
                    raise RuntimeError("abort this one")

    asyncio.run(scenario())
    assert _read_all(grouped, "async-tx", 1, "read_committed", 1) == [b"kept"]


def test_a_transaction_of_offsets_alone_commits_them(grouped: QuorumCluster) -> None:
    _topic(grouped, "source", 1)
    tp = TopicPartition("source", 0)
    with Producer(bootstrap_servers=grouped.bootstrap, transactional_id="offsets-only") as p:
        p.init_transactions()
        with p.transaction():
            p.send_offsets_to_transaction({tp: 42}, ConsumerGroupMetadata("offsets-only"))
        with pytest.raises(RuntimeError), p.transaction():
            p.send_offsets_to_transaction({tp: 99}, ConsumerGroupMetadata("offsets-only"))
            raise RuntimeError("aborted: the offset stays 42")
    with Consumer(
        bootstrap_servers=grouped.bootstrap,
        group_id="offsets-only",
        isolation_level="read_committed",
    ) as reader:
        assert reader.committed([tp]) == {tp: 42}
