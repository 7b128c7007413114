"""LogSegment: append, index placement, reads, time lookups, truncation, load and recovery."""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lograft.protocol.batch_header import BatchHeader, assign_offsets, validate_batches
from replica.log.offset_index import CorruptIndexError
from replica.log.segment import LogSegment, parse_segment_file_name, segment_file
from tests.unit.log_fixtures import headers_of, make_batch

BASE = 100


@pytest.fixture
def segment(tmp_path: Path) -> Iterator[LogSegment]:
    created = LogSegment.create(tmp_path, BASE)
    yield created
    created.close()


def append(
    segment: LogSegment,
    values: list[bytes],
    *,
    timestamp_ms: int = 1_000,
    interval: int = 0,
    now_ms: int = 0,
) -> BatchHeader:
    """Append one batch at the segment's next offset; returns its stored header."""
    buffer = bytearray(make_batch(values, timestamp_ms=timestamp_ms))
    headers = validate_batches(buffer, 1 << 24)
    assign_offsets(buffer, headers, segment.next_offset, 0)
    stored = headers_of(bytes(buffer))
    position = segment.size
    segment.append(buffer, stored, interval, now_ms)
    return dataclasses.replace(stored[0], position=position)


def test_file_names() -> None:
    assert segment_file(Path("/d"), 42, ".log") == Path("/d/00000000000000000042.log")
    assert parse_segment_file_name("00000000000000000042.timeindex") == (42, ".timeindex")
    assert parse_segment_file_name("42.log") is None
    assert parse_segment_file_name("00000000000000000042.log.deleted") is None
    assert parse_segment_file_name("99999999999999999999.log") is None  # beyond int64


def test_append_tracks_offsets_size_and_timestamps(segment: LogSegment) -> None:
    assert segment.is_empty and segment.next_offset == BASE
    append(segment, [b"a", b"b", b"c"], timestamp_ms=5_000, now_ms=7)
    append(segment, [b"d"], timestamp_ms=4_000)
    assert segment.next_offset == BASE + 4
    assert segment.size == segment.log_path.stat().st_size
    assert segment.max_timestamp == 5_000
    assert segment.offset_of_max_timestamp == BASE
    assert segment.first_append_ms == 7


def test_index_entries_every_interval(segment: LogSegment) -> None:
    batch_size = len(make_batch([b"x" * 40]))
    for _ in range(10):
        append(segment, [b"x" * 40], interval=2 * batch_size)
    # An entry before batch 2, 4, 6, 8 (the first batch needs none: lookups fall back to 0).
    assert segment.offset_index.entries == 4
    assert segment.offset_index.lookup(BASE + 5) == (BASE + 4, 4 * batch_size)


def test_time_index_records_growth_only(segment: LogSegment) -> None:
    for timestamp in (100, 300, 200, 200, 400):
        append(segment, [b"v"], timestamp_ms=timestamp, interval=0)
    # Entries at every batch where the max grew: 100@0, 300@1, 400@4.
    assert [segment.time_index.entry_before(t) for t in (101, 301, 401)] == [
        (100, BASE),
        (300, BASE + 1),
        (400, BASE + 4),
    ]


def test_find_batch_and_read(segment: LogSegment) -> None:
    first = append(segment, [b"a", b"b"])
    second = append(segment, [b"c" * 100])
    third = append(segment, [b"d"])
    assert segment.find_batch(BASE + 1) == first
    assert segment.find_batch(BASE + 2) == second
    assert segment.find_batch(BASE + 9) is None
    everything = segment.read(BASE, 1 << 20, 1 << 62)
    assert [h.base_offset for h in headers_of(everything)] == [BASE, BASE + 2, BASE + 3]
    # max_bytes smaller than the first batch still returns it whole, and only it.
    assert headers_of(segment.read(BASE + 2, 1, 1 << 62)) == [
        dataclasses.replace(second, position=0)
    ]
    # max_offset excludes batches starting at or after it.
    limited = segment.read(BASE, 1 << 20, third.base_offset)
    assert [h.base_offset for h in headers_of(limited)] == [BASE, BASE + 2]
    assert segment.read(BASE + 3, 1 << 20, BASE + 3) == b""


def test_find_timestamp(segment: LogSegment) -> None:
    for index, timestamp in enumerate((100, 300, 200, 500, 500)):
        append(segment, [b"v"], timestamp_ms=timestamp, interval=0 if index % 2 else 10_000)
    found = segment.find_timestamp(250)
    assert found is not None and (found.base_offset, found.max_timestamp) == (BASE + 1, 300)
    found = segment.find_timestamp(500)
    assert found is not None and found.base_offset == BASE + 3
    assert segment.find_timestamp(501) is None
    found = segment.find_timestamp(0)
    assert found is not None and found.base_offset == BASE


def test_truncate_to_removes_whole_batches(segment: LogSegment) -> None:
    append(segment, [b"a", b"b"], timestamp_ms=10)
    second = append(segment, [b"c", b"d", b"e"], timestamp_ms=30, interval=0)
    append(segment, [b"f"], timestamp_ms=20, interval=0)
    size_before = segment.size
    removed = segment.truncate_to(BASE + 3)  # inside the second batch
    assert removed == size_before - second.position
    assert segment.next_offset == second.base_offset
    assert segment.size == second.position == segment.log_path.stat().st_size
    assert segment.max_timestamp == 10
    assert segment.offset_index.last_entry() == (BASE, 0)
    assert segment.time_index.last_entry() == (10, BASE)
    assert segment.truncate_to(BASE + 50) == 0
    segment.truncate_to(BASE)
    assert segment.is_empty and segment.next_offset == BASE and segment.first_append_ms is None


