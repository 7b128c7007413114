"""DiskStorage: agreement with MemoryStorage, recovery from damaged files, and the real core.

Crashes are simulated by making one step of ``write`` raise (everything before it was
fsynced, so the files are what a power cut at that point would leave) and reopening the
directory; no test sleeps or measures time.
"""

# Over 600 lines: DiskStorage's crash and recovery tests, beside the crash helpers they share.
from __future__ import annotations

import logging
import os
import random
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.raft import (
    Entry,
    EntryKind,
    HardState,
    MemoryStorage,
    RaftConfig,
    RaftMessage,
    RaftNode,
    Ready,
    Role,
    Snapshot,
    SnapshotId,
)
from controller.storage import MAX_ENTRY_BYTES, CorruptMetadataStorageError, DiskStorage
from controller.storage import disk_storage as disk_storage_module
from controller.storage.disk_storage import LOCK_FILE, LOG_FILE, QUORUM_STATE_FILE
from controller.storage.formats import (
    FRAME_OVERHEAD,
    LOG_HEADER_SIZE,
    SNAPSHOT_HEADER_SIZE,
    FrameError,
    decode_quorum_state,
    decode_snapshot,
    encode_frame,
    encode_quorum_state,
    encode_snapshot,
    snapshot_file_name,
)
from lograft.protocol.errors import KafkaStorageError, MessageTooLargeError

LOGGER = "controller.storage.recovery"


# --- helpers ----------------------------------------------------------------------------------


def make_ready(
    *,
    hard_state: HardState | None = None,
    snapshot: Snapshot | None = None,
    truncate: int | None = None,
    entries: tuple[Entry, ...] = (),
) -> Ready:
    """A Ready with only the fields storage reads set."""
    return Ready(
        hard_state=hard_state,
        snapshot=snapshot,
        apply_snapshot=False,
        truncate_from_offset=truncate,
        entries=entries,
        messages=(),
        committed_entries=(),
        role=Role.FOLLOWER,
        epoch=0,
        leader_id=None,
        high_watermark=0,
    )


def entries_from(start: int, epochs: list[int]) -> tuple[Entry, ...]:
    """Entries at ``start, start + 1, ...`` with the given epochs and recognisable data."""
    return tuple(
        Entry(start + i, epoch, f"e{start + i}@{epoch}".encode()) for i, epoch in enumerate(epochs)
    )


def assert_same(disk: DiskStorage, mem: MemoryStorage) -> None:
    """Every Storage read agrees (including which reads raise)."""
    assert disk.hard_state() == mem.hard_state()
    assert disk.snapshot() == mem.snapshot()
    assert disk.snapshot_id() == (None if mem.snapshot() is None else mem.snapshot().id)  # type: ignore[union-attr]
    start, end = mem.log_start_offset(), mem.log_end_offset()
    assert (disk.log_start_offset(), disk.log_end_offset()) == (start, end)
    for offset in range(start - 1, end):
        if offset >= 0 or start == 0:
            assert disk.epoch_at(offset) == mem.epoch_at(offset)
    for bad in (end, start - 2):
        if bad >= 0:
            with pytest.raises(IndexError):
                mem.epoch_at(bad)
            with pytest.raises(IndexError):
                disk.epoch_at(bad)
    assert list(disk.entries(start, end)) == list(mem.entries(start, end))
    mid = (start + end) // 2
    assert list(disk.entries(mid, end)) == list(mem.entries(mid, end))
    with pytest.raises(IndexError):
        disk.entries(start, end + 1)


def assert_disk_consistent(disk: DiskStorage) -> None:
    """No temporaries left, ``size_bytes`` matches the files, at most two snapshots kept."""
    names = set(os.listdir(disk.directory))
    assert not [n for n in names if n.endswith(".tmp")]
    sizes = sum((disk.directory / n).stat().st_size for n in names if n != LOCK_FILE)
    quorum = (disk.directory / QUORUM_STATE_FILE).stat().st_size
    assert disk.size_bytes() == sizes - quorum
    assert len([n for n in names if n.endswith(".checkpoint")]) <= 2
    snap = disk.snapshot()
    if snap is not None:
        assert snapshot_file_name(snap.end_offset, snap.epoch) in names


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    """A metadata log directory that does not exist yet."""
    return tmp_path / "__cluster_metadata-0"


@pytest.fixture
def opened(store_dir: Path) -> Iterator[DiskStorage]:
    """A fresh DiskStorage, closed after the test."""
    storage = DiskStorage.open(store_dir)
    yield storage
    storage.close()


def reopen(storage: DiskStorage) -> DiskStorage:
    """Close (writes nothing: like a crash once ``write`` has returned) and open again."""
    storage.close()
    return DiskStorage.open(storage.directory)


class Crash(Exception):
    """Stands for a power cut at an injected point."""


