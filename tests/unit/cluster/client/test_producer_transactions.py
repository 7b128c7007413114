"""A transactional producer that meets a fatal error never reports a commit.

Kafka's rule: once another producer of the ``transactional.id`` took over (fenced), the
broker does not support what the producer asks, or the producer is not authorized, the
producer can only be closed: the call that met the error raises it, and so does every
later transactional call. Here the error comes from each place it can (adding the
partition, the write itself, adding the offsets, committing them, ending the
transaction), for each fatal error, through ``Producer`` and ``AsyncProducer``, against a
fake coordinator that answers the scripted error once.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from collections.abc import Callable, Iterator

import pytest

from cluster.client import AsyncProducer, ConsumerGroupMetadata, Producer, TopicPartition
from lograft.protocol.errors import (
    ClusterAuthorizationFailedError,
    InvalidProducerEpochError,
    LograftError,
    ProducerFencedError,
    TransactionalIdAuthorizationFailedError,
    UnsupportedVersionError,
    error_for_code,
)
from tests.unit.producer_fixtures import (
    TIMEOUT_S,
    FakeLeader,
    FakeTxnCoordinator,
    Plan,
    fake_leader,
)

FATAL = {
    # the code answered: the error the producer raises from then on
    ProducerFencedError.code: ProducerFencedError,
    InvalidProducerEpochError.code: ProducerFencedError,  # a newer producer took over
    UnsupportedVersionError.code: UnsupportedVersionError,
    TransactionalIdAuthorizationFailedError.code: TransactionalIdAuthorizationFailedError,
    ClusterAuthorizationFailedError.code: ClusterAuthorizationFailedError,
}
WHERE = ["AddPartitionsToTxn", "Produce", "AddOffsetsToTxn", "TxnOffsetCommit", "EndTxn"]
OFFSETS = {TopicPartition("in", 0): 5}
GROUP = ConsumerGroupMetadata("g")


@pytest.fixture
def fake() -> Iterator[FakeTxnCoordinator]:
    with fake_leader(FakeTxnCoordinator) as leader:
        leader.add_topic("t", 1)
        assert isinstance(leader, FakeTxnCoordinator)
        yield leader


def _config(fake: FakeLeader) -> dict[str, object]:
    return {
        "bootstrap.servers": f"127.0.0.1:{fake.port}",
        "transactional.id": "t",
        "linger.ms": 0,
        "max.block.ms": 5000,
    }


def _script(fake: FakeTxnCoordinator, where: str, code: int) -> None:
    if where == "Produce":
        fake.plans.append(Plan(error=code))
    else:
        fake.fail_next(where, code)


def _raises_fatal(expected: type[LograftError], call: Callable[[], object]) -> None:
    with pytest.raises(expected):
        call()


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("code", sorted(FATAL), ids=lambda code: error_for_code(code).error_name)
def test_a_fatal_error_fails_the_commit_and_every_later_transactional_call(
    fake: FakeTxnCoordinator, where: str, code: int
) -> None:
    expected = FATAL[code]
    producer = Producer(_config(fake))
    try:
        producer.init_transactions()
        with producer.transaction():  # one transaction commits first, as a user's would
            producer.send("t", b"committed")
        _script(fake, where, code)
        producer.begin_transaction()
        doomed = producer.send("t", b"doomed")
        if where in ("AddOffsetsToTxn", "TxnOffsetCommit"):
            _raises_fatal(expected, lambda: producer.send_offsets_to_transaction(OFFSETS, GROUP))
        _raises_fatal(expected, producer.commit_transaction)
        if where == "AddPartitionsToTxn":  # the record was never sent
            assert isinstance(doomed.exception(timeout=TIMEOUT_S), expected)
        if where == "Produce":  # the record was refused with the broker's error
            assert type(doomed.exception(timeout=TIMEOUT_S)) is type(error_for_code(code))
        # From now on every transactional call raises the same error: close is all that works.
        _raises_fatal(expected, producer.commit_transaction)
        _raises_fatal(expected, producer.abort_transaction)
        _raises_fatal(expected, producer.begin_transaction)
        _raises_fatal(expected, lambda: producer.send("t", b"after"))
        _raises_fatal(expected, lambda: producer.send_offsets_to_transaction(OFFSETS, GROUP))
        _raises_fatal(expected, producer.init_transactions)
    finally:
        producer.close()
    assert fake.calls.count("EndTxn") == 1 + (where == "EndTxn")
    assert fake.values("t", 0)[0] == b"committed"
    assert b"after" not in fake.values("t", 0)


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("code", sorted(FATAL), ids=lambda code: error_for_code(code).error_name)
def test_the_asyncio_producer_raises_the_fatal_error_alike(
    fake: FakeTxnCoordinator, where: str, code: int
) -> None:
    expected = FATAL[code]

    async def run() -> None:
        async with AsyncProducer(_config(fake)) as producer:
            await producer.init_transactions()
            async with producer.transaction():
                await producer.send("t", b"committed")
            _script(fake, where, code)
            await producer.begin_transaction()
            await producer.send("t", b"doomed")
            if where in ("AddOffsetsToTxn", "TxnOffsetCommit"):
                with pytest.raises(expected):
                    await producer.send_offsets_to_transaction(OFFSETS, GROUP)
            for call in (
                producer.commit_transaction,
                producer.commit_transaction,
                producer.abort_transaction,
                producer.begin_transaction,
                lambda: producer.send("t", b"after"),
                lambda: producer.send_offsets_to_transaction(OFFSETS, GROUP),
            ):
                with pytest.raises(expected):
                    await call()

    asyncio.run(run())
    assert fake.calls.count("EndTxn") == 1 + (where == "EndTxn")


def test_a_transaction_fenced_when_its_partition_is_added_never_commits(
    fake: FakeTxnCoordinator,
) -> None:
    """The finding as a user met it: producer A commits once, producer B of the same id
    initialises, A's next transaction fails to add its partition (PRODUCER_FENCED), and
    A's commit returned as if it had committed, without ending anything."""
    with Producer(_config(fake)) as first:
        first.init_transactions()
        with first.transaction():
            first.send("t", b"a-1")
        with Producer(_config(fake)) as second:
            second.init_transactions()
            fake.fail_next("AddPartitionsToTxn", ProducerFencedError.code)  # A's epoch is old
            first.begin_transaction()
            lost = first.send("t", b"a-2")
            with pytest.raises(ProducerFencedError):
                first.commit_transaction()
            assert isinstance(lost.exception(timeout=TIMEOUT_S), ProducerFencedError)
            with second.transaction():
                second.send("t", b"b-1")
    assert fake.values("t", 0) == [b"a-1", b"b-1"]


