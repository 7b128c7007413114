"""PartitionLog: appends, reads, rolls, retention, truncation, recovery and flushing."""

# Over 600 lines: PartitionLog's tests and its state-machine model, beside shared helpers.
from __future__ import annotations

import logging
import os
import shutil
import struct
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from lograft.protocol.batch_header import BatchHeader, validate_batches
from lograft.protocol.errors import KafkaStorageError, OffsetOutOfRangeError
from lograft.protocol.topic_config import LogConfig
from replica.log import segment as segment_module
from replica.log.partition_log import (
    CLEAN_SHUTDOWN_FILE,
    RECOVERY_POINT_FILE,
    PartitionLog,
    delete_files,
)
from replica.log.segment import LogSegment, SegmentRecovery
from tests.unit.log_fixtures import (
    append_values,
    crash_copy,
    headers_of,
    make_batch,
    read_all,
    segment_logs,
)

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


def fill(log: PartitionLog, count: int, *, timestamp_ms: int = 1_000) -> bytes:
    """Append ``count`` batches of growing size; returns everything stored."""
    stored = bytearray()
    for index in range(count):
        values = [bytes([index % 251]) * (index % 37 + 1) for _ in range(index % 3 + 1)]
        _, data = append_values(log, values, timestamp_ms=timestamp_ms + index)
        stored += data
    return bytes(stored)


def batch_containing(data: bytes, offset: int) -> bytes:
    for header in headers_of(data):
        if header.base_offset <= offset <= header.last_offset:
            return data[header.position : header.position + header.size]
    raise AssertionError(f"no batch holds offset {offset}")


# ---- appends and reads --------------------------------------------------------------------


def test_open_creates_an_empty_log(directory: Path) -> None:
    log = PartitionLog.open(directory, SMALL, now_ms=0)
    assert directory.is_dir()
    assert (log.log_start_offset, log.log_end_offset, log.size_bytes) == (0, 0, 0)
    assert log.read(0, 100) == b""
    assert log.offset_for_timestamp(0) is None
    assert log.max_timestamp_offset() is None
    assert log.config is SMALL and log.directory == directory
    log.close()


def test_append_assigns_offsets_and_leader_epoch(log: PartitionLog) -> None:
    first, stored = append_values(log, [b"a", b"b", b"c"], leader_epoch=7)
    second, _ = append_values(log, [b"d"], batches=2)
    assert (first.first_offset, first.last_offset, first.log_append_time_ms) == (0, 2, -1)
    assert (second.first_offset, second.last_offset) == (3, 4)
    assert log.log_end_offset == 5
    header = headers_of(log.read(0, 1))[0]
    assert (header.base_offset, header.partition_leader_epoch) == (0, 7)
    assert log.read(0, 1) == stored


def test_log_append_time_stamps_batches(directory: Path) -> None:
    config = LogConfig(message_timestamp_type="LogAppendTime", retention_ms=-1)
    log = PartitionLog.open(directory, config, now_ms=0)
    result, stored = append_values(log, [b"a", b"b"], timestamp_ms=5, now_ms=9_999)
    assert result.log_append_time_ms == 9_999
    header = headers_of(stored)[0]
    assert header.is_log_append_time and header.max_timestamp == 9_999
    validate_batches(bytearray(log.read(0, 1 << 20)), 1 << 20)  # CRC still valid
    assert log.offset_for_timestamp(9_000) == (0, 9_999)
    log.close()


def test_append_and_read_across_many_segments(log: PartitionLog, directory: Path) -> None:
    stored = fill(log, 200)
    assert len(segment_logs(directory)) > 10
    assert read_all(log) == stored
    assert log.size_bytes == len(stored)
    # Every offset, looked up through the segment list and the indexes, lands on its batch.
    for offset in range(log.log_end_offset):
        assert log.read(offset, 1) == batch_containing(stored, offset)


def test_segments_hold_whole_appends_and_roll_before_overflow(
    log: PartitionLog, directory: Path
) -> None:
    _, first = append_values(log, [b"x" * 100], batches=2)
    _, second = append_values(log, [b"y" * 100], batches=3)  # would pass 600 bytes: roll
    logs = segment_logs(directory)
    assert [path.read_bytes() for path in logs] == [first, second]
    # An append larger than segment.bytes still goes into the (new, empty) segment.
    _, big = append_values(log, [b"z" * 1_000])
    assert segment_logs(directory)[-1].read_bytes() == big
    assert len(big) > SMALL.segment_bytes


