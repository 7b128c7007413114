"""ProducerStateManager: Kafka's idempotent-producer rules, recovery, truncation, replaying
its snapshots (their codec: ``test_producer_snapshot_codec.py``)."""

# Over 600 lines: the state machine's rules and its reference-model tests, read together.
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from lograft.protocol.batch_header import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    BatchHeader,
    iter_headers,
    validate_batches,
)
from lograft.protocol.control_records import EndTxnMarker
from lograft.protocol.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    OutOfOrderSequenceNumberError,
)
from lograft.protocol.records import encode_batch
from lograft.protocol.topic_config import LogConfig
from replica.log.partition_log import PartitionLog
from replica.producer_snapshot_codec import decode_snapshot, encode_snapshot
from replica.producer_state import (
    MAX_SEQUENCE,
    NUM_BATCHES_TO_RETAIN,
    AppendPlan,
    BatchMetadata,
    Duplicate,
    ProducerStateManager,
    last_sequence,
)
from tests.unit.producer_state_fixtures import PID, at_offset, header, produce

# ---- the produce rules ---------------------------------------------------------------------


def test_batches_without_producer_id_pass_and_only_move_the_end_offset() -> None:
    manager = ProducerStateManager()
    for _ in range(3):
        result = produce(manager, header(producer_id=-1, epoch=-1, seq=-1, count=4))
        assert result == AppendPlan(-1, -1, -1, -1)
        assert not result.is_idempotent
    assert manager.end_offset == 12
    assert manager.entries() == {}


def test_first_batch_records_the_producer() -> None:
    manager = ProducerStateManager()
    assert produce(manager, header(seq=0, count=3, timestamp=77)) == AppendPlan(PID, 0, 0, 2)
    entry = manager.entry(PID)
    assert entry is not None
    assert entry.producer_epoch == 0
    assert entry.batches == (BatchMetadata(0, 2, 0, 2, 77),)
    assert entry.last_timestamp == 77


@pytest.mark.parametrize("back", range(1, NUM_BATCHES_TO_RETAIN + 1))
def test_each_of_the_last_five_batches_is_a_duplicate(back: int) -> None:
    manager = ProducerStateManager()
    sent = [header(seq=2 * i, count=2) for i in range(8)]
    for batch in sent:
        produce(manager, batch)
    retry = sent[-back]
    result = manager.check_and_plan(retry)
    assert isinstance(result, Duplicate)
    assert result.first_offset == 2 * (8 - back)
    assert result.last_offset == 2 * (8 - back) + 1
    assert manager.end_offset == 16


def test_the_sixth_batch_back_is_out_of_order_not_a_duplicate() -> None:
    manager = ProducerStateManager()
    sent = [header(seq=i) for i in range(NUM_BATCHES_TO_RETAIN + 1)]
    for batch in sent:
        produce(manager, batch)
    with pytest.raises(OutOfOrderSequenceNumberError):
        manager.check_and_plan(sent[0])


def test_duplicate_needs_the_exact_sequence_range_and_epoch() -> None:
    manager = ProducerStateManager()
    produce(manager, header(seq=0, count=3))
    with pytest.raises(OutOfOrderSequenceNumberError):
        manager.check_and_plan(header(seq=0, count=2))  # same start, other end
    with pytest.raises(OutOfOrderSequenceNumberError):
        manager.check_and_plan(header(epoch=1, seq=1, count=2))
    assert isinstance(manager.check_and_plan(header(epoch=1, seq=0, count=3)), AppendPlan)


@pytest.mark.parametrize("seq", [0, 1, 2, 4, 5, 100])
def test_gaps_and_rewinds_are_out_of_order(seq: int) -> None:
    manager = ProducerStateManager()
    produce(manager, header(seq=0, count=3))  # sequences 0..2, next is 3
    with pytest.raises(OutOfOrderSequenceNumberError):
        manager.check_and_plan(header(seq=seq))
    assert isinstance(manager.check_and_plan(header(seq=3)), AppendPlan)


