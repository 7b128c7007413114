"""LazyFS, the power-loss file system (chaos/lazyfs): a crash keeps what was fsynced and drops
the rest, writes and directory changes alike; a real node on it keeps every record it
acknowledged under the default flush policy, and loses acknowledged records under
``log.flush.policy=interval``, the documented trade.

The model tests (``LazyStore``) need nothing; the mount tests need ``/dev/fuse`` and are
skipped without it, unless ``LOGRAFT_REQUIRE_FUSE=1`` (then they fail).
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from chaos.lazyfs import LazyFS, LazyStore, fuse_available
from chaos.lazyfs.store import PAGE_SIZE, RENAME_EXCHANGE, RENAME_NOREPLACE, Unsynced
from cluster.halt import LOG_DIR_FAILURE_EXIT_CODE
from lograft.protocol.errors import KafkaStorageError
from lograft.protocol.records import encode_batch
from lograft.protocol.topic_config import LogConfig
from lograft.protocol.wire import broker_pb2_grpc as pb_grpc
from replica.log.partition_log import PartitionLog
from tests.integration.nodes import NodeProcess, wait_until
from tests.integration.wire_helpers import create_topic, fetch_all, produce
from tests.unit.log_fixtures import append_values, headers_of

pytestmark = pytest.mark.integration

needs_fuse = pytest.mark.skipif(
    not fuse_available() and os.environ.get("LOGRAFT_REQUIRE_FUSE") != "1",
    reason="no /dev/fuse here (LOGRAFT_REQUIRE_FUSE=1 makes this a failure)",
)


def fsync_path(path: Path) -> None:
    """fsync a file or a directory by name."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file(path: Path, data: bytes, *, sync: bool = False) -> None:
    with open(path, "wb") as file:
        file.write(data)
        file.flush()
        if sync:
            os.fsync(file.fileno())


# -- the model, without FUSE -------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Iterator[LazyStore]:
    lazy = LazyStore(tmp_path / "backing")
    try:
        yield lazy
    finally:
        lazy.close(sync=False)


def new_file(store: LazyStore, path: str, data: bytes = b"", *, sync: bool = False) -> None:
    fh = store.create(path, 0o644, os.O_WRONLY, 0, 0)
    store.write(fh, data, 0)
    if sync:
        store.fsync(fh)
    store.release(fh)


def content(store: LazyStore, path: str) -> bytes:
    fh = store.open(path, os.O_RDONLY)
    try:
        return store.read(fh, 1 << 30, 0)
    finally:
        store.release(fh)


def sync_dir(store: LazyStore, path: str) -> None:
    fh = store.opendir(path)
    store.fsyncdir(fh)
    store.releasedir(fh)


def names(store: LazyStore, path: str) -> set[str]:
    fh = store.opendir(path)
    try:
        return {e.name for e in store.readdir(fh)} - {".", ".."}
    finally:
        store.releasedir(fh)


def test_random_writes_truncates_and_syncs_match_a_simple_model(store: LazyStore) -> None:
    """One file, a thousand random steps: what reads see is the live bytes; after each
    crash, exactly the bytes of the last fsync (the pages' edges are where bugs hide)."""
    rng = random.Random(12)
    new_file(store, "/f", sync=True)
    sync_dir(store, "/")
    live, durable = bytearray(), b""
    fh = store.open("/f", os.O_RDWR)
    for step in range(1000):
        action = rng.choice(["write", "write", "write", "truncate", "fsync", "crash", "read"])
        if action == "write":
            offset = rng.choice([len(live), rng.randrange(0, 3 * PAGE_SIZE)])
            data = rng.randbytes(rng.choice([1, 100, PAGE_SIZE - 1, PAGE_SIZE, 2 * PAGE_SIZE + 7]))
            store.write(fh, data, offset)
            if offset > len(live):
                live.extend(bytes(offset - len(live)))
            live[offset : offset + len(data)] = data
        elif action == "truncate":
            length = rng.randrange(0, 3 * PAGE_SIZE)
            store.truncate(None, length, fh)
            live = live[:length] if length <= len(live) else live + bytes(length - len(live))
        elif action == "fsync":
            store.fsync(fh)
            durable = bytes(live)
        elif action == "crash":
            store.crash()
            live = bytearray(durable)
            fh = store.open("/f", os.O_RDWR)
            assert (store.backing / "f").read_bytes() == durable, f"step {step}"
        assert store.getattr(None, fh).size == len(live), f"step {step}"
        offset = rng.randrange(0, len(live) + 1)
        size = rng.randrange(0, 3 * PAGE_SIZE)
        assert store.read(fh, size, offset) == bytes(live[offset : offset + size]), f"step {step}"