def test_read_limits(log: PartitionLog) -> None:
    stored = bytearray()
    for _ in range(4):
        stored += append_values(log, [b"v" * 50])[1]
    size = len(make_batch([b"v" * 50]))
    assert len(log.read(0, 2 * size)) == 2 * size
    assert len(log.read(0, 2 * size + size - 1)) == 2 * size  # whole batches only
    assert log.read(0, 0) == stored[:size]  # at least one batch, even over max_bytes
    assert log.read(1, 10_000, max_offset=3) == stored[size : 3 * size]
    assert log.read(0, 10_000, max_offset=0) == b""
    assert log.read(2, 10_000, max_offset=2) == b""
    assert log.read(4, 10_000) == b""  # the log end


@pytest.mark.parametrize("offset", [-1, 5, 100])
def test_read_out_of_range(log: PartitionLog, offset: int) -> None:
    append_values(log, [b"a"], batches=4)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(offset, 100)


def test_offset_for_timestamp_and_max_timestamp(log: PartitionLog) -> None:
    timestamps = [100, 200, 150, 400, 400, 300, 500, 500]
    for timestamp in timestamps:
        append_values(log, [b"v" * 60], timestamp_ms=timestamp, batches=2)
    # Append i wrote two one-record batches: offsets 2i and 2i+1, both at timestamps[i].
    assert log.offset_for_timestamp(0) == (0, 100)
    assert log.offset_for_timestamp(160) == (2, 200)
    assert log.offset_for_timestamp(201) == (6, 400)
    assert log.offset_for_timestamp(450) == (12, 500)
    assert log.offset_for_timestamp(501) is None
    assert log.max_timestamp_offset() == (12, 500)


# ---- rolling ------------------------------------------------------------------------------


def test_segment_ms_rolls(directory: Path) -> None:
    config = LogConfig(segment_ms=1_000, retention_ms=-1)
    log = PartitionLog.open(directory, config, now_ms=0)
    assert not log.roll_if_due(5_000)  # empty segments never roll
    append_values(log, [b"a"], now_ms=10)
    assert not log.roll_if_due(1_009)
    assert log.roll_if_due(1_010)
    assert len(segment_logs(directory)) == 2
    append_values(log, [b"b"], now_ms=2_000)
    append_values(log, [b"c"], now_ms=3_000)  # due at append time: rolls first
    assert [path.stat().st_size > 0 for path in segment_logs(directory)] == [True] * 3
    assert log.read(2, 100)[:8] == struct.pack(">q", 2)
    log.close()


def test_full_index_rolls(directory: Path) -> None:
    # Room for three offset-index entries (and two time-index entries, which the constant
    # timestamps never use up).
    config = LogConfig(index_interval_bytes=0, segment_index_bytes=24, retention_ms=-1)
    log = PartitionLog.open(directory, config, now_ms=0)
    for _ in range(7):
        append_values(log, [b"a"])
    assert [path.name[:20] for path in segment_logs(directory)] == [
        f"{base:020d}" for base in (0, 3, 6)
    ]
    log.close()


# ---- retention ----------------------------------------------------------------------------


def test_retention_by_time(log: PartitionLog, directory: Path) -> None:
    for index in range(30):
        append_values(log, [b"v" * 80], timestamp_ms=1_000 + index * 100)
    files = segment_logs(directory)
    bases = [int(path.name[:20]) for path in files]
    max_timestamps = [max(h.max_timestamp for h in headers_of(p.read_bytes())) for p in files]
    assert len(files) > 5
    log.update_config(LogConfig(segment_bytes=600, index_interval_bytes=128, retention_ms=500))
    # Segments 0-2 are more than 500 ms older than now; segment 3 is exactly 500 ms old.
    paths = log.enforce_retention(now_ms=max_timestamps[3] + 500)
    assert log.log_start_offset == bases[3]
    assert len(paths) == 9
    assert all(path.name.endswith(".deleted") and path.exists() for path in paths)
    delete_files(paths)
    assert not any(path.exists() for path in paths)
    assert segment_logs(directory) == files[3:]
    assert log.enforce_retention(now_ms=max_timestamps[3] + 501) == [
        directory / f"{bases[3]:020d}{suffix}.deleted"
        for suffix in (".log", ".index", ".timeindex")
    ]
    assert log.log_start_offset == bases[4]
    assert log.size_bytes == sum(path.stat().st_size for path in files[4:])
    with pytest.raises(OffsetOutOfRangeError):
        log.read(bases[4] - 1, 100)
    assert headers_of(log.read(bases[4], 1))[0].base_offset == bases[4]


