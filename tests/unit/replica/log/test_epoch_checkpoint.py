"""The leader-epoch checkpoint: file format, write lifecycle, reload, rebuild, crash safety."""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from lograft.protocol.topic_config import LogConfig
from replica.log import log_checkpoints as log_checkpoints_module
from replica.log.epoch_checkpoint import (
    LEADER_EPOCH_CHECKPOINT_FILE,
    LEADER_EPOCH_CHECKPOINT_TMP_FILE,
    read_epoch_checkpoint,
    write_epoch_checkpoint,
)
from replica.log.partition_log import PartitionLog, delete_files
from replica.log.segment import LogSegment
from replica.replication.errors import LeaderEpochCheckpointError
from replica.replication.leader_epoch_cache import EpochEntry, LeaderEpochCache
from tests.unit.follower_fixtures import entries, follow, leader_batches
from tests.unit.log_fixtures import append_values, crash_copy, headers_of, read_all

LOGGER = "replica.log"  # the partition log and the modules it delegates to
SMALL = LogConfig(segment_bytes=600, index_interval_bytes=128, retention_ms=-1)


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    return tmp_path / "topic-0"


@pytest.fixture
def log(directory: Path) -> Iterator[PartitionLog]:
    opened = PartitionLog.open(directory, SMALL, now_ms=0)
    yield opened
    opened.close()


def cache_from_headers(log: PartitionLog) -> LeaderEpochCache:
    """The truth: the cache the log's batch headers imply."""
    cache = LeaderEpochCache()
    for header in headers_of(read_all(log)):
        cache.assign(header.partition_leader_epoch, header.base_offset)
    return cache


def checkpoint_text(directory: Path) -> str:
    return (directory / LEADER_EPOCH_CHECKPOINT_FILE).read_text("ascii")


