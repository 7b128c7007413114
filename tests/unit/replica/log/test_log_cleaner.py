"""Log compaction: the cleaner's passes, its crash-safe swap, and a log with offset holes."""

# Over 600 lines: the cleaner's passes, swap and offset holes, beside the log helpers they share.
from __future__ import annotations

import asyncio
import itertools
import os
import shutil
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lograft.protocol.batch_header import (
    ATTR_TRANSACTIONAL,
    BatchHeader,
    assign_offsets,
    batch_crc,
    iter_headers,
    parse_header,
    validate_batches,
)
from lograft.protocol.control_records import EndTxnMarker, decode_marker, encode_marker_batch
from lograft.protocol.errors import CorruptMessageError, InvalidRecordError, KafkaStorageError
from lograft.protocol.records import Record, RecordBatchBuilder, encode_batch, iter_records
from lograft.protocol.topic_config import LogConfig
from lograft.protocol.wire import broker_pb2 as pb
from replica.broker_service import BrokerEndpoint, BrokerService
from replica.log.cleaner import (
    DELETE_HORIZON_FLAG,
    CleaningResult,
    clean_log,
    filter_batch,
)
from replica.log.partition_log import (
    CLEANER_CHECKPOINT_FILE,
    CLEANER_SWAP_FILE,
    PartitionLog,
    delete_files,
)
from replica.log.segment import CLEANED_SUFFIX, LogSegment
from replica.log_cleaner_loop import LogCleaner
from replica.log_manager import LogManager
from replica.producer_snapshots import load_producer_state, marker_reader
from replica.producer_state import ProducerStateManager

COMPACT = LogConfig(
    segment_bytes=700,
    index_interval_bytes=150,
    retention_ms=-1,
    cleanup_policy="compact",
)
NOW = 1_000_000
DAY = 86_400_000


# ---- helpers ------------------------------------------------------------------------------


@dataclass
class Producer:
    """An idempotent producer's id, epoch and next sequence."""

    producer_id: int
    epoch: int = 0
    sequence: int = 0


def append(
    log: PartitionLog,
    pairs: list[tuple[bytes | None, bytes | None]],
    *,
    codec: int = 0,
    producer: Producer | None = None,
    timestamp_ms: int = 5_000,
    leader_epoch: int = 0,
) -> BatchHeader:
    """Append one batch of ``(key, value)`` records; returns its stored header."""
    batch = bytearray(
        encode_batch(
            [value for _, value in pairs],
            [key for key, _ in pairs],
            timestamp_ms=timestamp_ms,
            compression=codec,
            producer_id=-1 if producer is None else producer.producer_id,
            producer_epoch=-1 if producer is None else producer.epoch,
            base_sequence=-1 if producer is None else producer.sequence,
        )
    )
    if producer is not None:
        producer.sequence += len(pairs)
    result = log.append(batch, validate_batches(batch, 1 << 20), leader_epoch, 0)
    return result.headers[0]


def batches(log: PartitionLog) -> tuple[list[BatchHeader], list[Record]]:
    """Every batch header and record, by reads from the log start to the log end."""
    headers: list[BatchHeader] = []
    records: list[Record] = []
    offset = log.log_start_offset
    for _ in range(100_000):
        if offset >= log.log_end_offset:
            break
        data = log.read(offset, 1 << 20)
        found = list(iter_headers(data))
        assert found, f"empty read at {offset} below the log end {log.log_end_offset}"
        headers.extend(found)
        records.extend(iter_records(data, offset))
        offset = found[-1].next_offset
    return headers, records


def stage(
    log: PartitionLog,
    *,
    limit: int | None = None,
    now_ms: int = NOW,
    producer_last_offsets: Mapping[int, int] | None = None,
    max_map_keys: int = 10**6,
    aborted: tuple[tuple[int, int, int], ...] = (),
) -> CleaningResult | None:
    """One cleaning below ``limit`` (default: the log end), staged but not committed; None
    if nothing is due. ``aborted``: the aborted transactions in the log."""
    cleaning = log.prepare_cleaning(log.log_end_offset if limit is None else limit, now_ms)
    if cleaning is None:
        return None
    try:
        return clean_log(
            cleaning,
            now_ms=now_ms,
            producer_last_offsets=producer_last_offsets or {},
            max_map_keys=max_map_keys,
            aborted_transactions=aborted,
        )
    finally:
        cleaning.close()


def clean(
    log: PartitionLog, *, limit: int | None = None, now_ms: int = NOW, max_map_keys: int = 10**6
) -> CleaningResult | None:
    """One cleaning below ``limit`` (default: the log end), committed; None if nothing due."""
    state = ProducerStateManager(end_offset=log.log_start_offset)
    state.rebuild_from_batches(log.batch_headers(), marker_reader(log))
    last_offsets = {pid: entry.last_offset for pid, entry in state.entries().items()}
    aborted = tuple(
        (txn.producer_id, txn.first_offset, txn.last_offset)
        for txn in state.aborted_transactions(0, log.log_end_offset)
    )
    result = stage(
        log,
        limit=limit,
        now_ms=now_ms,
        producer_last_offsets=last_offsets,
        max_map_keys=max_map_keys,
        aborted=aborted,
    )
    if result is None:
        return None
    deleted = log.commit_cleaning(result, now_ms)
    assert deleted is not None
    delete_files(deleted)
    log.persist_cleaner_checkpoint()
    return result