def test_directory_entries_are_durable_only_after_the_directory_is_fsynced(
    store: LazyStore,
) -> None:
    new_file(store, "/kept", b"k", sync=True)
    sync_dir(store, "/")
    store.mkdir("/d", 0o755, 0, 0)
    new_file(store, "/d/inner", b"i", sync=True)
    sync_dir(store, "/d")  # the directory's own entries, but /d itself is not in / yet
    store.link("/hard", "/kept")
    store.symlink("/sym", "kept", 0, 0)
    store.crash()
    assert names(store, "/") == {"kept"}

    store.mkdir("/d", 0o755, 0, 0)
    new_file(store, "/d/inner", b"i", sync=True)
    sync_dir(store, "/d")
    store.link("/hard", "/kept")
    store.symlink("/sym", "kept", 0, 0)
    sync_dir(store, "/")
    store.unlink("/kept")
    store.crash()
    assert names(store, "/") == {"kept", "d", "hard", "sym"}
    assert names(store, "/d") == {"inner"}
    assert content(store, "/hard") == b"k"
    assert store.readlink("/sym") == "kept"
    assert (store.backing / "hard").stat().st_ino == (store.backing / "kept").stat().st_ino


def test_a_durable_entry_names_what_its_inode_had_synced(store: LazyStore) -> None:
    """fsync of the directory makes the name durable, not the data written after the
    file's own last fsync."""
    fh = store.create("/f", 0o644, os.O_WRONLY, 0, 0)
    store.write(fh, b"synced", 0)
    store.fsync(fh)
    store.write(fh, b"-and-then-more", 6)
    sync_dir(store, "/")
    store.release(fh)
    store.crash()
    assert content(store, "/f") == b"synced"


def test_rename_flags_and_directory_moves(store: LazyStore) -> None:
    for name in ("a", "b"):
        store.mkdir(f"/{name}", 0o755, 0, 0)
        new_file(store, f"/{name}/x", name.encode(), sync=True)
        sync_dir(store, f"/{name}")
    sync_dir(store, "/")
    with pytest.raises(OSError) as refused:
        store.rename("/a", "/b", RENAME_NOREPLACE)
    assert refused.value.errno == errno.EEXIST
    with pytest.raises(OSError) as into_itself:
        store.rename("/a", "/a/sub")
    assert into_itself.value.errno == errno.EINVAL
    store.rename("/a", "/b", RENAME_EXCHANGE)
    assert content(store, "/a/x") == b"b"
    store.crash()
    assert content(store, "/a/x") == b"a"

    store.rename("/a", "/b", RENAME_EXCHANGE)
    sync_dir(store, "/")
    store.crash()
    assert content(store, "/a/x") == b"b"

    # A directory moved into another, then that one fsynced: it is there after a crash.
    store.mkdir("/c", 0o755, 0, 0)
    sync_dir(store, "/")
    store.rename("/a", "/c/moved")
    sync_dir(store, "/c")
    store.crash()
    assert content(store, "/c/moved/x") == b"b"
    assert names(store, "/") == {"b", "c"}