def test_older_epoch_is_invalid_producer_epoch() -> None:
    manager = ProducerStateManager()
    produce(manager, header(epoch=3, seq=0))
    with pytest.raises(InvalidProducerEpochError):
        manager.check_and_plan(header(epoch=2, seq=1))
    with pytest.raises(InvalidProducerEpochError):
        manager.check_and_plan(header(epoch=2, seq=0))


def test_epoch_bump_resets_the_sequence_and_the_cache() -> None:
    manager = ProducerStateManager()
    for seq in range(3):
        produce(manager, header(epoch=0, seq=seq))
    with pytest.raises(OutOfOrderSequenceNumberError):
        manager.check_and_plan(header(epoch=1, seq=3))
    assert isinstance(produce(manager, header(epoch=1, seq=0)), AppendPlan)
    entry = manager.entry(PID)
    assert entry is not None and entry.producer_epoch == 1 and len(entry.batches) == 1
    # The old epoch's batches are neither duplicates nor acceptable any more.
    with pytest.raises(InvalidProducerEpochError):
        manager.check_and_plan(header(epoch=0, seq=2))
    assert isinstance(manager.check_and_plan(header(epoch=1, seq=1)), AppendPlan)


def test_unknown_producer_is_accepted_at_any_sequence() -> None:
    """KIP-360: no UNKNOWN_PRODUCER_ID; a producer without state starts where it is."""
    manager = ProducerStateManager()
    assert isinstance(produce(manager, header(seq=4242, count=2)), AppendPlan)
    with pytest.raises(OutOfOrderSequenceNumberError):
        manager.check_and_plan(header(seq=4245))
    assert isinstance(manager.check_and_plan(header(seq=4244)), AppendPlan)


def test_sequence_wraps_after_int32_max() -> None:
    manager = ProducerStateManager()
    produce(manager, header(seq=MAX_SEQUENCE - 1, count=2))  # ends exactly at MAX
    entry = manager.entry(PID)
    assert entry is not None and entry.last_seq == MAX_SEQUENCE
    with pytest.raises(OutOfOrderSequenceNumberError):
        manager.check_and_plan(header(seq=1))
    assert produce(manager, header(seq=0, count=2)) == AppendPlan(PID, 0, 0, 1)
    # A batch that itself crosses the wrap: MAX-1, MAX, 0, 1.
    wrapping = header(producer_id=PID + 1, seq=MAX_SEQUENCE - 1, count=4)
    assert produce(manager, wrapping) == AppendPlan(PID + 1, 0, MAX_SEQUENCE - 1, 1)
    assert isinstance(manager.check_and_plan(wrapping), Duplicate)
    assert isinstance(manager.check_and_plan(header(producer_id=PID + 1, seq=2)), AppendPlan)


def test_last_sequence_matches_kafkas_increment_sequence() -> None:
    def kafka(sequence: int, increment: int) -> int:
        if sequence > MAX_SEQUENCE - increment:
            return increment - (MAX_SEQUENCE - sequence) - 1
        return sequence + increment

    for sequence in (0, 1, 5, MAX_SEQUENCE - 3, MAX_SEQUENCE - 1, MAX_SEQUENCE):
        for increment in (0, 1, 2, 3, 4, 1000):
            assert last_sequence(sequence, increment) == kafka(sequence, increment)