def test_retention_by_time_keeps_the_active_segment(log: PartitionLog, directory: Path) -> None:
    fill(log, 40)
    log.update_config(LogConfig(segment_bytes=600, retention_ms=0))
    delete_files(log.enforce_retention(now_ms=10**12))
    assert len(segment_logs(directory)) == 1
    assert log.log_start_offset == int(segment_logs(directory)[0].name[:20])
    assert log.size_bytes == segment_logs(directory)[0].stat().st_size


def test_retention_by_bytes(log: PartitionLog, directory: Path) -> None:
    stored = fill(log, 100)
    sizes = [path.stat().st_size for path in segment_logs(directory)]
    limit = sum(sizes[-3:])
    log.update_config(
        LogConfig(
            segment_bytes=600, index_interval_bytes=128, retention_ms=-1, retention_bytes=limit
        )
    )
    paths = log.enforce_retention(now_ms=0)
    delete_files(paths)
    assert log.size_bytes == limit
    assert len(segment_logs(directory)) == 3
    assert log.log_start_offset == int(segment_logs(directory)[0].name[:20])
    assert read_all(log) == stored[len(stored) - limit :]
    assert log.enforce_retention(now_ms=0) == []


def test_retention_deletion_survives_restart_before_unlink(
    log: PartitionLog, directory: Path
) -> None:
    fill(log, 60)
    log.update_config(LogConfig(segment_bytes=600, retention_ms=-1, retention_bytes=0))
    paths = log.enforce_retention(now_ms=0)
    start = log.log_start_offset
    log.close()
    reopened = PartitionLog.open(directory, SMALL, now_ms=0)
    assert not any(path.exists() for path in paths)  # the open removed leftovers
    assert reopened.log_start_offset == start
    reopened.close()


# ---- truncation ---------------------------------------------------------------------------


def test_truncate_to(log: PartitionLog, directory: Path) -> None:
    stored = fill(log, 100)
    headers = headers_of(stored)
    middle = next(header for header in headers[60:] if header.records_count > 1)
    log.truncate_to(middle.base_offset + 1)  # inside a batch: the whole batch goes
    assert log.log_end_offset == middle.base_offset
    assert read_all(log) == stored[: middle.position]
    assert log.size_bytes == middle.position
    # Appends continue from the new end.
    result, _ = append_values(log, [b"new"])
    assert result.first_offset == middle.base_offset
    # At a segment boundary: the segment that starts there ends up empty and active.
    boundary = int(segment_logs(directory)[2].name[:20])
    log.truncate_to(boundary)
    assert log.log_end_offset == boundary
    assert len(segment_logs(directory)) == 3
    assert segment_logs(directory)[-1].stat().st_size == 0
    log.truncate_to(10**9)  # above the end: nothing happens
    assert log.log_end_offset == boundary


def test_truncate_below_log_start_restarts_the_log(log: PartitionLog, directory: Path) -> None:
    fill(log, 50)
    log.update_config(LogConfig(segment_bytes=600, retention_ms=-1, retention_bytes=0))
    delete_files(log.enforce_retention(now_ms=0))
    start = log.log_start_offset
    log.truncate_to(start - 5)
    assert (log.log_start_offset, log.log_end_offset, log.size_bytes) == (start - 5, start - 5, 0)
    assert [path.name[:20] for path in segment_logs(directory)] == [f"{start - 5:020d}"]
    result, _ = append_values(log, [b"a"])
    assert result.first_offset == start - 5


def test_truncate_lowers_the_persisted_recovery_point(log: PartitionLog, directory: Path) -> None:
    fill(log, 60)
    log.flush()
    assert (directory / RECOVERY_POINT_FILE).read_text() == f"0\n{log.log_end_offset}\n"
    log.truncate_to(3)
    assert (directory / RECOVERY_POINT_FILE).read_text() == "0\n3\n"
    assert log.flushed_offset == 3


# ---- close, reopen, recovery ---------------------------------------------------------------


