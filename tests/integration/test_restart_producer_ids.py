"""Producer ids right after a whole-cluster restart (issue 12: STALE_BROKER_EPOCH).

After a restart a broker serves requests before it has re-registered with the controller;
an InitProducerId it could not yet serve used to reach the producer as STALE_BROKER_EPOCH
("broker 1 epoch -1 is not the current 3"), a non-retriable error, so the first
`lograft produce --acks all` after a restart failed. A broker that is not registered yet
must answer with a retriable error, and the producer must get its id once it is.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from lograft.protocol.errors import error_for_code
from lograft.protocol.wire import broker_pb2 as pb
from lograft.protocol.wire import broker_pb2_grpc as pb_grpc
from tests.integration.nodes import wait_until
from tests.integration.quorum import QuorumCluster

pytestmark = pytest.mark.integration

ASK_TIMEOUT_S = 60.0


def test_init_producer_id_right_after_a_full_restart_is_only_ever_retriable(
    tmp_path: Path,
) -> None:
    cluster = QuorumCluster(tmp_path)
    cluster.start()
    try:
        cluster.stop()  # kill -9 every node
        for node in cluster.nodes.values():
            node.start(wait=False)
        node = cluster.nodes[1]
        answers: list[tuple[int, str]] = []

        def asked_until_assigned() -> bool:
            try:
                with grpc.insecure_channel(node.address) as channel:
                    response = pb_grpc.BrokerStub(channel).InitProducerId(
                        pb.InitProducerIdRequest(), timeout=5
                    )
            except grpc.RpcError:
                return False  # not listening yet
            answers.append((response.error_code, response.error_message))
            return response.error_code == 0 and response.producer_id >= 0

        # Asked from the moment the restarted node listens, so the window before it has
        # registered is seen (each failed answer is kept).
        wait_until(asked_until_assigned, ASK_TIMEOUT_S, "a producer id from the restarted node")
        refused = [
            (error_for_code(code, message).error_name, message)
            for code, message in answers
            if code != 0 and not error_for_code(code, message).retriable
        ]
        assert refused == [], f"non-retriable answers to InitProducerId: {refused}"
    finally:
        cluster.stop()