def test_several_batches_in_one_request_are_checked_in_order() -> None:
    manager = ProducerStateManager()
    produce(manager, header(seq=0, count=2))
    first, second = header(seq=2, count=3), header(seq=5, count=1)
    assert manager.check_batches([first, second]) == [
        AppendPlan(PID, 0, 2, 4),
        AppendPlan(PID, 0, 5, 5),
    ]
    # Without the first, the second is a gap; the same batch twice is out of order.
    with pytest.raises(OutOfOrderSequenceNumberError):
        manager.check_and_plan(second)
    with pytest.raises(OutOfOrderSequenceNumberError):
        manager.check_batches([first, first])
    # An epoch bump inside a request: the next batch must follow the new epoch.
    bump, after = header(epoch=1, seq=0), header(epoch=1, seq=1)
    assert manager.check_batches([bump, after])[1] == AppendPlan(PID, 1, 1, 1)
    with pytest.raises(InvalidProducerEpochError):
        manager.check_batches([bump, header(epoch=0, seq=2)])
    # Other producers in the same request do not interfere; checking changed nothing.
    other = header(producer_id=PID + 1, seq=0)
    assert len(manager.check_batches([first, other, second])) == 3
    entry = manager.entry(PID)
    assert entry is not None and entry.last_seq == 1 and manager.end_offset == 2


def test_retried_request_with_a_duplicate_and_a_new_batch() -> None:
    manager = ProducerStateManager()
    produce(manager, header(seq=0, count=2))
    results = manager.check_batches([header(seq=0, count=2), header(seq=2)])
    assert isinstance(results[0], Duplicate) and results[0].first_offset == 0
    assert results[1] == AppendPlan(PID, 0, 2, 2)


def test_invalid_epoch_or_sequence_with_a_producer_id_is_an_invalid_record() -> None:
    manager = ProducerStateManager()
    for bad in (header(epoch=-1), header(seq=-1), header(producer_id=-7)):
        with pytest.raises(InvalidRecordError):
            manager.check_and_plan(bad)


def test_on_appended_refuses_offsets_already_covered() -> None:
    manager = ProducerStateManager()
    produce(manager, header(seq=0, count=3))
    with pytest.raises(ValueError, match="below"):
        manager.on_appended(header(seq=3, base_offset=2))


def test_replicated_batches_are_recorded_without_checks() -> None:
    """A follower applies what the leader wrote, even an epoch the leader would refuse."""
    manager = ProducerStateManager()
    manager.on_appended(header(epoch=5, seq=9, base_offset=0))
    manager.on_appended(header(epoch=4, seq=0, base_offset=1))
    entry = manager.entry(PID)
    assert entry is not None and entry.producer_epoch == 4 and len(entry.batches) == 1


# ---- expiry --------------------------------------------------------------------------------


def test_expiry_removes_producers_idle_for_the_expiration_time() -> None:
    manager = ProducerStateManager(producer_id_expiration_ms=1_000)
    produce(manager, header(producer_id=1, timestamp=5_000))
    produce(manager, header(producer_id=2, timestamp=5_500))
    assert manager.expire_producers(now_ms=5_999) == []
    assert manager.expire_producers(now_ms=6_000) == [1]
    assert manager.entry(1) is None and manager.entry(2) is not None
    # An expired producer is unknown: accepted again at any sequence.
    assert isinstance(manager.check_and_plan(header(producer_id=1, seq=7)), AppendPlan)
    assert manager.expire_producers(now_ms=10**12) == [2]


def test_default_expiration_is_one_day() -> None:
    manager = ProducerStateManager()
    produce(manager, header(timestamp=0))
    assert manager.expire_producers(86_399_999) == []
    assert manager.expire_producers(86_400_000) == [PID]


# ---- recovery: rebuild, truncate, snapshots -----------------------------------------------


def test_rebuild_from_headers_equals_live_appends() -> None:
    live = ProducerStateManager()
    appended: list[BatchHeader] = []
    batches = [
        header(producer_id=1, seq=0, count=2),
        header(producer_id=-1, epoch=-1, seq=-1, count=3),
        header(producer_id=2, seq=10),
        header(producer_id=1, seq=2),
        header(producer_id=1, epoch=1, seq=0),
        *[header(producer_id=2, seq=11 + i, timestamp=2_000 + i) for i in range(7)],
    ]
    for batch in batches:
        result = live.check_and_plan(batch)
        assert isinstance(result, AppendPlan)
        stamped = at_offset(batch, live.end_offset)
        live.on_appended(stamped)
        appended.append(stamped)
    rebuilt = ProducerStateManager()
    rebuilt.rebuild_from_batches(appended)
    assert rebuilt == live
    # Replaying from a snapshot skips what the snapshot covers.
    middle = ProducerStateManager()
    middle.rebuild_from_batches(appended[:4])
    resumed = decode_snapshot(encode_snapshot(middle))
    resumed.rebuild_from_batches(appended)
    assert resumed == live


