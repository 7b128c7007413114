"""The chaos checker on hand-made histories: each anomaly kind is found in a history that has
exactly that anomaly, and its near-identical valid twin is not flagged (a checker that cannot
fail is worthless); indeterminate sends are never held against the system; generated valid
histories are valid, and dropping any acknowledged value from their drain is one lost write.
"""

# Over 600 lines: each anomaly kind with its valid twin, built by the same history helpers.
from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import replace
from typing import Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chaos.checker import KINDS, CheckResult, FinalState, check
from chaos.history import OUTPUT_SEPARATOR, HistoryError, HistoryWriter, Op
from chaos.report import render_report

TOPIC = "t"
Outcome = Literal["ok", "fail", "info", "none"]


class Clock:
    """A clock that advances 1 ms per reading."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 0.001
        return self.now


class History:
    """A hand-made history: helpers that record whole operations."""

    def __init__(self) -> None:
        self.h = HistoryWriter(clock=Clock())

    def ops(self) -> list[Op]:
        return self.h.ops()

    def send(
        self,
        process: str,
        value: str,
        outcome: Outcome = "ok",
        partition: int = 0,
        offset: int | None = None,
        idempotent: bool | None = True,
        acks: str = "all",
    ) -> tuple[int, ...]:
        """One send, invoked and completed; returns its op indexes."""
        invoked = self.invoke_send(process, value, partition, idempotent, acks)
        if outcome == "none":
            return (invoked.index,)
        return (invoked.index, self.complete_send(invoked, outcome, partition, offset).index)

    def invoke_send(
        self,
        process: str,
        value: str,
        partition: int = 0,
        idempotent: bool | None = True,
        acks: str = "all",
    ) -> Op:
        return self.h.invoke(
            process,
            "send",
            topic=TOPIC,
            partition=partition,
            value=value,
            acks=acks,
            idempotent=idempotent,
        )

    def complete_send(
        self, invoked: Op, outcome: Outcome, partition: int = 0, offset: int | None = None
    ) -> Op:
        if outcome == "ok":
            return self.h.complete(invoked, "ok", topic=TOPIC, partition=partition, offset=offset)
        assert outcome in ("fail", "info")
        return self.h.complete(invoked, outcome, error="REQUEST_TIMED_OUT")

    def poll(self, process: str, records: list[tuple[int, int, str]]) -> int:
        """One ok poll of (partition, offset, value) records; returns its completion index."""
        invoked = self.h.invoke(process, "poll", group=None)
        done = self.h.complete(invoked, "ok", records=[(TOPIC, p, o, v) for p, o, v in records])
        return done.index

    def op(self, process: str, f: str, outcome: Outcome = "ok", **fields: object) -> Op:
        invoked = self.h.invoke(process, f, **fields)
        if outcome == "none":
            return invoked
        return self.h.complete(invoked, outcome)

    def commit(
        self, process: str, group: str, offsets: dict[str, int], outcome: Outcome = "ok"
    ) -> Op:
        return self.op(process, "commit", outcome, group=group, offsets=offsets)

    def drain(self, records: list[tuple[int, int, str]]) -> None:
        invoked = self.h.invoke("drain", "drain")
        self.h.complete(invoked, "ok", records=[(TOPIC, p, o, v) for p, o, v in records])

    def check(self, final: FinalState | None = None) -> CheckResult:
        return check(self.ops(), final or FinalState())

    def kinds(self, final: FinalState | None = None) -> dict[str, int]:
        return {kind: n for kind, n in self.check(final).counts.items() if n}


def base() -> History:
    """Acknowledged writes to two partitions, polled in order: valid once drained."""
    h = History()
    h.send("p0", "a", offset=0)
    h.send("p0", "b", offset=1)
    h.send("p1", "c", partition=1, offset=0)
    h.poll("c0", [(0, 0, "a"), (0, 1, "b"), (1, 0, "c")])
    return h


FULL_DRAIN = [(0, 0, "a"), (0, 1, "b"), (1, 0, "c")]


def only(h: History, kind: str, final: FinalState | None = None) -> tuple[int, ...]:
    """Asserts the history has exactly one anomaly, of ``kind``; returns its ops."""
    result = h.check(final)
    assert [a.kind for a in result.anomalies] == [kind], result.anomalies
    assert "\n" not in result.anomalies[0].message
    assert not result.valid
    return result.anomalies[0].op_indexes


def test_a_clean_history_is_valid() -> None:
    h = base()
    h.drain(FULL_DRAIN)
    result = h.check()
    assert result.valid
    assert result.anomalies == ()
    assert result.counts == dict.fromkeys(KINDS, 0)


# --- each kind: a history with exactly it, and its valid twin -----------------------------


def test_lost_write() -> None:
    h = History()
    h.send("p0", "a", offset=0)
    b = h.send("p0", "b", offset=1, acks="1")
    h.drain([(0, 0, "a")])
    assert only(h, "lost-write") == b
    message = h.check().anomalies[0].message
    assert message == "b sent by p0 was acknowledged at t-0@1 (acks=1) but the drain lacks it"
    twin = History()
    twin.send("p0", "a", offset=0)
    twin.send("p0", "b", offset=1, acks="1")
    twin.drain([(0, 0, "a"), (0, 1, "b")])
    assert twin.kinds() == {}


@pytest.mark.parametrize("outcome", ["fail", "info", "none"])
def test_a_write_that_was_not_acknowledged_is_never_lost(outcome: Outcome) -> None:
    h = base()
    h.send("p0", "d", outcome)
    h.drain(FULL_DRAIN)
    assert h.kinds() == {}


@pytest.mark.parametrize("outcome", ["info", "none"])
@pytest.mark.parametrize("present", [True, False])
def test_an_indeterminate_send_may_or_may_not_be_in_the_drain(
    outcome: Outcome, present: bool
) -> None:
    h = base()
    h.send("p0", "d", outcome)
    h.drain(FULL_DRAIN + ([(0, 2, "d")] if present else []))
    assert h.kinds() == {}


def test_an_indeterminate_send_a_poll_saw_is_still_a_dirty_read_if_the_drain_lacks_it() -> None:
    h = base()
    d = h.send("p0", "d", "info")
    seen = h.poll("c0", [(0, 2, "d")])
    h.drain(FULL_DRAIN)
    assert only(h, "dirty-read") == (seen, *d)
    twin = base()
    twin.send("p0", "d", "info")
    twin.poll("c0", [(0, 2, "d")])
    twin.drain([*FULL_DRAIN, (0, 2, "d")])
    assert twin.kinds() == {}


@pytest.mark.parametrize(
    ("outcome", "idempotent", "said"),
    [
        ("ok", True, "idempotent"),
        ("ok", False, "non-idempotent"),
        ("ok", None, "idempotence unknown"),
        ("info", True, "idempotent"),  # an unknown send is still not to be written twice
    ],
)
def test_duplicate(outcome: Outcome, idempotent: bool | None, said: str) -> None:
    def history(twice: bool) -> tuple[History, tuple[int, ...]]:
        h = History()
        h.send("p0", "a", offset=0)
        b = h.send("p0", "b", outcome, offset=1, idempotent=idempotent)
        h.drain([(0, 0, "a"), (0, 1, "b")] + ([(0, 2, "b")] if twice else []))
        return h, b

    h, b = history(twice=True)
    assert only(h, "duplicate") == b
    message = h.check().anomalies[0].message
    assert message.startswith("b is in the drain 2 times, at t-0@1, t-0@2 (sent by p0: ")
    assert f": {said}, acks=all, send {outcome})" in message
    assert history(twice=False)[0].kinds() == {}


def test_a_duplicate_across_partitions_is_a_duplicate() -> None:
    h = History()
    a = h.send("p0", "a", offset=0)
    h.drain([(0, 0, "a"), (1, 0, "a")])
    assert only(h, "duplicate") == a


def test_offset_mismatch() -> None:
    def history(acked_at: int) -> tuple[History, tuple[int, ...]]:
        h = History()
        a = h.send("p0", "a", offset=acked_at)
        h.drain([(0, 0, "a")])
        return h, a

    h, a = history(acked_at=5)
    assert only(h, "offset-mismatch") == a
    assert h.check().anomalies[0].message == (
        "a was acknowledged at t-0@5; the drain has it at t-0@0"
    )
    assert history(acked_at=0)[0].kinds() == {}


def test_an_ack_in_the_wrong_partition_is_an_offset_mismatch() -> None:
    h = History()
    invoked = h.invoke_send("p0", "a", partition=1)
    h.complete_send(invoked, "ok", partition=1, offset=0)
    h.drain([(0, 0, "a")])
    assert only(h, "offset-mismatch") == (invoked.index, invoked.index + 1)


def test_a_poll_at_an_offset_the_drain_does_not_have_is_an_offset_mismatch() -> None:
    def history(polled_at: int) -> tuple[History, int]:
        h = History()
        h.send("p0", "a", offset=0)
        seen = h.poll("c0", [(0, polled_at, "a")])
        h.drain([(0, 0, "a")])
        return h, seen

    h, seen = history(polled_at=3)
    assert only(h, "offset-mismatch") == (seen,)
    assert history(polled_at=0)[0].kinds() == {}


def test_an_ack_without_an_offset_is_not_a_mismatch() -> None:
    # acks=0: the producer learns no offset (Kafka reports -1).
    h = History()
    h.send("p0", "a", offset=-1, acks="0")
    h.drain([(0, 0, "a")])
    assert h.kinds() == {}


def test_offset_conflict_between_a_poll_and_the_drain() -> None:
    def history(polled_at: int) -> tuple[History, int]:
        h = base()
        seen = h.poll("c1", [(0, polled_at, "b")])  # b, which the drain has at offset 1
        h.drain(FULL_DRAIN)
        return h, seen

    h, seen = history(polled_at=0)
    assert only(h, "offset-conflict") == (1, 7, seen)  # a's ack, the first poll, c1's
    assert h.check().anomalies[0].message == (
        "t-0@0 was seen with 2 values: 'a' by the drain, ack op 1, poll op 7; 'b' by poll op 9"
    )
    assert history(polled_at=1)[0].kinds() == {}


def test_offset_conflict_between_two_acks() -> None:
    # An unclean election: a was acknowledged at offset 1, then the new leader gave offset 1
    # to b. The drain has b there and a later on: a's ack is also an offset mismatch.
    h = History()
    a = h.send("p0", "a", offset=1)
    b = h.send("p1", "b", offset=1)
    h.drain([(0, 0, "x"), (0, 1, "b"), (0, 2, "a")])
    result = h.check()
    assert result.counts["offset-conflict"] == 1
    assert result.counts["offset-mismatch"] == 1
    conflict = next(x for x in result.anomalies if x.kind == "offset-conflict")
    assert conflict.op_indexes == (a[1], b[1])


def test_offset_conflict_between_two_polls() -> None:
    def history(second: str) -> History:
        h = History()
        h.send("p0", "a", offset=0)
        h.send("p0", "b", "info")
        h.poll("c0", [(0, 0, "a")])
        h.poll("c1", [(0, 0, second)])
        h.drain([(0, 0, "a"), (0, 1, "b")])
        return h

    assert only(history("b"), "offset-conflict") == (1, 5, 7)
    assert history("a").kinds() == {}


def test_failed_write_read_by_the_drain() -> None:
    def history(drained: bool) -> tuple[History, tuple[int, ...]]:
        h = base()
        d = h.send("p0", "d", "fail")
        h.drain(FULL_DRAIN + ([(0, 2, "d")] if drained else []))
        return h, d

    h, d = history(drained=True)
    assert only(h, "failed-write-read") == d
    assert h.check().anomalies[0].message == (
        "d's send by p0 failed (REQUEST_TIMED_OUT) but the drain (at t-0@2) read it"
    )
    assert history(drained=False)[0].kinds() == {}


def test_failed_write_read_by_a_poll() -> None:
    h = base()
    d = h.send("p0", "d", "fail")
    seen = h.poll("c0", [(0, 2, "d")])
    h.drain([*FULL_DRAIN, (0, 2, "d")])
    assert only(h, "failed-write-read") == (*d, seen)
    # Polled but then gone from the log: also a dirty read.
    gone = base()
    gone.send("p0", "d", "fail")
    gone.poll("c0", [(0, 2, "d")])
    gone.drain(FULL_DRAIN)
    assert gone.kinds() == {"failed-write-read": 1, "dirty-read": 1}


def test_dirty_read() -> None:
    def history(drained: bool) -> tuple[History, tuple[int, ...], int]:
        h = History()
        a = h.send("p0", "a", "info")
        seen = h.poll("c0", [(0, 0, "a")])
        h.poll("c0", [(0, 1, "b")])  # b was never sent: still read, still in the drain
        h.drain(([(0, 0, "a")] if drained else []) + [(0, 1, "b")])
        return h, a, seen

    h, a, seen = history(drained=False)
    assert only(h, "dirty-read") == (seen, *a)
    assert "(sent by p0: idempotent, acks=all, send info)" in h.check().anomalies[0].message
    assert history(drained=True)[0].kinds() == {}


def test_an_acknowledged_write_polled_then_lost_is_a_lost_write_and_a_dirty_read() -> None:
    h = base()
    h.drain([(0, 0, "a"), (1, 0, "c")])
    assert h.kinds() == {"lost-write": 1, "dirty-read": 1}


def test_producer_order_only_for_producers_that_promise_it() -> None:
    # a was sent before b, yet the log (and the acks) put b first: a retried batch jumped
    # ahead, which idempotence exists to prevent.
    def history(idempotent: bool | None, **extra: object) -> tuple[History, tuple[int, ...]]:
        h = History()
        first = h.h.invoke("p0", "send", topic=TOPIC, value="a", idempotent=idempotent, **extra)
        second = h.h.invoke("p0", "send", topic=TOPIC, value="b", idempotent=idempotent, **extra)
        acked_b = h.complete_send(second, "ok", offset=0)
        acked_a = h.complete_send(first, "ok", offset=1)
        h.drain([(0, 0, "b"), (0, 1, "a")])
        return h, (first.index, acked_a.index, second.index, acked_b.index)

    h, indexes = history(idempotent=True)
    assert only(h, "producer-order") == indexes
    assert h.check().anomalies[0].message == (
        "p0 sent a before b, but the drain has them at t-0@1 and @0"
    )
    assert history(idempotent=False)[0].kinds() == {}
    assert history(idempotent=None)[0].kinds() == {}
    assert history(idempotent=False, max_in_flight=1)[0].kinds() == {"producer-order": 1}


def test_producer_order_holds_for_sends_in_flight_together() -> None:
    # Completions in another order than the sends do not matter: the log order does. And
    # sends in flight together are paired with their completions by reference: pairing by
    # process alone would swap them and report two offset mismatches.
    h = History()
    first = h.invoke_send("p0", "a")
    second = h.invoke_send("p0", "b")
    h.complete_send(second, "ok", offset=1)
    h.complete_send(first, "ok", offset=0)
    h.drain([(0, 0, "a"), (0, 1, "b")])
    assert h.kinds() == {}


def test_producer_order_is_per_producer_and_partition() -> None:
    h = History()
    h.send("p0", "a", offset=1)
    h.send("p1", "b", offset=0)  # another producer: no order between p0 and p1
    h.send("p0", "c", partition=1, offset=0)  # another partition
    h.drain([(0, 0, "b"), (0, 1, "a"), (1, 0, "c")])
    assert h.kinds() == {}


def test_non_monotonic_poll() -> None:
    h = base()
    first = h.poll("c0", [(0, 1, "b")])  # base's poll (op 7) read up to t-0@1
    h.drain(FULL_DRAIN)
    assert only(h, "non-monotonic-poll") == (7, first)
    assert h.check().anomalies[0].message == (
        "c0 polled t-0@1 after @1 (op 7) with no rebalance or seek between"
    )


def test_non_monotonic_poll_within_one_poll_is_reported_once() -> None:
    h = History()
    h.send("p0", "a", offset=0)
    h.send("p0", "b", offset=1)
    seen = h.poll("c0", [(0, 1, "b"), (0, 0, "a"), (0, 0, "a")])
    h.drain([(0, 0, "a"), (0, 1, "b")])
    assert only(h, "non-monotonic-poll") == (seen,)


@pytest.mark.parametrize(
    ("between", "expected"),
    [
        (lambda h: h.op("c0", "seek", partitions=["t/0"]), {}),
        (lambda h: h.op("c0", "seek"), {}),  # every partition
        (lambda h: h.op("c0", "seek", "info", partitions=["t/0"]), {}),  # it may have moved
        (lambda h: h.op("c0", "rebalance", partitions=["t/0", "t/1"]), {}),
        (lambda h: h.op("c0", "rebalance", "none"), {}),
        (lambda h: h.op("c0", "seek", "fail", partitions=["t/0"]), {"non-monotonic-poll": 1}),
        (lambda h: h.op("c0", "seek", partitions=["t/1"]), {"non-monotonic-poll": 1}),
        (lambda h: h.op("c1", "rebalance", partitions=["t/0"]), {"non-monotonic-poll": 1}),
        (lambda h: h.poll("c1", [(0, 0, "a")]), {"non-monotonic-poll": 1}),
    ],
)
def test_non_monotonic_poll_unless_that_consumer_seeked_or_rebalanced(
    between: Callable[[History], object], expected: dict[str, int]
) -> None:
    h = base()
    between(h)
    h.poll("c0", [(0, 0, "a"), (0, 1, "b")])
    h.drain(FULL_DRAIN)
    assert h.kinds() == expected


def test_a_consumer_moving_on_is_monotonic() -> None:
    h = base()
    h.send("p0", "d", offset=2)
    h.poll("c0", [(0, 2, "d")])
    h.poll("c0", [])
    h.drain([*FULL_DRAIN, (0, 2, "d")])
    assert h.kinds() == {}


def test_commit_regression() -> None:
    def history(second: int) -> tuple[History, Op, Op]:
        h = base()
        earlier = h.commit("c0", "g", {"t/0": 2, "t/1": 1})
        later = h.commit("c1", "g", {"t/0": second})
        h.drain(FULL_DRAIN)
        return h, earlier, later

    h, earlier, later = history(second=1)
    ops = (earlier.ref, earlier.index, later.ref, later.index)
    assert only(h, "commit-regression") == ops
    assert h.check().anomalies[0].message == (
        f"group g committed t/0 at 1 after its commit at 2 (op {earlier.ref}) was acknowledged"
    )
    assert history(second=2)[0].kinds() == {}
    assert history(second=3)[0].kinds() == {}


@pytest.mark.parametrize(
    "history",
    [
        # Commits that overlapped in time: either may have been applied last.
        "overlapping",
        # The higher commit failed, or its outcome is unknown: nothing was acknowledged.
        "fail",
        "info",
        # Another group's offsets are its own.
        "other-group",
    ],
)
def test_commits_that_do_not_regress(history: str) -> None:
    h = base()
    if history == "overlapping":
        high = h.h.invoke("c0", "commit", group="g", offsets={"t/0": 2})
        low = h.h.invoke("c1", "commit", group="g", offsets={"t/0": 1})
        h.h.complete(high, "ok")
        h.h.complete(low, "ok")
    else:
        outcome: Outcome = "ok" if history == "other-group" else history  # type: ignore[assignment]
        h.commit("c0", "g", {"t/0": 2}, outcome)
        h.commit("c1", "h" if history == "other-group" else "g", {"t/0": 1})
    h.drain(FULL_DRAIN)
    assert h.kinds() == {}


def test_replica_divergence() -> None:
    h = base()
    h.drain(FULL_DRAIN)
    diverged = FinalState(
        replica_logs={
            (TOPIC, 0): {1: [(0, "a"), (1, "b")], 2: [(0, "a"), (1, "z")], 3: [(0, "y")]},
            (TOPIC, 1): {1: [(0, "c")], 2: [(0, "c")]},
        }
    )
    assert only(h, "replica-divergence", diverged) == ()
    assert h.check(diverged).anomalies[0].message == (
        "t-0's replicas differ below the high watermark at 2 offset(s); first t-0@0: "
        "node 1, 2: 'a'; node 3: 'y'"
    )
    same = FinalState(
        replica_logs={(TOPIC, 0): {1: [(0, "a")], 2: [(0, "a"), (1, "b")], 3: []}},
    )
    assert h.kinds(same) == {}


def test_under_replicated_after_heal() -> None:
    h = base()
    h.drain(FULL_DRAIN)
    final = FinalState(under_replicated_after_heal=["t-1"])
    assert only(h, "under-replicated-after-heal", final) == ()
    assert h.check(final).anomalies[0].message == "t-1 stayed under-replicated after healing"
    assert h.kinds(FinalState(under_replicated_after_heal=[])) == {}


def test_undrained_partition_is_reported_and_what_was_sent_to_it_is_not_called_lost() -> None:
    h = base()
    h.send("p0", "d", partition=1)  # acknowledged without an offset: its partition counts
    # Partition 1 could not be read after healing: only partition 0 was drained.
    final = FinalState(drained={(TOPIC, 0): [(0, "a"), (1, "b")]}, undrained=[(TOPIC, 1)])
    assert only(h, "undrained", final) == ()
    assert h.check(final).anomalies[0].message == (
        "t-1 could not be drained after healing: its acknowledged sends are not known to be "
        "lost or kept"
    )
    # Without it, "c" (acknowledged, polled) and "d" are lost, "c" a dirty read too.
    assert h.kinds(FinalState(drained={(TOPIC, 0): [(0, "a"), (1, "b")]})) == {
        "lost-write": 2,
        "dirty-read": 1,
    }


def test_an_undrained_partition_does_not_hide_a_loss_in_a_drained_one() -> None:
    h = base()
    final = FinalState(drained={(TOPIC, 0): [(0, "a")]}, undrained=[(TOPIC, 1)])
    assert h.kinds(final) == {"lost-write": 1, "dirty-read": 1, "undrained": 1}


def test_node_halted() -> None:
    h = base()
    h.drain(FULL_DRAIN)
    line = (
        "node 2 halted 3 time(s), first: where=task fetcher-1 "
        "error_type=ReplicationInvariantError error=replica=2 leader_epoch=2 would truncate "
        "to 0, below its high watermark 938 exit_code=70"
    )
    final = FinalState(drained={}, halted_nodes=[line])
    assert only(h, "node-halted", final) == ()
    assert h.check(final).anomalies[0].message == line


def test_every_kind_has_a_test_of_its_own() -> None:
    names = [name for name in globals() if name.startswith("test_")]
    for kind in KINDS:
        assert any(name.startswith(f"test_{kind.replace('-', '_')}") for name in names), kind


# --- the drain, pairing, statistics, recovery ---------------------------------------------


def test_the_drain_of_the_final_state_is_used_when_given() -> None:
    h = History()
    h.send("p0", "a", offset=0)
    assert h.kinds(FinalState(drained={(TOPIC, 0): [(0, "a")]})) == {}
    assert h.kinds(FinalState(drained={(TOPIC, 0): []})) == {"lost-write": 1}
    assert h.kinds() == {"lost-write": 1}  # no drain at all: nothing acknowledged survived


def test_the_drain_op_and_the_final_state_give_the_same_result() -> None:
    h = base()
    h.send("p0", "d", "info")
    h.poll("c0", [(0, 0, "a")])
    h.drain([(0, 0, "a"), (0, 2, "d")])
    drained = {(TOPIC, 0): [(0, "a"), (2, "d")]}
    assert h.check() == h.check(FinalState(drained=drained))
    assert h.kinds() == {"lost-write": 2, "dirty-read": 2, "non-monotonic-poll": 1}


def test_completions_without_refs_pair_with_their_process_open_invocation() -> None:
    # A hand-written history (no refs): each process has one operation open at a time.
    ops = [
        Op(0, 0.0, "p0", "invoke", "send", topic=TOPIC, partition=0, value="a"),
        Op(1, 1.0, "p1", "invoke", "send", topic=TOPIC, partition=0, value="b"),
        Op(2, 2.0, "p1", "ok", "send", topic=TOPIC, partition=0, offset=1),
        Op(3, 3.0, "p0", "ok", "send", topic=TOPIC, partition=0, offset=0),
        Op(4, 4.0, "p2", "ok", "send", topic=TOPIC, partition=0, offset=9),  # of nothing
        Op(5, 5.0, "drain", "invoke", "drain"),
        Op(6, 6.0, "drain", "ok", "drain", records=((TOPIC, 0, 0, "a"), (TOPIC, 0, 1, "b"))),
    ]
    result = check(ops, FinalState())
    assert result.valid
    assert result.stats["send-ok"] == 2


def test_a_value_sent_twice_is_a_broken_history() -> None:
    h = History()
    h.send("p0", "a", offset=0)
    h.send("p1", "a", offset=1)
    with pytest.raises(HistoryError, match="'a' was sent twice"):
        h.check()


def test_stats_count_operations_by_outcome_and_records_read() -> None:
    h = base()
    h.send("p0", "d", "fail")
    h.send("p0", "e", "info")
    h.send("p0", "f", "none")
    h.commit("c0", "g", {"t/0": 2})
    h.op("nemesis", "fault", fault="kill", targets=[1])
    h.op("c0", "poll", "fail")
    h.drain(FULL_DRAIN)
    stats = h.check().stats
    assert {k: v for k, v in stats.items() if k.startswith("send-")} == {
        "send-invoked": 6,
        "send-ok": 3,
        "send-fail": 1,
        "send-info": 2,  # one unknown, one never completed
    }
    assert (stats["poll-invoked"], stats["poll-ok"], stats["poll-fail"]) == (2, 1, 1)
    assert (stats["commit-invoked"], stats["commit-ok"]) == (1, 1)
    assert (stats["fault-invoked"], stats["fault-ok"]) == (1, 1)
    assert (stats["records-polled"], stats["records-drained"]) == (3, 3)


def test_every_stat_is_present_in_an_empty_history() -> None:
    stats = check([], FinalState()).stats
    for f in ("send", "poll", "commit", "fault"):
        for what in ("invoked", "ok", "fail", "info"):
            assert stats[f"{f}-{what}"] == 0


def test_recovery_is_from_each_heal_to_the_first_acks_all_ack_of_a_send_invoked_after_it() -> None:
    h = History()
    h.op("nemesis", "fault", fault="kill", targets=[1])
    before = h.invoke_send("p0", "a")  # invoked before the heal: does not count
    healed = h.op("nemesis", "fault", fault="restart", targets=[1])
    h.complete_send(before, "ok", offset=0)
    h.send("p1", "b", acks="1", offset=1)  # acks=1: does not count
    h.send("p2", "c", "info")  # not acknowledged
    slow = h.invoke_send("p3", "d")  # invoked first after the heal, acknowledged last
    fast = h.invoke_send("p4", "e")
    fast_ack = h.complete_send(fast, "ok", offset=2)
    h.complete_send(slow, "ok", offset=3)
    h.op("nemesis", "fault", fault="pause", targets=[2])
    never = h.op("nemesis", "fault", fault="resume", targets=[2])  # nothing acked after it
    h.op("nemesis", "fault", "fail", fault="heal", targets=[1, 2])  # a failed heal: none
    h.drain([(0, 0, "a"), (0, 1, "b"), (0, 2, "e"), (0, 3, "d")])
    result = h.check()
    assert result.valid
    assert healed.ref is not None and never.ref is not None
    assert result.recovery_ms == (
        (healed.ref, round(fast_ack.time_ms - healed.time_ms, 1)),
        (never.ref, None),
    )
    assert result.recovery_ms[0][1] == 8.0  # the clock reads 1 ms per op: 8 ops later


def test_recovery_from_heal_times_the_runner_gives() -> None:
    h = History()
    h.send("p0", "a", offset=0)  # its invocation at 1 ms, its ack at 2 ms
    h.drain([(0, 0, "a")])
    assert h.check(FinalState(heal_times_ms=[(7, 0.5)])).recovery_ms == ((7, 1.5),)
    assert h.check(FinalState(heal_times_ms=[(7, 1.5)])).recovery_ms == ((7, None),)


def test_the_result_is_json_and_deterministic() -> None:
    h = base()
    h.poll("c0", [(0, 0, "a")])
    h.send("p0", "d", "fail")
    heal = h.op("nemesis", "fault", fault="heal", targets=[1])
    h.drain([(0, 0, "a"), (0, 2, "d")])
    final = FinalState(under_replicated_after_heal=["t-0"])
    first, second = check(h.ops(), final), check(list(h.ops()), final)
    assert first == second
    document = json.loads(json.dumps(first.to_json()))
    assert document["valid"] is False
    assert set(document["counts"]) == set(KINDS)
    assert document["counts"]["lost-write"] == 2
    assert document["recovery_ms"] == [{"fault_op": heal.ref, "ms": None}]
    assert [a["kind"] for a in document["anomalies"]] == sorted(
        (a["kind"] for a in document["anomalies"]), key=KINDS.index
    )
    assert all(set(a) == {"kind", "message", "ops"} for a in document["anomalies"])


# --- generated histories ------------------------------------------------------------------


class _Run:
    """A generated run against a model log that behaves as promised (acks=all,
    idempotence): each send lands, if it lands, when it is invoked, so every producer's
    records are in invocation order; completions come back in any order."""

    def __init__(self, rng: random.Random, partitions: int) -> None:
        self.rng = rng
        self.h = History()
        self.logs: list[list[str]] = [[] for _ in range(partitions)]
        self.in_flight: list[tuple[Op, Outcome, int | None]] = []
        self.positions: dict[str, dict[int, int]] = {}
        self.committed: dict[tuple[str, str], int] = {}
        self.acked: list[tuple[str, tuple[int, ...]]] = []  # (value, send op indexes)
        self.polled: set[str] = set()
        self.sent = 0

    def step(self) -> None:
        action = self.rng.choice(["send", "send", "complete", "complete", "poll", "other"])
        if action == "send" or (action == "complete" and not self.in_flight):
            self.send()
        elif action == "complete":
            self.complete(self.in_flight.pop(self.rng.randrange(len(self.in_flight))))
        elif action == "poll":
            self.poll(self.rng.choice(["c0", "c1"]))
        else:
            self.other()

    def send(self) -> None:
        process = f"p{self.rng.randrange(3)}"
        partition = self.rng.randrange(len(self.logs))
        value = f"{process}-{self.sent}"
        self.sent += 1
        outcomes: list[Outcome] = ["ok", "ok", "ok", "fail", "info", "none"]
        outcome = self.rng.choice(outcomes)
        lands = outcome == "ok" or (outcome in ("info", "none") and self.rng.random() < 0.5)
        invoked = self.h.invoke_send(process, value, partition, idempotent=True)
        offset = None
        if lands:
            offset = len(self.logs[partition])
            self.logs[partition].append(value)
        self.in_flight.append((invoked, outcome, offset))

    def complete(self, call: tuple[Op, Outcome, int | None]) -> None:
        invoked, outcome, offset = call
        if outcome == "none":
            return  # never completes
        assert invoked.partition is not None
        done = self.h.complete_send(invoked, outcome, invoked.partition, offset)
        if outcome == "ok":
            assert invoked.value is not None
            self.acked.append((invoked.value, (invoked.index, done.index)))

    def poll(self, consumer: str) -> None:
        positions = self.positions.setdefault(consumer, {})
        records = []
        for partition, log in enumerate(self.logs):
            start = positions.get(partition, 0)
            end = min(len(log), start + self.rng.randrange(4))
            records += [(partition, offset, log[offset]) for offset in range(start, end)]
            positions[partition] = end
        self.polled.update(value for _, _, value in records)
        self.h.poll(consumer, records)

    def other(self) -> None:
        consumer = self.rng.choice(["c0", "c1"])
        positions = self.positions.setdefault(consumer, {})
        kind = self.rng.choice(["seek", "rebalance", "commit", "fault"])
        if kind == "seek" and positions:
            partition = self.rng.choice(sorted(positions))
            positions[partition] = self.rng.randint(0, positions[partition])
            self.h.op(consumer, "seek", partitions=[f"{TOPIC}/{partition}"])
        elif kind == "rebalance":
            positions.clear()
            self.h.op(consumer, "rebalance", partitions=[f"{TOPIC}/{p}" for p in range(2)])
        elif kind == "commit" and positions:
            group = f"g-{consumer}"
            offsets = {}
            for partition, position in positions.items():
                key = (group, f"{TOPIC}/{partition}")
                self.committed[key] = max(self.committed.get(key, 0), position)
                offsets[key[1]] = self.committed[key]
            self.h.commit(consumer, group, offsets)
        else:
            fault = self.rng.choice(["kill", "restart", "pause", "resume", "heal"])
            self.h.op("nemesis", "fault", fault=fault, targets=[self.rng.randrange(3)])

    def finish(self) -> list[Op]:
        while self.in_flight:
            self.complete(self.in_flight.pop(self.rng.randrange(len(self.in_flight))))
        self.h.drain(
            [
                (p, offset, value)
                for p, log in enumerate(self.logs)
                for offset, value in enumerate(log)
            ]
        )
        return self.h.ops()


@st.composite
def runs(draw: st.DrawFn) -> _Run:
    run = _Run(random.Random(draw(st.integers(0, 2**32))), draw(st.integers(1, 3)))
    for _ in range(draw(st.integers(0, 60))):
        run.step()
    return run


def _with_drain(ops: list[Op], records: list[tuple[str, int, int, str | None]]) -> list[Op]:
    assert ops[-1].f == "drain" and ops[-1].type == "ok"
    return [*ops[:-1], replace(ops[-1], records=tuple(records))]


@settings(max_examples=150, deadline=None)
@given(runs(), st.data())
def test_generated_valid_histories_are_valid_and_each_dropped_ack_is_one_lost_write(
    run: _Run, data: st.DataObject
) -> None:
    ops = run.finish()
    result = check(ops, FinalState())
    assert result.valid, result.anomalies
    assert result.stats["send-ok"] == len(run.acked)
    if not run.acked:
        return
    value, indexes = data.draw(st.sampled_from(run.acked))
    drained = ops[-1].records or ()
    changed = check(_with_drain(ops, [r for r in drained if r[3] != value]), FinalState())
    lost = [a for a in changed.anomalies if a.kind == "lost-write"]
    assert len(lost) == 1
    assert lost[0].op_indexes == indexes
    assert lost[0].message.startswith(f"{value} sent by ")
    # A consumer that read it saw a value the log then lost: a dirty read, and nothing else.
    expected = {"lost-write": 1} | ({"dirty-read": 1} if value in run.polled else {})
    assert {k: n for k, n in changed.counts.items() if n} == expected


@settings(max_examples=100, deadline=None)
@given(runs(), st.data())
def test_a_drained_value_written_again_is_exactly_one_duplicate(
    run: _Run, data: st.DataObject
) -> None:
    ops = run.finish()
    drained = list(ops[-1].records or ())
    if not drained:
        return
    topic, partition, _, value = data.draw(st.sampled_from(drained))
    end = max(offset for _, p, offset, _ in drained if p == partition) + 1
    changed = check(_with_drain(ops, [*drained, (topic, partition, end, value)]), FinalState())
    assert [a.kind for a in changed.anomalies] == ["duplicate"]


# --- the transactional pipeline (txn-pipeline) ---------------------------------------------

SRC, OUT, GROUP = "in", "out", "g"
Txn = tuple[Op, Op | None]


class Pipeline:
    """A hand-made history of a transactional read-process-write pipeline: input records
    (already in the input topic), transactions of workers, reads of the group's committed
    offsets, read_committed polls of the output, then the drains."""

    def __init__(self) -> None:
        self.h = History()
        self.input: dict[int, list[tuple[int, str]]] = {}
        self.output: dict[int, list[tuple[int, str, str]]] = {}  # partition -> (offset, value, txn)
        self.outcome_of: dict[str, Outcome] = {}

    def ops(self) -> list[Op]:
        return self.h.ops()

    def txn(
        self,
        process: str,
        label: str,
        partition: int,
        records: list[tuple[int, str]],
        outcome: Outcome = "ok",
        offsets: dict[str, int] | None = None,
        outputs: list[str] | None = None,
        written: bool = True,
        complete: bool = True,
    ) -> Op:
        """One transaction reading ``records`` (offset, value) of input partition
        ``partition``; its outputs go to the same partition of the output, at the next
        offsets (with a marker after them) when ``written``. Returns its invocation."""
        values = (
            outputs
            if outputs is not None
            else [f"{v}{OUTPUT_SEPARATOR}{label}" for _, v in records]
        )
        invoked = self.h.h.invoke(
            process,
            "txn",
            group=GROUP,
            offsets=offsets or {f"{SRC}/{partition}": max(o for o, _ in records) + 1},
            records=[(SRC, partition, o, v) for o, v in records],
            txn=label,
            transactional_id=f"tid-{process}",
            outputs=values,
        )
        if written:
            log = self.output.setdefault(partition, [])
            start = log[-1][0] + 2 if log else 0  # a marker after each transaction
            log += [(start + n, v, label) for n, v in enumerate(values)]
        self.outcome_of[label] = outcome
        if complete:
            self.end(invoked, outcome)
        return invoked

    def end(self, invoked: Op, outcome: Outcome) -> Op | None:
        if outcome == "none":
            return None
        if outcome == "ok":
            return self.h.h.complete(invoked, "ok", txn=invoked.extra["txn"])
        return self.h.h.complete(
            invoked, outcome, error="PRODUCER_FENCED", aborted=outcome == "fail"
        )

    def fetch(
        self, offsets: dict[str, int], process: str = "offset-fetch-0", stable: bool = True
    ) -> Op:
        invoked = self.h.h.invoke(
            process,
            "offset-fetch",
            group=GROUP,
            partitions=[f"{SRC}/0", f"{SRC}/1"],
            **({"isolation": "read_committed"} if stable else {}),
        )
        return self.h.h.complete(invoked, "ok", group=GROUP, offsets=offsets)

    def poll_output(self, records: list[tuple[int, int, str]], committed: bool = True) -> int:
        fields = {"isolation": "read_committed"} if committed else {}
        invoked = self.h.h.invoke("assign-consumer-1", "poll", group=None, **fields)
        done = self.h.h.complete(
            invoked, "ok", records=[(OUT, p, o, v) for p, o, v in records], **fields
        )
        return done.index

    def finish(
        self,
        committed: set[str] | None = None,
        hidden: tuple[str, ...] = (),
        shown: tuple[str, ...] = (),
    ) -> None:
        """The drains: the input; the output read_uncommitted (everything written); the
        output read_committed: the outputs of transactions that committed (of ``committed``
        when given), less ``hidden``, plus ``shown``."""
        invoked = self.h.h.invoke("drain", "drain", topic=SRC)
        self.h.h.complete(
            invoked,
            "ok",
            records=[(SRC, p, o, v) for p, rs in sorted(self.input.items()) for o, v in rs],
        )
        outputs = [(p, o, v, t) for p, rs in sorted(self.output.items()) for o, v, t in rs]
        invoked = self.h.h.invoke("drain", "drain", topic=OUT)
        self.h.h.complete(invoked, "ok", records=[(OUT, p, o, v) for p, o, v, _ in outputs])
        if committed is None:
            committed = {t for t, outcome in self.outcome_of.items() if outcome == "ok"}
        kept = [
            (OUT, p, o, v)
            for p, o, v, t in outputs
            if (t in committed and v not in hidden) or v in shown
        ]
        invoked = self.h.h.invoke("drain", "drain-committed", topic=OUT, source=SRC, group=GROUP)
        self.h.h.complete(invoked, "ok", records=kept)

    def kinds(self) -> dict[str, int]:
        return self.h.kinds()


def pipeline(finish: bool = True, first_c: Outcome = "fail") -> Pipeline:
    """Two workers: w0 commits a and b, aborts c (its first try ends ``first_c``), commits
    c again; w1 commits d."""
    p = Pipeline()
    p.input = {0: [(0, "a"), (1, "b"), (2, "c")], 1: [(0, "d")]}
    p.txn("w0", "0.1", 0, [(0, "a"), (1, "b")])
    p.txn("w0", "0.2", 0, [(2, "c")], first_c)
    p.txn("w0", "0.3", 0, [(2, "c")])
    p.txn("w1", "1.1", 1, [(0, "d")])
    if finish:
        p.fetch({"in/0": 3, "in/1": 1}, process="offset-fetch-final")
        p.finish()
    return p


def only_kinds(p: Pipeline, expected: dict[str, int]) -> CheckResult:
    result = p.h.check()
    assert p.kinds() == expected, result.anomalies
    return result


def test_a_clean_pipeline_history_is_valid() -> None:
    p = pipeline()
    result = p.h.check()
    assert result.valid, result.anomalies
    assert result.stats["txn-ok"] == 3 and result.stats["txn-fail"] == 1
    assert result.stats["records-drained-committed"] == 4
    assert result.stats["records-drained"] == 4 + 5  # the input, every output written


def test_the_pipeline_checks_need_the_committed_drain() -> None:
    p = pipeline(finish=False)
    p.fetch({"in/0": 3, "in/1": 1})
    assert p.kinds() == {}  # nothing to say without the output as read_committed reads it


def test_lost_input() -> None:
    def history(outputs: list[str]) -> Pipeline:
        # A worker that committed a and b's offsets but wrote only a's output.
        p = Pipeline()
        p.input = {0: [(0, "a"), (1, "b")]}
        p.txn("w0", "0.1", 0, [(0, "a"), (1, "b")], outputs=outputs)
        p.fetch({"in/0": 2})
        p.finish()
        return p

    p = history(["a|0.1"])
    result = only_kinds(p, {"lost-input": 1})
    assert result.anomalies[0].message == (
        "in-0@1 (b) is below the group's final committed offset 2 of in-0 but no record of "
        "the committed output carries it; read by txn 0.1 of w0 (committed)"
    )
    assert result.anomalies[0].op_indexes == (0, 1)
    assert history(["a|0.1", "b|0.1"]).kinds() == {}


def test_lost_input_and_lost_commit_when_a_committed_transaction_vanishes() -> None:
    p = pipeline(finish=False)
    p.fetch({"in/0": 3, "in/1": 1})
    p.finish(hidden=("b|0.1",))
    result = only_kinds(p, {"lost-input": 1, "lost-commit": 1})
    lost = next(a for a in result.anomalies if a.kind == "lost-commit")
    assert lost.message == (
        "txn 0.1 of w0 (committed): the committed output lacks 1 of its 2 records (b|0.1)"
    )


def test_duplicate_output() -> None:
    def history(first: Outcome) -> Pipeline:
        # c processed twice, both transactions committed (a worker that did not seek back
        # after a commit it thought failed, say).
        p = pipeline(finish=False, first_c=first)
        p.fetch({"in/0": 3, "in/1": 1})
        p.finish()
        return p

    p = history("ok")
    result = only_kinds(p, {"duplicate-output": 1})
    assert result.anomalies[0].message == (
        "in-0@2 (c) is carried by 2 records of the committed output: out-0@3 by txn 0.2 of w0 "
        "(committed), out-0@5 by txn 0.3 of w0 (committed)"
    )
    assert history("fail").kinds() == {}


def test_output_without_offset() -> None:
    def history(final: int) -> Pipeline:
        p = Pipeline()
        p.input = {0: [(0, "a"), (1, "b")]}
        p.txn("w0", "0.1", 0, [(0, "a")])
        p.txn("w0", "0.2", 0, [(1, "b")], "info")  # it did commit b's output
        p.fetch({"in/0": final})
        p.finish(committed={"0.1", "0.2"})
        return p

    result = only_kinds(history(1), {"output-without-offset": 1})
    assert result.anomalies[0].message == (
        "in-0@1 (b) is carried by the committed output at out-0@2 (txn 0.2 of w0 (outcome "
        "unknown: PRODUCER_FENCED)) but the group's final committed offset of in-0 is 1"
    )
    assert history(2).kinds() == {}


def test_unprocessed_input() -> None:
    def history(final: dict[str, int] | None) -> Pipeline:
        p = pipeline(finish=False)
        p.input[1].append((1, "e"))  # never processed
        if final is not None:
            p.fetch(final)
        p.finish()
        return p

    result = only_kinds(history({"in/0": 3, "in/1": 1}), {"unprocessed-input": 1})
    assert result.anomalies[0].message == (
        "1 input records of in-1 (from @1) are in no output: the group's final committed "
        "offset of it is 1, its end 2"
    )
    result = only_kinds(history(None), {"unprocessed-input": 1})
    assert "committed offsets were never read" in result.anomalies[0].message


def test_aborted_read_in_the_committed_output() -> None:
    p = pipeline(finish=False)
    p.fetch({"in/0": 3, "in/1": 1})
    p.finish(shown=("c|0.2",))
    result = only_kinds(p, {"aborted-read": 1, "duplicate-output": 1})
    aborted = next(a for a in result.anomalies if a.kind == "aborted-read")
    assert aborted.message == (
        "read_committed saw txn 0.2 of w0 (aborted: PRODUCER_FENCED): the committed output "
        "has out-0@3"
    )


@pytest.mark.parametrize(("committed", "expected"), [(True, 1), (False, 0)])
def test_aborted_read_by_a_read_committed_poll(committed: bool, expected: int) -> None:
    p = pipeline(finish=False)
    seen = p.poll_output([(0, 0, "a|0.1"), (0, 1, "b|0.1"), (0, 3, "c|0.2")], committed)
    p.fetch({"in/0": 3, "in/1": 1})
    p.finish()
    result = only_kinds(p, {"aborted-read": 1} if expected else {})
    if expected:
        assert result.anomalies[0].message == (
            "read_committed saw txn 0.2 of w0 (aborted: PRODUCER_FENCED): assign-consumer-1 "
            f"polled 'c|0.2' at out-0@3 (op {seen}), which the committed output lacks"
        )
        assert seen in result.anomalies[0].op_indexes


def test_aborted_read_of_a_transaction_that_then_aborted() -> None:
    # Its outcome unknown to its worker, read by read_committed, then gone: the log end
    # read_committed reads to (the last stable offset) passed it before it was decided.
    def history(final_has_it: bool) -> Pipeline:
        p = Pipeline()
        p.input = {0: [(0, "a")]}
        p.txn("w0", "0.1", 0, [(0, "a")], "info")
        p.poll_output([(0, 0, "a|0.1")])
        p.txn("w0", "0.2", 0, [(0, "a")])
        p.fetch({"in/0": 1})
        p.finish(committed={"0.2", "0.1"} if final_has_it else {"0.2"})
        return p

    result = only_kinds(history(final_has_it=False), {"aborted-read": 1})
    assert "txn 0.1 of w0 (outcome unknown: PRODUCER_FENCED)" in result.anomalies[0].message
    # Had it committed, the committed output would carry a twice.
    assert history(final_has_it=True).kinds() == {"duplicate-output": 1}


def test_aborted_read_of_committed_offsets() -> None:
    def history(read: int) -> Pipeline:
        p = Pipeline()
        p.input = {0: [(0, "a"), (1, "b")]}
        p.txn("w0", "0.1", 0, [(0, "a")])
        p.txn("w0", "0.2", 0, [(1, "b")], "fail")  # its offset, 2, must never count
        p.fetch({"in/0": read})
        p.txn("w0", "0.3", 0, [(1, "b")])
        p.fetch({"in/0": 2}, process="offset-fetch-final")
        p.finish()
        return p

    result = only_kinds(history(read=2), {"aborted-read": 1})
    assert result.anomalies[0].message == (
        "offset-fetch-0 read the group's committed offset of in/0 as 2 (op 5), but only "
        "txn 0.2 of w0 (aborted: PRODUCER_FENCED) committed it"
    )
    assert history(read=1).kinds() == {}


def test_aborted_read_of_an_offset_no_transaction_committed() -> None:
    p = pipeline(finish=False)
    p.fetch({"in/0": 7, "in/1": 1})
    p.fetch({"in/0": 3, "in/1": 1}, process="offset-fetch-final")
    p.finish()
    # Also a read that went backwards, to the final one.
    result = only_kinds(p, {"aborted-read": 1, "committed-offset-regression": 1})
    aborted = next(a for a in result.anomalies if a.kind == "aborted-read")
    assert aborted.message.endswith("as 7 (op 9), but no transaction committed it")


def test_lost_commit() -> None:
    def history(hidden: tuple[str, ...]) -> Pipeline:
        # c's first transaction committed too (a duplicate) but the log lost its record.
        p = pipeline(finish=False, first_c="ok")
        p.fetch({"in/0": 3, "in/1": 1})
        p.finish(hidden=hidden)
        return p

    result = only_kinds(history(("c|0.2",)), {"lost-commit": 1})
    assert result.anomalies[0].message == (
        "txn 0.2 of w0 (committed): the committed output lacks 1 of its 1 records (c|0.2)"
    )
    assert history(("c|0.3",)).kinds() == {"lost-commit": 1}
    assert history(()).kinds() == {"duplicate-output": 1}


@pytest.mark.parametrize(
    ("committed", "expected"),
    [
        ({"a|0.1"}, {"non-atomic-txn": 1, "lost-input": 1}),
        ({"a|0.1", "b|0.1"}, {}),  # it committed
        (set(), {"lost-input": 2}),  # it aborted, yet its offsets count
    ],
)
def test_non_atomic_txn(committed: set[str], expected: dict[str, int]) -> None:
    p = Pipeline()
    p.input = {0: [(0, "a"), (1, "b")]}
    p.txn("w0", "0.1", 0, [(0, "a"), (1, "b")], "info")
    p.fetch({"in/0": 2})
    p.finish(committed=set(), shown=tuple(committed))
    result = only_kinds(p, expected)
    if "non-atomic-txn" in expected:
        anomaly = next(a for a in result.anomalies if a.kind == "non-atomic-txn")
        assert anomaly.message == (
            "txn 0.1 of w0 (outcome unknown: PRODUCER_FENCED): the committed output has 1 "
            "of its 2 records; it lacks b|0.1"
        )


def test_committed_offset_regression_between_reads() -> None:
    def history(second: int | None, stable: bool = True) -> Pipeline:
        # The commits' outcomes are unknown to their worker: only the reads show them.
        p = Pipeline()
        p.input = {0: [(0, "a"), (1, "b")]}
        p.txn("w0", "0.1", 0, [(0, "a")], "info")
        p.txn("w0", "0.2", 0, [(1, "b")], "info")
        p.fetch({"in/0": 2})
        p.fetch({} if second is None else {"in/0": second}, stable=stable)
        p.fetch({"in/0": 2}, process="offset-fetch-final")
        p.finish(committed={"0.1", "0.2"})
        return p

    result = only_kinds(history(1), {"committed-offset-regression": 1})
    assert result.anomalies[0].message == (
        "offset-fetch-0 read group g's committed offset of in/0 as 1 (op 7) after "
        "offset-fetch-0's read (op 5) showed 2"
    )
    assert result.anomalies[0].op_indexes == (4, 5, 6, 7)
    result = only_kinds(history(None), {"committed-offset-regression": 1})
    assert "as no committed offset (op 7)" in result.anomalies[0].message
    assert history(2).kinds() == {}
    # A read of unstable offsets (no read_committed) may lag a transaction in flight.
    assert history(1, stable=False).kinds() == {}


def test_committed_offset_regression_after_an_acknowledged_commit() -> None:
    def history(acknowledged_first: bool) -> Pipeline:
        p = Pipeline()
        p.input = {0: [(0, "a"), (1, "b")]}
        p.txn("w0", "0.1", 0, [(0, "a")])
        second = p.txn("w0", "0.2", 0, [(1, "b")], complete=False)
        if acknowledged_first:
            p.end(second, "ok")
        read = p.fetch({"in/0": 1})  # concurrent with the commit: either offset will do
        if not acknowledged_first:
            p.end(second, "ok")
        del read
        p.fetch({"in/0": 2}, process="offset-fetch-final")
        p.finish()
        return p

    result = only_kinds(history(True), {"committed-offset-regression": 1})
    assert result.anomalies[0].message == (
        "offset-fetch-0 read group g's committed offset of in/0 as 1 (op 5) after txn 0.2 "
        "of w0 (committed), acknowledged showed 2"
    )
    assert history(False).kinds() == {}


def test_commit_regression_of_transactions() -> None:
    def history(second: int) -> Pipeline:
        p = Pipeline()
        p.input = {0: [(0, "a"), (1, "b")]}
        p.txn("w0", "0.1", 0, [(0, "a"), (1, "b")])
        # A zombie's transaction, accepted: it commits an offset behind the group's.
        p.txn("w1", "1.1", 0, [(0, "a")], offsets={"in/0": second}, outputs=[], written=False)
        p.fetch({"in/0": second}, process="offset-fetch-final")
        p.finish()
        return p

    # Its offset is also below what a read had shown, and below b, whose output committed.
    assert history(1).kinds() == {
        "commit-regression": 1,
        "committed-offset-regression": 1,
        "output-without-offset": 1,
    }
    assert history(2).kinds() == {}


class _PipelineRun:
    """A generated run of a pipeline that is exactly once: each transaction reads on from
    its partition's committed offset; it commits (``ok``), aborts (``fail``) or ends unknown
    to its worker (``info``: committed or aborted, either), its effect at some point between
    its invocation and its completion; offset reads and read_committed polls come between
    and during transactions."""

    def __init__(self, rng: random.Random, partitions: int, records: int) -> None:
        self.rng = rng
        self.p = Pipeline()
        self.p.input = {q: [(k, f"i{q}-{k}") for k in range(records)] for q in range(partitions)}
        self.offsets: dict[int, int] = {}
        self.committed: set[str] = set()
        self.aborted: list[tuple[str, str]] = []  # (label, output value) of aborted ones
        self.read_to: dict[int, int] = {}  # the read_committed poller's position per partition
        self.labels = 0

    def step(self) -> None:
        action = self.rng.choice(["txn", "txn", "txn", "fetch", "poll"])
        if action == "txn":
            self.txn(self.rng.choice(["ok", "ok", "fail", "info"]))
        elif action == "fetch":
            self.fetch()
        else:
            self.poll()

    def fetch(self, process: str = "offset-fetch-0") -> None:
        self.p.fetch({f"{SRC}/{q}": o for q, o in sorted(self.offsets.items())}, process)

    def poll(self) -> None:
        q = self.rng.choice(sorted(self.p.input))
        visible = [(q, o, v) for o, v, t in self.p.output.get(q, []) if t in self.committed]
        start = self.read_to.get(q, -1)
        records = [r for r in visible if r[1] > start][: self.rng.randint(0, 3)]
        if records:
            self.read_to[q] = records[-1][1]
        self.p.poll_output(records)

    def txn(self, outcome: Outcome, partition: int | None = None) -> bool:
        q = self.rng.choice(sorted(self.p.input)) if partition is None else partition
        start = self.offsets.get(q, 0)
        todo = self.p.input[q][start:]
        if not todo:
            return False
        self.labels += 1
        label = f"w.{self.labels}"
        records = todo[: self.rng.randint(1, 3)]
        invoked = self.p.txn(self.rng.choice(["w0", "w1"]), label, q, records, complete=False)
        commits = outcome == "ok" or (outcome == "info" and self.rng.random() < 0.5)
        during = self.rng.random() < 0.3  # a read while it is in flight, before its effect
        if during:
            self.fetch()
        if commits:
            self.offsets[q] = records[-1][0] + 1
            self.committed.add(label)
        else:
            outputs = invoked.extra["outputs"]
            self.aborted += [(label, value) for value in outputs]
        if self.rng.random() < 0.3:  # after its effect, before its completion
            self.fetch()
        self.p.end(invoked, outcome)
        return True

    def finish(self) -> list[Op]:
        for q in sorted(self.p.input):
            while self.txn("ok", q):
                pass
        self.fetch("offset-fetch-final")
        self.p.finish(committed=self.committed)
        return self.p.ops()


@st.composite
def pipeline_runs(draw: st.DrawFn) -> _PipelineRun:
    run = _PipelineRun(
        random.Random(draw(st.integers(0, 2**32))), draw(st.integers(1, 2)), draw(st.integers(0, 8))
    )
    for _ in range(draw(st.integers(0, 30))):
        run.step()
    return run


def _with_committed_drain(
    ops: list[Op], records: list[tuple[str, int, int, str | None]]
) -> list[Op]:
    assert ops[-1].f == "drain-committed" and ops[-1].type == "ok"
    return [*ops[:-1], replace(ops[-1], records=tuple(records))]


@settings(max_examples=150, deadline=None)
@given(pipeline_runs(), st.data())
def test_generated_exactly_once_pipelines_are_valid_and_a_dropped_output_is_a_lost_input(
    run: _PipelineRun, data: st.DataObject
) -> None:
    ops = run.finish()
    result = check(ops, FinalState())
    assert result.valid, result.anomalies
    committed = list(ops[-1].records or ())
    if not committed:
        return
    dropped = data.draw(st.sampled_from(committed))
    changed = check(
        _with_committed_drain(ops, [r for r in committed if r != dropped]), FinalState()
    )
    kinds = {k for k, n in changed.counts.items() if n}
    assert "lost-input" in kinds
    # Its transaction lost a record (it committed, or its outcome is unknown and the rest
    # of it is there), and a poll may have seen it: nothing else.
    assert kinds <= {"lost-input", "lost-commit", "non-atomic-txn", "aborted-read"}


@settings(max_examples=100, deadline=None)
@given(pipeline_runs(), st.data())
def test_generated_pipelines_with_an_aborted_record_made_visible_are_flagged(
    run: _PipelineRun, data: st.DataObject
) -> None:
    ops = run.finish()
    if not run.aborted:
        return
    label, value = data.draw(st.sampled_from(run.aborted))
    where = next((OUT, q, o, v) for q, log in run.p.output.items() for o, v, t in log if v == value)
    changed = check(_with_committed_drain(ops, [*(ops[-1].records or ()), where]), FinalState())
    kinds = {k for k, n in changed.counts.items() if n}
    # Its input was processed again by a transaction that committed: a duplicate.
    assert "duplicate-output" in kinds
    txn = next(o for o in ops if o.f == "txn" and o.type == "invoke" and o.extra["txn"] == label)
    completion = next(o for o in ops if o.ref == txn.index)
    if completion.type == "fail":
        assert "aborted-read" in kinds


def test_the_report_shows_the_pipeline_transactions_and_its_anomalies() -> None:
    p = pipeline(finish=False)
    p.fetch({"in/0": 3, "in/1": 1})
    p.finish(shown=("c|0.2",))
    result = p.h.check()
    summary = {"scenario": "kill-random", "workload": "txn-pipeline", "seed": 1}
    page = render_report(summary | {"duration_s": 1, "operations": 9, "faults": 0}, p.ops(), result)
    assert "<h2>Transactions</h2>" in page
    assert "<td>txn</td><td>committed</td><td>-</td><td>3</td>" in page
    assert "<td>txn</td><td>aborted</td><td>PRODUCER_FENCED</td><td>1</td>" in page
    assert "read_committed saw txn 0.2 of w0 (aborted: PRODUCER_FENCED)" in page
    assert "<h2>Transactions</h2>" not in render_report(
        summary | {"duration_s": 1, "operations": 0, "faults": 0}, [], check([], FinalState())
    )


def test_hanging_txn() -> None:
    def history(held: bool) -> Pipeline:
        p = Pipeline()
        p.input = {0: [(0, "a"), (1, "b")]}
        p.txn("w0", "0.1", 0, [(0, "a")])
        p.txn("w0", "0.2", 0, [(1, "b")], "info")  # its records at out-0@2, held or not
        if not held:  # it ended (committed)
            p.fetch({"in/0": 2})
            p.finish(committed={"0.1", "0.2"})
            return p
        p.fetch({"in/0": 1})
        for topic, records in ((SRC, p.input), (OUT, p.output)):
            invoked = p.h.h.invoke("drain", "drain", topic=topic)
            p.h.h.complete(
                invoked,
                "ok",
                records=[(topic, q, r[0], r[1]) for q, rs in records.items() for r in rs],
            )
        invoked = p.h.h.invoke("drain", "drain-committed", topic=OUT, source=SRC, group=GROUP)
        p.h.h.complete(invoked, "info", error="OpenTransactionsError", open={"out/0": [2, 3]})
        return p

    result = only_kinds(history(held=True), {"hanging-txn": 1})
    assert result.anomalies[0].message == (
        "out-0's last stable offset stayed at 2, below its high watermark 3, after every "
        "worker had stopped: a transaction nobody ends holds read_committed readers there; "
        "the first record held, 'b|0.2' at @2, is of txn 0.2 of w0 (outcome unknown: "
        "PRODUCER_FENCED)"
    )
    assert history(held=False).kinds() == {}
