"""A broker given new partitions by the metadata opens them several at once
(``KRaftBroker._open_all``): every partition that can be opened is opened and returned in
the order asked, and one that cannot be opened is left out without stopping the others."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace

from cluster.kraft_broker import KRaftBroker
from lograft.protocol.errors import KafkaStorageError
from lograft.protocol.topic_config import LogConfig
from lograft.protocol.topic_partition import TopicPartition
from replica.log_manager import LogManager
from replica.partition import Partition

TOPIC = "__consumer_offsets"
PARTITIONS = 20
BROKEN = TopicPartition(TOPIC, 7)


class _OneBrokenDisk:
    """The node's ``LogManager``, except that one partition's directory cannot be opened."""

    def __init__(self, logs: LogManager) -> None:
        self._logs = logs

    def open_partition(
        self, tp: TopicPartition, topic_id: str, configs: Mapping[str, str]
    ) -> Partition:
        if tp == BROKEN:
            raise KafkaStorageError(f"{tp} cannot be written")
        return self._logs.open_partition(tp, topic_id, configs)


def test_every_partition_that_can_be_opened_is_opened_in_order(tmp_path: Path) -> None:
    logs = LogManager(tmp_path, LogConfig(), lambda: int(time.time() * 1000))
    missing = [(TopicPartition(TOPIC, i), "topic-id", {}) for i in range(PARTITIONS)]
    broker = SimpleNamespace(_logs=_OneBrokenDisk(logs))
    opened = KRaftBroker._open_all(broker, missing)  # type: ignore[arg-type]
    try:
        assert [p.topic_partition for p in opened] == [tp for tp, _, _ in missing if tp != BROKEN]
        assert all((tmp_path / f"{TOPIC}-{i}").is_dir() for i in range(PARTITIONS) if i != 7)
    finally:
        for partition in opened:
            partition.log.close()
