"""The transaction coordinator core (replica.txn): Kafka's rules, one behaviour per test."""

from __future__ import annotations

import itertools
import logging
import struct
from collections.abc import Callable
from dataclasses import replace

import pytest

from lograft.protocol.errors import (
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    CorruptMessageError,
    InvalidProducerIdMappingError,
    InvalidRequestError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    ProducerFencedError,
)
from lograft.protocol.topic_partition import TopicPartition
from replica.txn import (
    MAX_PRODUCER_EPOCH,
    EndResult,
    InitResult,
    MarkerJob,
    TransactionCoordinator,
    TxnState,
    decode_record,
    encode_record,
    partition_for_transactional_id,
)
from replica.txn.metadata import TxnRecord

# The cores' logger in these tests (their shells pass the real ones).
CORE_LOG = logging.getLogger(__name__)

TID = "orders-writer"
A, B, OFFSETS = (
    TopicPartition("a", 0),
    TopicPartition("b", 1),
    TopicPartition("__consumer_offsets", 7),
)
NOW = 1_000_000
TIMEOUT = 60_000


def _ids(start: int = 4000) -> Callable[[], int]:
    counter = itertools.count(start)
    return lambda: next(counter)


def _coordinator(two_phase: bool = False) -> TransactionCoordinator:
    coordinator = TransactionCoordinator(
        partition=3, coordinator_epoch=5, two_phase_enabled=two_phase, logger=CORE_LOG
    )
    assert coordinator.complete_load() == ()
    return coordinator


def _init(c: TransactionCoordinator, **kw: bool) -> InitResult:
    outcome = c.init_producer_id(TID, TIMEOUT, NOW, _ids(), **kw)
    assert outcome.error is None
    return outcome.result


def _open(c: TransactionCoordinator, *partitions: TopicPartition) -> InitResult:
    producer = _init(c)
    c.add_partitions(TID, producer.producer_id, producer.producer_epoch, partitions, NOW)
    return producer


def test_a_new_transactional_id_gets_a_producer_id_at_epoch_0() -> None:
    c = _coordinator()
    outcome = c.init_producer_id(TID, TIMEOUT, NOW, _ids())
    assert outcome.result == InitResult(4000, 0)
    (record,) = outcome.records
    assert record.metadata is not None and record.metadata.state is TxnState.EMPTY


def test_init_again_bumps_the_epoch_and_fences_the_old_producer() -> None:
    c = _coordinator()
    old = _init(c)
    new = _init(c)
    assert (new.producer_id, new.producer_epoch) == (old.producer_id, old.producer_epoch + 1)
    with pytest.raises(ProducerFencedError):
        c.add_partitions(TID, old.producer_id, old.producer_epoch, [A], NOW)
    with pytest.raises(ProducerFencedError):
        c.end_transaction(TID, old.producer_id, old.producer_epoch, True, NOW)


def test_adding_partitions_opens_the_transaction_and_grows_it() -> None:
    c = _coordinator()
    p = _open(c, A)
    meta = c.metadata(TID)
    assert meta is not None and meta.state is TxnState.ONGOING and meta.partitions == {A}
    assert c.add_partitions(TID, p.producer_id, p.producer_epoch, [A], NOW + 5).records == ()
    c.add_partitions(TID, p.producer_id, p.producer_epoch, [B, OFFSETS], NOW + 9)
    meta = c.metadata(TID)
    assert meta is not None and meta.partitions == {A, B, OFFSETS} and meta.started_ms == NOW
    assert c.verify_partition(TID, p.producer_id, p.producer_epoch, B)
    assert not c.verify_partition(TID, p.producer_id, p.producer_epoch, TopicPartition("c", 0))


def test_commit_bumps_the_epoch_writes_markers_with_it_then_completes() -> None:
    c = _coordinator()
    p = _open(c, A, B)
    ended = c.end_transaction(TID, p.producer_id, p.producer_epoch, True, NOW + 10)
    assert ended.result == EndResult(p.producer_id, p.producer_epoch + 1)
    assert ended.markers == (
        MarkerJob(TID, p.producer_id, p.producer_epoch + 1, True, frozenset({A, B}), 5),
    )
    assert ended.records[0].metadata is not None
    assert ended.records[0].metadata.state is TxnState.PREPARE_COMMIT
    done = c.markers_written(TID, p.producer_id, p.producer_epoch + 1, NOW + 20)
    assert done.result is True
    meta = c.metadata(TID)
    assert meta is not None and meta.state is TxnState.COMPLETE_COMMIT and not meta.partitions
    # The next transaction runs under the epoch the end returned.
    c.add_partitions(TID, p.producer_id, p.producer_epoch + 1, [A], NOW + 30)