def producer_summary(log: PartitionLog) -> dict[int, tuple[int, int, int, int]]:
    """Per producer: epoch, last sequence, last offset, first offset of its last batch."""
    state = ProducerStateManager(end_offset=log.log_start_offset)
    state.rebuild_from_batches(log.batch_headers())
    return {
        pid: (e.producer_epoch, e.last_seq, e.last_offset, e.batches[-1].first_offset)
        for pid, e in state.entries().items()
    }


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    return tmp_path / "compacted-0"


@pytest.fixture
def log(directory: Path) -> Iterator[PartitionLog]:
    opened = PartitionLog.open(directory, COMPACT, now_ms=0)
    yield opened
    opened.close()


def fill(log: PartitionLog, updates: int, keys: int = 3, per_batch: int = 2) -> None:
    """``updates`` batches of ``per_batch`` records over ``keys`` keys; flushed."""
    for n in range(updates):
        append(
            log, [(f"k{(n + i) % keys}".encode(), f"v{n}-{i}".encode()) for i in range(per_batch)]
        )
    log.flush()


# ---- the property: latest value of every key, offsets unchanged ---------------------------

# Segments of a few batches each, so that cleanings see many segments and groups.
TINY_SEGMENTS = replace(COMPACT, segment_bytes=300, index_interval_bytes=100)
_KEYS = [f"key-{n}".encode() for n in range(6)]
_record = st.tuples(st.sampled_from(_KEYS), st.one_of(st.none(), st.binary(max_size=24)))
_batch = st.tuples(
    st.lists(_record, min_size=1, max_size=4),
    st.sampled_from([0, 0, 1, 2, 3, 4]),  # none, gzip, snappy, lz4, zstd
    st.sampled_from([None, 0, 1, 2]),  # no producer id, or one of three producers
)