def test_rebuild_refuses_a_batch_straddling_the_snapshot_offset() -> None:
    manager = ProducerStateManager(end_offset=5)
    with pytest.raises(ValueError, match="straddles"):
        manager.rebuild_from_batches([header(seq=0, count=3, base_offset=4)])


def test_rebuild_from_a_real_partition_log(tmp_path: Path) -> None:
    """Produce through PartitionLog, reopen it, replay its headers: the same state."""
    config = LogConfig(segment_bytes=400, retention_ms=-1)
    log = PartitionLog.open(tmp_path, config, now_ms=0)
    live = ProducerStateManager()
    sequences = {7: 0, 8: 0}
    for step in range(12):
        producer_id = 7 + step % 2
        values = [b"v%d" % step] * (1 + step % 3)
        data = encode_batch(
            values,
            timestamp_ms=1_000 + step,
            producer_id=producer_id,
            producer_epoch=0,
            base_sequence=sequences[producer_id],
        )
        if step == 5:  # the same batch twice in one request: the second is out of order
            with pytest.raises(OutOfOrderSequenceNumberError):
                live.check_batches(validate_batches(bytearray(data * 2), 1 << 20))
        buffer = bytearray(data)
        headers = validate_batches(buffer, 1 << 20)
        results = live.check_batches(headers)
        assert all(isinstance(result, AppendPlan) for result in results)
        log.append(buffer, headers, leader_epoch=0, now_ms=0)
        for stamped in iter_headers(buffer):
            live.on_appended(stamped)
        sequences[producer_id] += len(values)
        retry = live.check_batches(validate_batches(bytearray(data), 1 << 20))
        assert isinstance(retry[0], Duplicate)
    log.close()
    reopened = PartitionLog.open(tmp_path, config, now_ms=0)
    rebuilt = ProducerStateManager()
    offset = reopened.log_start_offset
    while offset < reopened.log_end_offset:
        chunk = reopened.read(offset, 1 << 20)
        for stamped in iter_headers(chunk):
            rebuilt.rebuild_from_batches([stamped])
            offset = stamped.next_offset
    reopened.close()
    assert rebuilt == live


def test_truncate_to_drops_batches_at_and_above_the_offset() -> None:
    manager = ProducerStateManager()
    produce(manager, header(producer_id=1, seq=0, count=2, timestamp=1))  # offsets 0-1
    produce(manager, header(producer_id=2, seq=0, timestamp=2))  # 2
    produce(manager, header(producer_id=1, seq=2, timestamp=3))  # 3
    produce(manager, header(producer_id=3, seq=0, timestamp=4))  # 4
    inexact = manager.truncate_to(3)
    assert manager.end_offset == 3
    assert manager.entry(3) is None  # lost its only batch
    entry = manager.entry(1)
    assert entry is not None and entry.batches == (BatchMetadata(0, 1, 0, 1, 1),)
    assert entry.last_timestamp == 1
    assert inexact == frozenset({3})  # producer 1 had fewer than five: still exact
    # Producer 1 continues after its remaining batch; the truncated one is no duplicate.
    assert isinstance(manager.check_and_plan(header(producer_id=1, seq=2)), AppendPlan)
    assert manager.truncate_to(10) == frozenset() and manager.end_offset == 3
    with pytest.raises(ValueError):
        manager.truncate_to(-1)


