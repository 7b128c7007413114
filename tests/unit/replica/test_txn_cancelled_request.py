"""A transaction coordinator request whose client gives up mid-write still ends the
transaction (issue 40, item 7; found by the ``txn-pipeline`` chaos workload).

gRPC cancels a handler once its client's deadline has passed. ``EndTxn`` decides in memory
(``PREPARE_COMMIT``), appends the decision to ``__transaction_state`` and waits for every
in-sync replica, and only then starts the job that writes the markers. When replication took
longer than the client waited (a follower cut off until the ISR shrank), the cancellation
ended the handler inside that wait: the record stayed in the log and the state in memory,
but no marker job ever started. The transaction hung in ``PREPARE_COMMIT`` until the
partition's leadership moved: its partitions' last stable offset stayed behind its records
(``read_committed`` readers stopped there), its group's offsets stayed unstable, and every
``InitProducerId`` and ``EndTxn`` of the id was answered ``CONCURRENT_TRANSACTIONS``.

Here a real :class:`TransactionService` leads ``__transaction_state-0`` (one replica) and
an append wrapper holds each write after it reached the log until the test lets it go, as a
slow ISR does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path

import pytest

from lograft.protocol.errors import LograftError
from lograft.protocol.topic_config import LogConfig
from lograft.protocol.topic_partition import TopicPartition
from replica.coordinator_log import append_acks_all
from replica.log.partition_log import PartitionLog
from replica.log_manager import LogManager
from replica.partition import Partition
from replica.txn.coordinator import MarkerJob
from replica.txn.metadata import TxnState
from replica.txn_service import TRANSACTION_STATE_TOPIC, TransactionService
from tests.unit.broker_fixtures import eventually, now_ms

TXN_ID = "pipeline-0"
EVENTS = TopicPartition("events", 0)


class Peers:
    """The rest of the cluster: producer ids, and every marker written at once."""

    def __init__(self) -> None:
        self.markers: list[tuple[int, bool, frozenset[TopicPartition]]] = []
        self._next_id = 1000

    async def next_producer_id(self) -> int:
        self._next_id += 1
        return self._next_id

    async def write_markers(
        self, job: MarkerJob, partitions: frozenset[TopicPartition]
    ) -> Mapping[TopicPartition, LograftError | None]:
        self.markers.append((job.producer_epoch, job.committed, partitions))
        return dict.fromkeys(partitions)

    async def verify(
        self, transactional_id: str, producer_id: int, producer_epoch: int, tp: TopicPartition
    ) -> None:
        return None


class SlowReplication:
    """Wraps the coordinator's ``acks=all`` append: once armed, a write waits after it is
    in the log until :meth:`release`."""

    def __init__(self, append: Callable[..., Awaitable[None]]) -> None:
        self._append = append
        self.armed = False
        self.waiting = asyncio.Event()
        self._released = asyncio.Event()

    async def __call__(
        self, partition: Partition, pairs: Sequence[tuple[bytes, bytes | None]], now_ms: int
    ) -> None:
        await self._append(partition, pairs, now_ms)
        if self.armed:
            self.waiting.set()
            await self._released.wait()

    def release(self) -> None:
        self.armed = False
        self._released.set()


def _loaded(service: TransactionService) -> bool:
    try:
        service.read(TXN_ID, lambda c: c.metadata(TXN_ID))
    except LograftError:
        return False  # still loading
    return True


def _state(service: TransactionService) -> TxnState | None:
    meta = service.read(TXN_ID, lambda c: c.metadata(TXN_ID))
    return None if meta is None else meta.state


@pytest.fixture
def logs(tmp_path: Path) -> LogManager:
    manager = LogManager(tmp_path / "logs", LogConfig(), now_ms)
    manager.open(load_topics=False)
    tp = TopicPartition(TRANSACTION_STATE_TOPIC, 0)
    partition = Partition(tp, PartitionLog.open(tmp_path / "state-0", LogConfig(), now_ms()))
    partition.become_leader(
        replica_id=1, replicas=(1,), isr=(1,), leader_epoch=0, partition_epoch=0, now_ms=0
    )
    manager.adopt_partition(partition)
    return manager


@pytest.mark.parametrize("commit", [True, False])
async def test_an_end_txn_whose_client_gave_up_during_replication_still_ends_it(
    logs: LogManager, monkeypatch: pytest.MonkeyPatch, commit: bool
) -> None:
    slow = SlowReplication(append_acks_all)
    monkeypatch.setattr("replica.txn_service.append_acks_all", slow)
    peers = Peers()
    service = TransactionService(logs, lambda: {TRANSACTION_STATE_TOPIC: 1}, peers)
    service.sync()
    try:
        await eventually(lambda: _loaded(service), "the coordinator's load")
        started = await service.call(
            TXN_ID, lambda c: c.init_producer_id(TXN_ID, 60_000, now_ms(), lambda: 1001)
        )
        pid, epoch = started.producer_id, started.producer_epoch
        await service.call(
            TXN_ID, lambda c: c.add_partitions(TXN_ID, pid, epoch, [EVENTS], now_ms())
        )

        slow.armed = True
        ending = asyncio.create_task(
            service.call(TXN_ID, lambda c: c.end_transaction(TXN_ID, pid, epoch, commit, now_ms()))
        )
        await slow.waiting.wait()  # the decision is in the log, not yet replicated
        ending.cancel()  # the client's deadline passed: gRPC cancels the handler
        with pytest.raises(asyncio.CancelledError):
            await ending
        slow.release()  # the followers catch up

        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        await eventually(lambda: _state(service) is done, f"{done.name}")
        assert (epoch + 1, commit, frozenset({EVENTS})) in peers.markers
        # The id can start again (before the fix: CONCURRENT_TRANSACTIONS, for ever).
        again = await service.call(
            TXN_ID, lambda c: c.init_producer_id(TXN_ID, 60_000, now_ms(), lambda: 1001)
        )
        assert again.producer_id == pid and again.producer_epoch > epoch
    finally:
        slow.release()
        await service.stop()
