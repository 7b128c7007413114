"""The broker's lease: how long it may trust that the controller has not moved its
leaderships away (cluster/broker_lease.py)."""

from __future__ import annotations

import pytest

from cluster.broker_lease import CLOCK_RATE_ALLOWANCE, BrokerLease

SESSION_MS = 3000
LEASE_MS = SESSION_MS * (1 - CLOCK_RATE_ALLOWANCE)


def test_no_lease_before_a_heartbeat_was_answered() -> None:
    assert not BrokerLease().holds(0)


def test_a_lease_counts_from_the_heartbeats_send_time_not_its_answer() -> None:
    lease = BrokerLease()
    sent_at = 10_000
    lease.renew(sent_at, SESSION_MS)  # answered, say, 2 s later: the lease is no longer
    assert lease.holds(sent_at + int(LEASE_MS) - 1)
    assert not lease.holds(sent_at + int(LEASE_MS))
    # The controller's session ends no earlier than send time + session: the lease ends first.
    assert not lease.holds(sent_at + SESSION_MS - 1)


def test_an_answer_to_an_older_heartbeat_never_shortens_the_lease() -> None:
    lease = BrokerLease()
    lease.renew(5000, SESSION_MS)
    lease.renew(4000, SESSION_MS)
    assert lease.holds(5000 + int(LEASE_MS) - 1)


def test_a_fenced_answer_revokes_the_lease_at_once() -> None:
    lease = BrokerLease()
    lease.renew(5000, SESSION_MS)
    lease.revoke()
    assert not lease.holds(5001)


def test_a_session_must_be_positive() -> None:
    with pytest.raises(ValueError):
        BrokerLease().renew(0, 0)
