"""The member side of a consumer group (KIP-848): join, cooperative reconciliation, fencing."""

from __future__ import annotations

import pytest

from cluster.client._connection import TopicPartition
from cluster.client._membership import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    GroupMembership,
    MemberState,
    Reconciliation,
)
from lograft.protocol.errors import IllegalStateError, InvalidRequestError, UnknownServerError

A0, A1, A2, B0 = (
    TopicPartition("a", 0),
    TopicPartition("a", 1),
    TopicPartition("a", 2),
    TopicPartition("b", 0),
)
NOT_COORDINATOR = 16
UNKNOWN_MEMBER_ID = 25
FENCED_MEMBER_EPOCH = 110


def _joined(owned: frozenset[TopicPartition]) -> GroupMembership:
    member = GroupMembership("g", "range", 300_000)
    member.subscribe(["a", "b"])
    member.next_heartbeat(0)
    step = member.on_heartbeat_response(0, "", "m-1", 1, 1000, owned)
    member.done(step)
    return member


def test_joining_sends_the_subscription_and_takes_the_assignment() -> None:
    member = GroupMembership("g", "range", 300_000)
    member.subscribe(["b", "a", "a"])
    assert member.state is MemberState.JOINING and member.heartbeat_due(0)
    join = member.next_heartbeat(0)
    assert (join.member_id, join.member_epoch) == ("", JOIN_EPOCH)
    assert join.subscribed_topics == ("a", "b") and join.assignor == "range"
    assert join.owned == frozenset()
    assert not member.heartbeat_due(0), "one heartbeat in flight at a time"

    step = member.on_heartbeat_response(0, "", "m-1", 1, 1000, frozenset({A0, A1}))
    assert step == Reconciliation(assign=frozenset({A0, A1}))
    member.done(step)
    assert member.state is MemberState.STABLE and member.owned == {A0, A1}
    assert (member.member_id, member.member_epoch) == ("m-1", 1)
    # The new ownership is reported at once; after that, heartbeats follow the interval.
    assert member.heartbeat_due(1)
    report = member.next_heartbeat(1)
    assert report.owned == {A0, A1} and report.subscribed_topics is None
    member.on_heartbeat_response(0, "", "", 1, 1000, None)
    assert not member.heartbeat_due(500) and member.heartbeat_due(1001)


def test_a_rebalance_revokes_only_what_moves_and_keeps_the_rest() -> None:
    member = _joined(frozenset({A0, A1, A2}))
    member.next_heartbeat(10)
    step = member.on_heartbeat_response(0, "", "", 2, 1000, frozenset({A0, B0}))
    assert step.revoke == {A1, A2} and step.assign == {B0} and not step.lost
    assert member.state is MemberState.RECONCILING
    member.done(step)
    assert member.owned == {A0, B0} and member.state is MemberState.STABLE
    assert member.next_heartbeat(11).owned == {A0, B0}


@pytest.mark.parametrize("code", [UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH])
def test_a_fenced_member_loses_its_partitions_and_joins_again(code: int) -> None:
    member = _joined(frozenset({A0, A1}))
    member.next_heartbeat(10)
    step = member.on_heartbeat_response(code, "fenced", "", 0, 0, None)
    assert step == Reconciliation(lost=frozenset({A0, A1}))
    member.done(step)
    assert member.state is MemberState.JOINING and member.owned == frozenset()
    rejoin = member.next_heartbeat(11)
    assert rejoin.member_epoch == JOIN_EPOCH and rejoin.subscribed_topics == ("a", "b")
    assert rejoin.member_id == ("" if code == UNKNOWN_MEMBER_ID else "m-1")


def test_leaving_revokes_everything_then_sends_epoch_minus_one() -> None:
    member = _joined(frozenset({A0}))
    step = member.leave()
    assert step == Reconciliation(revoke=frozenset({A0}))
    leave = member.next_heartbeat(10)
    assert leave.member_epoch == LEAVE_EPOCH and leave.member_id == "m-1"
    member.on_heartbeat_response(0, "", "", LEAVE_EPOCH, 0, None)
    assert member.state is MemberState.UNSUBSCRIBED and not member.heartbeat_due(20)


def test_a_lost_or_misdirected_heartbeat_is_resent_with_every_field() -> None:
    member = _joined(frozenset({A0}))
    member.next_heartbeat(10)
    member.on_heartbeat_response(NOT_COORDINATOR, "moved", "", 0, 0, None)
    assert member.heartbeat_due(10)
    again = member.next_heartbeat(10)
    assert again.owned == {A0} and again.subscribed_topics == ("a", "b")
    assert member.owned == {A0}, "a coordinator move does not take partitions away"


def test_a_fatal_error_drops_the_partitions_and_stops_heartbeats() -> None:
    member = _joined(frozenset({A0}))
    member.next_heartbeat(10)
    step = member.on_heartbeat_response(InvalidRequestError.code, "bad", "", 0, 0, None)
    assert step.lost == {A0}
    assert member.state is MemberState.FATAL
    assert isinstance(member.fatal_error, InvalidRequestError)
    assert not member.heartbeat_due(1_000_000)
    with pytest.raises(IllegalStateError):
        member.next_heartbeat(1_000_000)


