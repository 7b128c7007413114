"""A broken invariant halts the node process; it is never answered over the wire.

The broken state is real: a partition's ``leader-epoch-checkpoint`` claims a leader epoch
(99) far above any the controller has given out, as a corrupted or foreign data
directory would. When the broker is told to lead the partition at its real epoch, the
replication core refuses to lead an epoch older than its own log, and the process must
stop at once with the state in its log, instead of serving from that log.
"""

from __future__ import annotations

import signal
from pathlib import Path

import grpc
import pytest

from cluster.halt import HALT_EXIT_CODE
from lograft.protocol.records import encode_batch
from lograft.protocol.wire import broker_pb2_grpc as pb_grpc
from tests.integration.nodes import wait_until
from tests.integration.quorum import CLUSTER_TIMEOUT_S, QuorumCluster
from tests.integration.wire_helpers import produce

pytestmark = pytest.mark.integration

EXIT_TIMEOUT_S = 60


def test_a_broken_replication_invariant_halts_the_node(tmp_path: Path) -> None:
    cluster = QuorumCluster(tmp_path, size=1, dedicated_controller=True)
    cluster.start()
    broker = cluster.nodes[1]
    try:
        assert cluster.create_topic(broker, "broken", 1, 1) == 0
        with grpc.insecure_channel(broker.address) as channel:
            stub = pb_grpc.BrokerStub(channel)
            wait_until(
                lambda: (
                    produce(stub, "broken", 0, encode_batch([b"a", b"b", b"c"])).error_code == 0
                ),
                CLUSTER_TIMEOUT_S,
                "a write",
            )
        assert broker.stop() == 0

        checkpoint = broker.data_dir / "broken-0" / "leader-epoch-checkpoint"
        version, _count, *entries = checkpoint.read_text().split("\n")
        entries = [e for e in entries if e] + ["99 1"]
        checkpoint.write_text("\n".join([version, str(len(entries)), *entries]) + "\n")

        broker.start(wait=False)
        assert broker.process is not None
        code = broker.process.wait(timeout=EXIT_TIMEOUT_S)
        log = broker.read_log()
        assert code == HALT_EXIT_CODE, log[-3000:]
        assert "invariant broken, halting node" in log
        assert "ReplicationInvariantError" in log
        assert "leads epoch" in log and "its log has epoch 99" in log
        assert "node stopped" not in log.split("invariant broken")[-1]
    finally:
        if broker.process is not None and broker.process.poll() is None:
            broker.process.send_signal(signal.SIGKILL)
        cluster.stop()