def test_init_transactions_waits_within_max_block_ms_for_a_cluster_no_broker_of_answers() -> None:
    """A whole-cluster restart: no broker answers when the application starts; Kafka's
    ``initTransactions`` blocks for ``max.block.ms`` meanwhile instead of failing at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    retried = threading.Event()

    class Retries(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "coordinator call retry" in record.getMessage():
                retried.set()

    watcher = logging.getLogger("cluster.client._coordinator")
    handler, level = Retries(), watcher.level
    watcher.addHandler(handler)
    watcher.setLevel(logging.DEBUG)
    outcome: list[BaseException | None] = []
    producer = Producer(
        {
            "bootstrap.servers": f"127.0.0.1:{port}",
            "transactional.id": "t",
            "max.block.ms": int(TIMEOUT_S * 1000),
            "retry.backoff.ms": 20,
        }
    )

    def init() -> None:
        try:
            producer.init_transactions()
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    caller = threading.Thread(target=init)
    try:
        caller.start()
        assert retried.wait(TIMEOUT_S)  # no broker answered, and the call goes on
        with fake_leader(FakeTxnCoordinator, port=port) as fake:
            fake.add_topic("t", 1)
            caller.join(TIMEOUT_S)
            assert outcome == [None]
            with producer.transaction():
                producer.send("t", b"after the restart")
            assert fake.values("t", 0) == [b"after the restart"]
    finally:
        watcher.removeHandler(handler)
        watcher.setLevel(level)
        producer.close()