# Over 70 lines: a property test: two cleanings, each checked against the model.
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    batch_specs=st.lists(_batch, min_size=3, max_size=60),
    limit_fraction=st.floats(min_value=0.0, max_value=1.0),
)
def test_cleaning_keeps_the_latest_record_of_every_key_at_its_offset(
    tmp_path_factory: pytest.TempPathFactory,
    batch_specs: list[tuple[list[tuple[bytes, bytes | None]], int, int | None]],
    limit_fraction: float,
) -> None:
    directory = tmp_path_factory.mktemp("prop") / "t-0"
    log = PartitionLog.open(directory, TINY_SEGMENTS, now_ms=0)
    try:
        producers = [Producer(1000 + n) for n in range(3)]
        for pairs, codec, who in batch_specs:
            producer = None if who is None else producers[who]
            append(log, list(pairs), codec=codec, producer=producer, timestamp_ms=7_000)
        log.flush()
        before_headers, before = batches(log)
        before_producers = producer_summary(log)
        limit = int(log.log_end_offset * limit_fraction)
        result = clean(log, limit=limit)

        after_headers, after = batches(log)
        by_offset = {record.offset: record for record in before}
        # Offsets never change; a kept record is the record that was at its offset.
        assert all(by_offset[record.offset] == record for record in after)
        assert [r.offset for r in after] == sorted({r.offset for r in after})
        # Batches keep their offset ranges; the log reads back in offset order.
        ranges = {(h.base_offset, h.last_offset) for h in before_headers}
        assert all((h.base_offset, h.last_offset) in ranges for h in after_headers)
        assert [h.base_offset for h in after_headers] == sorted(
            {h.base_offset for h in after_headers}
        )
        assert (log.log_start_offset, log.log_end_offset) == (0, before_headers[-1].next_offset)
        end = 0 if result is None else result.next_dirty_offset
        # The model: below the end of the cleaned range only each key's latest record stays
        # (tombstones too: their delete horizon is set now, they go a day later); at and
        # above it nothing is touched.
        latest: dict[bytes | None, int] = {}
        for record in before:
            if record.offset < end:
                latest[record.key] = record.offset
        expected = sorted(set(latest.values()) | {r.offset for r in before if r.offset >= end})
        assert [r.offset for r in after] == expected
        assert producer_summary(log) == before_producers
        # The same after a restart (indexes and files as the swap left them).
        log.close()
        log = PartitionLog.open(directory, TINY_SEGMENTS, now_ms=0)
        assert batches(log)[1] == after
        assert load_producer_state(log).entries().keys() == before_producers.keys()

        # More updates, then a cleaning after the delete horizon of the first one: the
        # tombstones it kept are gone, the ones it did not see yet get their horizon.
        for pairs, codec, who in batch_specs[: len(batch_specs) // 2]:
            producer = None if who is None else producers[who]
            append(log, list(pairs), codec=codec, producer=producer, timestamp_ms=8_000)
        log.flush()
        middle_headers, middle = batches(log)
        middle_producers = producer_summary(log)
        second = clean(log, now_ms=NOW + DAY + 1)
        # Nothing cleanable at all leaves the log as it is.
        end2 = 0 if second is None else second.next_dirty_offset
        latest = {}
        for record in middle:
            if record.offset < end2:
                latest[record.key] = record.offset
        by_offset = {record.offset: record for record in middle}
        expected = sorted(
            {
                offset
                for offset in latest.values()
                if offset >= end or by_offset[offset].value is not None
            }
            | {r.offset for r in middle if r.offset >= end2}
        )
        _, final = batches(log)
        assert [r.offset for r in final] == expected
        assert all(by_offset[record.offset] == record for record in final)
        assert producer_summary(log) == middle_producers
        assert log.log_end_offset == middle_headers[-1].next_offset
    finally:
        log.close()


# ---- batches --------------------------------------------------------------------------------


def _stored(pairs: list[tuple[bytes | None, bytes | None]], **kwargs: Any) -> bytes:
    batch = bytearray(
        encode_batch([v for _, v in pairs], [k for k, _ in pairs], timestamp_ms=5_000, **kwargs)
    )
    batch[:8] = (40).to_bytes(8, "big")  # as if stored at offset 40
    return bytes(batch)


def test_a_rewritten_batch_keeps_offsets_producer_fields_and_codec() -> None:
    data = _stored(
        [(b"a", b"1"), (b"b", b"2"), (b"a", b"3")],
        compression=4,
        producer_id=7,
        producer_epoch=2,
        base_sequence=10,
    )
    result = filter_batch(data, {b"a": 42}, NOW, DAY, retain_if_empty=False)
    assert result.data is not None and (result.kept, result.removed) == (2, 1)
    old, new = parse_header(data), parse_header(result.data)
    assert (new.base_offset, new.last_offset, new.records_count) == (40, 42, 2)
    assert (new.producer_id, new.producer_epoch, new.base_sequence) == (7, 2, 10)
    assert new.compression == old.compression == 4
    assert [(r.offset, r.key, r.value) for r in iter_records(result.data)] == [
        (41, b"b", b"2"),
        (42, b"a", b"3"),
    ]  # iter_records checks the new CRC


def test_an_emptied_batch_goes_unless_it_is_its_producers_last() -> None:
    data = _stored([(b"a", b"1")], producer_id=7, producer_epoch=0, base_sequence=0)
    assert filter_batch(data, {b"a": 99}, NOW, DAY, retain_if_empty=False).data is None
    kept = filter_batch(data, {b"a": 99}, NOW, DAY, retain_if_empty=True).data
    assert kept is not None
    header = parse_header(kept)
    assert (header.records_count, header.base_offset, header.last_offset) == (0, 40, 40)
    assert list(iter_records(kept)) == []  # consumers skip it
    # Once the producer wrote a later batch, the empty one goes at the next cleaning.
    assert filter_batch(kept, {}, NOW, DAY, retain_if_empty=True).data == kept
    assert filter_batch(kept, {}, NOW, DAY, retain_if_empty=False).data is None


def test_tombstones_get_a_delete_horizon_then_go_after_it() -> None:
    builder = RecordBatchBuilder(4)
    builder.append(b"x", key=b"a", timestamp_ms=5_000)
    builder.append(None, key=b"b", timestamp_ms=5_100)
    data = bytearray(builder.build())
    data[:8] = (40).to_bytes(8, "big")
    first = filter_batch(bytes(data), {}, NOW, DAY, retain_if_empty=False)
    assert first.data is not None
    header = parse_header(first.data)
    assert header.attributes & DELETE_HORIZON_FLAG
    assert header.base_timestamp == NOW + DAY
    # Record timestamps are what the producer wrote, re-encoded against the horizon.
    assert [(r.key, r.timestamp) for r in iter_records(first.data)] == [
        (b"a", 5_000),
        (b"b", 5_100),
    ]
    early = filter_batch(first.data, {}, NOW + DAY - 1, DAY, retain_if_empty=False)
    assert early.data == first.data
    late = filter_batch(first.data, {}, NOW + DAY, DAY, retain_if_empty=False)
    assert late.tombstones_removed == 1 and late.data is not None
    assert [(r.key, r.timestamp) for r in iter_records(late.data)] == [(b"a", 5_000)]


def test_a_timestamp_too_far_from_the_horizon_refuses_the_batch_instead_of_mangling_it() -> None:
    builder = RecordBatchBuilder(0)
    builder.append(b"x", key=b"a", timestamp_ms=-(1 << 62))  # a producer's odd timestamp
    builder.append(None, key=b"b", timestamp_ms=-(1 << 62))
    data = bytearray(builder.build())
    # Re-basing on a horizon near 2**63 gives a delta beyond a 64-bit varlong.
    with pytest.raises(CorruptMessageError, match="64-bit varlong"):
        filter_batch(bytes(data), {}, (1 << 63) - 1 - DAY, DAY, retain_if_empty=False)


def test_records_without_a_key_are_dropped() -> None:
    data = _stored([(None, b"1"), (b"a", b"2")])
    result = filter_batch(data, {}, NOW, DAY, retain_if_empty=False)
    assert result.unkeyed_removed == 1
    assert result.data is not None
    assert [r.key for r in iter_records(result.data)] == [b"a"]


def test_a_corrupt_source_batch_stops_the_cleaning(log: PartitionLog, directory: Path) -> None:
    fill(log, 20)
    first = sorted(directory.glob("*.log"))[0]
    with open(first, "r+b") as handle:
        handle.seek(70)
        byte = handle.read(1)
        handle.seek(70)
        handle.write(bytes([byte[0] ^ 0xFF]))
    cleaning = log.prepare_cleaning(log.log_end_offset, NOW)
    assert cleaning is not None
    try:
        with pytest.raises(CorruptMessageError):
            clean_log(cleaning, now_ms=NOW, producer_last_offsets={})
    finally:
        cleaning.close()
    log.abandon_cleaning()
    assert not list(directory.glob(f"*{CLEANED_SUFFIX}"))


# ---- what gets cleaned ----------------------------------------------------------------------


def test_never_the_active_segment_nor_at_or_above_the_limit(
    log: PartitionLog, directory: Path
) -> None:
    fill(log, 40)
    headers = list(log.batch_headers())
    limit = headers[len(headers) // 2].base_offset
    active = sorted(directory.glob("*.log"))[-1]
    active_bytes = active.read_bytes()
    result = clean(log, limit=limit)
    assert result is not None
    assert 0 < result.next_dirty_offset <= limit
    _, after = batches(log)
    assert {r.offset for r in after if r.offset >= result.next_dirty_offset} == set(
        range(result.next_dirty_offset, log.log_end_offset)
    )
    assert active.read_bytes() == active_bytes
    # Nothing dirty below the limit is left: no cleaning is due.
    assert log.cleanable_view(limit, NOW) is None


def test_the_dirty_ratio_and_checkpoint(log: PartitionLog, directory: Path) -> None:
    fill(log, 40)
    view = log.cleanable_view(log.log_end_offset, NOW)
    assert view is not None and view.clean_bytes == 0 and view.dirty_ratio == 1.0
    result = clean(log)
    assert result is not None
    assert log.first_dirty_offset == result.next_dirty_offset
    checkpoint = (directory / CLEANER_CHECKPOINT_FILE).read_text()
    assert checkpoint == f"0\n{result.next_dirty_offset}\n-1\n"  # no tombstones
    assert log.cleanable_view(log.log_end_offset, NOW) is None  # nothing new is dirty
    fill(log, 40)
    view = log.cleanable_view(log.log_end_offset, NOW)
    assert view is not None and view.clean_bytes > 0 and 0 < view.dirty_ratio < 1
    log.close()
    reopened = PartitionLog.open(directory, COMPACT, now_ms=0)
    try:
        assert reopened.first_dirty_offset == result.next_dirty_offset
    finally:
        reopened.close()


def test_min_compaction_lag_keeps_young_segments_dirty(directory: Path) -> None:
    config = replace(COMPACT, min_compaction_lag_ms=1_000)
    log = PartitionLog.open(directory, config, now_ms=0)
    try:
        for n in range(30):
            append(log, [(b"k", f"{n}".encode())], timestamp_ms=10_000 + n * 100)
        log.flush()
        assert log.cleanable_view(log.log_end_offset, 10_500) is None
        view = log.cleanable_view(log.log_end_offset, 10_000 + 30 * 100 + 1_000)
        assert view is not None and view.end_offset > 0
    finally:
        log.close()


def test_a_full_offset_map_cleans_a_prefix_and_the_rest_later(log: PartitionLog) -> None:
    for n in range(60):
        append(log, [(f"key-{n}".encode(), b"v"), (f"key-{n % 3}".encode(), b"w")])
    log.flush()
    _, before = batches(log)
    first = clean(log, max_map_keys=8)
    assert first is not None and first.cleaned_sources < len(first.input.sources)
    second = clean(log, max_map_keys=10**6)
    assert second is not None and second.next_dirty_offset > first.next_dirty_offset
    latest = {r.key: r for r in before if r.offset < second.next_dirty_offset}
    _, after = batches(log)
    assert all(record in after for record in latest.values())


@pytest.mark.parametrize("more_updates", [True, False])
def test_tombstones_disappear_after_delete_retention(
    log: PartitionLog, directory: Path, more_updates: bool
) -> None:
    append(log, [(b"gone", b"1")])
    append(log, [(b"gone", None)])
    fill(log, 30)
    first = clean(log)
    assert first is not None and first.tombstone_horizon_ms == NOW + DAY
    assert any(r.key == b"gone" and r.value is None for r in batches(log)[1])
    if more_updates:
        fill(log, 30)
    else:
        # A quiet log: nothing is dirty, yet the horizon alone makes it due (and it is
        # remembered across a restart).
        log.close()
        log = PartitionLog.open(directory, COMPACT, now_ms=0)
        assert log.cleanable_view(log.log_end_offset, NOW + DAY - 1) is None
        view = log.cleanable_view(log.log_end_offset, NOW + DAY)
        assert view is not None and view.tombstones_due and view.dirty_bytes == 0
    second = clean(log, now_ms=NOW + DAY + 1)
    assert second is not None and second.stats.tombstones_removed >= 1
    assert all(r.key != b"gone" for r in batches(log)[1])
    assert log.cleanable_view(log.log_end_offset, 2 * (NOW + DAY)) is None
    log.close()


# ---- reads across holes ---------------------------------------------------------------------


def test_reads_lookups_and_truncation_across_holes(log: PartitionLog, directory: Path) -> None:
    append(log, [(b"early", b"stays")], timestamp_ms=10_000)
    for n in range(1, 50):
        append(log, [(f"k{n % 4}".encode(), f"{n}".encode())], timestamp_ms=10_000 + n)
    log.flush()
    assert clean(log) is not None
    headers, _ = batches(log)
    offsets = [(h.base_offset, h.last_offset) for h in headers]
    assert len(offsets) < 50  # there are holes
    for offset in range(log.log_start_offset, log.log_end_offset):
        data = log.read(offset, 1)
        first = next(iter_headers(data))
        # The batch holding the offset, or the next one after a hole.
        expected = next(b for b in offsets if b[1] >= offset)
        assert (first.base_offset, first.last_offset) == expected
    # Time lookups land on kept batches.
    found = log.offset_for_timestamp(10_000)
    assert found is not None and found[0] == headers[0].base_offset
    maximum = log.max_timestamp_offset()
    assert maximum is not None and maximum[1] == 10_049
    # Truncation into a hole ends the log where the batch before the hole ends.
    hole = next(end + 1 for (_, end), (start, _) in itertools.pairwise(offsets) if start > end + 1)
    before_hole = max(end for _, end in offsets if end < hole) + 1
    log.truncate_to(hole)
    assert log.log_end_offset == before_hole
    append(log, [(b"k0", b"after")])
    assert batches(log)[1][-1].offset == before_hole


def test_a_follower_copies_a_compacted_leader(log: PartitionLog, tmp_path: Path) -> None:
    producer = Producer(77)
    for n in range(40):
        append(log, [(f"k{n % 3}".encode(), f"{n}".encode())], producer=producer)
    log.flush()
    assert clean(log) is not None
    follower = PartitionLog.open(tmp_path / "follower-0", COMPACT, now_ms=0)
    try:
        for _ in range(1000):
            if follower.log_end_offset >= log.log_end_offset:
                break
            data = bytearray(log.read(follower.log_end_offset, 300))
            follower.append_as_follower(data, list(iter_headers(data)), 0)

        def shape(of: PartitionLog) -> list[tuple[int, int, int]]:
            return [(h.base_offset, h.last_offset, h.crc) for h in batches(of)[0]]

        assert shape(follower) == shape(log)
        assert batches(follower)[1] == batches(log)[1]
        assert producer_summary(follower) == producer_summary(log)
    finally:
        follower.close()


def test_compact_only_logs_ignore_time_and_size_retention(directory: Path) -> None:
    both = replace(COMPACT, retention_ms=1, retention_bytes=1)
    log = PartitionLog.open(directory, replace(both, cleanup_policy="compact"), now_ms=0)
    try:
        fill(log, 30)
        assert log.enforce_retention(NOW) == []
        log.update_config(replace(both, cleanup_policy="compact,delete"))
        assert log.enforce_retention(NOW) != []
    finally:
        log.close()


# ---- crash safety of the swap ---------------------------------------------------------------


def _snapshots(
    monkeypatch: pytest.MonkeyPatch, root: Path, directory: Path
) -> tuple[list[Path], Callable[[], None]]:
    """Copy ``directory`` (as a kill -9 would leave it) after every rename during the swap."""
    taken: list[Path] = []

    def snap() -> None:
        target = root / f"crash-{len(taken):02d}"
        shutil.copytree(directory, target)
        taken.append(target)

    real_rename, real_replace = os.rename, os.replace

    def rename(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        real_rename(src, dst, *args, **kwargs)
        snap()

    def replace_(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        real_replace(src, dst, *args, **kwargs)
        snap()

    monkeypatch.setattr(os, "rename", rename)
    monkeypatch.setattr(os, "replace", replace_)
    return taken, snap


def test_a_crash_at_any_step_of_the_swap_leaves_old_or_new(
    log: PartitionLog, directory: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(40):
        append(log, [(f"k{n % 3}".encode(), f"{n}".encode()), (b"fixed", b"x")])
    log.flush()
    _, old = batches(log)
    result = stage(log)
    assert result is not None
    crashes, snap = _snapshots(monkeypatch, tmp_path, directory)
    snap()  # staged files written, nothing committed
    deleted = log.commit_cleaning(result, NOW)
    monkeypatch.undo()
    assert deleted is not None
    _, new = batches(log)
    assert len(crashes) > 5 and new != old
    outcomes = set()
    for crashed in crashes:
        reopened = PartitionLog.open(crashed, COMPACT, now_ms=0)
        try:
            _, records = batches(reopened)
        finally:
            reopened.close()
        assert records in (old, new), crashed.name
        outcomes.add("old" if records == old else "new")
        leftovers = [p.name for p in crashed.iterdir() if p.name.endswith(CLEANED_SUFFIX)]
        assert not leftovers and not (crashed / CLEANER_SWAP_FILE).exists()
    assert outcomes == {"old", "new"}


def test_an_unreadable_swap_file_is_a_storage_error(log: PartitionLog, directory: Path) -> None:
    fill(log, 5)
    log.close()
    (directory / CLEANER_SWAP_FILE).write_bytes(b"garbage")
    with pytest.raises(KafkaStorageError, match="cleaner-swap"):
        PartitionLog.open(directory, COMPACT, now_ms=0)


def test_a_cleaning_is_abandoned_when_the_log_changed(log: PartitionLog, directory: Path) -> None:
    fill(log, 40)
    _, before = batches(log)
    result = stage(log)
    assert result is not None
    log.truncate_to(log.log_end_offset - 3)
    assert log.commit_cleaning(result, NOW) is None
    assert not list(directory.glob(f"*{CLEANED_SUFFIX}"))
    assert batches(log)[1] == [r for r in before if r.offset < log.log_end_offset]


def test_the_staged_segment_is_a_real_segment(tmp_path: Path) -> None:
    staged = LogSegment.create(tmp_path, 5, CLEANED_SUFFIX)
    staged.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f"{5:020d}.index{CLEANED_SUFFIX}",
        f"{5:020d}.log{CLEANED_SUFFIX}",
        f"{5:020d}.timeindex{CLEANED_SUFFIX}",
    ]


# ---- the broker's cleaner loop ----------------------------------------------------------------


def test_the_cleaner_loop_cleans_due_compacted_partitions_only(tmp_path: Path) -> None:
    logs = LogManager(tmp_path, LogConfig(), lambda: NOW)
    logs.open()
    small = {"segment.bytes": "700", "index.interval.bytes": "150"}
    logs.create_topic("plain", 1, 1, small)
    logs.create_topic("table", 1, 1, {**small, "cleanup.policy": "compact"})
    logs.create_topic(
        "lagging",
        1,
        1,
        {
            **small,
            "cleanup.policy": "compact,delete",
            "retention.ms": "-1",
            "min.cleanable.dirty.ratio": "0.99",
            "max.compaction.lag.ms": "1000",
        },
    )
    try:
        for name in ("plain", "table", "lagging"):
            partition = logs.partition(name, 0)
            for n in range(30):
                batch = bytearray(
                    encode_batch(
                        [f"{n}".encode()] * 2, [b"k1", f"k{n % 3}".encode()], timestamp_ms=5_000
                    )
                )
                partition.append_as_leader(batch, validate_batches(batch, 1 << 20), 1, 0)
            partition.log.flush()
            partition.on_local_flush()  # the high watermark follows the flush
        cleaner = LogCleaner(logs, lambda: NOW, backoff_ms=10)

        async def rounds() -> list[str]:
            done = []
            for _ in range(5):
                cleaned = await cleaner.clean_once()
                if cleaned is None:
                    break
                done.append(cleaned.topic_partition.topic)
            return done

        # Both compacted logs are entirely dirty; "lagging" is past max.compaction.lag.ms
        # (its records are from timestamp 5000), so it goes first; "plain" never.
        assert asyncio.run(rounds()) == ["lagging", "table"]
        for name in ("table", "lagging"):
            log = logs.partition(name, 0).log
            assert len({r.key for r in batches(log)[1]}) < len(batches(log)[1])
    finally:
        logs.close()


def test_a_compacted_log_rolls_within_max_compaction_lag(directory: Path) -> None:
    # The cleaner never touches the active segment, so it must close in time (KIP-354).
    log = PartitionLog.open(directory, replace(COMPACT, max_compaction_lag_ms=1_000), now_ms=0)
    try:
        append(log, [(b"k", b"v")])
        assert not log.roll_if_due(999)
        assert log.roll_if_due(1_000)
        log.update_config(replace(COMPACT, cleanup_policy="delete", max_compaction_lag_ms=1_000))
        append(log, [(b"k", b"w")])
        assert not log.roll_if_due(5_000)  # segment.ms (a week) alone decides
    finally:
        log.close()


# ---- the first dirty offset across truncation and restart ------------------------------------


def test_a_tombstone_appended_after_a_truncation_survives_a_restart(
    log: PartitionLog, directory: Path
) -> None:
    append(log, [(b"K", b"v1")])
    fill(log, 30)
    first = clean(log)
    assert first is not None and first.next_dirty_offset > 1
    # A follower's divergent tail goes; the new leader's history deletes K.
    log.truncate_to(1)
    assert log.first_dirty_offset == 1
    assert (directory / CLEANER_CHECKPOINT_FILE).read_text().split()[1] == "1"
    append(log, [(b"K", None)])
    fill(log, 40)
    assert log.log_end_offset > first.next_dirty_offset
    log.close()
    log = PartitionLog.open(directory, COMPACT, now_ms=0)
    try:
        assert log.first_dirty_offset == 1
        for now_ms in (NOW, NOW + 2 * DAY, NOW + 4 * DAY):
            clean(log, now_ms=now_ms)
        assert [r for r in batches(log)[1] if r.key == b"K"] == []
    finally:
        log.close()


def test_a_first_dirty_offset_above_the_recovered_log_is_reset(directory: Path) -> None:
    log = PartitionLog.open(directory, COMPACT, now_ms=0)
    fill(log, 30)
    log.close()
    # As after a crash that lost the tail the checkpoint still covers.
    (directory / CLEANER_CHECKPOINT_FILE).write_text("0\n1000\n-1\n")
    log = PartitionLog.open(directory, COMPACT, now_ms=0)
    try:
        assert log.first_dirty_offset == log.log_start_offset == 0
        assert (directory / CLEANER_CHECKPOINT_FILE).read_text() == "0\n0\n-1\n"
        fill(log, 500)  # past the stale value: still all dirty
        assert log.first_dirty_offset == 0
    finally:
        log.close()


def test_a_failed_log_does_not_stop_the_cleaning_of_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = LogManager(tmp_path, LogConfig(), lambda: NOW)
    logs.open()
    small = {"segment.bytes": "700", "index.interval.bytes": "150", "cleanup.policy": "compact"}
    # "broken" is the dirtier one: without the fix it is picked every round.
    logs.create_topic("broken", 1, 1, {**small, "min.cleanable.dirty.ratio": "0.01"})
    logs.create_topic("table", 1, 1, small)
    try:
        for name, updates in (("broken", 40), ("table", 30)):
            partition = logs.partition(name, 0)
            for n in range(updates):
                batch = bytearray(
                    encode_batch([f"{n}".encode()] * 2, [b"k1", f"k{n % 3}".encode()])
                )
                partition.append_as_leader(batch, validate_batches(batch, 1 << 20), 1, 0)
            partition.log.flush()
            partition.on_local_flush()
        broken = logs.partition("broken", 0).log
        monkeypatch.setattr(broken, "_failed", True)  # as after a failed fdatasync
        assert broken.failed
        cleaner = LogCleaner(logs, lambda: NOW, backoff_ms=10)

        async def rounds() -> list[str]:
            done = []
            for _ in range(3):
                cleaned = await cleaner.clean_once()
                if cleaned is not None:
                    done.append(cleaned.topic_partition.topic)
            return done

        assert asyncio.run(rounds()) == ["table"]
    finally:
        logs.close()


def test_a_storage_error_while_preparing_marks_the_partition_uncleanable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = LogManager(tmp_path, LogConfig(), lambda: NOW)
    logs.open()
    small = {"segment.bytes": "700", "index.interval.bytes": "150", "cleanup.policy": "compact"}
    logs.create_topic("table", 1, 1, small)
    try:
        partition = logs.partition("table", 0)
        for n in range(30):
            batch = bytearray(encode_batch([f"{n}".encode()] * 2, [b"k1", f"k{n % 3}".encode()]))
            partition.append_as_leader(batch, validate_batches(batch, 1 << 20), 1, 0)
        partition.log.flush()
        partition.on_local_flush()

        def unreadable(limit_offset: int, now_ms: int) -> None:
            raise KafkaStorageError("cannot read log")

        monkeypatch.setattr(partition.log, "prepare_cleaning", unreadable)
        cleaner = LogCleaner(logs, lambda: NOW, backoff_ms=10)
        assert asyncio.run(cleaner.clean_once()) is None
        monkeypatch.undo()
        # Not retried (until a restart), like a log with corrupt segments.
        assert asyncio.run(cleaner.clean_once()) is None
    finally:
        logs.close()


# ---- attributes a producer may not set ---------------------------------------------------------


def _with_attributes(batch: bytes, extra: int) -> bytearray:
    """``batch`` with ``extra`` attribute bits set and its CRC recomputed (a well-formed
    batch a misbehaving client could send)."""
    out = bytearray(batch)
    header = parse_header(out)
    out[21:23] = (header.attributes | extra).to_bytes(2, "big")
    out[17:21] = batch_crc(out, parse_header(out)).to_bytes(4, "big")
    return out


@pytest.mark.parametrize("bit", [DELETE_HORIZON_FLAG, ATTR_TRANSACTIONAL])
def test_a_produced_batch_may_not_claim_a_delete_horizon_or_a_transaction(
    tmp_path: Path, bit: int
) -> None:
    logs = LogManager(tmp_path, LogConfig(), lambda: NOW)
    logs.open()
    logs.create_topic("table", 1, 1, {"cleanup.policy": "compact"})
    service = BrokerService(logs, BrokerEndpoint(1, "127.0.0.1", 9092), "cluster", lambda: NOW)
    try:
        partition = logs.partition("table", 0)
        # baseTimestamp 0: a horizon long past, so the first cleaning would drop the tombstone.
        batch = encode_batch([None], [b"k"], timestamp_ms=0)
        result = pb.PartitionProduceResponse()
        with pytest.raises(InvalidRecordError, match="attributes"):
            service._append(partition, bytes(_with_attributes(batch, bit)), 1, result)
        assert partition.log.log_end_offset == 0
        # The same batch without the bit is fine, and a follower still copies stored
        # batches that carry a horizon (the cleaner set it on the leader).
        service._append(partition, bytes(batch), 1, result)
        assert partition.log.log_end_offset == 1
        stored = _with_attributes(encode_batch([None], [b"k"], timestamp_ms=0), bit)
        assign_offsets(stored, list(iter_headers(stored)), 1, 0)
        partition.log.append_as_follower(stored, list(iter_headers(stored)), 0)
        assert partition.log.log_end_offset == 2
    finally:
        logs.close()


# ---- the swap's preconditions and what a cleaned segment keeps ---------------------------------


def test_a_missing_staged_segment_stops_the_swap_before_its_commit(
    log: PartitionLog, directory: Path
) -> None:
    fill(log, 30)
    before = batches(log)
    result = stage(log)
    assert result is not None
    new_bases = [group.new_base for group in result.groups if group.new_base is not None]
    (directory / f"{new_bases[-1]:020d}.log{CLEANED_SUFFIX}").unlink()
    with pytest.raises(KafkaStorageError, match="staged"):
        log.commit_cleaning(result, NOW)
    assert not log.failed
    assert not (directory / CLEANER_SWAP_FILE).exists()
    assert list(directory.glob(f"*{CLEANED_SUFFIX}")) == []
    assert batches(log) == before
    assert clean(log) is not None  # the next cleaning works
    log.close()
    reopened = PartitionLog.open(directory, COMPACT, now_ms=0)
    try:
        assert {r.key for r in batches(reopened)[1]} == {r.key for r in before[1]}
    finally:
        reopened.close()


def test_a_cleaned_segment_keeps_the_last_modified_time_retention_uses(directory: Path) -> None:
    # Records without timestamps: retention.ms falls back to the segment's last append.
    config = replace(COMPACT, cleanup_policy="compact,delete", retention_ms=DAY)
    log = PartitionLog.open(directory, config, now_ms=0)
    try:
        for n in range(30):
            batch = bytearray(
                encode_batch([b"v"] * 2, [f"k{n % 3}".encode(), b"x"], timestamp_ms=-1)
            )
            log.append(batch, validate_batches(batch, 1 << 20), 0, 0)  # appended at time 0
        log.flush()
        assert clean(log, now_ms=NOW) is not None
        # Everything but the active segment was last written at 0: a day later it all goes.
        assert log.enforce_retention(DAY + 1) != []
        assert len(list(directory.glob("*.log"))) == 1
    finally:
        log.close()


def test_cleaning_removes_aborted_transactions_and_compacts_committed_ones(
    tmp_path: Path,
) -> None:
    """An aborted transaction's records go, and never supersede the committed value of
    their key; a committed transaction's records are compacted like any others; markers
    stay (read_committed readers need them to end each transaction)."""
    log = PartitionLog.open(tmp_path / "t-0", COMPACT, now_ms=0)

    def transactional(producer_id: int, key: bytes, value: bytes) -> None:
        builder = RecordBatchBuilder(
            producer_id=producer_id, producer_epoch=0, base_sequence=0, is_transactional=True
        )
        builder.append(key=key, value=value, timestamp_ms=7_000)
        stored = bytearray(builder.build())
        log.append(stored, validate_batches(stored, 1 << 20), 0, 0)

    def marker(producer_id: int, committed: bool) -> None:
        stored = bytearray(encode_marker_batch(EndTxnMarker(committed, 0), producer_id, 1, 7_000))
        log.append(stored, list(iter_headers(stored)), 0, 0)

    try:
        append(log, [(b"k", b"committed")])  # 0
        transactional(77, b"k", b"aborted")  # 1
        marker(77, committed=False)  # 2
        transactional(78, b"j", b"txn-old")  # 3
        marker(78, committed=True)  # 4
        append(log, [(b"j", b"new")])  # 5
        for i in range(40):  # later keys fill segments, so the first ones can be cleaned
            append(log, [(b"other-%d" % i, b"x" * 40)])
        log.flush()
        clean(log)
        headers, records = batches(log)
        assert [r.value for r in records if r.key == b"k"] == [b"committed"]
        assert [r.value for r in records if r.key == b"j"] == [b"new"]
        assert sorted(h.base_offset for h in headers if h.is_control) == [2, 4]
    finally:
        log.close()


def test_a_marker_with_nothing_left_of_its_transaction_goes_after_its_horizon(
    tmp_path: Path,
) -> None:
    """Kafka's rule for markers: kept while anything of their transaction is left (a replay
    would find it open otherwise); once nothing is, a delete horizon, then gone. A replay of
    the cleaned log finds no transaction open."""
    marker = bytearray(encode_marker_batch(EndTxnMarker(False, 0), 77, 1, 5_000))
    marker[:8] = (9).to_bytes(8, "big")
    kept = filter_batch(bytes(marker), {}, NOW, DAY, retain_if_empty=False)
    assert kept.data == bytes(marker), "its transaction is still in the log"
    first = filter_batch(bytes(marker), {}, NOW, DAY, False, marker_removable=True)
    assert first.data is not None
    assert parse_header(first.data).attributes & DELETE_HORIZON_FLAG
    assert decode_marker(first.data) == EndTxnMarker(False, 0)
    assert filter_batch(first.data, {}, NOW + DAY, DAY, False, marker_removable=True).data is None

    log = PartitionLog.open(tmp_path / "t-0", COMPACT, now_ms=0)
    try:
        for value, committed in ((b"aborted", False), (b"kept", True)):
            builder = RecordBatchBuilder(
                producer_id=77, producer_epoch=0, base_sequence=0, is_transactional=True
            )
            builder.append(key=b"k", value=value, timestamp_ms=7_000)
            stored = bytearray(builder.build())
            log.append(stored, validate_batches(stored, 1 << 20), 0, 0)
            done = bytearray(encode_marker_batch(EndTxnMarker(committed, 0), 77, 1, 7_000))
            log.append(done, list(iter_headers(done)), 0, 0)
        for i in range(40):
            append(log, [(b"other-%d" % i, b"x" * 40)])
        log.flush()
        clean(log)  # the aborted data goes; its marker gets a horizon
        assert sorted(h.base_offset for h in batches(log)[0] if h.is_control) == [1, 3]
        for i in range(40):  # dirty the log again
            append(log, [(b"other-%d" % i, b"y" * 40)])
        log.flush()
        clean(log, now_ms=NOW + DAY + 1)
        headers, records = batches(log)
        assert [h.base_offset for h in headers if h.is_control] == [3], "the commit stays"
        assert [r.value for r in records if r.key == b"k"] == [b"kept"]
        replayed = ProducerStateManager(end_offset=log.log_start_offset)
        replayed.rebuild_from_batches(log.batch_headers(), marker_reader(log))
        assert replayed.open_transactions() == {}
        assert replayed.last_stable_offset(log.log_end_offset) == log.log_end_offset
    finally:
        log.close()
