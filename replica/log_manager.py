"""The topics and partition logs of one broker's data directory.

Until the controller quorum exists, topics are local to the node: their definitions live in
``topics.json`` in the data directory (written atomically), and each partition's log lives in
``<topic>-<partition>/``. Not thread-safe: used from the node's event loop only.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from lograft.durable import create_directories, fsync_directory, write_file_atomically
from lograft.protocol.errors import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    KafkaStorageError,
    LograftError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from lograft.protocol.topic_config import LogConfig
from lograft.protocol.topic_partition import MAX_PARTITIONS, TopicPartition, validate_topic_name
from replica.log.partition_log import LogFailureHandler, PartitionLog
from replica.log.replication_offset_checkpoint import (
    read_high_watermarks,
    write_high_watermarks,
)
from replica.partition import Partition

__all__ = ["MAX_PARTITIONS", "LogManager", "TopicInfo", "validate_topic_name"]

log = logging.getLogger(__name__)

_TOPICS_FILE = "topics.json"
_PARTITION_METADATA = "partition.metadata"
_DELETE_SUFFIX = "-delete"
_PARTITION_DIR = re.compile(r"^[a-zA-Z0-9._-]+-[0-9]+$")
STANDALONE_REPLICA_ID = 0
"""The replica id a standalone node (no controller) leads its single-replica partitions as."""
_INTERNAL_PREFIX = "__cluster_metadata"
"""Directories the controller's metadata log owns; never treated as topic partitions."""


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic as this node knows it."""

    name: str
    num_partitions: int
    replication_factor: int
    configs: Mapping[str, str] = field(default_factory=dict)


class LogManager:
    """Owns every ``Partition`` of the node and the topic definitions."""

    def __init__(
        self,
        data_dir: Path,
        default_config: LogConfig,
        now_ms: Callable[[], int],
        on_log_failure: LogFailureHandler | None = None,
    ) -> None:
        """``on_log_failure`` is given to every partition log it opens
        (:meth:`PartitionLog.open`)."""
        self.data_dir = data_dir
        self._on_log_failure = on_log_failure
        self.default_config = default_config
        self._now_ms = now_ms
        self.topics: dict[str, TopicInfo] = {}
        self.partitions: dict[TopicPartition, Partition] = {}
        # replication-offset-checkpoint as last read or written; a partition opens at its
        # entry. Entries of partitions not (yet) open again are kept until they are removed.
        self._checkpointed: dict[TopicPartition, int] = {}
        # The periodic write runs on a worker thread and may still be running when close
        # writes the last one: both replace the same file through the same temporary name.
        self._checkpoint_write_lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []

    # ---- start-up and shutdown ----------------------------------------------------------

    def open(self, load_topics: bool = True) -> None:
        """Load topic definitions and open (and recover) every partition log.

        With ``load_topics=False`` (a node in a controller quorum) no topic is loaded here:
        partitions are opened as the metadata image assigns them (:meth:`open_partition`,
        then :meth:`adopt_partition`).
        """
        create_directories(self.data_dir)
        for leftover in self.data_dir.glob(f"*{_DELETE_SUFFIX}"):
            shutil.rmtree(leftover, ignore_errors=True)
        try:
            self._checkpointed = read_high_watermarks(self.data_dir)
        except KafkaStorageError as exc:
            # Conservative, not fatal: every partition opens at its log start offset, and a
            # leader publishes records only once its in-sync followers hold them again.
            log.error("high watermark checkpoint ignored error=%s", exc)
            self._checkpointed = {}
        if not load_topics:
            return
        path = self.data_dir / _TOPICS_FILE
        if path.exists():
            try:
                raw = json.loads(path.read_text())
                topics = [
                    TopicInfo(
                        name=str(t["name"]),
                        num_partitions=int(t["num_partitions"]),
                        replication_factor=int(t["replication_factor"]),
                        configs={str(k): str(v) for k, v in dict(t["configs"]).items()},
                    )
                    for t in raw["topics"]
                ]
            except (ValueError, KeyError, TypeError) as exc:
                raise KafkaStorageError(f"{path} is not a valid topics file: {exc}") from exc
            for topic in topics:
                self.topics[topic.name] = topic
        self._remove_orphans()
        for topic in self.topics.values():
            for partition in self._open_partitions(topic):
                self.partitions[partition.topic_partition] = partition
        log.info(
            "log manager opened data_dir=%s topics=%d partitions=%d",
            self.data_dir,
            len(self.topics),
            len(self.partitions),
        )

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (on the event loop) whenever a partition is added or its log
        config changes."""
        self._listeners.append(listener)

    def _partitions_changed(self) -> None:
        for listener in self._listeners:
            listener()

    def update_config(self, partition: Partition, config: LogConfig) -> None:
        """Give a hosted partition a changed topic config (:meth:`Partition.update_config`)."""
        partition.update_config(config)
        self._partitions_changed()

    def close(self) -> None:
        """Checkpoint the high watermarks, flush and close every log (clean-shutdown markers)."""
        try:
            self.write_high_watermark_checkpoint(self.high_watermarks())
        except KafkaStorageError as exc:
            log.error("high watermark checkpoint not written at shutdown error=%s", exc)
        for partition in self.partitions.values():
            partition.unhost()
            try:
                partition.write_producer_snapshot()
            except OSError as exc:
                # Only a start-up shortcut: the state is rebuilt from the log without it.
                log.warning(
                    "producer snapshot not written partition=%s error=%s",
                    partition.topic_partition,
                    exc,
                )
            partition.log.close()
        self.partitions.clear()

    # ---- high watermark checkpoint ------------------------------------------------------

    def high_watermarks(self) -> dict[TopicPartition, int]:
        """What the checkpoint should hold now (event loop): hosted partitions' HWs."""
        for tp, partition in self.partitions.items():
            self._checkpointed[tp] = partition.high_watermark
        return dict(self._checkpointed)

    def write_high_watermark_checkpoint(
        self, high_watermarks: Mapping[TopicPartition, int]
    ) -> None:
        """Write ``replication-offset-checkpoint`` (disk work: off the event loop)."""
        with self._checkpoint_write_lock:
            write_high_watermarks(self.data_dir, high_watermarks)

    # ---- topics -------------------------------------------------------------------------

    def log_config_for(self, configs: Mapping[str, str]) -> LogConfig:
        """The effective log config of a topic: broker defaults with its overrides."""
        return self.default_config.with_overrides(configs)

    def validate_new_topic(
        self, name: str, num_partitions: int, replication_factor: int, configs: Mapping[str, str]
    ) -> None:
        """Raise the typed error a CreateTopics for these arguments would get."""
        validate_topic_name(name)
        if name in self.topics:
            raise TopicAlreadyExistsError(f"topic {name!r} already exists")
        if not 1 <= num_partitions <= MAX_PARTITIONS:
            raise InvalidPartitionsError(
                f"num_partitions must be between 1 and {MAX_PARTITIONS}, got {num_partitions}"
            )
        if replication_factor != 1:
            raise InvalidReplicationFactorError(
                f"replication factor {replication_factor} is larger than the 1 available broker"
                if replication_factor > 1
                else f"replication factor must be at least 1, got {replication_factor}"
            )
        self.log_config_for(configs)

    def prepare_topic(
        self, name: str, num_partitions: int, replication_factor: int, configs: Mapping[str, str]
    ) -> tuple[TopicInfo, list[Partition]]:
        """Validate a new topic and open its partition logs; nothing is visible yet.

        Touches only the file system, so it may run on a worker thread. On failure every
        log it opened is closed and removed. Pass the result to :meth:`commit_topic`.
        """
        self.validate_new_topic(name, num_partitions, replication_factor, configs)
        topic = TopicInfo(name, num_partitions, replication_factor, dict(configs))
        return topic, self._open_partitions(topic, fresh=True)

    def commit_topic(self, topic: TopicInfo, partitions: list[Partition]) -> None:
        """Make a prepared topic visible and durable (``topics.json``); on the event loop."""
        if topic.name in self.topics:
            remove_directories(_discard(partitions))
            raise TopicAlreadyExistsError(f"topic {topic.name!r} already exists")
        self.topics[topic.name] = topic
        for partition in partitions:
            self.partitions[partition.topic_partition] = partition
        self._write_topics()
        self._partitions_changed()
        log.info(
            "topic created topic=%s partitions=%d replication_factor=%d",
            topic.name,
            topic.num_partitions,
            topic.replication_factor,
        )

    def create_topic(
        self, name: str, num_partitions: int, replication_factor: int, configs: Mapping[str, str]
    ) -> TopicInfo:
        """Create a topic and its partition logs; raises a typed error when invalid."""
        topic, partitions = self.prepare_topic(name, num_partitions, replication_factor, configs)
        self.commit_topic(topic, partitions)
        return topic

    def delete_topic(self, name: str) -> list[Path]:
        """Forget a topic; returns directories to remove (off the event loop)."""
        topic = self.topics.pop(name, None)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        self._write_topics()
        doomed = []
        for index in range(topic.num_partitions):
            partition = self.partitions.pop(TopicPartition(name, index), None)
            self._checkpointed.pop(TopicPartition(name, index), None)
            if partition is not None:
                doomed.extend(_discard([partition]))
        log.info("topic deleted topic=%s", name)
        return doomed

    # ---- partitions assigned by the metadata image (controller quorum) ------------------

    def open_partition(
        self, tp: TopicPartition, topic_id: str, configs: Mapping[str, str]
    ) -> Partition:
        """Open (and recover) the log of a partition the metadata image assigns here.

        Only touches its own directory, so it may run on a worker thread; the caller then
        hands the result to :meth:`adopt_partition` on the event loop.
        ``partition.metadata`` records the topic id: a directory left by an earlier topic of
        the same name (another id) is moved aside, never adopted.
        """
        directory = self.data_dir / f"{tp.topic}-{tp.partition}"
        marker = directory / _PARTITION_METADATA
        if directory.exists() and (
            not marker.exists() or marker.read_text().strip() != f"topic_id={topic_id}"
        ):
            log.warning("moving aside directory of another topic dir=%s", directory)
            remove_directories([_mark_deleted(directory)])
        partition_log = PartitionLog.open(
            directory, self.log_config_for(configs), self._now_ms(), self._on_log_failure
        )
        if not marker.exists():
            write_file_atomically(marker, f"topic_id={topic_id}\n".encode())
        try:
            if partition_log.flushed_offset < partition_log.log_end_offset:
                partition_log.flush()
            return Partition(tp, partition_log, self._checkpointed.get(tp))
        except (OSError, LograftError):
            partition_log.close()
            raise

    def adopt_partition(self, partition: Partition) -> None:
        """Make an opened partition servable (event loop only)."""
        self.partitions[partition.topic_partition] = partition
        self._partitions_changed()

    def unhost_partition(self, tp: TopicPartition) -> Path | None:
        """Close a partition this broker no longer hosts; returns its directory to remove."""
        partition = self.partitions.pop(tp, None)
        self._checkpointed.pop(tp, None)
        if partition is None:
            return None
        return _discard([partition])[0]

    def partition(self, topic: str, index: int) -> Partition:
        """The partition, or ``UnknownTopicOrPartitionError``."""
        found = self.partitions.get(TopicPartition(topic, index))
        if found is None:
            raise UnknownTopicOrPartitionError(f"{topic}-{index} is not hosted on this node")
        return found

    def _open_partitions(self, topic: TopicInfo, fresh: bool = False) -> list[Partition]:
        """Open every partition log of ``topic``; all or none.

        ``fresh``: the topic is new, so a directory left from an earlier topic of that name
        (a crash during its deletion) is moved aside instead of adopted.
        """
        config = self.log_config_for(topic.configs)
        opened: list[Partition] = []
        try:
            for index in range(topic.num_partitions):
                tp = TopicPartition(topic.name, index)
                directory = self.data_dir / f"{topic.name}-{index}"
                if fresh and directory.exists():
                    remove_directories([_mark_deleted(directory)])
                partition_log = PartitionLog.open(
                    directory, config, self._now_ms(), self._on_log_failure
                )
                try:
                    if partition_log.flushed_offset < partition_log.log_end_offset:
                        # Recovered bytes that survived a crash sit in the page cache; make
                        # them durable before they become readable below the high watermark.
                        partition_log.flush()
                    partition = Partition(tp, partition_log, self._checkpointed.get(tp))
                except (OSError, LograftError):
                    partition_log.close()
                    raise
                partition.lead_alone(STANDALONE_REPLICA_ID)
                opened.append(partition)
        except (OSError, LograftError) as exc:
            doomed = _discard(opened)
            if fresh:
                failed = self.data_dir / f"{topic.name}-{len(opened)}"
                if failed.exists():
                    doomed.append(_mark_deleted(failed))
                remove_directories(doomed)
            if isinstance(exc, LograftError):
                raise
            raise KafkaStorageError(f"cannot open the logs of {topic.name!r}: {exc}") from exc
        return opened

    def _remove_orphans(self) -> None:
        """Delete partition directories of topics ``topics.json`` does not list.

        They are what a crash between deciding a deletion (``topics.json``) and removing the
        files leaves behind; a later topic of the same name must not adopt them.
        """
        expected = {
            f"{topic.name}-{index}"
            for topic in self.topics.values()
            for index in range(topic.num_partitions)
        }
        for entry in self.data_dir.iterdir():
            if (
                entry.is_dir()
                and _PARTITION_DIR.match(entry.name)
                and not entry.name.startswith(_INTERNAL_PREFIX)
                and entry.name not in expected
            ):
                log.warning("removing orphan partition directory dir=%s", entry)
                remove_directories([_mark_deleted(entry)])

    def _write_topics(self) -> None:
        body = {
            "version": 1,
            "topics": [
                {
                    "name": t.name,
                    "num_partitions": t.num_partitions,
                    "replication_factor": t.replication_factor,
                    "configs": dict(t.configs),
                }
                for t in self.topics.values()
            ],
        }
        write_file_atomically(self.data_dir / _TOPICS_FILE, json.dumps(body, indent=1).encode())


def _mark_deleted(directory: Path) -> Path:
    """Rename a partition directory out of the way, durably; returns the new path."""
    target = directory.with_name(f"{directory.name}.{uuid.uuid4().hex}{_DELETE_SUFFIX}")
    os.replace(directory, target)
    fsync_directory(directory.parent)
    return target


def _discard(partitions: list[Partition]) -> list[Path]:
    """Close partitions and rename their directories away; returns the directories."""
    doomed = []
    for partition in partitions:
        partition.unhost()
        partition.log.close()
        doomed.append(_mark_deleted(partition.log.directory))
    return doomed


def remove_directories(paths: list[Path]) -> None:
    """Remove deleted partition directories (run on a worker thread)."""
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)