def fill(storage: DiskStorage, mem: MemoryStorage, ready: Ready) -> None:
    """Write ``ready`` to both stores."""
    storage.write(ready)
    mem.write(ready)


# --- property: DiskStorage == MemoryStorage ------------------------------------------------------


@st.composite
def random_ready(draw: st.DrawFn, mem: MemoryStorage) -> Ready:
    """A Ready valid for ``mem``: hard state, snapshot, truncation and appends at random."""
    hs = mem.hard_state()
    hard_state = None
    if draw(st.booleans()):
        epoch = hs.epoch + draw(st.integers(0, 2))
        hard_state = HardState(epoch, draw(st.none() | st.integers(0, 4)))
    start, end = mem.log_start_offset(), mem.log_end_offset()
    snapshot = None
    if draw(st.integers(0, 3)) == 0:
        if end > start and draw(st.integers(0, 3)) > 0:
            snap_end = draw(st.integers(start + 1, end))
        else:
            snap_end = draw(st.integers(max(0, start - 1), end + 3))
        if start < snap_end <= end and draw(st.integers(0, 3)) > 0:
            epoch = mem.epoch_at(snap_end - 1)  # a local snapshot: continues the log
        else:
            epoch = draw(st.integers(0, 6))  # installed from a leader (or older: ignored)
        snapshot = Snapshot(snap_end, epoch, draw(st.binary(max_size=40)))
    probe = mem.copy()
    if snapshot is not None:
        probe.save_snapshot(snapshot)
    start, end = probe.log_start_offset(), probe.log_end_offset()
    truncate = None
    if draw(st.integers(0, 3)) == 0:
        truncate = draw(st.integers(start, end + 1))
        probe.truncate_from(truncate)
    count = draw(st.integers(0, 4))
    base = probe.log_end_offset()
    entries = tuple(
        Entry(
            base + i,
            draw(st.integers(1, 6)),
            draw(st.binary(max_size=24)),
            draw(st.sampled_from(list(EntryKind))),
        )
        for i in range(count)
    )
    return make_ready(hard_state=hard_state, snapshot=snapshot, truncate=truncate, entries=entries)


@settings(
    max_examples=80,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.data())
def test_disk_storage_agrees_with_memory_storage(data: st.DataObject) -> None:
    """Same random Readies and reopen cycles: every Storage read agrees, files stay tidy."""
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "meta"
        mem = MemoryStorage()
        disk = DiskStorage.open(directory)
        try:
            for _ in range(data.draw(st.integers(1, 40), label="steps")):
                if data.draw(st.integers(0, 5), label="reopen?") == 0:
                    disk = reopen(disk)
                else:
                    ready = data.draw(random_ready(mem), label="ready")
                    mem.write(ready)
                    disk.write(ready)
                assert_same(disk, mem)
                assert_disk_consistent(disk)
            disk = reopen(disk)
            assert_same(disk, mem)
        finally:
            disk.close()


# --- basics ------------------------------------------------------------------------------------


def test_new_directory_is_initialised_and_reopens_empty(store_dir: Path) -> None:
    with DiskStorage.open(store_dir) as storage:
        assert storage.hard_state() == HardState(0, None)
        assert storage.snapshot() is None and storage.snapshot_id() is None
        assert (storage.log_start_offset(), storage.log_end_offset()) == (0, 0)
        assert storage.epoch_at(-1) == 0
        assert storage.directory == store_dir
    assert {QUORUM_STATE_FILE, LOG_FILE} <= set(os.listdir(store_dir))
    with DiskStorage.open(store_dir) as storage:
        assert storage.log_end_offset() == 0
        assert storage.size_bytes() == LOG_HEADER_SIZE


def test_vote_and_entries_survive_reopen(opened: DiskStorage) -> None:
    mem = MemoryStorage()
    fill(opened, mem, make_ready(hard_state=HardState(3, 2), entries=entries_from(0, [1, 2, 3])))
    fill(opened, mem, make_ready(truncate=2, entries=entries_from(2, [3, 3])))
    storage = reopen(opened)
    try:
        assert_same(storage, mem)
        assert storage.hard_state() == HardState(3, 2)
        raw = (storage.directory / QUORUM_STATE_FILE).read_bytes()
        assert decode_quorum_state(raw, "x") == HardState(3, 2)
    finally:
        storage.close()


