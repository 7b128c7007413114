"""A node dies after every node's wall clock went back a day: the cluster must still fence it
and drop it from the ISRs, so that acks=all sends go on (issue 12's clock-jump scenario).

Broker sessions (the controller) and follower lag (each leader) are intervals. Measured on
the wall clock, a clock set back a day made every broker's session and every follower's
last catch-up lie in the future: a node killed then was never fenced and never left an ISR,
so the partitions it led had no leader and acks=all to the others waited for it, for the
whole day. (Set a day ahead, every ISR shrank to its leader and every broker was fenced at
once.) Nodes run with libfaketime preloaded (chaos.clock): skipped without it unless
``LOGRAFT_REQUIRE_CHAOS_TOOLS=1``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from chaos.clock import clock_unavailable
from chaos.targets import LocalTarget
from cluster.client import AdminClient, Producer
from cluster.client.admin import NewTopic
from tests.integration.nodes import wait_until

pytestmark = pytest.mark.integration

TOPIC = "clocked"
PARTITIONS = 3
DAY_S = 86_400

if clock_unavailable() is not None and os.environ.get("LOGRAFT_REQUIRE_CHAOS_TOOLS") != "1":
    pytest.skip(f"{clock_unavailable()} (chaos/install-tools.sh)", allow_module_level=True)


def test_a_node_killed_after_the_clocks_went_back_is_fenced_and_leaves_the_isr(
    tmp_path: Path,
) -> None:
    target = LocalTarget(
        tmp_path / "cluster", configs={"replica.lag.time.max.ms": "4000"}, clocks=True
    )
    target.up()
    try:
        with AdminClient({"bootstrap.servers": target.bootstrap}) as admin:
            topic = NewTopic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
            admin.create_topics([topic])[TOPIC].result()
        for node in target.node_ids:
            target.set_clock(node, -DAY_S)
        config = {
            "bootstrap.servers": target.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "delivery.timeout.ms": 60_000,
            "linger.ms": 0,
        }
        with (
            Producer(config) as producer,
            AdminClient({"bootstrap.servers": target.bootstrap}) as admin,
        ):
            warm = [producer.send(TOPIC, b"before", partition=p) for p in range(PARTITIONS)]
            for future in warm:
                future.result(timeout=90)

            def isrs_whole() -> bool:  # a loaded machine may have let a follower fall behind
                (description,) = admin.describe_topics([TOPIC])
                return all(len(p.isr) == 3 for p in description.partitions)

            wait_until(isrs_whole, 60.0, "every ISR whole before the kill")
            controller = target.controller()
            victim = next(n for n in target.node_ids if n != controller)
            target.kill(victim)
            after = [
                producer.send(TOPIC, f"after-{p}-{i}".encode(), partition=p)
                for p in range(PARTITIONS)
                for i in range(5)
            ]
            failed = [f.exception(timeout=90) for f in after]
        assert [e for e in failed if e is not None] == [], "acks=all sends failed"
        with AdminClient({"bootstrap.servers": target.bootstrap}) as admin:

            def moved_on() -> bool:
                (description,) = admin.describe_topics([TOPIC])
                return all(
                    p.leader not in (victim, -1) and victim not in p.isr
                    for p in description.partitions
                )

            wait_until(moved_on, 30.0, f"node {victim} left every ISR and leadership")
    finally:
        target.close()
