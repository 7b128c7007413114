"""When a coordinator may answer: the rule the group and the transaction coordinators share
(Kafka's ``NOT_COORDINATOR`` and ``COORDINATOR_LOAD_IN_PROGRESS``).

A coordinator holds the state of one partition of its internal topic
(``__consumer_offsets``, ``__transaction_state``) as one leadership of that partition wrote
it: it was loaded from the log when its broker became leader at some leader epoch. It may
answer only while its broker still leads the partition at that epoch. A broker that lost
the partition, even for a moment, may have missed what the next leader took (a commit, a
transaction's end), so its answers could be stale. The shell therefore asks, for every
request and in the same step as the answer (no ``await`` in between), at which epoch the
broker leads the partition now (``None``: it does not), and the coordinator answers::

    the broker leads it now   coordinator LOADING            coordinator loaded
    not at all                NOT_COORDINATOR                NOT_COORDINATOR
    at an older epoch         NOT_COORDINATOR                NOT_COORDINATOR
    at its epoch              COORDINATOR_LOAD_IN_PROGRESS   answers
    at a newer epoch          COORDINATOR_LOAD_IN_PROGRESS   COORDINATOR_LOAD_IN_PROGRESS

A newer epoch means the broker lost the partition and leads it again: the shell loads a new
coordinator from the log (which now holds what the other leader wrote) and drops this one.
Both answers are retriable; ``NOT_COORDINATOR`` sends the client back to
``FindCoordinator``.

Pure: no clock, I/O or state.
"""

from __future__ import annotations

from lograft.protocol.errors import CoordinatorLoadInProgressError, NotCoordinatorError

__all__ = ["check_leadership"]


def check_leadership(
    partition: str, loaded_epoch: int, leader_epoch: int | None, *, loading: bool
) -> None:
    """Raise unless a coordinator of ``partition`` (``"__consumer_offsets-3"``), loaded at
    ``loaded_epoch`` and done loading unless ``loading``, may answer while its broker leads
    the partition at ``leader_epoch`` (``None``: not at all); see the module docstring."""
    if leader_epoch is None:
        raise NotCoordinatorError(f"this broker no longer leads {partition}")
    if leader_epoch < loaded_epoch:
        raise NotCoordinatorError(
            f"this broker leads {partition} at leader epoch {leader_epoch}, older than the "
            f"coordinator's {loaded_epoch}"
        )
    if leader_epoch > loaded_epoch:
        raise CoordinatorLoadInProgressError(
            f"{partition} is led here again at leader epoch {leader_epoch} (the coordinator "
            f"was loaded at {loaded_epoch}): it is loaded anew"
        )
    if loading:
        raise CoordinatorLoadInProgressError(f"{partition} is still loading")