def test_write_without_anything_to_persist_does_no_io(
    opened: DiskStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    ready = make_ready()
    assert not ready.must_sync

    def no_io(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"I/O during a Ready with nothing to persist: {args}")

    for name in ("open", "pwrite", "write", "fsync", "fdatasync", "replace", "ftruncate"):
        monkeypatch.setattr(os, name, no_io)
    monkeypatch.setattr("builtins.open", no_io)
    opened.write(ready)


# Over 70 lines: fakes six file operations, then checks three writes' traces in order.
def test_write_makes_each_step_durable_in_the_core_order(
    opened: DiskStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Snapshot file, then log (written and synced), then old checkpoints, then the vote."""
    mem = two_snapshots(opened)
    fill(opened, mem, make_ready(entries=entries_from(6, [2])))
    trace: list[str] = []
    real_atomic, real_fsync, real_fdatasync = (
        disk_storage_module.write_file_atomically,
        os.fsync,
        os.fdatasync,
    )
    real_pwrite, real_ftruncate, real_unlink = os.pwrite, os.ftruncate, os.unlink

    def atomic(path: Path, data: bytes) -> None:
        trace.append(f"atomic {path.name}")
        real_atomic(path, data)
        # Its own temp-file write, fsync, rename and directory fsync are not traced.
        del trace[trace.index(f"atomic {path.name}") + 1 :]

    def pwrite(fd: int, data: memoryview, position: int) -> int:
        trace.append(f"pwrite {fd}")
        return real_pwrite(fd, data, position)

    def ftruncate(fd: int, size: int) -> None:
        trace.append(f"ftruncate {fd}")
        real_ftruncate(fd, size)

    def fsync(fd: int) -> None:
        trace.append(f"fsync {fd}")
        real_fsync(fd)

    def fdatasync(fd: int) -> None:
        trace.append(f"fdatasync {fd}")
        real_fdatasync(fd)

    def unlink(path: Path) -> None:
        trace.append(f"unlink {Path(path).name}")
        real_unlink(path)

    monkeypatch.setattr(disk_storage_module, "write_file_atomically", atomic)
    for name, fake in [
        ("pwrite", pwrite),
        ("ftruncate", ftruncate),
        ("fsync", fsync),
        ("fdatasync", fdatasync),
        ("unlink", unlink),
    ]:
        monkeypatch.setattr(os, name, fake)

    # Appends alone: one pwrite, one fdatasync of the log, nothing else.
    fill(opened, mem, make_ready(entries=entries_from(7, [2, 2])))
    (log_fd,) = {int(t.split()[1]) for t in trace}
    assert trace == [f"pwrite {log_fd}", f"fdatasync {log_fd}"]
    # A truncation and an append: cut, write, then one fsync (the size changed).
    trace.clear()
    fill(opened, mem, make_ready(truncate=8, entries=entries_from(8, [3])))
    assert trace == [f"ftruncate {log_fd}", f"pwrite {log_fd}", f"fsync {log_fd}"]
    # Everything at once.
    trace.clear()
    ready = make_ready(
        snapshot=Snapshot(7, 2, b"image@7"),
        truncate=8,
        entries=entries_from(8, [4]),
        hard_state=HardState(4, 3),
    )
    fill(opened, mem, ready)
    assert trace == [
        f"atomic {snapshot_file_name(7, 2)}",
        f"atomic {LOG_FILE}",
        f"unlink {snapshot_file_name(3, 1)}",
        # the directory fsync after the unlink
        trace[3],
        f"atomic {QUORUM_STATE_FILE}",
    ]
    assert trace[3].startswith("fsync ")
    assert_same(opened, mem)


def test_atomic_write_syncs_the_file_then_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        trace.append("fsync dir" if os.path.isdir(f"/proc/self/fd/{fd}") else "fsync file")
        real_fsync(fd)

    def replace(src: Path, dst: Path) -> None:
        trace.append(f"replace {Path(src).name} {Path(dst).name}")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    disk_storage_module.write_file_atomically(tmp_path / "f", b"data")
    assert trace == ["fsync file", "replace f.tmp f", "fsync dir"]
    assert (tmp_path / "f").read_bytes() == b"data"
    assert os.listdir(tmp_path) == ["f"]


def test_invalid_ready_raises_before_any_io(opened: DiskStorage) -> None:
    opened.write(make_ready(entries=entries_from(0, [1, 1])))
    before = (opened.directory / LOG_FILE).read_bytes()
    with pytest.raises(IndexError):
        opened.write(make_ready(hard_state=HardState(9, 1), entries=entries_from(5, [1])))
    with pytest.raises(IndexError):
        opened.write(make_ready(snapshot=Snapshot(1, 1, b"img"), truncate=0))
    assert (opened.directory / LOG_FILE).read_bytes() == before
    assert opened.hard_state() == HardState(0, None)
    assert opened.snapshot() is None
    assert not [n for n in os.listdir(opened.directory) if n.endswith(".checkpoint")]


def test_entry_over_the_size_limit_is_refused(opened: DiskStorage) -> None:
    big = Entry(0, 1, bytes(MAX_ENTRY_BYTES + 1))
    with pytest.raises(MessageTooLargeError):
        opened.write(make_ready(entries=(big,)))
    assert opened.log_end_offset() == 0


def test_second_open_of_the_same_directory_is_refused(opened: DiskStorage) -> None:
    with pytest.raises(KafkaStorageError, match="in use"):
        DiskStorage.open(opened.directory)
    opened.close()
    DiskStorage.open(opened.directory).close()


def test_write_after_close_or_io_failure_raises(
    opened: DiskStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    def eio(fd: int) -> None:
        raise OSError(5, "Input/output error")

    with monkeypatch.context() as patch:
        patch.setattr(os, "fdatasync", eio)
        with pytest.raises(KafkaStorageError, match="write failed"):
            opened.write(make_ready(entries=entries_from(0, [1])))
    # After a failed fsync nobody knows what is on disk: refuse until a restart recovers.
    with pytest.raises(KafkaStorageError, match="restart"):
        opened.write(make_ready(entries=entries_from(0, [1])))
    opened.close()
    with pytest.raises(KafkaStorageError, match="closed"):
        opened.write(make_ready(entries=entries_from(0, [1])))


# --- recovery of the log -------------------------------------------------------------------


def six_entries(storage: DiskStorage) -> MemoryStorage:
    mem = MemoryStorage()
    fill(storage, mem, make_ready(hard_state=HardState(2, 1), entries=entries_from(0, [1] * 3)))
    fill(storage, mem, make_ready(entries=entries_from(3, [2] * 3)))
    return mem


def frame_positions(storage: DiskStorage) -> list[int]:
    """Byte positions of the frames, recomputed from the entries' sizes."""
    position, out = LOG_HEADER_SIZE, []
    for entry in storage.entries(storage.log_start_offset(), storage.log_end_offset()):
        out.append(position)
        position += FRAME_OVERHEAD + len(entry.data)
    return out


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_torn_last_frame_is_cut_with_a_warning(
    opened: DiskStorage, caplog: pytest.LogCaptureFixture
) -> None:
    mem = six_entries(opened)
    last = frame_positions(opened)[-1]
    path = opened.directory / LOG_FILE
    opened.close()
    size = path.stat().st_size
    os.truncate(path, size - 3)  # a crash in the middle of the last append
    caplog.set_level(logging.WARNING, logger=LOGGER)
    with DiskStorage.open(opened.directory) as storage:
        assert storage.log_end_offset() == 5
        mem.truncate_from(5)
        assert_same(storage, mem)
        assert path.stat().st_size == last
        # The cut point is where the next append goes: it survives another reopen.
        fill(storage, mem, make_ready(entries=entries_from(5, [3])))
    (message,) = warnings_of(caplog)
    assert f"position={last}" in message and f"bytes_dropped={size - 3 - last}" in message
    assert "reason=torn" in message
    with DiskStorage.open(opened.directory) as storage:
        assert_same(storage, mem)


def test_garbage_after_the_last_frame_is_dropped(
    opened: DiskStorage, caplog: pytest.LogCaptureFixture
) -> None:
    mem = six_entries(opened)
    path = opened.directory / LOG_FILE
    opened.close()
    end = path.stat().st_size
    with open(path, "ab") as handle:
        handle.write(random.Random(7).randbytes(100))
    caplog.set_level(logging.WARNING, logger=LOGGER)
    with DiskStorage.open(opened.directory) as storage:
        assert_same(storage, mem)
        assert path.stat().st_size == end
    (message,) = warnings_of(caplog)
    assert f"dir={opened.directory}" in message
    assert f"position={end} bytes_dropped=100" in message


def test_corrupt_frame_in_the_middle_drops_it_and_everything_after(
    opened: DiskStorage, caplog: pytest.LogCaptureFixture
) -> None:
    mem = six_entries(opened)
    third = frame_positions(opened)[2]
    path = opened.directory / LOG_FILE
    opened.close()
    raw = bytearray(path.read_bytes())
    raw[third + FRAME_OVERHEAD] ^= 0x01  # one bit of the third entry's data
    path.write_bytes(bytes(raw))
    caplog.set_level(logging.WARNING, logger=LOGGER)
    with DiskStorage.open(opened.directory) as storage:
        mem.truncate_from(2)
        assert_same(storage, mem)
        assert path.stat().st_size == third
    (message,) = warnings_of(caplog)
    assert f"position={third} bytes_dropped={len(raw) - third}" in message
    assert "reason=crc_mismatch" in message


@pytest.mark.parametrize(
    ("tail", "reason"),
    [
        (encode_frame(Entry(9, 2, b"skips ahead")), "offset_gap"),
        (encode_frame(Entry(5, 2, b"repeats")), "offset_gap"),
        ((2**31).to_bytes(4, "big") + bytes(40), "bad_length"),
        (bytes(4) + bytes(40), "bad_length"),
    ],
)
def test_frames_that_do_not_continue_the_log_are_dropped(
    opened: DiskStorage, caplog: pytest.LogCaptureFixture, tail: bytes, reason: str
) -> None:
    mem = six_entries(opened)
    path = opened.directory / LOG_FILE
    opened.close()
    with open(path, "ab") as handle:
        handle.write(tail)
    caplog.set_level(logging.WARNING, logger=LOGGER)
    with DiskStorage.open(opened.directory) as storage:
        assert_same(storage, mem)
    (message,) = warnings_of(caplog)
    assert f"reason={reason}" in message


def test_corrupt_log_header_is_fatal(opened: DiskStorage) -> None:
    six_entries(opened)
    path = opened.directory / LOG_FILE
    opened.close()
    raw = bytearray(path.read_bytes())
    raw[10] ^= 0xFF  # inside the base offset: nothing says where the entries belong
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptMetadataStorageError, match="corrupt log header"):
        DiskStorage.open(opened.directory)


def test_stray_temporary_files_are_removed_with_a_warning(
    opened: DiskStorage, caplog: pytest.LogCaptureFixture
) -> None:
    mem = six_entries(opened)
    opened.close()
    for name in (LOG_FILE, QUORUM_STATE_FILE, snapshot_file_name(3, 1)):
        (opened.directory / f"{name}.tmp").write_bytes(b"half written")
    caplog.set_level(logging.WARNING, logger=LOGGER)
    with DiskStorage.open(opened.directory) as storage:
        assert_same(storage, mem)
        assert_disk_consistent(storage)
    assert len([m for m in warnings_of(caplog) if "stray temporary file" in m]) == 3


# --- quorum-state ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "damage",
    [
        lambda raw: raw.replace(b'"leaderEpoch": 7', b'"leaderEpoch": 8'),  # valid JSON, bad CRC
        lambda raw: raw.replace(b'"votedId": 2', b'"votedId": 3'),
        lambda raw: raw[: len(raw) // 2],
        lambda raw: b"",
        lambda raw: b"\xff" * 10,
        lambda raw: b"[]",
        lambda raw: raw.replace(b'"data_version": 1', b'"data_version": 9'),
        lambda raw: b" " * 5000,
    ],
)
def test_corrupt_quorum_state_is_fatal(opened: DiskStorage, damage: object) -> None:
    opened.write(make_ready(hard_state=HardState(7, 2), entries=entries_from(0, [7])))
    opened.close()
    path = opened.directory / QUORUM_STATE_FILE
    damaged = damage(path.read_bytes())  # type: ignore[operator]
    assert damaged != path.read_bytes()
    path.write_bytes(damaged)
    with pytest.raises(KafkaStorageError, match="quorum-state") as info:
        DiskStorage.open(opened.directory)
    assert isinstance(info.value, CorruptMetadataStorageError)
    assert not info.value.retriable
    # The refusal changed nothing: the evidence is still there for an operator.
    assert path.read_bytes() == damaged


def test_missing_quorum_state_next_to_a_log_is_fatal(opened: DiskStorage) -> None:
    opened.write(make_ready(hard_state=HardState(4, 4)))
    opened.close()
    (opened.directory / QUORUM_STATE_FILE).unlink()
    with pytest.raises(CorruptMetadataStorageError, match="quorum-state missing"):
        DiskStorage.open(opened.directory)


def test_quorum_state_round_trips_and_rejects_booleans() -> None:
    for state in (HardState(0, None), HardState(2**31 - 1, 0), HardState(5, 3)):
        assert decode_quorum_state(encode_quorum_state(state), "x") == state
    raw = encode_quorum_state(HardState(1, 1)).replace(b'"votedId": 1', b'"votedId": true')
    with pytest.raises(CorruptMetadataStorageError):
        decode_quorum_state(raw, "x")


# --- snapshots ---------------------------------------------------------------------------------


def two_snapshots(storage: DiskStorage) -> MemoryStorage:
    """Six entries, then local snapshots at 3 and at 5 (each continuing the log)."""
    mem = six_entries(storage)
    fill(storage, mem, make_ready(snapshot=Snapshot(3, 1, b"image@3")))
    fill(storage, mem, make_ready(snapshot=Snapshot(5, 2, b"image@5")))
    return mem


def test_local_snapshots_keep_the_previous_one_and_the_log_from_its_end(
    opened: DiskStorage,
) -> None:
    mem = two_snapshots(opened)
    assert_same(opened, mem)
    names = sorted(n for n in os.listdir(opened.directory) if n.endswith(".checkpoint"))
    assert names == [snapshot_file_name(3, 1), snapshot_file_name(5, 2)]
    assert opened.snapshot_id() == SnapshotId(5, 2)
    fill(opened, mem, make_ready(entries=entries_from(6, [2, 2])))
    fill(opened, mem, make_ready(snapshot=Snapshot(7, 2, b"image@7")))
    names = sorted(n for n in os.listdir(opened.directory) if n.endswith(".checkpoint"))
    assert names == [snapshot_file_name(5, 2), snapshot_file_name(7, 2)]
    assert_disk_consistent(opened)
    storage = reopen(opened)
    try:
        assert_same(storage, mem)
    finally:
        storage.close()


def test_corrupt_newest_snapshot_falls_back_to_the_previous_one(
    opened: DiskStorage, caplog: pytest.LogCaptureFixture
) -> None:
    mem = two_snapshots(opened)
    opened.close()
    newest = opened.directory / snapshot_file_name(5, 2)
    raw = bytearray(newest.read_bytes())
    raw[-1] ^= 0x80
    newest.write_bytes(bytes(raw))
    caplog.set_level(logging.WARNING, logger=LOGGER)
    with DiskStorage.open(opened.directory) as storage:
        assert storage.snapshot() == Snapshot(3, 1, b"image@3")
        # Nothing is lost: the log still holds every entry since the older snapshot.
        assert list(storage.entries(3, 6)) == list(entries_from(3, [2] * 3))
        assert storage.log_end_offset() == mem.log_end_offset()
        # The next snapshot replaces the corrupt file.
        storage.write(make_ready(snapshot=Snapshot(6, 2, b"image@6")))
        names = sorted(n for n in os.listdir(opened.directory) if n.endswith(".checkpoint"))
        assert names == [snapshot_file_name(3, 1), snapshot_file_name(6, 2)]
    (message,) = warnings_of(caplog)
    assert "corrupt snapshot" in message and "reason=crc_mismatch" in message


def test_corrupt_only_snapshot_with_the_log_from_zero_falls_back_to_no_snapshot(
    opened: DiskStorage,
) -> None:
    mem = six_entries(opened)
    opened.write(make_ready(snapshot=Snapshot(4, 2, b"img")))
    opened.close()
    path = opened.directory / snapshot_file_name(4, 2)
    path.write_bytes(path.read_bytes()[:-1])  # size no longer matches the header
    with DiskStorage.open(opened.directory) as storage:
        assert_same(storage, mem)  # the whole log from offset 0, no snapshot


def test_corrupt_installed_snapshot_with_nothing_to_fall_back_on_is_fatal(
    opened: DiskStorage,
) -> None:
    mem = six_entries(opened)
    # From the leader, covering more than our log: the log restarts at 20.
    fill(opened, mem, make_ready(snapshot=Snapshot(20, 4, b"leader image"), truncate=20))
    fill(opened, mem, make_ready(entries=entries_from(20, [4])))
    storage = reopen(opened)
    assert_same(storage, mem)
    storage.close()
    path = opened.directory / snapshot_file_name(20, 4)
    path.write_bytes(b"LRSN" + bytes(10))
    with pytest.raises(CorruptMetadataStorageError, match="no valid snapshot"):
        DiskStorage.open(opened.directory)


def test_snapshot_decoder_rejects_lies() -> None:
    good = encode_snapshot(Snapshot(5, 2, b"abc"))
    assert decode_snapshot(good, 5, 2) == Snapshot(5, 2, b"abc")
    with pytest.raises(FrameError, match="name_mismatch"):
        decode_snapshot(good, 6, 2)
    huge = bytearray(good)
    huge[20:24] = (2**31).to_bytes(4, "big")  # the length field
    with pytest.raises(FrameError, match="too_large"):
        decode_snapshot(bytes(huge), 5, 2)
    with pytest.raises(FrameError, match="short_header"):
        decode_snapshot(good[: SNAPSHOT_HEADER_SIZE - 1], 5, 2)


# --- crashes inside write ----------------------------------------------------------------------


def crash_when_writing(monkeypatch: pytest.MonkeyPatch, target: str) -> None:
    """Make the atomic write of file ``target`` crash before it starts."""
    real = disk_storage_module.write_file_atomically

    def crashing(path: Path, data: bytes) -> None:
        if path.name == target:
            raise Crash(path.name)
        real(path, data)

    monkeypatch.setattr(disk_storage_module, "write_file_atomically", crashing)


def test_crash_after_snapshot_before_log_rewrite_recovers_the_new_snapshot(
    opened: DiskStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    mem = two_snapshots(opened)
    fill(opened, mem, make_ready(entries=entries_from(6, [2, 2])))
    ready = make_ready(snapshot=Snapshot(7, 2, b"image@7"), hard_state=HardState(3, None))
    with monkeypatch.context() as patch:
        crash_when_writing(patch, LOG_FILE)
        with pytest.raises(Crash):
            opened.write(ready)
    opened.close()
    with DiskStorage.open(opened.directory) as storage:
        # The snapshot is durable; the vote (written last) is not; entries 7.. still serve.
        mem.save_snapshot(ready.snapshot)  # type: ignore[arg-type]
        assert_same(storage, mem)
        # Three checkpoints linger until the next snapshot tidies up.
        storage.write(make_ready(snapshot=Snapshot(8, 2, b"image@8")))
        mem.save_snapshot(Snapshot(8, 2, b"image@8"))
        assert_same(storage, mem)
        assert_disk_consistent(storage)


def test_crash_after_installed_snapshot_before_log_reset(
    opened: DiskStorage, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The snapshot's end lies inside our log but our entry there has another epoch."""
    mem = six_entries(opened)  # epochs 1 1 1 2 2 2
    installed = Snapshot(5, 3, b"leader image")  # the leader's entry 4 had epoch 3
    with monkeypatch.context() as patch:
        crash_when_writing(patch, LOG_FILE)
        with pytest.raises(Crash):
            opened.write(make_ready(snapshot=installed, truncate=5))
    opened.close()
    caplog.set_level(logging.WARNING, logger=LOGGER)
    with DiskStorage.open(opened.directory) as storage:
        # Entry 5 followed our (uncommitted) entry 4, not the leader's: it must not be served.
        mem.write(make_ready(snapshot=installed, truncate=5))
        assert_same(storage, mem)
        assert (storage.log_start_offset(), storage.log_end_offset()) == (5, 5)
    assert any("does not continue snapshot" in m for m in warnings_of(caplog))


def test_crash_after_snapshot_beyond_the_log_resets_it(
    opened: DiskStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    mem = six_entries(opened)
    installed = Snapshot(40, 5, b"leader image")
    with monkeypatch.context() as patch:
        crash_when_writing(patch, LOG_FILE)
        with pytest.raises(Crash):
            opened.write(make_ready(snapshot=installed, truncate=40))
    opened.close()
    with DiskStorage.open(opened.directory) as storage:
        mem.write(make_ready(snapshot=installed, truncate=40))
        assert_same(storage, mem)
        fill(storage, mem, make_ready(entries=entries_from(40, [5])))
    with DiskStorage.open(opened.directory) as storage:
        assert_same(storage, mem)


def test_crash_after_log_rewrite_before_old_snapshots_are_deleted(
    opened: DiskStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    mem = two_snapshots(opened)
    ready = make_ready(snapshot=Snapshot(6, 2, b"image@6"))

    def crashing_unlink(path: object) -> None:
        raise Crash(str(path))

    with monkeypatch.context() as patch:
        patch.setattr(os, "unlink", crashing_unlink)
        with pytest.raises(Crash):
            opened.write(ready)
    opened.close()
    with DiskStorage.open(opened.directory) as storage:
        mem.write(ready)
        assert_same(storage, mem)


def test_log_rewritten_but_new_snapshot_lost_falls_back_without_losing_entries(
    opened: DiskStorage,
) -> None:
    """The other order: as if the log were rewritten and the new checkpoint never landed."""
    mem = two_snapshots(opened)
    opened.close()
    (opened.directory / snapshot_file_name(5, 2)).unlink()
    with DiskStorage.open(opened.directory) as storage:
        assert storage.snapshot_id() == SnapshotId(3, 1)
        assert storage.log_end_offset() == mem.log_end_offset()
        assert list(storage.entries(5, 6)) == list(mem.entries(5, 6))


def test_log_reset_but_installed_snapshot_lost_is_fatal(opened: DiskStorage) -> None:
    six_entries(opened)
    opened.write(make_ready(snapshot=Snapshot(20, 4, b"leader image"), truncate=20))
    opened.close()
    (opened.directory / snapshot_file_name(20, 4)).unlink()
    with pytest.raises(CorruptMetadataStorageError, match="base_offset=20"):
        DiskStorage.open(opened.directory)


# --- with the real Raft core -------------------------------------------------------------------

CLUSTER = "disk"
TIMEOUT = 10
AnyStorage = MemoryStorage | DiskStorage


class Cluster:
    """Three RaftNodes on a perfect in-memory network; node 1 keeps its state on disk."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.stores: dict[int, AnyStorage] = {
            1: DiskStorage.open(directory),
            2: MemoryStorage(),
            3: MemoryStorage(),
        }
        self.nodes = {i: self._node(i) for i in self.stores}
        self.applied: dict[int, list[Entry]] = {i: [] for i in self.stores}
        self.down: set[int] = set()

    def _node(self, node_id: int) -> RaftNode:
        config = RaftConfig(
            node_id=node_id,
            cluster_id=CLUSTER,
            voters=frozenset(self.stores),
            election_timeout_ticks=TIMEOUT,
        )
        rng, logger = random.Random(node_id), logging.getLogger("controller.raft")
        return RaftNode(config, self.stores[node_id], rng, logger)

    def restart_disk_node(self) -> RaftNode:
        """Drop node 1's in-memory state and rebuild it from its directory."""
        store = self.stores[1]
        assert isinstance(store, DiskStorage)
        store.close()
        self.stores[1] = DiskStorage.open(self.directory)
        self.nodes[1] = self._node(1)
        self.applied[1] = []  # the application restarts from the snapshot's image
        return self.nodes[1]

    def flush(self) -> None:
        for _ in range(10_000):
            pending: list[RaftMessage] = []
            for i, node in self.nodes.items():
                while node.has_ready():
                    ready = node.ready()
                    self.stores[i].write(ready)
                    pending.extend(ready.messages)
                    self.applied[i].extend(ready.committed_entries)
                    node.advance(ready)
            pending = [m for m in pending if m.src not in self.down and m.dst not in self.down]
            if not pending:
                return
            for m in pending:
                self.nodes[m.dst].step(m)
        raise AssertionError("messages never stopped")

    def tick_until(
        self, done: Callable[[], bool], only: set[int] | None = None, limit: int = 50 * TIMEOUT
    ) -> None:
        for _ in range(limit):
            if done():
                return
            for i, node in self.nodes.items():
                if i not in self.down and (only is None or i in only):
                    node.tick()
            self.flush()
        raise AssertionError("condition never held")

    def leader(self) -> RaftNode | None:
        leaders = [n for i, n in self.nodes.items() if n.role is Role.LEADER and i not in self.down]
        return leaders[0] if len(leaders) == 1 else None

    def close(self) -> None:
        store = self.stores[1]
        assert isinstance(store, DiskStorage)
        store.close()


def data_of(entries: list[Entry]) -> list[bytes]:
    return [e.data for e in entries if e.kind is EntryKind.DATA]


def test_node_on_disk_restarts_and_rejoins_with_log_and_vote_intact(store_dir: Path) -> None:
    cluster = Cluster(store_dir)
    try:
        cluster.tick_until(lambda: cluster.leader() is not None)
        leader = cluster.leader()
        assert leader is not None
        for i in range(5):
            leader.propose(f"before-{i}".encode())
        cluster.flush()
        cluster.tick_until(lambda: all(len(data_of(a)) == 5 for a in cluster.applied.values()))

        # The node on disk takes a snapshot of what it applied, then more entries arrive.
        node1 = cluster.nodes[1]
        node1.create_snapshot(
            node1.applied_offset, b"image of " + str(node1.applied_offset).encode()
        )
        cluster.flush()
        leader = cluster.leader()
        assert leader is not None
        for i in range(3):
            leader.propose(f"middle-{i}".encode())
        cluster.flush()

        before = (node1.epoch, node1.voted_for, node1.log_end_offset, node1.snapshot())
        persisted = list(node1.entries(node1.log_start_offset, node1.log_end_offset))
        restarted = cluster.restart_disk_node()
        assert (
            restarted.epoch,
            restarted.voted_for,
            restarted.log_end_offset,
            restarted.snapshot(),
        ) == before
        assert (
            list(restarted.entries(restarted.log_start_offset, restarted.log_end_offset))
            == persisted
        )

        # It rejoins: new entries reach it and it applies everything after its snapshot.
        cluster.tick_until(lambda: cluster.leader() is not None)
        leader = cluster.leader()
        assert leader is not None
        leader.propose(b"after")
        cluster.flush()
        cluster.tick_until(lambda: b"after" in data_of(cluster.applied[1]))
        snapshot = restarted.snapshot()
        assert snapshot is not None
        other = cluster.stores[2]
        tail = list(other.entries(snapshot.end_offset, other.log_end_offset()))
        assert data_of(cluster.applied[1]) == data_of(tail)
        assert data_of(tail)[-4:] == [b"middle-0", b"middle-1", b"middle-2", b"after"]
    finally:
        cluster.close()


def test_vote_cast_by_the_disk_node_survives_its_restart(store_dir: Path) -> None:
    """Raft Figure 2: votedFor is on stable storage before the grant is sent."""
    cluster = Cluster(store_dir)
    try:
        # Only node 1 ticks, so it campaigns and votes for itself (then wins).
        cluster.tick_until(lambda: cluster.nodes[1].role is Role.LEADER, only={1})
        epoch = cluster.nodes[1].epoch
        cluster.down.add(1)
        restarted = cluster.restart_disk_node()
        assert restarted.epoch == epoch and restarted.voted_for == 1
        assert cluster.stores[1].hard_state() == HardState(epoch, 1)
        cluster.down.clear()
        cluster.tick_until(lambda: cluster.leader() is not None)
        leader = cluster.leader()
        assert leader is not None
        leader.propose(b"x")
        cluster.flush()
        cluster.tick_until(lambda: b"x" in data_of(cluster.applied[1]))
    finally:
        cluster.close()
