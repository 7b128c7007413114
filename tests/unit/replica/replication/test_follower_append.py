"""PartitionLog.append_as_follower, the leader-epoch cache it keeps, end_offset_for_epoch."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lograft.protocol.batch_header import validate_batches
from lograft.protocol.errors import CorruptMessageError
from lograft.protocol.topic_config import LogConfig
from replica.log.partition_log import PartitionLog
from replica.replication.leader_epoch_cache import EpochEntry
from tests.unit.follower_fixtures import SMALL, entries, follow, leader_batches
from tests.unit.log_fixtures import append_values, crash_copy, headers_of, read_all

# ---- keeping offsets and epochs -----------------------------------------------------------


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    return tmp_path / "topic-0"


@pytest.fixture
def log(directory: Path) -> Iterator[PartitionLog]:
    opened = PartitionLog.open(directory, SMALL, now_ms=0)
    yield opened
    opened.close()


def test_follower_append_keeps_offsets_epochs_and_bytes(log: PartitionLog) -> None:
    data = leader_batches(0, [0, 0, 1, 1, 3])
    assert follow(log, bytearray(data)) == (0, 9)
    assert log.log_end_offset == 10
    assert read_all(log) == bytes(data)  # byte for byte: nothing re-stamped
    assert [(h.base_offset, h.partition_leader_epoch) for h in headers_of(read_all(log))] == [
        (0, 0),
        (2, 0),
        (4, 1),
        (6, 1),
        (8, 3),
    ]
    assert entries(log) == [(0, 0), (1, 4), (3, 8)]
    assert log.latest_epoch == 3
    assert log.size_bytes == len(data)


def test_follower_appends_continue_each_other_and_leader_appends(log: PartitionLog) -> None:
    append_values(log, [b"a", b"b"], leader_epoch=2)  # offsets 0-1, as leader at epoch 2
    assert follow(log, leader_batches(2, [2, 2])) == (2, 5)
    assert follow(log, leader_batches(6, [5])) == (6, 7)
    first, _ = append_values(log, [b"c"], leader_epoch=7)  # became leader at epoch 7
    assert first.first_offset == 8
    assert entries(log) == [(2, 0), (5, 6), (7, 8)]


def test_leader_append_assigns_each_new_epoch_once(log: PartitionLog) -> None:
    append_values(log, [b"a"], leader_epoch=0)
    append_values(log, [b"b"], leader_epoch=0, batches=3)
    append_values(log, [b"c"], leader_epoch=4, batches=2)
    assert entries(log) == [(0, 0), (4, 4)]


# ---- refusals: all or nothing -------------------------------------------------------------


@pytest.mark.parametrize(
    ("first_offset", "epochs", "reason"),
    [
        (3, [1], "overlaps the log"),
        (0, [1], "rewrites the log"),
        (4, [-1], "no epoch"),
        (4, [0], "epoch below the log's latest"),
        (4, [1, 1, 0], "epoch decreases inside the append"),
    ],
)
def test_bad_follower_appends_are_refused_whole(
    log: PartitionLog, first_offset: int, epochs: list[int], reason: str
) -> None:
    follow(log, leader_batches(0, [0, 1]))
    before = (read_all(log), log.log_end_offset, log.size_bytes, entries(log))
    with pytest.raises(CorruptMessageError):
        follow(log, leader_batches(first_offset, epochs))
    assert (read_all(log), log.log_end_offset, log.size_bytes, entries(log)) == before, reason


def test_overlap_between_batches_of_one_append_appends_nothing(log: PartitionLog) -> None:
    data = leader_batches(0, [0]) + leader_batches(1, [0])  # offsets 0-1 then 1-2
    with pytest.raises(CorruptMessageError, match="expected 2 or more"):
        follow(log, data)
    assert (log.log_end_offset, log.size_bytes, read_all(log)) == (0, 0, b"")
    assert entries(log) == []
    follow(log, leader_batches(0, [0, 1]))  # the log is still usable
    assert log.log_end_offset == 4


def test_holes_of_a_compacted_leader_are_copied(log: PartitionLog) -> None:
    # A leader whose log was cleaned sends batches with offset holes between them.
    follow(log, leader_batches(0, [0]) + leader_batches(3, [0]))  # offsets 0-1 then 3-4
    follow(log, leader_batches(9, [1]))  # and from past the log end
    assert log.log_end_offset == 11
    assert [(h.base_offset, h.last_offset) for h in log.batch_headers()] == [
        (0, 1),
        (3, 4),
        (9, 10),
    ]
    assert log.read(2, 1 << 20)[:8] == (3).to_bytes(8, "big")  # a fetch in a hole


def test_headers_must_tile_the_records(log: PartitionLog) -> None:
    data = leader_batches(0, [0, 0])
    headers = validate_batches(data, 1 << 20)
    with pytest.raises(ValueError, match="cover"):
        log.append_as_follower(data, headers[:1], 0)
    assert log.log_end_offset == 0


# ---- rolls, indexes, reads ----------------------------------------------------------------


def test_follower_appends_roll_index_and_read_back(log: PartitionLog, directory: Path) -> None:
    data = bytearray()
    offset = 0
    for round_ in range(30):
        epoch = round_ // 7  # a new epoch every seven appends
        chunk = leader_batches(offset, [epoch] * 2, records=3, timestamp_ms=1_000 + 10 * round_)
        follow(log, chunk, now_ms=round_)
        data += chunk
        offset = headers_of(bytes(chunk))[-1].next_offset
    assert len(list(directory.glob("*.log"))) > 3  # rolled on segment.bytes
    assert read_all(log) == bytes(data)
    assert log.size_bytes == len(data)
    for header in headers_of(bytes(data)):
        for target in (header.base_offset, header.last_offset):
            found = headers_of(log.read(target, 1))[0]
            assert found.base_offset == header.base_offset
    assert log.offset_for_timestamp(1_000 + 10 * 15) == (90, 1_000 + 10 * 15)
    assert entries(log) == [(0, 0), (1, 42), (2, 84), (3, 126), (4, 168)]
    # The indexes written by follower appends survive a clean reopen and a crash.
    copy = PartitionLog.open(crash_copy(directory, directory.parent / "crashed"), SMALL, 0)
    assert read_all(copy) == bytes(data)
    assert copy.leader_epoch_cache == log.leader_epoch_cache
    copy.close()
    log.close()
    reopened = PartitionLog.open(directory, SMALL, now_ms=0)
    assert read_all(reopened) == bytes(data)
    assert reopened.leader_epoch_cache == log.leader_epoch_cache
    reopened.close()


# ---- end_offset_for_epoch -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("epoch", "answer"),
    [
        (0, (0, 4)),  # ends where epoch 1 starts
        (1, (1, 8)),
        (2, (1, 8)),  # KIP-279: never had epoch 2, answer with the largest below
        (3, (3, 10)),  # latest epoch ends at the log end
        (4, (-1, -1)),  # above the latest: unknown
        (-1, (-1, -1)),
    ],
)
def test_end_offset_for_epoch_kip_101(
    log: PartitionLog, epoch: int, answer: tuple[int, int]
) -> None:
    follow(log, leader_batches(0, [0, 0, 1, 1, 3]))
    assert log.end_offset_for_epoch(epoch) == answer


def test_end_offset_for_epoch_below_first_after_retention(directory: Path) -> None:
    config = LogConfig(segment_bytes=200, index_interval_bytes=128, retention_bytes=1)
    log = PartitionLog.open(directory, config, now_ms=0)
    offset = 0
    for epoch in [1, 1, 1, 2, 2, 4, 4]:  # one append each: an append never spans segments
        offset = follow(log, leader_batches(offset, [epoch], records=4))[1] + 1
    assert log.log_end_offset == 28
    log.enforce_retention(now_ms=0)
    start = log.log_start_offset
    assert start > 0
    assert entries(log)[0][1] == start
    assert log.end_offset_for_epoch(0) == (0, start)  # older than anything kept
    assert log.end_offset_for_epoch(4) == (4, log.log_end_offset)
    log.close()


def test_empty_log_answers_undefined(log: PartitionLog) -> None:
    assert log.end_offset_for_epoch(0) == (-1, -1)
    assert log.latest_epoch == -1
    assert log.leader_epoch_cache.entries == []


def test_cache_property_is_a_copy(log: PartitionLog) -> None:
    follow(log, leader_batches(0, [0, 1]))
    copy = log.leader_epoch_cache
    copy.truncate_from_end(0)
    assert log.leader_epoch_cache.entries == [EpochEntry(0, 0), EpochEntry(1, 2)]


# ---- offsets beyond a segment's relative range (KAFKA-6264) -------------------------------


@pytest.mark.parametrize("first_offset", [0, 10])
def test_a_batch_beyond_the_relative_offset_range_starts_a_new_segment(
    directory: Path, first_offset: int
) -> None:
    far = 3_000_000_000  # more than 2**31 past the empty active segment's base
    log = PartitionLog.open(directory, SMALL, now_ms=0)
    data = leader_batches(0, [0] * (first_offset // 2))
    if data:
        follow(log, data)
        log.truncate_to(first_offset)  # the active segment holds data; a new one is empty
    # One fetch response: a batch just past the log end, then one past a hole > 2**31.
    near = leader_batches(first_offset, [1])
    data += near
    far_batch = leader_batches(far, [1])
    follow(log, near + far_batch)
    follow(log, leader_batches(far + 2, [2]))
    expected = bytes(data + far_batch + leader_batches(far + 2, [2]))
    assert log.log_end_offset == far + 4
    assert read_all(log) == expected
    log.close()
    reopened = PartitionLog.open(directory, SMALL, now_ms=0)
    try:
        assert reopened.log_start_offset == 0
        assert reopened.log_end_offset == far + 4
        assert read_all(reopened) == expected
        assert headers_of(reopened.read(far, 1))[0].base_offset == far
        assert headers_of(reopened.read(first_offset + 2, 1))[0].base_offset == far  # the hole
    finally:
        reopened.close()


def test_an_empty_log_takes_a_first_batch_beyond_the_relative_offset_range(
    directory: Path,
) -> None:
    far = 3_000_000_000
    log = PartitionLog.open(directory, SMALL, now_ms=0)
    batch = leader_batches(far, [0])
    follow(log, batch)
    log.close()
    reopened = PartitionLog.open(directory, SMALL, now_ms=0)
    try:
        assert reopened.log_end_offset == far + 2
        assert read_all(reopened) == bytes(batch)
        assert reopened.read(0, 1 << 20) == bytes(batch)  # the hole reads as the next batch
    finally:
        reopened.close()