@dataclass
class Snapshot:
    start: int
    end: int
    size: int
    data: bytes
    by_timestamp: list[tuple[int, int] | None]
    max_timestamp: tuple[int, int] | None
    index_files: dict[str, bytes]


def snapshot(log: PartitionLog) -> Snapshot:
    return Snapshot(
        log.log_start_offset,
        log.log_end_offset,
        log.size_bytes,
        read_all(log),
        [log.offset_for_timestamp(t) for t in range(990, 1_300, 7)],
        log.max_timestamp_offset(),
        {path.name: path.read_bytes() for path in sorted(log.directory.glob("*index"))},
    )


def test_reopen_after_close_is_identical(log: PartitionLog, directory: Path) -> None:
    fill(log, 150)
    log.close()
    assert (directory / CLEAN_SHUTDOWN_FILE).exists()
    first = PartitionLog.open(directory, SMALL, now_ms=0)
    before = snapshot(first)
    assert not (directory / CLEAN_SHUTDOWN_FILE).exists()  # removed on open
    assert first.flushed_offset == first.log_end_offset
    first.close()
    second = PartitionLog.open(directory, SMALL, now_ms=0)
    assert snapshot(second) == before
    result, _ = append_values(second, [b"after"])
    assert result.first_offset == before.end
    second.close()


def test_unclean_reopen_recovers_everything(log: PartitionLog, tmp_path: Path) -> None:
    stored = fill(log, 120)
    expected = snapshot(log)
    crashed = PartitionLog.open(crash_copy(log.directory, tmp_path / "crashed"), SMALL, now_ms=0)
    assert snapshot(crashed) == expected
    assert crashed.flushed_offset == 0  # nothing was flushed before the crash
    assert crashed.flush() == crashed.log_end_offset
    assert read_all(crashed) == stored
    crashed.close()