def test_truncating_a_full_cache_reports_the_producer() -> None:
    manager = ProducerStateManager()
    for seq in range(7):
        produce(manager, header(seq=seq))
    assert manager.truncate_to(6) == frozenset({PID})
    entry = manager.entry(PID)
    assert entry is not None and entry.last_seq == 5 and len(entry.batches) == 4


# ---- a stateful test against a reference model ---------------------------------------------


@dataclass
class _Client:
    epoch: int = 0
    next_seq: int = 0
    sent: list[BatchHeader] = field(default_factory=list)


def _model_state(log: list[BatchHeader], producer_id: int) -> tuple[int, list[BatchHeader]]:
    """(epoch, cached batches) of ``producer_id`` from the log; (-1, []) if unknown."""
    mine = [batch for batch in log if batch.producer_id == producer_id]
    if not mine:
        return -1, []
    epoch = mine[-1].producer_epoch
    run: list[BatchHeader] = []
    for batch in reversed(mine):
        if batch.producer_epoch != epoch:
            break
        run.append(batch)
    return epoch, run[::-1][-NUM_BATCHES_TO_RETAIN:]


def _seq_range(batch: BatchHeader) -> tuple[int, int]:
    return batch.base_sequence, last_sequence(batch.base_sequence, batch.last_offset_delta)


def _expected(log: list[BatchHeader], earlier: list[BatchHeader], batch: BatchHeader) -> str | int:
    """The model's answer: the duplicate's first offset, "ok", "epoch" or "order"."""
    epoch, cached = _model_state(log, batch.producer_id)
    if epoch == batch.producer_epoch:
        for old in cached:
            if _seq_range(old) == _seq_range(batch):
                return old.base_offset
    last_seq = _seq_range(cached[-1])[1] if cached else -1
    for previous in earlier:
        if previous.producer_id == batch.producer_id:
            epoch, last_seq = previous.producer_epoch, _seq_range(previous)[1]
    if epoch == -1:
        return "ok"
    if batch.producer_epoch < epoch:
        return "epoch"
    if batch.producer_epoch > epoch:
        return "ok" if batch.base_sequence == 0 else "order"
    follows = (last_seq + 1) % (MAX_SEQUENCE + 1) == batch.base_sequence
    return "ok" if follows else "order"


def _answer(manager: ProducerStateManager, batches: list[BatchHeader]) -> list[str | int]:
    plans: list[AppendPlan] = []
    answers: list[str | int] = []
    for batch in batches:
        try:
            result = manager.check_and_plan(batch, plans)
        except InvalidProducerEpochError:
            return [*answers, "epoch"]
        except OutOfOrderSequenceNumberError:
            return [*answers, "order"]
        if isinstance(result, Duplicate):
            answers.append(result.first_offset)
        else:
            answers.append("ok")
            plans.append(result)
    return answers


PRODUCERS = st.integers(0, 2)


