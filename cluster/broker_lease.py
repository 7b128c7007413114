"""How long a broker may trust that the controller has not moved its leaderships away.

The active controller fences a broker it has not heard from for ``broker.session.timeout.ms``
and gives the partitions it led to other replicas. A broker cut off from the controller
learns of that only when it can read the metadata log again, so until then its image still
names it leader, and a coordinator on it would answer reads from state another leader has
already moved past (a group's committed offsets, a transaction's state): the chaos suite's
txn-pipeline saw a stable committed offset read go backwards that way, under a
partition-leader fault.

The session counts from when the controller *received* a heartbeat, which is after the
broker sent it, and a new active controller starts every session afresh. So a session
renewed by a heartbeat sent at ``t`` cannot end before ``t + session``: until then no other
broker can have been made leader of what this one leads, unless this broker was told (a
controlled shutdown, a fencing it asked for). The lease is that interval, measured on the
broker's own monotonic clock from the heartbeat's send time, shortened by
:data:`CLOCK_RATE_ALLOWANCE` for clocks of two machines that run at slightly different rates.
A heartbeat answered ``fenced`` (or an error) renews nothing; a fenced broker leads nothing.

Pure: times come in as arguments.
"""

from __future__ import annotations

__all__ = ["CLOCK_RATE_ALLOWANCE", "BrokerLease"]

CLOCK_RATE_ALLOWANCE = 0.01
"""The share of a session a lease gives up for clock rates: NTP slews a clock by at most
500 ppm, so two monotonic clocks drift apart by far less than 1 %."""


class BrokerLease:
    """Until when the controller cannot have fenced this broker, as far as it has heard.

    Not thread-safe: the broker's event loop owns it.
    """

    def __init__(self) -> None:
        self._expires_ms: float | None = None

    def renew(self, sent_at_ms: int, session_timeout_ms: int) -> None:
        """A heartbeat sent at ``sent_at_ms`` (monotonic) was answered unfenced, with a
        session of ``session_timeout_ms`` counted from its arrival. Renewals answered out of
        order never shorten the lease."""
        if session_timeout_ms <= 0:
            raise ValueError(f"a session must be positive, got {session_timeout_ms} ms")
        expires = sent_at_ms + session_timeout_ms * (1 - CLOCK_RATE_ALLOWANCE)
        if self._expires_ms is None or expires > self._expires_ms:
            self._expires_ms = expires

    def revoke(self) -> None:
        """The controller answered that this broker is fenced, or no longer knows this
        incarnation: it may have moved every leadership away already."""
        self._expires_ms = None

    def holds(self, now_ms: int) -> bool:
        """Whether, at ``now_ms`` (monotonic), no leadership of this broker's can have moved
        without it being told."""
        return self._expires_ms is not None and now_ms < self._expires_ms
