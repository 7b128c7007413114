"""Errors of the pure group coordinator core.

Request-level failures use the shared :mod:`lograft.protocol.errors` classes directly
(``UNKNOWN_MEMBER_ID``, ``FENCED_MEMBER_EPOCH``, ``STALE_MEMBER_EPOCH``,
``GROUP_ID_NOT_FOUND``, ``UNASSIGNED_PARTITION``, ...). Two kinds are defined here:

* :class:`GroupRecordError` -- bytes read from ``__consumer_offsets`` that do not decode to
  a group record (truncated, oversized, unknown type or version, bad field). The shell
  treats them as corrupt storage: the partition cannot be loaded.
* :class:`GroupInvariantError` -- the coordinator or its caller broke a group invariant (a
  partition owned by two members, records replayed into an inconsistent state, a call on a
  coordinator that is not active). It crashes the node on purpose and is never caught and
  logged away.
"""

from __future__ import annotations

from lograft.protocol.errors import CorruptMessageError, InvariantError

__all__ = ["GroupInvariantError", "GroupRecordError"]


class GroupRecordError(CorruptMessageError):
    """``CORRUPT_MESSAGE``: a ``__consumer_offsets`` record key or value is not valid."""


class GroupInvariantError(InvariantError):
    """A group coordinator invariant is broken; the node halts (never answered)."""