def test_load_indexes_after_reopen(tmp_path: Path, segment: LogSegment) -> None:
    for timestamp in range(20):
        append(segment, [b"v" * 30], timestamp_ms=timestamp, interval=100)
    segment.seal()
    segment.close()
    loaded = LogSegment.open_existing(tmp_path, BASE, now_ms=0)
    loaded.load_indexes()
    assert loaded.next_offset == BASE + 20
    assert loaded.max_timestamp == 19
    assert loaded.offset_of_max_timestamp == BASE + 19
    assert loaded.find_batch(BASE + 13) is not None
    loaded.close()


def test_load_indexes_detects_bad_tail_and_wrong_entry(tmp_path: Path, segment: LogSegment) -> None:
    for _ in range(5):
        append(segment, [b"v" * 30], interval=0)
    segment.close()
    with open(segment.log_path, "ab") as handle:
        handle.write(b"\x00" * 10)
    loaded = LogSegment.open_existing(tmp_path, BASE, now_ms=0)
    with pytest.raises(CorruptIndexError):
        loaded.load_indexes()
    loaded.close()


def test_recover_truncates_at_corrupt_batch_and_rebuilds_indexes(
    tmp_path: Path, segment: LogSegment
) -> None:
    headers = [append(segment, [b"v" * 30], timestamp_ms=i, interval=0) for i in range(6)]
    index_before = segment.offset_index.file.path.read_bytes()
    segment.close()
    # Flip a byte inside the fifth batch's records: its CRC no longer matches.
    with open(segment.log_path, "r+b") as handle:
        handle.seek(headers[4].position + headers[4].size - 2)
        handle.write(b"\xff")
    recovering = LogSegment.open_existing(tmp_path, BASE, now_ms=0)
    result = recovering.recover(index_interval_bytes=0)
    assert result.valid_bytes == headers[4].position
    assert result.truncated_bytes == 2 * headers[4].size
    assert result.reason is not None and "CRC" in result.reason
    assert recovering.next_offset == BASE + 4
    assert recovering.max_timestamp == 3
    assert segment.log_path.stat().st_size == headers[4].position
    # The rebuilt index is the prefix of the original for the surviving batches.
    assert recovering.offset_index.file.path.read_bytes() == index_before[: 4 * 8]
    recovering.close()


def test_recover_rejects_offsets_going_backwards(tmp_path: Path, segment: LogSegment) -> None:
    # A gap is what compaction leaves and is accepted; an overlap is corruption.
    append(segment, [b"a"])
    segment.close()
    with open(segment.log_path, "ab") as handle:
        handle.write(make_batch([b"b"], base_offset=BASE))  # valid CRC, wrong offset
    recovering = LogSegment.open_existing(tmp_path, BASE, now_ms=0)
    result = recovering.recover(index_interval_bytes=0)
    assert result.reason is not None and "expected" in result.reason
    assert recovering.next_offset == BASE + 1
    recovering.close()


def test_recover_handles_batches_larger_than_a_chunk(tmp_path: Path, segment: LogSegment) -> None:
    big = append(segment, [b"x" * (3 * 1024 * 1024)])
    append(segment, [b"y"])
    segment.close()
    recovering = LogSegment.open_existing(tmp_path, BASE, now_ms=0)
    result = recovering.recover(index_interval_bytes=4096)
    assert result.truncated_bytes == 0
    assert recovering.next_offset == BASE + 2
    assert recovering.offset_index.lookup(BASE + 1) == (BASE + 1, big.size)
    recovering.close()


def test_rename_to_deleted(tmp_path: Path, segment: LogSegment) -> None:
    append(segment, [b"a"])
    paths = segment.rename_to_deleted()
    assert sorted(p.name for p in paths) == [
        "00000000000000000100.index.deleted",
        "00000000000000000100.log.deleted",
        "00000000000000000100.timeindex.deleted",
    ]
    assert all(p.exists() for p in paths)
    assert not list(tmp_path.glob("*.log"))


def _walked_find(segment: LogSegment, offset: int) -> BatchHeader | None:
    """``find_batch`` by brute force: every header from the start of the file."""
    return next((h for h in segment.batch_headers() if h.last_offset >= offset), None)


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(
        st.one_of(
            # append: batch value count, gap before it (a compacted leader's hole), interval
            st.tuples(
                st.just("append"),
                st.integers(1, 4),
                st.integers(0, 3),
                st.sampled_from([0, 60, 200, 1 << 20]),
            ),
            st.tuples(st.just("truncate"), st.integers(0, 40), st.just(0), st.just(0)),
            st.tuples(st.just("reopen"), st.just(0), st.just(0), st.just(0)),
        ),
        max_size=40,
    )
)
def test_find_batch_at_the_tail_agrees_with_walking_the_file(
    steps: list[tuple[str, int, int, int]],
) -> None:
    # The batches appended since the last index entry are found from memory; whatever
    # appends, holes, truncations and reopenings came before, the answer is the file's.
    with tempfile.TemporaryDirectory() as directory:
        segment = LogSegment.create(Path(directory), BASE)
        try:
            for action, count, gap, interval in steps:
                if action == "append":
                    buffer = bytearray(make_batch([b"v" * 30] * count))
                    headers = validate_batches(buffer, 1 << 24)
                    assign_offsets(buffer, headers, segment.next_offset + gap, 0)
                    segment.append(buffer, headers_of(bytes(buffer)), interval, 0)
                elif action == "truncate":
                    segment.truncate_to(BASE + count)
                else:
                    segment.close()
                    segment = LogSegment.open_existing(Path(directory), BASE, 0)
                    segment.load_indexes()
                for offset in range(BASE - 1, segment.next_offset + 2):
                    assert segment.find_batch(offset) == _walked_find(segment, offset)
        finally:
            segment.close()
