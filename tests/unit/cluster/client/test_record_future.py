"""``RecordFuture``: the light future ``Producer.send`` returns, one outcome per batch."""

from __future__ import annotations

import collections
import sys
import threading
from typing import Any

import pytest

from cluster.client import RecordFuture, RecordMetadata
from cluster.client._record_future import BatchOutcome
from lograft.protocol.errors import NotEnoughReplicasError


def test_records_of_a_batch_get_consecutive_offsets_and_their_own_timestamps() -> None:
    outcome = BatchOutcome("orders", 2)
    first, second = RecordFuture(outcome, 0, 111), RecordFuture(outcome, 1, 222)
    assert not first.done() and first.running()
    outcome.succeed(40, -1)
    assert first.done() and not first.running()
    assert first.result() == RecordMetadata("orders", 2, 40, 111)
    assert second.result() == RecordMetadata("orders", 2, 41, 222)
    assert second.exception() is None


def test_log_append_time_replaces_the_create_time_and_acks_0_has_no_offset() -> None:
    outcome = BatchOutcome("t", 0)
    outcome.succeed(-1, 999)
    assert RecordFuture(outcome, 3, 5).result() == RecordMetadata("t", 0, -1, 999)


def test_a_failed_batch_fails_every_record_with_its_error() -> None:
    outcome = BatchOutcome("t", 0)
    futures = [RecordFuture(outcome, i, 0) for i in range(3)]
    error = NotEnoughReplicasError("only one in sync")
    outcome.fail(error)
    for future in futures:
        assert future.exception() is error
        with pytest.raises(NotEnoughReplicasError):
            future.result()


def test_the_first_outcome_wins() -> None:
    outcome = BatchOutcome("t", 0)
    outcome.succeed(7, -1)
    outcome.fail(NotEnoughReplicasError("late"))
    assert RecordFuture(outcome, 0, 0).result().offset == 7


def test_callbacks_run_once_done_or_at_once_if_already_done() -> None:
    outcome = BatchOutcome("t", 0)
    seen: list[int] = []
    pending = RecordFuture(outcome, 1, 0)
    pending.add_done_callback(lambda f: seen.append(f.result().offset))
    assert seen == []
    outcome.succeed(10, -1)
    assert seen == [11]
    pending.add_done_callback(lambda f: seen.append(f.result().offset + 100))
    assert seen == [11, 111]


def test_a_callback_added_as_the_batch_completes_still_runs_once() -> None:
    outcome = BatchOutcome("t", 0)
    seen: list[int] = []

    class CompletedBeforeAppend(collections.deque[Any]):
        """The sender completes the batch (and empties the callbacks) between the
        caller's check that it is pending and its append."""

        def append(self, item: Any) -> None:
            outcome.succeed(5, -1)
            super().append(item)

    outcome.callbacks = CompletedBeforeAppend()
    RecordFuture(outcome, 1, 0).add_done_callback(lambda f: seen.append(f.result().offset))
    assert seen == [6]


def test_a_racing_adder_runs_only_its_own_callback_and_the_sender_keeps_the_order() -> None:
    outcome = BatchOutcome("t", 0)
    ran: list[tuple[str, str]] = []
    in_first, release_first = threading.Event(), threading.Event()

    def first(_future: RecordFuture) -> None:
        ran.append(("first", threading.current_thread().name))
        in_first.set()
        release_first.wait(5)
        ran.append(("first done", threading.current_thread().name))

    RecordFuture(outcome, 0, 0).add_done_callback(first)
    RecordFuture(outcome, 1, 0).add_done_callback(
        lambda _f: ran.append(("second", threading.current_thread().name))
    )
    sender = threading.Thread(target=outcome.succeed, args=(5, -1), name="sender")

    class CompletedBeforeAppend(collections.deque[Any]):
        """The sender completes the batch, and is inside its first callback, between the
        adding thread's check that the batch is pending and its append."""

        def append(self, item: Any) -> None:
            sender.start()
            in_first.wait(5)
            super().append(item)

    outcome.callbacks = CompletedBeforeAppend(outcome.callbacks)
    adder = threading.Thread(
        target=lambda: RecordFuture(outcome, 2, 0).add_done_callback(
            lambda _f: ran.append(("late", threading.current_thread().name))
        ),
        name="adder",
    )
    adder.start()
    adder.join()
    release_first.set()
    sender.join()
    assert [name for name, thread in ran if thread == "sender"] == [
        "first",
        "first done",
        "second",
    ]
    assert ("late", "adder") in ran


def _race_callbacks_with_completion(adders: int, per_adder: int) -> collections.Counter[int]:
    """Threads add callbacks while this one completes the batch; how often each ran."""
    outcome = BatchOutcome("t", 0)
    runs: collections.Counter[int] = collections.Counter()
    started = threading.Barrier(adders + 1)

    def add(first: int) -> None:
        started.wait()
        for index in range(first, first + per_adder):
            RecordFuture(outcome, index, 0).add_done_callback(
                lambda f: runs.update([f.result().offset])
            )

    threads = [threading.Thread(target=add, args=(n * per_adder,)) for n in range(adders)]
    for thread in threads:
        thread.start()
    started.wait()
    outcome.succeed(0, -1)
    for thread in threads:
        thread.join()
    return runs


def test_every_callback_runs_exactly_once_when_adding_races_completion() -> None:
    # Switching threads every microsecond makes adding and completing interleave.
    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(30):
            runs = _race_callbacks_with_completion(adders=2, per_adder=400)
            assert sorted(runs) == list(range(800))
            assert set(runs.values()) == {1}
    finally:
        sys.setswitchinterval(old_interval)


def test_a_failing_callback_does_not_stop_the_others(caplog: pytest.LogCaptureFixture) -> None:
    outcome = BatchOutcome("t", 0)
    seen: list[str] = []

    def broken(_future: RecordFuture) -> None:
        raise RuntimeError("caller bug")

    RecordFuture(outcome, 0, 0).add_done_callback(broken)
    RecordFuture(outcome, 1, 0).add_done_callback(lambda _f: seen.append("second"))
    outcome.succeed(0, -1)
    assert seen == ["second"]
    assert "exception calling callback" in caplog.text


def test_result_waits_for_another_thread_and_times_out_when_nothing_comes() -> None:
    outcome = BatchOutcome("t", 0)
    future = RecordFuture(outcome, 0, 0)
    with pytest.raises(TimeoutError):
        future.result(timeout=0.01)
    with pytest.raises(TimeoutError):
        future.exception(timeout=0.01)
    completer = threading.Thread(target=outcome.succeed, args=(5, -1))
    completer.start()
    assert future.result(timeout=30).offset == 5
    completer.join()


def test_a_record_cannot_be_cancelled() -> None:
    future = RecordFuture(BatchOutcome("t", 0), 0, 0)
    assert future.cancel() is False
    assert future.cancelled() is False
    assert not future.done()


def test_an_already_failed_future() -> None:
    future = RecordFuture.failed("t", -1, ValueError("too big"))
    assert future.done()
    assert isinstance(future.exception(), ValueError)
    assert "failed" in repr(future)
