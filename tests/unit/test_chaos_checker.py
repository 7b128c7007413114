"""The chaos checker on hand-made histories: each anomaly kind is found, and its near-identical
valid twin is not flagged (a checker that cannot fail is worthless)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from chaos.checker import KINDS, FinalState, check
from chaos.history import HistoryWriter, Op, read_history

TOPIC = "t"


class Clock:
    """A clock that advances 1 ms per reading."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 0.001
        return self.now


def writer() -> HistoryWriter:
    return HistoryWriter(None, clock=Clock())


def send(
    h: HistoryWriter,
    process: str,
    value: str,
    outcome: str,
    partition: int = 0,
    offset: int | None = None,
    idempotent: bool = True,
) -> None:
    invoked = h.invoke(
        process,
        "send",
        topic=TOPIC,
        partition=partition,
        value=value,
        idempotent=idempotent,
        acks="all",
    )
    if outcome == "ok":
        h.complete(invoked, "ok", topic=TOPIC, partition=partition, offset=offset)
    elif outcome in ("fail", "info"):
        h.complete(invoked, outcome, error="TIMEOUT")  # type: ignore[arg-type]


def poll(h: HistoryWriter, process: str, records: list[tuple[int, int, str]]) -> None:
    invoked = h.invoke(process, "poll", group=None)
    h.complete(invoked, "ok", records=[(TOPIC, p, o, v) for p, o, v in records])


def drain(h: HistoryWriter, records: list[tuple[int, int, str]]) -> None:
    invoked = h.invoke("drain", "drain")
    h.complete(invoked, "ok", records=[(TOPIC, p, o, v) for p, o, v in records])


def kinds(h: HistoryWriter, final: FinalState | None = None) -> dict[str, int]:
    result = check(h.ops(), final or FinalState())
    return {kind: n for kind, n in result.counts.items() if n}


def base() -> HistoryWriter:
    """Two acknowledged writes, polled and drained: valid."""
    h = writer()
    send(h, "p0", "a", "ok", offset=0)
    send(h, "p0", "b", "ok", offset=1)
    poll(h, "c0", [(0, 0, "a"), (0, 1, "b")])
    return h


def test_a_clean_history_is_valid() -> None:
    h = base()
    drain(h, [(0, 0, "a"), (0, 1, "b")])
    result = check(h.ops(), FinalState())
    assert result.valid
    assert result.counts == dict.fromkeys(KINDS, 0)
    assert result.stats["send-ok"] == 2


def test_lost_write() -> None:
    h = base()
    drain(h, [(0, 0, "a")])
    result = check(h.ops(), FinalState())
    assert [a.kind for a in result.anomalies if a.kind == "lost-write"] == ["lost-write"]
    lost = next(a for a in result.anomalies if a.kind == "lost-write")
    assert "b was acknowledged" in lost.message
    assert lost.op_indexes == (2, 3)  # the send of b: its invoke and its ok


def test_an_unknown_send_may_or_may_not_be_there() -> None:
    for present in (True, False):
        h = base()
        send(h, "p0", "c", "info")
        drain(h, [(0, 0, "a"), (0, 1, "b")] + ([(0, 2, "c")] if present else []))
        assert kinds(h) == {}


def test_duplicate() -> None:
    h = base()
    drain(h, [(0, 0, "a"), (0, 1, "b"), (0, 2, "b")])
    found = kinds(h)
    assert found.get("duplicate") == 1


def test_offset_mismatch() -> None:
    h = writer()
    send(h, "p0", "a", "ok", offset=5)
    drain(h, [(0, 0, "a")])
    assert kinds(h) == {"offset-mismatch": 1}


def test_offset_conflict() -> None:
    h = base()
    poll(h, "c1", [(0, 1, "x")])  # another value at offset 1
    drain(h, [(0, 0, "a"), (0, 1, "b")])
    found = kinds(h)
    assert found.get("offset-conflict") == 1


def test_failed_write_read() -> None:
    h = base()
    send(h, "p0", "c", "fail")
    drain(h, [(0, 0, "a"), (0, 1, "b"), (0, 2, "c")])
    assert kinds(h) == {"failed-write-read": 1}
    valid = base()
    send(valid, "p0", "c", "fail")
    drain(valid, [(0, 0, "a"), (0, 1, "b")])
    assert kinds(valid) == {}


def test_dirty_read() -> None:
    h = writer()
    send(h, "p0", "a", "info")
    poll(h, "c0", [(0, 0, "a")])
    drain(h, [])
    assert kinds(h) == {"dirty-read": 1}


def test_producer_order_only_for_idempotent_producers() -> None:
    # a was sent before b, yet the log (and the acks) put b first: a retried batch jumped
    # ahead, which idempotence exists to prevent.
    for idempotent, expected in ((True, {"producer-order": 1}), (False, {})):
        h = writer()
        send(h, "p0", "a", "ok", offset=1, idempotent=idempotent)
        send(h, "p0", "b", "ok", offset=0, idempotent=idempotent)
        drain(h, [(0, 0, "b"), (0, 1, "a")])
        assert kinds(h) == expected


def test_non_monotonic_poll_unless_a_seek_came_between() -> None:
    h = base()
    poll(h, "c0", [(0, 0, "a")])
    drain(h, [(0, 0, "a"), (0, 1, "b")])
    assert kinds(h) == {"non-monotonic-poll": 1}
    valid = base()
    seek = valid.invoke("c0", "seek", partitions=["t/0"])
    valid.complete(seek, "ok")
    poll(valid, "c0", [(0, 0, "a")])
    drain(valid, [(0, 0, "a"), (0, 1, "b")])
    assert kinds(valid) == {}