def test_a_directory_moved_into_its_former_child_stays_reachable_once_synced(
    store: LazyStore,
) -> None:
    store.mkdir("/p", 0o755, 0, 0)
    store.mkdir("/p/q", 0o755, 0, 0)
    sync_dir(store, "/p")
    sync_dir(store, "/")
    store.rename("/p/q", "/q")
    store.rename("/p", "/q/p")
    store.sync_all()
    store.crash()
    assert names(store, "/") == {"q"}
    assert names(store, "/q") == {"p"}


# -- the mount ---------------------------------------------------------------------------


@pytest.fixture
def lazyfs(tmp_path: Path) -> Iterator[LazyFS]:
    with LazyFS(tmp_path / "backing", tmp_path / "mnt") as mounted:
        yield mounted


@needs_fuse
def test_fsynced_data_survives_a_crash_and_unsynced_data_is_lost(lazyfs: LazyFS) -> None:
    mnt = lazyfs.mountpoint
    write_file(mnt / "f", b"durable", sync=True)
    fsync_path(mnt)
    with open(mnt / "f", "ab") as file:
        file.write(b"+lost")
    assert (mnt / "f").read_bytes() == b"durable+lost"
    assert lazyfs.status().unsynced_bytes == len(b"+lost")

    dropped = lazyfs.crash()

    assert dropped.unsynced_bytes == len(b"+lost")
    assert (mnt / "f").read_bytes() == b"durable"
    assert (lazyfs.backing / "f").read_bytes() == b"durable"


@needs_fuse
def test_a_created_and_fsynced_file_disappears_unless_its_directory_was_fsynced(
    lazyfs: LazyFS,
) -> None:
    mnt = lazyfs.mountpoint
    write_file(mnt / "orphan", b"data", sync=True)
    (mnt / "dir").mkdir()
    lazyfs.crash()
    assert sorted(os.listdir(mnt)) == []

    write_file(mnt / "kept", b"data", sync=True)
    fsync_path(mnt)
    lazyfs.crash()
    assert os.listdir(mnt) == ["kept"]
    assert (mnt / "kept").read_bytes() == b"data"


@needs_fuse
def test_rename_unlink_and_rmdir_without_a_directory_fsync_are_rolled_back(
    lazyfs: LazyFS,
) -> None:
    mnt = lazyfs.mountpoint
    (mnt / "d").mkdir()
    write_file(mnt / "old", b"old", sync=True)
    write_file(mnt / "gone", b"gone", sync=True)
    fsync_path(mnt)
    os.rename(mnt / "old", mnt / "new")
    fsync_path(mnt / "new")  # the file, not its directory
    os.unlink(mnt / "gone")
    os.rmdir(mnt / "d")
    assert sorted(os.listdir(mnt)) == ["new"]

    lazyfs.crash()

    assert sorted(os.listdir(mnt)) == ["d", "gone", "old"]
    assert (mnt / "old").read_bytes() == b"old"

    os.rename(mnt / "old", mnt / "new")
    fsync_path(mnt)
    lazyfs.crash()
    assert sorted(os.listdir(mnt)) == ["d", "gone", "new"]


@needs_fuse
def test_truncate_is_durable_only_after_an_fsync_of_the_file(lazyfs: LazyFS) -> None:
    mnt = lazyfs.mountpoint
    write_file(mnt / "f", b"0123456789" * 10, sync=True)
    fsync_path(mnt)
    os.truncate(mnt / "f", 10)
    lazyfs.crash()
    assert (mnt / "f").read_bytes() == b"0123456789" * 10

    with open(mnt / "f", "r+b") as file:
        file.truncate(10)
        file.seek(50)
        file.write(b"end")
        file.flush()
        assert (mnt / "f").read_bytes() == b"0123456789" + bytes(40) + b"end"
        os.fsync(file.fileno())
    lazyfs.crash()
    assert (mnt / "f").read_bytes() == b"0123456789" + bytes(40) + b"end"


