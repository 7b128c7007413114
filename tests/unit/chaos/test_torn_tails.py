"""The torn-tail fault damages what it says, and a partition log recovers from each kind of
damage: it opens, keeps every whole batch before the damage, and appends after it."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from chaos.torn_tails import DAMAGE_KINDS, tear_tails
from lograft.protocol.record_codec import iter_records
from lograft.protocol.topic_config import LogConfig
from replica.log.partition_log import PartitionLog
from tests.unit.log_fixtures import append_values

BATCHES = 20
PER_BATCH = 5


def _write_log(directory: Path) -> int:
    log = PartitionLog.open(directory, LogConfig(), 0)
    for n in range(BATCHES):
        values = [f"v{n}-{i}".encode() for i in range(PER_BATCH)]
        append_values(log, values)
    log.flush()
    end = log.log_end_offset
    # No close: the node was killed (no clean-shutdown marker, recovery re-validates).
    return end


def _values(log: PartitionLog) -> list[str]:
    data = log.read(log.log_start_offset, 1 << 22)
    return [r.value.decode() for r in iter_records(data, 0) if r.value is not None]


class _Choose(random.Random):
    """A Random whose choice of damage is fixed (the byte counts stay random)."""

    def __init__(self, kind: str, seed: int) -> None:
        super().__init__(seed)
        self._kind = kind

    def choice(self, seq):  # type: ignore[no-untyped-def,override]
        return self._kind if self._kind in seq else super().choice(seq)


@pytest.mark.parametrize("kind", DAMAGE_KINDS)
@pytest.mark.parametrize("seed", range(5))
def test_a_log_recovers_from_a_torn_tail_keeping_every_whole_batch_before_it(
    tmp_path: Path, kind: str, seed: int
) -> None:
    node_dir = tmp_path / "node-1"
    partition_dir = node_dir / "chaos-0"
    written = _write_log(partition_dir)
    (node_dir / "__cluster_metadata-0").mkdir()
    metadata_segment = node_dir / "__cluster_metadata-0" / f"{0:020d}.log"
    metadata_segment.write_bytes(b"raft entries")
    size_before = (partition_dir / f"{0:020d}.log").stat().st_size

    damaged = tear_tails(node_dir, _Choose(kind, seed))

    assert len(damaged) == 1 and damaged[0].startswith(f"chaos-0/{0:020d}.log {kind} ")
    assert metadata_segment.read_bytes() == b"raft entries", "the metadata log is left alone"
    size_after = (partition_dir / f"{0:020d}.log").stat().st_size
    assert (size_after < size_before) if kind == "cut" else (size_after >= size_before)

    recovered = PartitionLog.open(partition_dir, LogConfig(), 0)
    try:
        end = recovered.log_end_offset
        assert end % PER_BATCH == 0, "recovery keeps whole batches only"
        if kind == "zeros":
            assert end == written, "appended zeros cost no batch"
        else:
            assert end < written, "the damaged batch is gone"
        kept = _values(recovered)
        expected = [f"v{n}-{i}" for n in range(BATCHES) for i in range(PER_BATCH)]
        assert kept == expected[:end]
        append_values(recovered, [b"after"])
        assert _values(recovered)[-1] == "after"
    finally:
        recovered.close()


def test_an_empty_or_missing_segment_is_left_alone(tmp_path: Path) -> None:
    (tmp_path / "t-0").mkdir()
    (tmp_path / "t-0" / f"{0:020d}.log").write_bytes(b"")
    (tmp_path / "t-1").mkdir()
    assert tear_tails(tmp_path, random.Random(1)) == []
    assert (tmp_path / "t-0" / f"{0:020d}.log").read_bytes() == b""
