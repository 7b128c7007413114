"""OffsetIndex and TimeIndex: lookups, truncation, persistence and sanity checks."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from replica.log.offset_index import CorruptIndexError, OffsetIndex
from replica.log.time_index import TimeIndex

BASE = 1_000


def new_offset_index(tmp_path: Path, entries: list[tuple[int, int]] | None = None) -> OffsetIndex:
    index = OffsetIndex(tmp_path / "00000000000000001000.index", BASE)
    index.create()
    index.append(entries or [])
    return index


def new_time_index(tmp_path: Path, entries: list[tuple[int, int]] | None = None) -> TimeIndex:
    index = TimeIndex(tmp_path / "00000000000000001000.timeindex", BASE)
    index.create()
    index.append(entries or [])
    return index


def test_lookup_finds_greatest_entry_at_or_below(tmp_path: Path) -> None:
    index = new_offset_index(tmp_path, [(1_010, 100), (1_020, 250), (1_030, 400)])
    assert index.lookup(999) == (BASE, 0)
    assert index.lookup(1_000) == (BASE, 0)
    assert index.lookup(1_009) == (BASE, 0)
    assert index.lookup(1_010) == (1_010, 100)
    assert index.lookup(1_025) == (1_020, 250)
    assert index.lookup(5_000) == (1_030, 400)
    assert index.last_entry() == (1_030, 400)


def test_empty_index_lookup_is_segment_start(tmp_path: Path) -> None:
    index = new_offset_index(tmp_path)
    assert index.lookup(1_234) == (BASE, 0)
    assert index.last_entry() is None


def test_file_is_big_endian_pairs_and_reloads(tmp_path: Path) -> None:
    index = new_offset_index(tmp_path, [(1_003, 80)])
    index.append([(1_007, 200)])
    data = index.file.path.read_bytes()
    assert data == struct.pack(">iiii", 3, 80, 7, 200)
    index.file.close()
    reloaded = OffsetIndex(index.file.path, BASE)
    reloaded.load(log_size=1_000, max_entries=100)
    assert reloaded.entries == 2
    assert reloaded.lookup(1_008) == (1_007, 200)


def test_append_rejects_non_increasing_entries(tmp_path: Path) -> None:
    index = new_offset_index(tmp_path, [(1_010, 100)])
    with pytest.raises(ValueError):
        index.append([(1_010, 200)])
    with pytest.raises(ValueError):
        index.append([(1_011, 100)])
    assert index.entries == 1
    assert len(index.file.path.read_bytes()) == 8


def test_truncate_removes_entries_at_and_above(tmp_path: Path) -> None:
    index = new_offset_index(tmp_path, [(1_010, 100), (1_020, 250), (1_030, 400)])
    index.truncate_to(1_020)
    assert index.last_entry() == (1_010, 100)
    assert len(index.file.path.read_bytes()) == 8
    index.truncate_to(1_011)
    assert index.entries == 1
    index.truncate_to(BASE)
    assert index.entries == 0


@pytest.mark.parametrize(
    ("content", "log_size"),
    [
        (b"\x00" * 7, 1_000),  # not a multiple of the entry size
        (struct.pack(">iiii", 5, 100, 5, 200), 1_000),  # offsets not increasing
        (struct.pack(">iiii", 5, 100, 6, 100), 1_000),  # positions not increasing
        (struct.pack(">ii", 5, 990), 1_000),  # last entry leaves no room for a header
        (struct.pack(">ii", -1, 0), 1_000),  # negative relative offset
    ],
)
def test_load_rejects_insane_files(tmp_path: Path, content: bytes, log_size: int) -> None:
    path = tmp_path / "00000000000000001000.index"
    path.write_bytes(content)
    with pytest.raises(CorruptIndexError):
        OffsetIndex(path, BASE).load(log_size=log_size, max_entries=100)


def test_load_rejects_missing_and_oversized_files(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000001000.index"
    with pytest.raises(CorruptIndexError, match="missing"):
        OffsetIndex(path, BASE).load(log_size=1_000, max_entries=10)
    path.write_bytes(struct.pack(">iiii", 1, 10, 2, 20))
    with pytest.raises(CorruptIndexError, match="more than"):
        OffsetIndex(path, BASE).load(log_size=1_000, max_entries=1)


def test_is_full_at_segment_index_bytes(tmp_path: Path) -> None:
    index = new_offset_index(tmp_path, [(1_001, 10)])
    assert not index.is_full(16)
    index.append([(1_002, 20)])
    assert index.is_full(16)


@given(st.lists(st.integers(0, 10_000), unique=True, min_size=1), st.integers(0, 12_000))
def test_lookup_matches_linear_search(
    tmp_path_factory: pytest.TempPathFactory, offsets: list[int], target: int
) -> None:
    directory = tmp_path_factory.mktemp("index")
    entries = [(BASE + offset, 100 * (i + 1)) for i, offset in enumerate(sorted(offsets))]
    index = new_offset_index(directory, entries)
    expected = max((entry for entry in entries if entry[0] <= BASE + target), default=(BASE, 0))
    assert index.lookup(BASE + target) == expected
    index.file.close()


# ---- TimeIndex ----------------------------------------------------------------------------


def test_time_index_entry_before_is_strictly_lower(tmp_path: Path) -> None:
    index = new_time_index(tmp_path, [(100, 1_000), (200, 1_005), (300, 1_009)])
    assert index.entry_before(100) is None
    assert index.entry_before(101) == (100, 1_000)
    assert index.entry_before(200) == (100, 1_000)
    assert index.entry_before(10_000) == (300, 1_009)
    assert index.last_entry() == (300, 1_009)


def test_time_index_file_format_and_reload(tmp_path: Path) -> None:
    index = new_time_index(tmp_path, [(1_700_000_000_000, 1_002)])
    assert index.file.path.read_bytes() == struct.pack(">qi", 1_700_000_000_000, 2)
    index.file.close()
    reloaded = TimeIndex(index.file.path, BASE)
    reloaded.load(max_entries=10)
    assert reloaded.last_entry() == (1_700_000_000_000, 1_002)


def test_time_index_rejects_non_increasing(tmp_path: Path) -> None:
    index = new_time_index(tmp_path, [(100, 1_001)])
    with pytest.raises(ValueError):
        index.append([(100, 1_002)])
    with pytest.raises(ValueError):
        index.append([(150, 1_001)])
    path = tmp_path / "bad.timeindex"
    path.write_bytes(struct.pack(">qiqi", 100, 1, 90, 2))
    with pytest.raises(CorruptIndexError):
        TimeIndex(path, BASE).load(max_entries=10)
    path.write_bytes(b"\x00" * 13)
    with pytest.raises(CorruptIndexError):
        TimeIndex(path, BASE).load(max_entries=10)


def test_time_index_truncate(tmp_path: Path) -> None:
    index = new_time_index(tmp_path, [(100, 1_000), (200, 1_005), (300, 1_009)])
    index.truncate_to(1_005)
    assert index.last_entry() == (100, 1_000)
    assert len(index.file.path.read_bytes()) == 12
    assert index.is_full(12)
    assert not index.is_full(24)