class WriteCounter:
    """Counts checkpoint writes made by the partition log."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real = write_epoch_checkpoint

        def counting(directory: Path, text: str) -> None:
            self.count += 1
            real(directory, text)

        monkeypatch.setattr(log_checkpoints_module, "write_epoch_checkpoint", counting)


# ---- the file -----------------------------------------------------------------------------


def test_file_round_trip_in_kafka_format(tmp_path: Path) -> None:
    cache = LeaderEpochCache([EpochEntry(0, 0), EpochEntry(3, 120)])
    write_epoch_checkpoint(tmp_path, cache.encode())
    assert (tmp_path / LEADER_EPOCH_CHECKPOINT_FILE).read_text() == "0\n2\n0 0\n3 120\n"
    assert not (tmp_path / LEADER_EPOCH_CHECKPOINT_TMP_FILE).exists()
    assert read_epoch_checkpoint(tmp_path) == cache


def test_missing_file_reads_as_none(tmp_path: Path) -> None:
    assert read_epoch_checkpoint(tmp_path) is None


@pytest.mark.parametrize(
    "content",
    [b"", b"0\n1\n", b"1\n0\n", b"0\n2\n0 0\n0 5\n", b"0\n1\n\xff 0\n", b"0\n1\n0 0"],
)
def test_invalid_file_raises(tmp_path: Path, content: bytes) -> None:
    (tmp_path / LEADER_EPOCH_CHECKPOINT_FILE).write_bytes(content)
    with pytest.raises(LeaderEpochCheckpointError):
        read_epoch_checkpoint(tmp_path)


# ---- lifecycle ----------------------------------------------------------------------------


def test_written_once_per_flush_when_changed_never_on_append(
    directory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes = WriteCounter(monkeypatch)
    log = PartitionLog.open(directory, SMALL, now_ms=0)
    for epoch in (0, 0, 1, 2, 2):
        append_values(log, [b"x"], leader_epoch=epoch)
    follow(log, leader_batches(5, [3, 4]))
    assert writes.count == 0
    assert not (directory / LEADER_EPOCH_CHECKPOINT_FILE).exists()
    log.flush()
    assert writes.count == 1
    assert checkpoint_text(directory) == "0\n5\n0 0\n1 2\n2 3\n3 5\n4 7\n"
    log.flush()
    append_values(log, [b"y"], leader_epoch=4)  # same epoch: no change
    log.flush()
    assert writes.count == 1
    log.close()
    assert writes.count == 1  # nothing changed since the last flush


def test_close_writes_a_changed_cache(directory: Path) -> None:
    log = PartitionLog.open(directory, SMALL, now_ms=0)
    append_values(log, [b"x"], leader_epoch=6)
    log.close()
    assert checkpoint_text(directory) == "0\n1\n6 0\n"


def test_new_empty_log_gets_an_empty_checkpoint_without_warning(
    directory: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        log = PartitionLog.open(directory, SMALL, now_ms=0)
        log.close()
    assert not caplog.records
    assert checkpoint_text(directory) == "0\n0\n"


def test_reopen_loads_the_checkpoint_without_scanning(
    directory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = PartitionLog.open(directory, SMALL, now_ms=0)
    follow(log, leader_batches(0, [0, 0, 1, 1] + [3] * 16))
    expected = log.leader_epoch_cache
    log.close()

    def no_scan(self: LogSegment) -> Iterator[object]:
        raise AssertionError("a clean open must not rebuild the cache")

    monkeypatch.setattr(LogSegment, "batch_headers", no_scan)
    reopened = PartitionLog.open(directory, SMALL, now_ms=0)
    assert reopened.leader_epoch_cache == expected
    assert entries(reopened) == [(0, 0), (1, 4), (3, 8)]
    reopened.close()


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (None, "missing"),
        (b"0\n3\n0 0\n", "entries"),
        (b"garbage", "newline"),
        (b"0\n2\n5 0\n1 9\n", "out of order"),
    ],
)
def test_missing_or_invalid_checkpoint_is_rebuilt_from_headers(
    directory: Path, caplog: pytest.LogCaptureFixture, damage: bytes | None, reason: str
) -> None:
    log = PartitionLog.open(directory, SMALL, now_ms=0)
    offset = 0
    for epoch in (0, 0, 2, 2, 2, 5, 7, 7):  # one append per batch: several segments
        offset = follow(log, leader_batches(offset, [epoch], records=5))[1] + 1
    original = log.leader_epoch_cache
    log.close()
    path = directory / LEADER_EPOCH_CHECKPOINT_FILE
    if damage is None:
        path.unlink()
    else:
        path.write_bytes(damage)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        reopened = PartitionLog.open(directory, SMALL, now_ms=0)
    assert reopened.leader_epoch_cache == original
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert "rebuilding leader-epoch cache" in caplog.text and reason in caplog.text
    reopened.flush()  # the rebuilt cache is persisted at the next flush
    assert read_epoch_checkpoint(directory) == original
    reopened.close()


def test_leftover_temp_file_is_removed_at_open(directory: Path) -> None:
    PartitionLog.open(directory, SMALL, now_ms=0).close()
    (directory / LEADER_EPOCH_CHECKPOINT_TMP_FILE).write_text("0\n")
    PartitionLog.open(directory, SMALL, now_ms=0).close()
    assert not (directory / LEADER_EPOCH_CHECKPOINT_TMP_FILE).exists()


# ---- truncation and retention -------------------------------------------------------------


def test_truncate_to_drops_epochs_from_the_new_end(directory: Path) -> None:
    log = PartitionLog.open(directory, SMALL, now_ms=0)
    follow(log, leader_batches(0, [0, 0, 1, 1, 3, 3]))  # epoch 1 from 4, epoch 3 from 8
    log.truncate_to(9)  # inside the batch 8-9: the log ends at 8
    assert (log.log_end_offset, entries(log)) == (8, [(0, 0), (1, 4)])
    log.truncate_to(6)
    assert entries(log) == [(0, 0), (1, 4)]
    log.truncate_to(4)
    assert entries(log) == [(0, 0)]
    assert log.end_offset_for_epoch(0) == (0, 4)
    follow(log, leader_batches(4, [4]))  # the new leader's history
    assert entries(log) == [(0, 0), (4, 4)]
    log.close()
    reopened = PartitionLog.open(directory, SMALL, now_ms=0)
    assert entries(reopened) == [(0, 0), (4, 4)]
    reopened.close()


def test_truncate_below_log_start_clears_the_cache(directory: Path) -> None:
    config = LogConfig(segment_bytes=200, index_interval_bytes=128, retention_bytes=1)
    log = PartitionLog.open(directory, config, now_ms=0)
    offset = 0
    for epoch in (1, 1, 2, 2):
        offset = follow(log, leader_batches(offset, [epoch], records=4))[1] + 1
    delete_files(log.enforce_retention(now_ms=0))
    assert log.log_start_offset > 0
    log.truncate_to(2)  # below the log start: the log restarts, empty, at 2
    assert (log.log_start_offset, log.log_end_offset, entries(log)) == (2, 2, [])
    log.close()
    reopened = PartitionLog.open(directory, config, now_ms=0)
    assert entries(reopened) == []
    reopened.close()


def test_retention_moves_the_first_epoch_start(directory: Path) -> None:
    config = LogConfig(segment_bytes=200, index_interval_bytes=128, retention_bytes=1)
    log = PartitionLog.open(directory, config, now_ms=0)
    offset = 0
    for epoch in (1, 1, 2, 2, 2, 3):  # four records per batch; about two batches a segment
        offset = follow(log, leader_batches(offset, [epoch], records=4))[1] + 1
    assert entries(log) == [(1, 0), (2, 8), (3, 20)]
    delete_files(log.enforce_retention(now_ms=0))
    start = log.log_start_offset
    assert 8 < start <= 20
    assert log.leader_epoch_cache == cache_from_headers(log)
    assert entries(log)[0] == (2, start)
    log.close()
    reopened = PartitionLog.open(directory, config, now_ms=0)
    assert reopened.leader_epoch_cache == cache_from_headers(reopened)
    reopened.close()


# ---- crashes ------------------------------------------------------------------------------


def test_crash_without_any_checkpoint_rebuilds(log: PartitionLog, directory: Path) -> None:
    follow(log, leader_batches(0, [0, 2, 2, 5]))
    copy = PartitionLog.open(crash_copy(directory, directory.parent / "crashed"), SMALL, 0)
    assert copy.leader_epoch_cache == log.leader_epoch_cache == cache_from_headers(copy)
    copy.close()


def test_crash_with_a_stale_checkpoint_after_truncation(log: PartitionLog, directory: Path) -> None:
    offset = 0
    for epoch in (0, 0, 1, 1, 2, 2, 2, 2):
        offset = follow(log, leader_batches(offset, [epoch], records=3))[1] + 1
    log.flush()  # checkpoint: 0@0 1@6 2@12
    log.truncate_to(9)  # drops epoch 2; the checkpoint on disk still has it
    offset = 9
    for epoch in (3, 3, 4):
        offset = follow(log, leader_batches(offset, [epoch], records=3))[1] + 1
    assert entries(log) == [(0, 0), (1, 6), (3, 9), (4, 15)]
    assert read_epoch_checkpoint(directory) == LeaderEpochCache(
        [EpochEntry(0, 0), EpochEntry(1, 6), EpochEntry(2, 12)]
    )
    copy = PartitionLog.open(crash_copy(directory, directory.parent / "crashed"), SMALL, 0)
    assert copy.leader_epoch_cache == log.leader_epoch_cache == cache_from_headers(copy)
    copy.close()


@pytest.mark.parametrize("seed", range(25))
def test_random_histories_survive_crashes(tmp_path: Path, seed: int) -> None:
    """Random leader/follower appends, truncations, retention and flushes, with a crash copy
    after every step: the reopened cache always matches the copied log's headers."""
    rng = random.Random(seed)
    config = LogConfig(segment_bytes=300, index_interval_bytes=64, retention_bytes=1_500)
    directory = tmp_path / "topic-0"
    log = PartitionLog.open(directory, config, now_ms=0)
    epoch = 0
    for step in range(40):
        action = rng.random()
        if action < 0.35:
            epoch += rng.choice((0, 0, 1, 2))
            append_values(log, [b"v" * rng.randint(1, 40)], leader_epoch=epoch)
        elif action < 0.65:
            epoch += rng.choice((0, 1))
            epochs = [epoch] * rng.randint(1, 2) + [epoch + 1] * rng.randint(0, 1)
            follow(log, leader_batches(log.log_end_offset, epochs, records=rng.randint(1, 4)))
            epoch = epochs[-1]
        elif action < 0.75 and log.log_end_offset > log.log_start_offset:
            log.truncate_to(rng.randint(log.log_start_offset, log.log_end_offset - 1))
        elif action < 0.85:
            delete_files(log.enforce_retention(now_ms=0))
        else:
            log.flush()
        assert log.leader_epoch_cache == cache_from_headers(log), f"step {step}"
        copy_dir = crash_copy(directory, tmp_path / f"crash-{step}")
        copy = PartitionLog.open(copy_dir, config, now_ms=0)
        assert copy.leader_epoch_cache == log.leader_epoch_cache, f"step {step}"
        copy.close()
    log.close()
    reopened = PartitionLog.open(directory, config, now_ms=0)
    assert reopened.leader_epoch_cache == cache_from_headers(reopened)
    reopened.close()
