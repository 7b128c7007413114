"""The chaos history format: ops round-trip through JSON and through the file, the writer
numbers and times ops and keeps its file usable after a crash, and the reader rejects every
malformed line (naming it) except the torn last line of a crashed run."""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chaos.history import (
    FUNCTIONS,
    OUTPUT_SEPARATOR,
    HistoryError,
    HistoryLineError,
    HistoryWriter,
    Op,
    read_history,
)


class Clock:
    """A monotonic clock the test moves: seconds, like ``time.monotonic``."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_the_writer_numbers_ops_times_them_from_its_clock_and_pairs_completions() -> None:
    clock = Clock()
    h = HistoryWriter(clock=clock)
    clock.now += 0.0015
    sent = h.invoke("producer-0", "send", topic="t", partition=None, value="p0-000000")
    clock.now += 0.25
    acked = h.complete(sent, "ok", topic="t", partition=2, offset=7)
    assert (sent.index, sent.time_ms, sent.type, sent.f) == (0, 1.5, "invoke", "send")
    assert sent.partition is None and sent.value == "p0-000000"
    assert (acked.index, acked.time_ms, acked.type, acked.f) == (1, 251.5, "ok", "send")
    assert (acked.process, acked.ref, acked.partition, acked.offset) == ("producer-0", 0, 2, 7)
    assert h.ops() == [sent, acked]


def test_ops_returns_a_copy() -> None:
    h = HistoryWriter(clock=Clock())
    h.invoke("nemesis", "fault", fault="kill", targets=[1])
    h.ops().clear()
    assert len(h.ops()) == 1


def test_every_function_of_the_format_round_trips_through_json() -> None:
    h = HistoryWriter(clock=Clock())
    ops = [
        h.invoke(
            "producer-0",
            "send",
            topic="t",
            partition=1,
            value="v",
            acks="all",
            idempotent=True,
            producer="acks-all",
        ),
        h.invoke("consumer-g0-1", "poll", group="g0"),
        h.invoke("consumer-g0-1", "commit", group="g0", offsets={"t/0": 3, "t/1": 0}),
        h.invoke("consumer-g0-1", "rebalance", partitions=["t/0", "t/1"]),
        h.invoke("assign-consumer-0", "seek", partitions=["t/2"]),
        h.invoke("nemesis", "fault", fault="partition", targets=[1, 2], detail="halves"),
        h.invoke("drain", "drain", topic="t"),
        # The transactional pipeline's (the txn-pipeline workload).
        h.invoke(
            "pipeline-0",
            "txn",
            group="p",
            offsets={"t/0": 2},
            records=[("t", 0, 1, "v")],
            txn="0.1",
            transactional_id="chaos-pipeline-0",
            outputs=[f"v{OUTPUT_SEPARATOR}0.1"],
        ),
        h.invoke("pipeline-0", "txn-init", transactional_id="chaos-pipeline-0"),
        h.invoke("offset-fetch-0", "offset-fetch", group="p", partitions=["t/0"]),
        h.invoke("drain", "drain-committed", topic="out", source="t", group="p"),
    ]
    ops.append(h.complete(ops[1], "ok", records=[("t", 0, 0, "v"), ("t", 0, 1, None)]))
    ops.append(h.complete(ops[0], "info", error="REQUEST_TIMED_OUT"))
    ops.append(h.complete(ops[7], "fail", error="PRODUCER_FENCED", aborted=False))
    assert {op.f for op in ops} == set(FUNCTIONS)
    for op in ops:
        document = json.loads(json.dumps(op.to_json()))
        assert Op.from_json(document) == op
    assert ops[2].to_json()["offsets"] == {"t/0": 3, "t/1": 0}
    assert ops[-3].to_json()["records"] == [["t", 0, 0, "v"], ["t", 0, 1, None]]
    assert "partition" not in ops[-2].to_json()  # None fields are left out
    assert ops[7].extra["outputs"] == ["v|0.1"] and ops[-1].extra == {"aborted": False}


def test_unknown_fields_are_kept_in_extra_and_written_back() -> None:
    h = HistoryWriter(clock=Clock())
    op = h.invoke("producer-0", "send", value="v", max_in_flight=1, note={"retries": [1, 2]})
    assert op.extra == {"max_in_flight": 1, "note": {"retries": [1, 2]}}
    document = op.to_json()
    assert document["max_in_flight"] == 1 and document["note"] == {"retries": [1, 2]}
    assert Op.from_json(document).extra == op.extra
    # Kept as the file holds them: a tuple comes back as the list JSON makes of it.
    assert h.invoke("p", "send", value="w", pair=(1, 2)).extra == {"pair": [1, 2]}


def test_an_op_is_a_frozen_hashable_value() -> None:
    op = HistoryWriter(clock=Clock()).invoke("c", "commit", group="g", offsets={"t/0": 1}, x=1)
    with pytest.raises(AttributeError):
        op.index = 3  # type: ignore[misc]
    assert hash(op) == hash(Op.from_json(op.to_json()))


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"offset": "7"}, "offset must be an integer"),
        ({"partition": True}, "partition must be an integer"),
        ({"value": 5}, "value must be a string"),
        ({"idempotent": "yes"}, "idempotent must be true or false"),
        ({"records": [["t", 0, 1]]}, "a record must be"),
        ({"records": "t,0,1,v"}, "records must be a list"),
        ({"offsets": {"t/0": 1.5}}, "offsets must map"),
        ({"targets": ["n1"]}, "targets must be node ids"),
        ({"partitions": [0]}, "partitions must be 'topic/partition' strings"),
        ({"index": 3}, "index is set by the writer"),
        ({"ref": 0}, "ref is set by the writer"),
    ],
)
def test_the_writer_refuses_mistyped_fields(fields: dict[str, Any], reason: str) -> None:
    h = HistoryWriter(clock=Clock())
    with pytest.raises(HistoryError, match=reason):
        h.invoke("p", "send", **fields)
    assert h.ops() == []  # nothing half-recorded


def test_acks_given_as_a_number_is_kept_as_kafka_writes_it() -> None:
    h = HistoryWriter(clock=Clock())
    assert h.invoke("p", "send", acks=-1).acks == "-1"
    assert h.invoke("p", "send", acks=1).acks == "1"


def test_a_completion_completes_one_open_invocation_of_its_writer_once() -> None:
    h = HistoryWriter(clock=Clock())
    sent = h.invoke("p", "send", value="a")
    done = h.complete(sent, "fail", error="NOT_LEADER")
    with pytest.raises(HistoryError, match="not an open invocation"):
        h.complete(sent, "ok")
    with pytest.raises(HistoryError, match="is a completion"):
        h.complete(done, "ok")
    with pytest.raises(HistoryError, match="not 'invoke'"):
        h.complete(h.invoke("p", "send", value="b"), "invoke")
    other = HistoryWriter(clock=Clock())
    with pytest.raises(HistoryError, match="not an open invocation"):
        other.complete(sent, "ok")


def test_sends_in_flight_together_complete_in_any_order() -> None:
    h = HistoryWriter(clock=Clock())
    first = h.invoke("p", "send", value="a")
    second = h.invoke("p", "send", value="b")
    assert h.complete(second, "ok", partition=0, offset=0).ref == second.index
    assert h.complete(first, "info", error="timeout").ref == first.index


def test_each_op_is_on_disk_as_soon_as_it_is_recorded(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    h = HistoryWriter(path, clock=Clock())
    sent = h.invoke("p", "send", topic="t", value="a")
    # Read while the writer is still open, as after a crash of the run.
    assert read_history(path) == [sent]
    acked = h.complete(sent, "ok", topic="t", partition=0, offset=0)
    assert path.read_text().count("\n") == 2
    assert read_history(path) == [sent, acked]
    h.close()
    assert h.ops() == [sent, acked]
    with pytest.raises(HistoryError, match="closed"):
        h.invoke("p", "send", value="b")


def test_the_writer_never_overwrites_a_history(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    path.write_text("earlier run\n")
    with pytest.raises(FileExistsError):
        HistoryWriter(path)
    assert path.read_text() == "earlier run\n"


def test_the_writer_is_a_context_manager(tmp_path: Path) -> None:
    with HistoryWriter(tmp_path / "h.jsonl", clock=Clock()) as h:
        h.invoke("p", "send", value="a")
    with pytest.raises(HistoryError):
        h.invoke("p", "send", value="b")


def test_concurrent_writers_get_distinct_indexes_in_file_order(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    h = HistoryWriter(path)  # the real monotonic clock: times must never go back
    threads, per_thread = 8, 200
    start = threading.Barrier(threads)

    def work(n: int) -> None:
        start.wait()
        for i in range(per_thread):
            invoked = h.invoke(f"producer-{n}", "send", topic="t", value=f"p{n}-{i}")
            h.complete(invoked, "ok", topic="t", partition=n, offset=i)

    workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    h.close()
    ops = read_history(path)  # checks indexes count up, times never go back, refs pair
    assert ops == h.ops()
    assert [op.index for op in ops] == list(range(2 * threads * per_thread))
    by_index = {op.index: op for op in ops}
    for op in ops:
        if op.type == "ok":
            invoked = by_index[op.ref or 0]
            assert (invoked.process, invoked.value) == (op.process, f"p{op.partition}-{op.offset}")


def write_lines(path: Path, *lines: str, end: str = "\n") -> None:
    path.write_text("\n".join(lines) + end)


def line(index: int, **fields: Any) -> str:
    document = {
        "index": index,
        "time_ms": float(index),
        "process": "p",
        "type": "invoke",
        "f": "send",
        **fields,
    }
    return json.dumps(document)


def test_a_torn_last_line_is_ignored_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "history.jsonl"
    write_lines(path, line(0, value="a"), line(1, value="b")[:17], end="")
    with caplog.at_level(logging.WARNING, logger="chaos.history"):
        ops = read_history(path)
    assert [op.value for op in ops] == ["a"]
    assert "torn last line ignored" in caplog.text and "line=2" in caplog.text


def test_a_torn_last_line_may_cut_a_multibyte_character(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    path.write_bytes(line(0, value="a").encode() + b"\n" + '{"value": "é'.encode()[:-1])
    assert [op.value for op in read_history(path)] == ["a"]


def test_a_last_line_that_only_lost_its_newline_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    write_lines(path, line(0, value="a"), line(1, value="b"), end="")
    assert [op.value for op in read_history(path)] == ["a", "b"]


@pytest.mark.parametrize(
    ("lines", "bad_line", "reason"),
    [
        ([line(0), "{not json", line(1)], 2, "not JSON"),
        ([line(0), "", line(1)], 2, "not JSON"),
        ([line(0), "[1, 2]"], 2, "not a JSON object"),
        ([line(0), line(1, value=7)], 2, "value must be a string"),
        ([line(0), line(1, type="done")], 2, "type must be one of"),
        (
            [line(0), json.dumps({"index": 1, "time_ms": 1.0, "process": "p", "f": "send"})],
            2,
            "missing field 'type'",
        ),
        ([line(0), line(1, process="")], 2, "process must be a non-empty string"),
        ([line(0), line(1, time_ms="soon")], 2, "time_ms must be a finite number"),
        ([line(0), line(2)], 2, "index 2, expected 1"),
        ([line(1)], 1, "index 1, expected 0"),
        ([line(0), line(1), line(2, time_ms=0.5)], 3, "time_ms 0.5 is before"),
        ([line(0), line(1, type="ok", ref=5)], 2, "ref 5 is not an open send invocation"),
        ([line(0), line(1, type="ok", ref=0, process="q")], 2, "not an open send invocation"),
        ([line(0), line(1, type="ok", ref=0, f="poll")], 2, "not an open poll invocation"),
        ([line(0), line(1, type="ok", ref=0), line(2, type="ok", ref=0)], 3, "ref 0"),
        ([line(0, ref=0)], 1, "an invocation has no ref"),
        # A complete last line (it has its newline) is not torn: it is malformed.
        ([line(0), "{torn"], 2, "not JSON"),
    ],
)
def test_a_malformed_line_raises_naming_its_number(
    tmp_path: Path, lines: list[str], bad_line: int, reason: str
) -> None:
    path = tmp_path / "history.jsonl"
    write_lines(path, *lines)
    with pytest.raises(HistoryLineError, match=reason) as raised:
        read_history(path)
    assert raised.value.line == bad_line
    assert raised.value.path == path
    assert str(raised.value).startswith(f"{path}:{bad_line}: ")


def test_an_unterminated_last_line_that_is_json_but_not_an_op_is_malformed(
    tmp_path: Path,
) -> None:
    path = tmp_path / "history.jsonl"
    write_lines(path, line(0), line(1, offset="x"), end="")
    with pytest.raises(HistoryLineError, match="offset must be an integer") as raised:
        read_history(path)
    assert raised.value.line == 2


def test_an_empty_history_reads_as_no_ops(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    HistoryWriter(path).close()
    assert read_history(path) == []


_names = st.text(st.characters(codec="utf-8"), min_size=1)
_values = st.one_of(st.none(), _names)


@st.composite
def _op_fields(draw: st.DrawFn) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "topic": draw(_values),
        "partition": draw(st.none() | st.integers(0, 100)),
        "offset": draw(st.none() | st.integers(-1, 2**40)),
        "value": draw(_values),
        "records": draw(
            st.none()
            | st.lists(st.tuples(_names, st.integers(0, 9), st.integers(0, 2**40), _values))
        ),
        "offsets": draw(st.none() | st.dictionaries(_names, st.integers(0, 2**40))),
        "partitions": draw(st.none() | st.lists(_names)),
        "targets": draw(st.none() | st.lists(st.integers(0, 9))),
        "idempotent": draw(st.none() | st.booleans()),
        "custom": draw(st.none() | st.integers() | _names | st.lists(st.integers())),
    }
    return fields


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(_names, _op_fields(), st.sampled_from(["ok", "fail", "info", None]))))
def test_any_history_reads_back_as_written(
    tmp_path_factory: pytest.TempPathFactory,
    calls: list[tuple[str, dict[str, Any], str | None]],
) -> None:
    path = tmp_path_factory.mktemp("history") / "history.jsonl"
    clock = Clock()
    with HistoryWriter(path, clock=clock) as h:
        for process, fields, outcome in calls:
            clock.now += 0.001
            invoked = h.invoke(process, "send", **fields)
            if outcome is not None:
                h.complete(invoked, outcome, **fields)  # type: ignore[arg-type]
    assert read_history(path) == h.ops()