def test_commit_regression() -> None:
    def history(second: int) -> HistoryWriter:
        h = base()
        for offset in (2, second):
            invoked = h.invoke("c0", "commit", group="g", offsets={"t/0": offset})
            h.complete(invoked, "ok")
        drain(h, [(0, 0, "a"), (0, 1, "b")])
        return h

    assert kinds(history(1)) == {"commit-regression": 1}
    assert kinds(history(2)) == {}


def test_replica_divergence_and_under_replication_come_from_the_final_state() -> None:
    h = base()
    drain(h, [(0, 0, "a"), (0, 1, "b")])
    diverged = FinalState(
        replica_logs={(TOPIC, 0): {1: [(0, "a"), (1, "b")], 2: [(0, "a"), (1, "z")]}},
        under_replicated_after_heal=["t-0"],
    )
    assert kinds(h, diverged) == {"replica-divergence": 1, "under-replicated-after-heal": 1}
    same = FinalState(replica_logs={(TOPIC, 0): {1: [(0, "a")], 2: [(0, "a"), (1, "b")]}})
    assert kinds(h, same) == {}


def test_recovery_time_is_from_the_heal_to_the_first_acknowledged_send_after_it() -> None:
    h = writer()
    fault = h.invoke("nemesis", "fault", fault="kill", targets=[1])
    h.complete(fault, "ok")
    heal = h.invoke("nemesis", "fault", fault="restart", targets=[1])
    healed = h.complete(heal, "ok")
    invoked = h.invoke("p0", "send", topic=TOPIC, value="a", acks="all")
    acked = h.complete(invoked, "ok", topic=TOPIC, partition=0, offset=0)
    drain(h, [(0, 0, "a")])
    result = check(h.ops(), FinalState())
    assert result.recovery_ms == ((heal.index, round(acked.time_ms - healed.time_ms, 1)),)


def test_history_round_trips_through_its_file(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    h = HistoryWriter(path, clock=Clock())
    send(h, "p0", "a", "ok", offset=0)
    poll(h, "c0", [(0, 0, "a")])
    h.record("nemesis", "info", "fault", fault="kill", targets=[2], custom="kept")
    h.close()
    with path.open("a") as file:
        file.write('{"index": 9, "time')  # a torn last line
    read = read_history(path)
    assert read == h.ops()
    assert read[-1].extra == {"custom": "kept"}


def _valid_history(draw: st.DrawFn) -> tuple[HistoryWriter, list[Op]]:
    h = writer()
    partitions = draw(st.integers(1, 3))
    next_offset = dict.fromkeys(range(partitions), 0)
    drained: list[tuple[int, int, str]] = []
    acked: list[Op] = []
    for n in range(draw(st.integers(1, 30))):
        partition = draw(st.integers(0, partitions - 1))
        outcome = draw(st.sampled_from(["ok", "ok", "fail", "info"]))
        value = f"v{n}"
        invoked = h.invoke(f"p{n % 3}", "send", topic=TOPIC, partition=partition, value=value)
        if outcome == "ok" or (outcome == "info" and draw(st.booleans())):
            offset = next_offset[partition]
            next_offset[partition] += 1
            drained.append((partition, offset, value))
            if outcome == "ok":
                h.complete(invoked, "ok", topic=TOPIC, partition=partition, offset=offset)
                acked.append(invoked)
                continue
        h.complete(invoked, "fail" if outcome == "fail" else "info", error="E")
    drain(h, drained)
    return h, acked


@st.composite
def valid_histories(draw: st.DrawFn) -> tuple[HistoryWriter, list[Op]]:
    return _valid_history(draw)


@settings(max_examples=60, deadline=None)
@given(valid_histories(), st.data())
def test_generated_valid_histories_are_valid_and_each_dropped_ack_is_one_lost_write(
    generated: tuple[HistoryWriter, list[Op]], data: st.DataObject
) -> None:
    h, acked = generated
    ops = h.ops()
    assert check(ops, FinalState()).valid
    if not acked:
        return
    dropped = data.draw(st.sampled_from(acked))
    drain_op = ops[-1]
    assert drain_op.records is not None
    kept = tuple(r for r in drain_op.records if r[3] != dropped.value)
    changed = [*ops[:-1], Op(**{**_fields(drain_op), "records": kept})]
    result = check(changed, FinalState())
    assert [a.kind for a in result.anomalies] == ["lost-write"]
    assert result.anomalies[0].op_indexes[0] == dropped.index


def _fields(op: Op) -> dict[str, object]:
    return {name: getattr(op, name) for name in Op.__slots__ if not name.startswith("__")}


def test_sends_in_flight_together_are_paired_by_reference() -> None:
    # One producer, two sends in flight, completed in the other order: pairing by process
    # alone would swap them and report two offset mismatches.
    h = writer()
    first = h.invoke("p0", "send", topic=TOPIC, partition=0, value="a")
    second = h.invoke("p0", "send", topic=TOPIC, partition=0, value="b")
    h.complete(second, "ok", topic=TOPIC, partition=0, offset=1)
    h.complete(first, "ok", topic=TOPIC, partition=0, offset=0)
    drain(h, [(0, 0, "a"), (0, 1, "b")])
    assert kinds(h) == {}
