"""10 000 partitions in the metadata log: create, snapshot, restart the quorum, recover.

Starts a three-node combined cluster (small snapshot threshold so the creation is
snapshotted), creates one topic of N partitions (replication factor 1, spread over the
three brokers), restarts every node at once, and measures: creation time, metadata log and
snapshot sizes on disk, and the time from starting the restarted processes until every
node serves Metadata for all N partitions. Prints JSON; writes
bench/results/metadata_scale.json.

Usage: python bench/metadata_scale.py [--partitions 10000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import write_report
from controller_failover import ROOT, Cluster

SNAPSHOT_BYTES = "65536"


def _sizes(base: Path) -> dict[str, int]:
    log_bytes = snapshot_bytes = 0
    for node in (1, 2, 3):
        metadata = base / f"node-{node}" / "__cluster_metadata-0"
        log_bytes = max(log_bytes, sum(p.stat().st_size for p in metadata.glob("*.log")))
        snapshot_bytes = max(
            snapshot_bytes,
            max((p.stat().st_size for p in metadata.glob("*.checkpoint")), default=0),
        )
    return {"metadata_log_bytes": log_bytes, "latest_snapshot_bytes": snapshot_bytes}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--output", type=Path, default=ROOT / "bench/results/metadata_scale.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lograft-scale-") as raw_base:
        base = Path(raw_base)
        cluster = Cluster(
            base,
            extra=["--config", f"metadata.log.max.record.bytes.between.snapshots={SNAPSHOT_BYTES}"],
        )
        for node_id in (1, 2, 3):
            cluster.start(node_id)
        try:
            cluster.wait(cluster.healthy, "a healthy cluster")
            started = time.monotonic()
            code = cluster.create_topic(1, "wide", args.partitions, 1, timeout_s=120)
            if code != 0:
                raise SystemExit(f"CreateTopics failed with error code {code}")
            created_s = time.monotonic() - started

            def all_visible() -> bool:
                return all(len(cluster.leaders(n, "wide")) == args.partitions for n in (1, 2, 3))

            cluster.wait(all_visible, "every node to see every partition")
            visible_s = time.monotonic() - started
            sizes = _sizes(base)
            cluster.stop_all()
            restarted = time.monotonic()
            for node_id in (1, 2, 3):
                cluster.start(node_id)
            cluster.wait(cluster.healthy, "the restarted cluster")
            cluster.wait(all_visible, "recovered metadata")
            recovery_s = time.monotonic() - restarted
            sizes_after = _sizes(base)
        finally:
            cluster.stop_all()
    report = {
        "benchmark": "metadata_scale",
        "partitions": args.partitions,
        "create_topics_s": round(created_s, 3),
        "visible_on_every_node_s": round(visible_s, 3),
        "before_restart": sizes,
        "after_restart": sizes_after,
        "restart_all_to_metadata_served_s": round(recovery_s, 3),
    }
    write_report(report, args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