class ProducerStateMachine(RuleBasedStateMachine):
    """Random produce / retry / epoch bump / truncate / snapshot / restart, checked against
    a model that is the log itself: a list of batches, grouped by producer."""

    def __init__(self) -> None:
        super().__init__()
        self.manager = ProducerStateManager()
        self.log: list[BatchHeader] = []
        self.snapshots: list[bytes] = []
        self.clients = {producer_id: _Client() for producer_id in range(3)}
        self.clock = 0

    @property
    def end(self) -> int:
        return self.log[-1].next_offset if self.log else 0

    def _send(self, batches: list[BatchHeader]) -> list[str | int]:
        """Check one request against the model; append its new batches if all pass."""
        expected: list[str | int] = []
        planned: list[BatchHeader] = []
        for batch in batches:
            answer = _expected(self.log, planned, batch)
            expected.append(answer)
            if answer in ("epoch", "order"):
                break
            if answer == "ok":
                planned.append(batch)
        assert _answer(self.manager, batches) == expected
        if expected[-1] in ("epoch", "order"):
            return expected
        for batch, answer in zip(batches, expected, strict=True):
            if answer == "ok":
                stamped = at_offset(batch, self.end)
                self.manager.on_appended(stamped)
                self.log.append(stamped)
        return expected

    def _new_batch(self, producer_id: int, count: int, gap: int) -> BatchHeader:
        client = self.clients[producer_id]
        self.clock += 1
        seq = (client.next_seq + gap) % (MAX_SEQUENCE + 1)
        return header(producer_id, client.epoch, seq, count, timestamp=self.clock)

    def _sent(self, producer_id: int, batch: BatchHeader) -> None:
        client = self.clients[producer_id]
        client.next_seq = (_seq_range(batch)[1] + 1) % (MAX_SEQUENCE + 1)
        client.sent.append(batch)

    @rule(
        producer_id=PRODUCERS,
        counts=st.lists(st.integers(1, 3), min_size=1, max_size=3),
        gap=st.sampled_from([0, 0, 0, 0, 1, 2]),
    )
    def produce(self, producer_id: int, counts: list[int], gap: int) -> None:
        before = self.clients[producer_id].next_seq
        batches: list[BatchHeader] = []
        for index, count in enumerate(counts):
            batch = self._new_batch(producer_id, count, gap if index == 0 else 0)
            batches.append(batch)
            self._sent(producer_id, batch)
        answers = self._send(batches)
        if answers[-1] in ("epoch", "order"):
            self.clients[producer_id].next_seq = before

    @rule(producer_id=PRODUCERS, back=st.integers(1, 8))
    def retry(self, producer_id: int, back: int) -> None:
        sent = self.clients[producer_id].sent
        if len(sent) >= back:
            self._send([sent[-back]])

    @rule(producer_id=PRODUCERS)
    def bump_epoch(self, producer_id: int) -> None:
        client = self.clients[producer_id]
        client.epoch += 1
        client.next_seq = 0

    @rule(producer_id=PRODUCERS, near=st.integers(0, 3))
    def restart_near_wrap(self, producer_id: int, near: int) -> None:
        """A new producer incarnation (as after expiry) that starts near 2**31 - 1."""
        client = self.clients[producer_id]
        client.next_seq = MAX_SEQUENCE - near

    @rule(producer_id=PRODUCERS)
    def zombie(self, producer_id: int) -> None:
        client = self.clients[producer_id]
        if client.epoch > 0:
            self._send([header(producer_id, client.epoch - 1, 0)])

    @rule()
    def non_idempotent(self) -> None:
        batch = header(-1, -1, -1, 2)
        assert self.manager.check_and_plan(batch) == AppendPlan(-1, -1, -1, -1)
        stamped = at_offset(batch, self.end)
        self.manager.on_appended(stamped)
        self.log.append(stamped)

    @rule()
    def snapshot(self) -> None:
        self.snapshots.append(encode_snapshot(self.manager))

    @rule()
    def restart(self) -> None:
        self.manager = self._recover()

    @precondition(lambda self: bool(self.log))
    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        # Mostly the last few batches (a diverged follower's tail), sometimes deeper.
        drop = data.draw(st.one_of(st.integers(1, 3), st.integers(0, len(self.log))))
        keep = max(0, len(self.log) - drop)
        offset = self.log[keep].base_offset if keep < len(self.log) else self.end
        self.log = self.log[:keep]
        inexact = self.manager.truncate_to(offset)
        self.snapshots = [s for s in self.snapshots if decode_snapshot(s).end_offset <= offset]
        for producer_id in range(3):
            if producer_id not in inexact:
                self._check_producer(producer_id)
        if inexact:
            self.manager = self._recover()

    def _recover(self) -> ProducerStateManager:
        """What a restart does: the newest snapshot, then the log after it."""
        manager = decode_snapshot(self.snapshots[-1]) if self.snapshots else ProducerStateManager()
        manager.rebuild_from_batches(self.log)
        return manager

    def _check_producer(self, producer_id: int) -> None:
        epoch, cached = _model_state(self.log, producer_id)
        entry = self.manager.entry(producer_id)
        if not cached:
            assert entry is None
            return
        assert entry is not None
        assert entry.producer_epoch == epoch
        assert entry.batches == tuple(
            BatchMetadata(*_seq_range(b), b.base_offset, b.last_offset, b.max_timestamp)
            for b in cached
        )
        assert entry.last_timestamp == cached[-1].max_timestamp

    @invariant()
    def matches_the_model(self) -> None:
        self.manager.check_invariants()  # the core's own rules, after every step
        assert self.manager.end_offset == self.end
        for producer_id in range(3):
            self._check_producer(producer_id)
        assert set(self.manager.entries()) <= {0, 1, 2}


