"""Acknowledged writes survive kill -9; a torn or garbage tail is cut off on restart."""

from __future__ import annotations

import threading
from pathlib import Path

import grpc
import pytest

from lograft.protocol.records import encode_batch
from lograft.protocol.wire import broker_pb2_grpc as pb_grpc
from tests.integration.nodes import NodeProcess
from tests.integration.wire_helpers import create_topic, fetch_all, produce

pytestmark = pytest.mark.integration

TOTAL_RECORDS = 100_000
RECORDS_PER_BATCH = 100
PARTITIONS = 3
KILL_AFTER_ACKED = TOTAL_RECORDS // 2


class PartitionWriter(threading.Thread):
    """Writes numbered records to one partition, one request at a time, with acks=1.

    Values are ``p<partition>-<sequence>``. A request that fails (the node died) is never
    resent: its records are "unknown" — they may or may not be in the log, but at most once.
    """

    def __init__(
        self,
        stub_factory: grpc.Channel,
        partition: int,
        count: int,
        progress: threading.Condition,
        acked_total: list[int],
        node_back: threading.Event,
    ) -> None:
        super().__init__(daemon=True)
        self.channel = stub_factory
        self.partition = partition
        self.count = count
        self.progress = progress
        self.acked_total = acked_total
        self.node_back = node_back
        self.acked: list[bytes] = []
        self.unknown: set[bytes] = set()
        self.failures = 0

    def run(self) -> None:
        stub = pb_grpc.BrokerStub(self.channel)
        sequence = 0
        while sequence < self.count:
            values = [
                f"p{self.partition}-{n:06d}".encode()
                for n in range(sequence, min(sequence + RECORDS_PER_BATCH, self.count))
            ]
            sequence += len(values)
            try:
                result = produce(stub, "durable", self.partition, encode_batch(values))
            except grpc.RpcError:
                self.unknown.update(values)
                self.failures += 1
                assert self.node_back.wait(timeout=120), "node did not come back"
                continue
            assert result.error_code == 0, result
            self.acked.extend(values)
            with self.progress:
                self.acked_total[0] += len(values)
                self.progress.notify_all()


def test_kill9_mid_stream_loses_no_acknowledged_record(tmp_path: Path) -> None:
    node = NodeProcess(data_dir=tmp_path / "node-1", configs={"log.segment.bytes": "262144"})
    node.start()
    try:
        with grpc.insecure_channel(node.address) as channel:
            create_topic(pb_grpc.BrokerStub(channel), "durable", partitions=PARTITIONS)
        progress = threading.Condition()
        acked_total = [0]
        node_back = threading.Event()
        with grpc.insecure_channel(node.address) as channel:
            writers = [
                PartitionWriter(
                    channel, p, TOTAL_RECORDS // PARTITIONS, progress, acked_total, node_back
                )
                for p in range(PARTITIONS)
            ]
            for writer in writers:
                writer.start()
            with progress:
                assert progress.wait_for(lambda: acked_total[0] >= KILL_AFTER_ACKED, timeout=300)
            node.kill()
            node.start()
            node_back.set()
            for writer in writers:
                writer.join(timeout=300)
                assert not writer.is_alive()
            stub = pb_grpc.BrokerStub(channel)
            for writer in writers:
                stored = [r.value for r in fetch_all(stub, "durable", writer.partition)]
                assert len(stored) == len(set(stored)), "a record is stored twice"
                stored_set = set(stored)
                missing = [v for v in writer.acked if v not in stored_set]
                assert not missing, f"{len(missing)} acknowledged records lost: {missing[:5]}"
                acked_order = [v for v in stored if v not in writer.unknown]
                assert acked_order == writer.acked, "acknowledged records out of order"
                assert stored_set <= set(writer.acked) | writer.unknown
        assert sum(w.failures for w in writers) >= 1, "the kill did not interrupt any writer"
    finally:
        node.kill()


@pytest.mark.parametrize("shutdown", ["sigterm", "kill9"])
def test_garbage_and_half_written_batch_are_truncated_on_restart(
    tmp_path: Path, shutdown: str
) -> None:
    node = NodeProcess(data_dir=tmp_path / "node-1")
    node.start()
    try:
        with grpc.insecure_channel(node.address) as channel:
            stub = pb_grpc.BrokerStub(channel)
            create_topic(stub, "torn")
            sent = [f"record-{n}".encode() for n in range(1000)]
            for start in range(0, len(sent), 100):
                assert (
                    produce(stub, "torn", 0, encode_batch(sent[start : start + 100])).error_code
                    == 0
                )
        if shutdown == "sigterm":
            assert node.stop() == 0
        else:
            node.kill()
        segment = sorted((node.data_dir / "torn-0").glob("*.log"))[-1]
        good_size = segment.stat().st_size
        half_batch = encode_batch([b"never acknowledged"] * 10)
        with open(segment, "ab") as handle:
            handle.write(half_batch[: len(half_batch) // 2])
            handle.write(b"\xde\xad\xbe\xef" * 64)
        node.start()
        with grpc.insecure_channel(node.address) as channel:
            stub = pb_grpc.BrokerStub(channel)
            assert [r.value for r in fetch_all(stub, "torn", 0)] == sent
            after = produce(stub, "torn", 0, encode_batch([b"after restart"]))
            assert after.error_code == 0 and after.base_offset == len(sent)
        assert segment.stat().st_size >= good_size
        warnings = [
            line for line in node.read_log().splitlines() if "WARNING" in line and "truncat" in line
        ]
        assert warnings, "recovery did not warn about the truncated tail"
    finally:
        node.kill()
