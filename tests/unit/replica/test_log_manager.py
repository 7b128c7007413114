"""Topic lifecycle on one node's data directory, including crashes between steps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lograft.protocol.batch_header import validate_batches
from lograft.protocol.errors import KafkaStorageError, TopicAlreadyExistsError
from lograft.protocol.records import encode_batch
from lograft.protocol.topic_config import LogConfig
from replica.log.partition_log import LogFailureHandler, PartitionLog
from replica.log_manager import LogManager


def _manager(data_dir: Path) -> LogManager:
    manager = LogManager(data_dir, LogConfig(), now_ms=lambda: 1_000)
    manager.open()
    return manager


def _append(manager: LogManager, topic: str, values: list[bytes]) -> None:
    buffer = bytearray(encode_batch(values))
    partition = manager.partition(topic, 0)
    partition.log.append(buffer, validate_batches(buffer, 1 << 20), 0, 1_000)


def test_topics_survive_restart(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    manager.create_topic("orders", 2, 1, {"retention.ms": "1000"})
    _append(manager, "orders", [b"x", b"y"])
    manager.close()
    reopened = _manager(tmp_path)
    assert reopened.topics["orders"].num_partitions == 2
    assert reopened.partition("orders", 0).log.log_end_offset == 2
    assert reopened.partition("orders", 0).log.config.retention_ms == 1000


def test_crash_after_deciding_a_deletion_does_not_resurrect_its_data(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    manager.create_topic("secret", 1, 1, {})
    _append(manager, "secret", [b"old-1", b"old-2"])
    manager.close()
    # The crash: topics.json no longer lists the topic, its directory is still there.
    (tmp_path / "topics.json").write_text(json.dumps({"version": 1, "topics": []}))
    reopened = _manager(tmp_path)
    assert not (tmp_path / "secret-0").exists()
    reopened.create_topic("secret", 1, 1, {})
    assert reopened.partition("secret", 0).log.log_end_offset == 0


def test_a_new_topic_never_adopts_a_leftover_directory(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    leftover = tmp_path / "fresh-0"
    leftover.mkdir()
    (leftover / "00000000000000000000.log").write_bytes(encode_batch([b"stale"]))
    manager.create_topic("fresh", 1, 1, {})
    assert manager.partition("fresh", 0).log.log_end_offset == 0


def test_failed_creation_leaves_no_topic_and_no_directories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = _manager(tmp_path)
    real_open = PartitionLog.open

    def open_or_fail(
        directory: Path, config: LogConfig, now_ms: int, on_failure: LogFailureHandler | None
    ) -> PartitionLog:
        if directory.name == "broken-2":
            raise OSError(24, "Too many open files")
        return real_open(directory, config, now_ms, on_failure)

    monkeypatch.setattr(PartitionLog, "open", open_or_fail)
    with pytest.raises(KafkaStorageError):
        manager.create_topic("broken", 3, 1, {})
    assert "broken" not in manager.topics
    assert not any(tmp_path.glob("broken-0*")) and not any(tmp_path.glob("broken-1*"))
    assert not manager.partitions


def test_duplicate_prepared_topic_is_discarded(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    first = manager.prepare_topic("twice", 1, 1, {})
    second = manager.prepare_topic("twice", 1, 1, {})
    manager.commit_topic(*first)
    with pytest.raises(TopicAlreadyExistsError):
        manager.commit_topic(*second)
    assert manager.topics["twice"] == first[0]


def test_metadata_log_directory_is_not_an_orphan(tmp_path: Path) -> None:
    (tmp_path / "__cluster_metadata-0").mkdir()
    _manager(tmp_path)
    assert (tmp_path / "__cluster_metadata-0").is_dir()