def test_a_retried_end_is_answered_and_the_opposite_end_refused() -> None:
    c = _coordinator()
    p = _open(c, A)
    c.end_transaction(TID, p.producer_id, p.producer_epoch, False, NOW)
    with pytest.raises(ConcurrentTransactionsError):  # markers still out
        c.end_transaction(TID, p.producer_id, p.producer_epoch, False, NOW)
    with pytest.raises(InvalidTxnStateError):
        c.end_transaction(TID, p.producer_id, p.producer_epoch, True, NOW)
    c.markers_written(TID, p.producer_id, p.producer_epoch + 1, NOW)
    again = c.end_transaction(TID, p.producer_id, p.producer_epoch, False, NOW)
    assert again.result == EndResult(p.producer_id, p.producer_epoch + 1)
    assert again.records == () and again.markers == ()


def test_commit_without_a_transaction_is_refused_and_abort_only_moves_the_epoch() -> None:
    c = _coordinator()
    p = _init(c)
    with pytest.raises(InvalidTxnStateError):
        c.end_transaction(TID, p.producer_id, p.producer_epoch, True, NOW)
    aborted = c.end_transaction(TID, p.producer_id, p.producer_epoch, False, NOW)
    assert aborted.result == EndResult(p.producer_id, p.producer_epoch + 1)
    assert aborted.markers == ()


def test_init_while_a_transaction_is_open_aborts_it_and_asks_for_a_retry() -> None:
    c = _coordinator()
    zombie = _open(c, A, B)
    fencing = c.init_producer_id(TID, TIMEOUT, NOW, _ids())
    assert isinstance(fencing.error, ConcurrentTransactionsError)
    (job,) = fencing.markers
    assert (job.committed, job.producer_epoch, job.partitions) == (
        False,
        zombie.producer_epoch + 2,  # one bump fences, one is the abort's
        frozenset({A, B}),
    )
    for commit in (True, False):  # the zombie ends nothing, not even as a "retry"
        with pytest.raises(ProducerFencedError):
            c.end_transaction(TID, zombie.producer_id, zombie.producer_epoch, commit, NOW)
    with pytest.raises(ConcurrentTransactionsError):  # the abort is not complete yet
        c.init_producer_id(TID, TIMEOUT, NOW, _ids())
    c.markers_written(TID, job.producer_id, job.producer_epoch, NOW)
    assert _init(c).producer_epoch == zombie.producer_epoch + 3
    with pytest.raises(ProducerFencedError):
        c.add_partitions(TID, zombie.producer_id, zombie.producer_epoch, [A], NOW)


def test_a_prepared_transaction_is_kept_for_a_new_producer_and_never_times_out() -> None:
    c = _coordinator(two_phase=True)
    first = c.init_producer_id(TID, TIMEOUT, NOW, _ids(), two_phase=True).result
    c.add_partitions(TID, first.producer_id, first.producer_epoch, [A], NOW)
    assert c.tick(NOW + 10 * TIMEOUT).markers == ()  # two-phase: no timeout
    second = c.init_producer_id(TID, TIMEOUT, NOW, _ids(), two_phase=True, keep_prepared=True)
    assert second.error is None and second.markers == ()
    taken = second.result
    assert (taken.ongoing_producer_id, taken.ongoing_producer_epoch) == (
        first.producer_id,
        first.producer_epoch,
    )
    with pytest.raises(ProducerFencedError):  # the crashed process can end nothing
        c.end_transaction(TID, first.producer_id, first.producer_epoch, True, NOW)
    ended = c.end_transaction(TID, taken.producer_id, taken.producer_epoch, True, NOW)
    (job,) = ended.markers
    assert job.committed and job.partitions == {A}
    assert job.producer_epoch == first.producer_epoch + 2


def test_two_phase_needs_the_cluster_to_allow_it() -> None:
    with pytest.raises(InvalidTxnStateError):
        _coordinator().init_producer_id(TID, TIMEOUT, NOW, _ids(), two_phase=True)