TestProducerStateMachine = ProducerStateMachine.TestCase
TestProducerStateMachine.settings = settings(
    max_examples=300, stateful_step_count=50, deadline=None
)


# ---- transactions ---------------------------------------------------------------------------

_TXN_OPS = st.lists(
    st.tuples(st.integers(0, 2), st.sampled_from(["data", "commit", "abort", "plain", "late"])),
    max_size=40,
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(_TXN_OPS, st.integers(0, 80))
def test_transactional_state_replays_snapshots_and_bounds_the_stable_offset(
    ops: list[tuple[int, str]], high_watermark: int
) -> None:
    """Producers writing transactions (data, commit or abort markers with the bumped epoch,
    late markers of finished ones, plain writes): the live state equals a replay of the log
    and its snapshot, the last stable offset never passes an open transaction's first
    offset, and every aborted transaction's range holds only its producer's data up to its
    abort marker."""
    live = ProducerStateManager()
    logged: list[BatchHeader] = []
    markers: dict[int, EndTxnMarker] = {}
    epoch = {n: 0 for n in range(3)}
    seq = {n: 0 for n in range(3)}
    for who, op in ops:
        live.check_invariants()  # the core's own rules, after every step
        pid = 500 + who
        offset = live.end_offset
        if op in ("commit", "abort", "late"):
            marker = EndTxnMarker(committed=op != "abort", coordinator_epoch=1)
            marker_epoch = epoch[who] if op == "late" else epoch[who] + 1
            if not live.check_marker(pid, marker_epoch, marker):
                assert op == "late", "a fresh marker always carries a newer epoch"
                continue
            stamped = replace(
                header(producer_id=pid, epoch=marker_epoch, seq=-1, base_offset=offset),
                attributes=ATTR_CONTROL | ATTR_TRANSACTIONAL,
            )
            epoch[who], seq[who] = marker_epoch, 0
            markers[offset] = marker
            live.on_appended(stamped, marker)
        else:
            batch = header(producer_id=pid, epoch=epoch[who], seq=seq[who], count=2)
            if op == "data":
                batch = replace(batch, attributes=ATTR_TRANSACTIONAL)
            try:
                plan = live.check_and_plan(batch)
            except InvalidTxnStateError:
                assert op == "plain" and pid in live.open_transactions()
                continue
            assert isinstance(plan, AppendPlan)
            stamped = replace(batch, base_offset=offset)
            seq[who] += 2
            live.on_appended(stamped)
        logged.append(stamped)

    rebuilt = ProducerStateManager()
    rebuilt.rebuild_from_batches(logged, lambda h: markers[h.base_offset])
    live.check_invariants()
    rebuilt.check_invariants()
    assert rebuilt == live
    assert decode_snapshot(encode_snapshot(live)) == live
    stable = live.last_stable_offset(high_watermark)
    live.check_invariants()
    assert stable <= high_watermark
    assert all(stable <= first for first in live.open_transactions().values())
    by_offset = {h.base_offset: h for h in logged}
    for aborted in live.aborted_transactions(0, live.end_offset):
        assert by_offset[aborted.last_offset].is_control
        assert by_offset[aborted.first_offset].producer_id == aborted.producer_id
        assert by_offset[aborted.first_offset].is_transactional