@needs_fuse
def test_open_files_keep_working_when_renamed_or_unlinked(lazyfs: LazyFS) -> None:
    mnt = lazyfs.mountpoint
    fd = os.open(mnt / "segment.log", os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, b"before")
        os.rename(mnt / "segment.log", mnt / "segment.log.deleted")
        os.write(fd, b"-after")
        os.fdatasync(fd)
        fsync_path(mnt)
    finally:
        os.close(fd)
    fd = os.open(mnt / "scratch", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.unlink(mnt / "scratch")
        os.write(fd, b"still here")
        os.ftruncate(fd, 5)
        assert os.pread(fd, 100, 0) == b"still"
    finally:
        os.close(fd)
    lazyfs.crash()
    assert os.listdir(mnt) == ["segment.log.deleted"]
    assert (mnt / "segment.log.deleted").read_bytes() == b"before-after"


@needs_fuse
def test_a_handle_open_across_the_crash_is_stale(lazyfs: LazyFS) -> None:
    mnt = lazyfs.mountpoint
    write_file(mnt / "f", b"x", sync=True)
    fsync_path(mnt)
    fd = os.open(mnt / "f", os.O_WRONLY)
    try:
        lazyfs.crash()
        with pytest.raises(OSError) as stale:
            os.write(fd, b"y")
        assert stale.value.errno == errno.EIO
    finally:
        os.close(fd)


@needs_fuse
def test_sigusr1_crashes_and_a_killed_layer_remounts_with_what_was_synced(
    lazyfs: LazyFS,
) -> None:
    mnt = lazyfs.mountpoint
    write_file(mnt / "synced", b"s", sync=True)
    fsync_path(mnt)
    write_file(mnt / "unsynced", b"u")
    assert lazyfs.pid is not None
    os.kill(lazyfs.pid, signal.SIGUSR1)
    wait_until(lambda: lazyfs.status().crashes == 1, 10.0, "the crash by SIGUSR1")
    assert os.listdir(mnt) == ["synced"]

    write_file(mnt / "unsynced", b"u")
    lazyfs.kill()  # the layer itself dies: the same power loss
    lazyfs.mount()
    assert os.listdir(mnt) == ["synced"]
    assert (mnt / "synced").read_bytes() == b"s"


# -- a real node on the mount ------------------------------------------------------------


@dataclass
class NodeOnMount(NodeProcess):
    """A node whose data directory is on the mount and whose log is not (a log on the
    mount would lose its unsynced tail in the crash)."""

    log_dir: Path = Path()

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"node-{self.node_id}.log"


BATCHES = 40
RECORDS_PER_BATCH = 25


def produce_acked(node: NodeProcess, topic: str) -> list[bytes]:
    """Create ``topic`` and produce to it with acks=1; the values acknowledged."""
    acked: list[bytes] = []
    with grpc.insecure_channel(node.address) as channel:
        stub = pb_grpc.BrokerStub(channel)
        create_topic(stub, topic)
        for batch in range(BATCHES):
            values = [f"v-{batch:03d}-{n:02d}".encode() for n in range(RECORDS_PER_BATCH)]
            result = produce(stub, topic, 0, encode_batch(values), acks=1)
            assert result.error_code == 0, result
            acked.extend(values)
    return acked


def stored_values(node: NodeProcess, topic: str) -> list[bytes]:
    with grpc.insecure_channel(node.address) as channel:
        return [r.value or b"" for r in fetch_all(pb_grpc.BrokerStub(channel), topic, 0)]


def interval_flush_node(lazyfs: LazyFS, tmp_path: Path, flush_interval_ms: int) -> NodeOnMount:
    """A node on the mount that acknowledges before flushing (``log.flush.policy=interval``)
    and flushes every ``flush_interval_ms``."""
    return NodeOnMount(
        data_dir=lazyfs.mountpoint / "node-1",
        log_dir=tmp_path,
        configs={
            "log.flush.policy": "interval",
            "log.flush.interval.ms": str(flush_interval_ms),
        },
    )


def power_cycle(node: NodeProcess, lazyfs: LazyFS, topic: str) -> tuple[Unsynced, list[bytes]]:
    """Power loss under a running node, then start it again: what the crash dropped, and
    the values ``topic`` holds after."""
    node.kill()
    dropped = lazyfs.crash()
    assert (node.data_dir / "meta.properties").exists(), "the data directory was lost"
    node.start()
    return dropped, stored_values(node, topic)


@needs_fuse
def test_power_loss_keeps_every_record_acknowledged_under_the_default_flush_policy(
    lazyfs: LazyFS, tmp_path: Path
) -> None:
    """Also the issue's first finding: the data directory itself must survive a power loss
    right after the node came up (it did not while its creation skipped the fsync of its
    parent; cluster/durable.create_directories fixed that)."""
    node = NodeOnMount(data_dir=lazyfs.mountpoint / "node-1", log_dir=tmp_path)
    node.start()
    try:
        acked = produce_acked(node, "durable")
        dropped, stored = power_cycle(node, lazyfs, "durable")
    finally:
        node.kill()
    missing = [v for v in acked if v not in set(stored)]
    assert not missing, (
        f"{len(missing)} acknowledged records lost (dropped {dropped}): {missing[:3]}"
    )
    assert stored == acked


@needs_fuse
def test_a_node_whose_disk_fails_halts_and_restarts_with_every_acknowledged_record(
    lazyfs: LazyFS, tmp_path: Path
) -> None:
    """Kafka stops a broker whose only log directory failed; a node that kept running would
    lead its partitions on and answer KAFKA_STORAGE_ERROR to every write until restarted."""
    node = NodeOnMount(data_dir=lazyfs.mountpoint / "node-1", log_dir=tmp_path)
    node.start()
    try:
        acked = produce_acked(node, "failing")
        lazyfs.crash()  # the node's open files answer EIO from now on
        with grpc.insecure_channel(node.address) as channel:
            stub = pb_grpc.BrokerStub(channel)
            with contextlib.suppress(grpc.RpcError):  # the node may be gone before it answers
                result = produce(stub, "failing", 0, encode_batch([b"after"]), acks=1)
                assert result.error_code != 0, "acknowledged a write its disk refused"
        assert node.process is not None
        assert node.process.wait(timeout=30) == LOG_DIR_FAILURE_EXIT_CODE
        assert "log directory failed, halting node" in node.read_log()
        node.start()
        stored = stored_values(node, "failing")
    finally:
        node.kill()
    assert stored == acked


@needs_fuse
def test_power_loss_loses_acknowledged_records_under_the_interval_flush_policy(
    lazyfs: LazyFS, tmp_path: Path
) -> None:
    """``log.flush.policy=interval`` acknowledges before the fdatasync: the documented trade."""
    node = interval_flush_node(lazyfs, tmp_path, flush_interval_ms=60_000)
    node.start()
    try:
        acked = produce_acked(node, "lossy")
        dropped, stored = power_cycle(node, lazyfs, "lossy")
    finally:
        node.kill()
    assert dropped.unsynced_bytes > 0, dropped
    assert len(stored) < len(acked), "the crash lost no acknowledged record"
    assert stored == acked[: len(stored)], "what survived is not a prefix of what was acked"


@needs_fuse
def test_records_acknowledged_under_the_interval_flush_policy_are_durable_once_it_passed(
    lazyfs: LazyFS, tmp_path: Path
) -> None:
    """The node's interval flusher fdatasyncs a topic created after it started (it has no
    interval log to flush before, and waits for one instead of waking every second)."""
    node = interval_flush_node(lazyfs, tmp_path, flush_interval_ms=100)
    node.start()
    try:
        acked = produce_acked(node, "flushed-later")
        # The records are about 20 KiB. What stays unsynced is a few index entries: the
        # offset and time indexes are synced when their segment rolls, as in Kafka, and
        # recovery rebuilds them.
        wait_until(lambda: lazyfs.status().unsynced_bytes < 1024, 30, "the interval flusher synced")
        _, stored = power_cycle(node, lazyfs, "flushed-later")
    finally:
        node.kill()
    assert stored == acked


@needs_fuse
def test_a_slow_disk_holds_up_fsyncs_under_its_prefix_only_until_it_is_fast_again(
    lazyfs: LazyFS,
) -> None:
    mnt = lazyfs.mountpoint
    (mnt / "slow").mkdir()
    (mnt / "fast").mkdir()
    write_file(mnt / "slow" / "f", b"s")
    write_file(mnt / "fast" / "f", b"f")
    for directory in (mnt, mnt / "slow", mnt / "fast"):
        fsync_path(directory)  # the names are durable; the data is not yet
    lazyfs.slow("/slow", 30_000)  # longer than this test takes unless fast() releases it
    done: list[str] = []
    holder = threading.Thread(target=lambda: (fsync_path(mnt / "slow" / "f"), done.append("s")))
    holder.start()
    try:
        fsync_path(mnt / "fast" / "f")  # another node's fsync is not held up
        write_file(mnt / "slow" / "g", b"g")  # nor a write under the slow prefix
        assert done == [] and holder.is_alive(), "the slow fsync finished before the heal"
        assert lazyfs.status().unsynced_bytes == 2, "the held fsync has not synced f yet"
    finally:
        lazyfs.fast()
        holder.join(timeout=20)
    assert done == ["s"]
    lazyfs.crash()
    assert (mnt / "slow" / "f").read_bytes() == b"s", "released, the fsync made f durable"
    assert (mnt / "fast" / "f").read_bytes() == b"f"
    assert not (mnt / "slow" / "g").exists(), "g was never made durable"


@needs_fuse
@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_power_loss_keeps_every_flushed_record_findable_by_offset_and_by_time(
    lazyfs: LazyFS, seed: int
) -> None:
    # A flush syncs a segment's indexes only once it is no longer active (or at close):
    # after a crash, every record below the flushed offset must still be found by its
    # offset and its timestamp, through indexes that were synced or were rebuilt. The
    # crash comes right after a roll, with the segment before it flushed while it was
    # still active (its indexes never synced), or at a random point.
    config = LogConfig(segment_bytes=700, index_interval_bytes=100, retention_ms=-1)
    directory = lazyfs.mountpoint / "topic-0"
    rng = random.Random(seed)
    log = PartitionLog.open(directory, config, now_ms=0)
    batches: list[tuple[int, int, int]] = []  # base offset, last offset, max timestamp
    for step in range(rng.randint(30, 60)):
        segments_before = len(list(directory.glob("*.log")))
        values = [bytes([step % 251]) * rng.randint(1, 60) for _ in range(rng.randint(1, 3))]
        result, _ = append_values(log, values, timestamp_ms=10_000 + step * 10)
        batches.append((result.first_offset, result.last_offset, 10_000 + step * 10))
        rolled = len(list(directory.glob("*.log"))) > segments_before
        if rolled and rng.random() < 0.5:
            break  # crash right after a roll
        if rng.random() < 0.5:
            log.flush()
    flushed = log.flushed_offset
    lazyfs.crash()
    with contextlib.suppress(KafkaStorageError):
        log.close()  # its files answer EIO now: a dead process's descriptors

    reopened = PartitionLog.open(directory, config, now_ms=0)
    try:
        assert reopened.log_end_offset >= flushed
        for base_offset, last_offset, max_timestamp in batches:
            if last_offset >= flushed:
                break
            for offset in (base_offset, last_offset):
                data = reopened.read(offset, 1)
                header = headers_of(data)[0]
                assert header.base_offset <= offset <= header.last_offset
            assert reopened.offset_for_timestamp(max_timestamp) == (base_offset, max_timestamp)
    finally:
        reopened.close()