def test_a_transaction_open_past_its_timeout_is_fenced_and_aborted() -> None:
    c = _coordinator()
    p = _open(c, A)
    assert c.tick(NOW + TIMEOUT).result == ()
    expired = c.tick(NOW + TIMEOUT + 1)
    assert expired.result == (TID,)
    (job,) = expired.markers
    assert not job.committed and job.producer_epoch == p.producer_epoch + 2
    with pytest.raises(ProducerFencedError):
        c.add_partitions(TID, p.producer_id, p.producer_epoch, [B], NOW)


@pytest.mark.parametrize("timeout_ms", [0, -1, 900_001])
def test_timeouts_out_of_range_are_refused(timeout_ms: int) -> None:
    with pytest.raises(InvalidTransactionTimeoutError):
        _coordinator().init_producer_id(TID, timeout_ms, NOW, _ids())


@pytest.mark.parametrize("timeout_ms", [0, -1])
def test_a_two_phase_timeout_must_still_be_positive(timeout_ms: int) -> None:
    """It is written to ``__transaction_state``, whose reader refuses one that is not: a
    client must not be able to write a record the next coordinator cannot load."""
    with pytest.raises(InvalidTransactionTimeoutError, match="must be positive"):
        _coordinator(two_phase=True).init_producer_id(TID, timeout_ms, NOW, _ids(), two_phase=True)
    longest = _coordinator(two_phase=True).init_producer_id(
        TID, 2**31 - 1, NOW, _ids(), two_phase=True
    )
    assert longest.error is None  # no upper bound: a two-phase transaction never times out


def test_requests_of_unknown_producers_and_while_deciding() -> None:
    c = _coordinator()
    with pytest.raises(InvalidProducerIdMappingError):
        c.add_partitions(TID, 1, 0, [A], NOW)
    p = _open(c, A)
    with pytest.raises(InvalidProducerIdMappingError):
        c.add_partitions(TID, p.producer_id + 1, p.producer_epoch, [A], NOW)
    with pytest.raises(InvalidRequestError):
        c.add_partitions(TID, p.producer_id, p.producer_epoch, [], NOW)
    with pytest.raises(InvalidRequestError):
        c.init_producer_id("", TIMEOUT, NOW, _ids())
    c.end_transaction(TID, p.producer_id, p.producer_epoch, True, NOW)
    with pytest.raises(ConcurrentTransactionsError):
        c.add_partitions(TID, p.producer_id, p.producer_epoch + 1, [B], NOW)


def test_an_exhausted_epoch_gets_a_new_producer_id() -> None:
    c = _coordinator()
    _init(c)
    meta = c.metadata(TID)
    assert meta is not None
    c.replay(TxnRecord(TID, replace(meta, producer_epoch=MAX_PRODUCER_EPOCH - 1)))
    fresh = c.init_producer_id(TID, TIMEOUT, NOW, _ids(9000)).result
    assert fresh == InitResult(9000, 0)


def test_a_loading_coordinator_answers_load_in_progress_and_restarts_deciding_jobs() -> None:
    c = _coordinator()
    p = _open(c, A)
    records = list(c.end_transaction(TID, p.producer_id, p.producer_epoch, True, NOW).records)
    loaded = TransactionCoordinator(partition=3, coordinator_epoch=6, logger=CORE_LOG)
    with pytest.raises(CoordinatorLoadInProgressError):
        loaded.init_producer_id(TID, TIMEOUT, NOW, _ids())
    for record in records:
        key, value = encode_record(record)
        loaded.replay(decode_record(key, value))
    (job,) = loaded.complete_load()
    assert job.committed and job.partitions == {A} and job.coordinator_epoch == 6


def test_replaying_every_record_rebuilds_the_same_state() -> None:
    c = _coordinator()
    written: list[TxnRecord] = []
    for outcome in (
        c.init_producer_id(TID, TIMEOUT, NOW, _ids()),
        c.add_partitions(TID, 4000, 0, [A, B], NOW + 1),
        c.end_transaction(TID, 4000, 0, False, NOW + 2),
        c.markers_written(TID, 4000, 1, NOW + 3),
        c.init_producer_id("other", TIMEOUT, NOW, _ids(7000)),
    ):
        written += outcome.records
    replayed = TransactionCoordinator(partition=3, coordinator_epoch=6, logger=CORE_LOG)
    for record in written:
        replayed.replay(decode_record(*encode_record(record)))
    replayed.complete_load()
    assert [replayed.metadata(t) for t in c.transactional_ids()] == [
        c.metadata(t) for t in c.transactional_ids()
    ]