def test_a_new_target_waits_for_the_step_in_progress() -> None:
    # The consumer is still carrying out the first step when the target shrinks: the next
    # step must be computed against what it owns after the first, else A1 is never revoked.
    member = GroupMembership("g", "range", 300_000)
    member.subscribe(["a"])
    member.next_heartbeat(0)
    first = member.on_heartbeat_response(0, "", "m-1", 1, 1000, frozenset({A0, A1}))
    assert first == Reconciliation(assign=frozenset({A0, A1}))
    assert member.heartbeat_wait_ms(500) == 500
    member.next_heartbeat(1000)
    assert member.on_heartbeat_response(0, "", "", 2, 1000, frozenset({A0})).empty
    second = member.done(first)
    assert second == Reconciliation(revoke=frozenset({A1}))
    assert member.state is MemberState.RECONCILING and member.owned == {A0, A1}
    assert member.done(second).empty
    assert member.state is MemberState.STABLE and member.owned == {A0}
    assert member.heartbeat_wait_ms(1001) == 0, "the smaller ownership is reported at once"
    assert member.next_heartbeat(1001).owned == {A0}


def test_a_step_handed_out_before_a_fence_adds_nothing() -> None:
    member = GroupMembership("g", "range", 300_000)
    member.subscribe(["a"])
    member.next_heartbeat(0)
    stale = member.on_heartbeat_response(0, "", "m-1", 1, 1000, frozenset({A0, A1}))
    member.next_heartbeat(1000)
    lost = member.on_heartbeat_response(FENCED_MEMBER_EPOCH, "", "", 0, 0, None)
    assert lost == Reconciliation(lost=frozenset({A0, A1})), "covers the step not yet done"
    assert member.done(stale).empty
    member.done(lost)
    assert member.owned == frozenset() and member.state is MemberState.JOINING
    member.next_heartbeat(1001)
    step = member.on_heartbeat_response(0, "", "m-1", 3, 1000, frozenset({A1}))
    assert step == Reconciliation(assign=frozenset({A1}))
    member.done(step)
    assert member.owned == {A1} and member.state is MemberState.STABLE


def test_only_the_answer_to_the_leave_heartbeat_completes_the_leave() -> None:
    member = _joined(frozenset({A0}))
    member.next_heartbeat(10)  # a regular heartbeat is in flight when the consumer leaves
    member.leave()
    assert member.on_heartbeat_response(0, "", "", 1, 1000, frozenset({A0})).empty
    assert member.state is MemberState.LEAVING and member.heartbeat_due(11)
    leave = member.next_heartbeat(11)
    assert leave.member_epoch == LEAVE_EPOCH
    member.on_heartbeat_response(0, "", "", LEAVE_EPOCH, 0, None)
    assert member.state is MemberState.UNSUBSCRIBED


def test_subscribing_while_leaving_joins_again_once_the_leave_is_answered() -> None:
    member = _joined(frozenset({A0}))
    member.leave()
    member.next_heartbeat(10)
    member.subscribe(["a"])
    assert member.state is MemberState.LEAVING
    member.on_heartbeat_response(0, "", "", LEAVE_EPOCH, 0, None)
    assert member.state is MemberState.JOINING and member.heartbeat_due(11)
    join = member.next_heartbeat(11)
    assert (join.member_id, join.member_epoch) == ("", JOIN_EPOCH)
    assert join.subscribed_topics == ("a",) and join.owned == frozenset()


def test_fail_loses_the_partitions_for_good_and_completes_a_leave() -> None:
    member = _joined(frozenset({A0}))
    error = UnknownServerError("gRPC UNIMPLEMENTED")
    assert member.fail(error) == Reconciliation(lost=frozenset({A0}))
    assert member.state is MemberState.FATAL and member.fatal_error is error
    assert member.heartbeat_wait_ms(0) is None
    leaving = _joined(frozenset({A0}))
    leaving.leave()
    leaving.next_heartbeat(10)
    assert leaving.fail(error).empty
    assert leaving.state is MemberState.UNSUBSCRIBED and leaving.fatal_error is None


def test_a_leave_is_retried_on_a_coordinator_move_and_done_on_a_refusal() -> None:
    member = _joined(frozenset({A0}))
    member.leave()
    member.next_heartbeat(10)
    member.on_heartbeat_response(NOT_COORDINATOR, "moved", "", 0, 0, None)
    assert member.state is MemberState.LEAVING and member.heartbeat_due(11)
    assert member.next_heartbeat(11).member_epoch == LEAVE_EPOCH
    member.on_heartbeat_response(InvalidRequestError.code, "refused", "", 0, 0, None)
    assert member.state is MemberState.UNSUBSCRIBED, "a refused leave is not retried forever"