def test_recovery_truncates_garbage_tail(
    log: PartitionLog, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    stored = fill(log, 40)
    copy = crash_copy(log.directory, tmp_path / "crashed")
    active = segment_logs(copy)[-1]
    with open(active, "ab") as handle:
        handle.write(b"garbage bytes that are not a batch" * 3)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        recovered = PartitionLog.open(copy, SMALL, now_ms=0)
    assert read_all(recovered) == stored
    assert recovered.log_end_offset == log.log_end_offset
    [record] = [r for r in caplog.records if "truncated corrupt log tail" in r.getMessage()]
    assert record.levelno == logging.WARNING
    assert f"segment={active.name}" in record.getMessage()
    assert "bytes_dropped=102" in record.getMessage()
    result, _ = append_values(recovered, [b"next"])
    assert result.first_offset == log.log_end_offset
    recovered.close()


def test_recovery_truncates_half_written_batch(
    log: PartitionLog, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    stored = fill(log, 40)
    copy = crash_copy(log.directory, tmp_path / "crashed")
    torn = make_batch([b"torn" * 20], base_offset=log.log_end_offset)
    with open(segment_logs(copy)[-1], "ab") as handle:
        handle.write(torn[: len(torn) // 2])
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        recovered = PartitionLog.open(copy, SMALL, now_ms=0)
    assert read_all(recovered) == stored
    assert f"bytes_dropped={len(torn) // 2}" in caplog.text
    recovered.close()


def test_clean_marker_does_not_hide_a_damaged_tail(
    log: PartitionLog, directory: Path, caplog: pytest.LogCaptureFixture
) -> None:
    stored = fill(log, 40)
    log.close()
    with open(segment_logs(directory)[-1], "ab") as handle:
        handle.write(b"\x00" * 70)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        reopened = PartitionLog.open(directory, SMALL, now_ms=0)
    assert read_all(reopened) == stored
    assert "rebuilding index" in caplog.text and "truncated corrupt log tail" in caplog.text
    reopened.close()


def test_corrupt_batch_in_unflushed_segment_drops_later_segments(
    log: PartitionLog, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    stored = fill(log, 100)
    copy = crash_copy(log.directory, tmp_path / "crashed")
    files = segment_logs(copy)
    victim = files[3]
    data = bytearray(victim.read_bytes())
    second = headers_of(bytes(data))[1]
    data[second.position + second.size - 1] ^= 0xFF  # breaks the CRC of its second batch
    victim.write_bytes(bytes(data))
    kept_bytes = sum(path.stat().st_size for path in files[:3]) + second.position
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        recovered = PartitionLog.open(copy, SMALL, now_ms=0)
    assert recovered.log_end_offset == second.base_offset
    assert segment_logs(copy) == files[:4]
    assert read_all(recovered) == stored[:kept_bytes]
    assert "CRC" in caplog.text
    assert f"segments_dropped={len(files) - 4}" in caplog.text
    recovered.close()


def test_recovery_starts_at_the_recovery_point(
    log: PartitionLog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fill(log, 100)
    log.flush()
    flushed_segments = len(segment_logs(log.directory))
    fill(log, 30)
    recovered_bases: list[int] = []
    original = LogSegment.recover

    def spy(segment: LogSegment, index_interval_bytes: int) -> SegmentRecovery:
        recovered_bases.append(segment.base_offset)
        return original(segment, index_interval_bytes)

    monkeypatch.setattr(LogSegment, "recover", spy)
    crashed = PartitionLog.open(crash_copy(log.directory, tmp_path / "crashed"), SMALL, now_ms=0)
    bases = [int(path.name[:20]) for path in segment_logs(crashed.directory)]
    assert recovered_bases == bases[flushed_segments - 1 :]
    assert crashed.flushed_offset <= log.flushed_offset
    crashed.close()


@pytest.mark.parametrize("damage", ["delete", "misaligned", "not_monotonic", "out_of_range"])
def test_bad_index_is_rebuilt(
    log: PartitionLog, directory: Path, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    stored = fill(log, 100)
    log.close()
    index_path = directory / (segment_logs(directory)[2].name[:20] + ".index")
    original = index_path.read_bytes()
    assert len(original) >= 16
    if damage == "delete":
        index_path.unlink()
    elif damage == "misaligned":
        index_path.write_bytes(original[:-3])
    elif damage == "not_monotonic":
        index_path.write_bytes(original[8:16] + original[:8] + original[16:])
    else:
        index_path.write_bytes(original[:-8] + struct.pack(">ii", 1, 10**6))
    with caplog.at_level(logging.INFO, logger=LOGGER):
        reopened = PartitionLog.open(directory, SMALL, now_ms=0)
    assert "rebuilding index" in caplog.text
    assert index_path.read_bytes() == original
    assert read_all(reopened) == stored
    for offset in range(reopened.log_end_offset):
        assert reopened.read(offset, 1) == batch_containing(stored, offset)
    reopened.close()


def test_orphan_files_are_removed_and_foreign_files_kept(directory: Path) -> None:
    directory.mkdir()
    (directory / "00000000000000000500.index").write_bytes(b"")
    (directory / "00000000000000000007.log.deleted").write_bytes(b"x")
    (directory / "leader-epoch-checkpoint").write_bytes(b"0\n0\n")
    (directory / RECOVERY_POINT_FILE).write_bytes(b"not a checkpoint")
    log = PartitionLog.open(directory, SMALL, now_ms=0)
    assert sorted(path.name for path in directory.iterdir()) == [
        "00000000000000000000.index",
        "00000000000000000000.log",
        "00000000000000000000.timeindex",
        "leader-epoch-checkpoint",
        RECOVERY_POINT_FILE,
    ]
    log.close()


# ---- durability and failures ---------------------------------------------------------------


def test_flush_advances_flushed_offset_and_checkpoint(log: PartitionLog, directory: Path) -> None:
    append_values(log, [b"a"], batches=3)
    assert log.flushed_offset == 0
    assert log.flush() == 3 == log.flushed_offset
    assert not (directory / RECOVERY_POINT_FILE).exists()  # still inside the first segment
    fill(log, 30)
    assert log.flush() == log.log_end_offset
    assert (directory / RECOVERY_POINT_FILE).read_text() == f"0\n{log.log_end_offset}\n"
    assert log.flush() == log.log_end_offset  # nothing to do


def test_flush_from_a_thread_while_appending(log: PartitionLog, tmp_path: Path) -> None:
    done = threading.Event()
    started = threading.Barrier(3)
    observed: list[list[int]] = [[], []]
    errors: list[BaseException] = []

    def flusher(results: list[int]) -> None:
        try:
            results.append(log.flush())
            started.wait()
            while not done.is_set():
                results.append(log.flush())
        except BaseException as exc:  # handed to the main thread below
            errors.append(exc)
            started.abort()

    threads = [threading.Thread(target=flusher, args=(results,)) for results in observed]
    for thread in threads:
        thread.start()
    started.wait()  # both flushers are looping before the first append
    stored = fill(log, 300)
    done.set()
    for thread in threads:
        thread.join()
    assert not errors
    for results in observed:
        assert results == sorted(results)
        assert all(offset <= log.log_end_offset for offset in results)
    assert log.flush() == log.log_end_offset == log.flushed_offset
    crashed = PartitionLog.open(crash_copy(log.directory, tmp_path / "copy"), SMALL, now_ms=0)
    assert read_all(crashed) == stored
    crashed.close()


def test_failed_write_appends_nothing(log: PartitionLog, monkeypatch: pytest.MonkeyPatch) -> None:
    _, first = append_values(log, [b"a"])

    def half_then_fail(fd: int, data: bytes | bytearray | memoryview) -> None:
        os.write(fd, bytes(data)[: len(data) // 2])
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patched:
        patched.setattr(segment_module, "write_all", half_then_fail)
        with pytest.raises(KafkaStorageError):
            append_values(log, [b"b" * 100])
    assert log.log_end_offset == 1
    assert segment_logs(log.directory)[-1].read_bytes() == first
    result, _ = append_values(log, [b"c"])
    assert result.first_offset == 1


def test_closed_and_deleted_logs(directory: Path) -> None:
    log = PartitionLog.open(directory, SMALL, now_ms=0)
    append_values(log, [b"a"])
    log.close()
    log.close()  # idempotent
    with pytest.raises(KafkaStorageError):
        append_values(log, [b"b"])
    assert log.flush() == 1
    reopened = PartitionLog.open(directory, SMALL, now_ms=0)
    reopened.delete()
    assert not directory.exists()


# ---- model-based test ---------------------------------------------------------------------


@dataclass(frozen=True)
class ModelBatch:
    header: BatchHeader
    data: bytes


class PartitionLogMachine(RuleBasedStateMachine):
    """Compares the log with a list of batches under appends, reads, truncation, reopens."""

    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="lograft-log-test-"))
        self.generation = 0
        self.config = LogConfig(
            segment_bytes=400, index_interval_bytes=150, segment_index_bytes=64, retention_ms=-1
        )
        self.log = PartitionLog.open(self.root / "p0", self.config, now_ms=0)
        self.start = 0
        self.batches: list[ModelBatch] = []
        self.now_ms = 0

    @property
    def end(self) -> int:
        return self.batches[-1].header.next_offset if self.batches else self.start

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.root, ignore_errors=True)

    @rule(
        values=st.lists(st.binary(max_size=40), min_size=1, max_size=4),
        timestamp=st.integers(0, 50),
        batches=st.integers(1, 3),
    )
    def append(self, values: list[bytes], timestamp: int, batches: int) -> None:
        result, stored = append_values(
            self.log, values, timestamp_ms=timestamp, now_ms=self.now_ms, batches=batches
        )
        assert result.first_offset == self.end
        for header in headers_of(stored):
            self.batches.append(
                ModelBatch(header, stored[header.position : header.position + header.size])
            )

    @rule(data=st.data())
    def read(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(max(0, self.start - 2), self.end + 2))
        max_bytes = data.draw(st.integers(0, 500))
        max_offset = data.draw(st.none() | st.integers(self.start, self.end + 1))
        if not self.start <= offset <= self.end:
            with pytest.raises(OffsetOutOfRangeError):
                self.log.read(offset, max_bytes, max_offset)
            return
        got = self.log.read(offset, max_bytes, max_offset)
        limit = self.end if max_offset is None else min(max_offset, self.end)
        expected = [
            batch.data
            for batch in self.batches
            if batch.header.last_offset >= offset and batch.header.base_offset < limit
        ]
        if offset >= limit:
            expected = []  # reading at the high watermark is empty, even mid-batch
        got_batches = [got[h.position : h.position + h.size] for h in headers_of(got)]
        assert bool(got_batches) == bool(expected)
        assert got_batches == expected[: len(got_batches)]
        if len(got_batches) > 1:
            assert len(got) <= max_bytes

    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(max(0, self.start - 3), self.end + 2))
        self.log.truncate_to(offset)
        if offset >= self.end:
            return
        if offset < self.start:
            self.start = offset
            self.batches = []
        else:
            self.batches = [b for b in self.batches if b.header.last_offset < offset]

    @rule(retention_bytes=st.integers(0, 1_500))
    def retention(self, retention_bytes: int) -> None:
        self.log.update_config(
            LogConfig(
                segment_bytes=400,
                index_interval_bytes=150,
                segment_index_bytes=64,
                retention_ms=-1,
                retention_bytes=retention_bytes,
            )
        )
        paths = self.log.enforce_retention(self.now_ms)
        delete_files(paths)
        self.log.update_config(self.config)
        new_start = self.log.log_start_offset
        assert new_start == self.end or any(b.header.base_offset == new_start for b in self.batches)
        self.batches = [b for b in self.batches if b.header.base_offset >= new_start]
        self.start = new_start

    @rule(advance_ms=st.integers(0, 2_000))
    def roll_if_due(self, advance_ms: int) -> None:
        self.now_ms += advance_ms
        self.log.roll_if_due(self.now_ms)

    @rule()
    def flush(self) -> None:
        assert self.log.flush() == self.end

    @rule()
    def reopen(self) -> None:
        self.log.close()
        self.log = PartitionLog.open(self.log.directory, self.config, now_ms=self.now_ms)
        assert self.log.flushed_offset == self.end

    @rule()
    def crash_and_reopen(self) -> None:
        self.generation += 1
        copy = crash_copy(self.log.directory, self.root / f"p{self.generation}")
        self.log.close()
        self.log = PartitionLog.open(copy, self.config, now_ms=self.now_ms)

    @rule(timestamp=st.integers(-1, 55))
    def offset_for_timestamp(self, timestamp: int) -> None:
        expected = next(
            (
                (b.header.base_offset, b.header.max_timestamp)
                for b in self.batches
                if b.header.max_timestamp >= timestamp
            ),
            None,
        )
        assert self.log.offset_for_timestamp(timestamp) == expected

    @invariant()
    def matches_model(self) -> None:
        assert self.log.log_start_offset == self.start
        assert self.log.log_end_offset == self.end
        assert self.log.size_bytes == sum(len(b.data) for b in self.batches)
        assert self.log.flushed_offset <= self.end
        assert read_all(self.log) == b"".join(b.data for b in self.batches)
        top = max((b.header.max_timestamp for b in self.batches), default=None)
        expected = next(
            ((b.header.base_offset, top) for b in self.batches if b.header.max_timestamp == top),
            None,
        )
        assert self.log.max_timestamp_offset() == expected


TestPartitionLogModel = PartitionLogMachine.TestCase
TestPartitionLogModel.settings = settings(
    max_examples=75,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def test_retention_never_deletes_at_or_above_the_high_watermark(
    log: PartitionLog, directory: Path
) -> None:
    fill(log, 40)
    bases = [int(path.name[:20]) for path in segment_logs(directory)]
    assert len(bases) > 4
    log.update_config(LogConfig(segment_bytes=600, retention_ms=0))
    # The watermark sits inside the third segment: only the first two are wholly below it.
    delete_files(log.enforce_retention(now_ms=10**12, high_watermark=bases[2] + 1))
    assert log.log_start_offset == bases[2]
    # A watermark exactly at a segment's base frees the segment before it, not that one.
    delete_files(log.enforce_retention(now_ms=10**12, high_watermark=bases[3]))
    assert log.log_start_offset == bases[3]


def test_a_flush_syncs_the_active_segments_indexes_only_after_its_roll_or_at_close(
    log: PartitionLog, directory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real_fdatasync = os.fdatasync

    def fdatasync(fd: int) -> None:
        synced.append(Path(os.readlink(f"/proc/self/fd/{fd}")).suffix)
        real_fdatasync(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    append_values(log, [b"x" * 200])
    append_values(log, [b"x" * 200])  # past index.interval.bytes: an index entry
    log.flush()
    assert synced == [".log"]  # the active segment: its records, not its indexes

    synced.clear()
    while len(segment_logs(directory)) == 1:
        append_values(log, [b"x" * 200])
    log.flush()
    # The rolled segment whole, then the new active one's records.
    assert sorted(synced) == [".index", ".log", ".log", ".timeindex"]

    synced.clear()
    log.close()
    assert sorted(synced) == [".index", ".log", ".timeindex"]  # before the clean marker