def test_transactional_ids_hash_as_kafka_does() -> None:
    # Java: Math.abs("orders-writer".hashCode()) % 50
    assert partition_for_transactional_id(TID, 50) == abs(_java_hash(TID)) % 50


def _java_hash(text: str) -> int:
    h = 0
    for ch in text:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - 2**32 if h >= 2**31 else h


def test_a_record_reads_back_and_damaged_bytes_are_corrupt() -> None:
    c = _coordinator()
    p = _open(c, A, OFFSETS)
    meta = c.metadata(TID)
    key, value = encode_record(TxnRecord(TID, meta))
    assert decode_record(key, value) == TxnRecord(TID, meta)
    assert decode_record(key, None) == TxnRecord(TID, None)
    assert value is not None and p.producer_id == 4000
    for damaged_key, damaged_value in (
        (key, value[:-1]),  # ends early
        (key, value + b"x"),  # bytes over
        (b"\x00\x01" + key[2:], value),  # key version
        (key, b"\x00\x09" + value[2:]),  # value version
        (key, value[:18] + b"\x09" + value[19:]),  # unknown state
        (key, value[:-4] + b"\xff\xff\xff\xff"),  # negative partition
    ):
        with pytest.raises(CorruptMessageError):
            decode_record(damaged_key, damaged_value)


def _set_bytes(*topics: tuple[str, list[int]]) -> bytes:
    """A partition set laid out by hand, in the order given."""
    out = struct.pack(">I", len(topics))
    for topic, numbers in topics:
        name = topic.encode()
        out += struct.pack(">H", len(name)) + name
        out += struct.pack(f">I{len(numbers)}i", len(numbers), *numbers)
    return out


def test_the_partition_set_is_checked_like_the_group_coordinators() -> None:
    """The value's partitions use the codec shared with the group records (sorted, unique,
    valid names, counts within the bytes), and the encoder refuses what the decoder would."""
    c = _coordinator()
    _open(c, B, A)
    meta = c.metadata(TID)
    assert meta is not None
    key, value = encode_record(TxnRecord(TID, meta))
    assert value is not None
    fixed = value[:36]  # version u16 and the fixed fields (">qhhibbqq")
    assert value[36:] == _set_bytes(("a", [0]), ("b", [1]))  # the layout on disk
    for damaged, message in (
        (_set_bytes(("b", [1]), ("a", [0])), "topics not sorted or repeated"),
        (_set_bytes(("a", [0, 0])), "partitions of a not sorted or repeated"),
        (_set_bytes(("bad topic!", [0])), "partitions topic"),
        (_set_bytes(("a", [10_000])), "partitions partition=10000 is not in"),
        (struct.pack(">I", 1000) + value[40:], "topic count=1000 cannot fit"),
    ):
        with pytest.raises(CorruptMessageError, match=message):
            decode_record(key, fixed + damaged)
    for broken in (
        replace(meta, partitions=frozenset({TopicPartition("bad topic!", 0)})),
        replace(meta, producer_epoch=2**15),
        replace(meta, transactional_id="x" * 70_000),
    ):
        with pytest.raises(CorruptMessageError):
            encode_record(TxnRecord(broken.transactional_id, broken))


def test_an_idle_id_without_an_open_transaction_expires() -> None:
    c = TransactionCoordinator(
        partition=3, coordinator_epoch=5, id_expiration_ms=10_000, logger=CORE_LOG
    )
    c.complete_load()
    idle = _init(c)
    open_one = c.init_producer_id("busy", TIMEOUT, NOW, _ids(8000)).result
    c.add_partitions("busy", open_one.producer_id, open_one.producer_epoch, [A], NOW)
    assert c.expire_ids(NOW + 10_000).result == ()
    expired = c.expire_ids(NOW + 10_001)
    assert expired.result == (TID,)  # "busy" has a transaction open: kept
    assert expired.records == (TxnRecord(TID, None),)
    assert c.metadata(TID) is None
    with pytest.raises(InvalidProducerIdMappingError):  # its producer is gone with it
        c.add_partitions(TID, idle.producer_id, idle.producer_epoch, [A], NOW)
    assert c.init_producer_id(TID, TIMEOUT, NOW, _ids(9000)).result == InitResult(9000, 0)
