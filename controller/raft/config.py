"""The static configuration of one node of the Raft quorum (etcd's ``Config``)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RaftConfig"]


@dataclass(frozen=True, slots=True)
class RaftConfig:
    """Static configuration of one node of the quorum.

    Times are in ticks: the shell calls ``tick()`` every ``tick_ms`` of real time, so with
    ``tick_ms=50`` the default election timeout is 500-1000 ms (randomised per election in
    ``[election_timeout_ticks, 2 * election_timeout_ticks)``).
    """

    node_id: int
    cluster_id: str
    #: Kafka's ``controller.quorum.voters`` ids. A node not in it is an observer.
    voters: frozenset[int]
    election_timeout_ticks: int = 10
    #: A fetch not answered within this many ticks (after its ``fetch_max_wait_ticks``) is
    #: sent again.
    fetch_timeout_ticks: int = 2
    #: Long poll: how long a fetch that finds nothing new may be held by the leader (the
    #: ``max_wait_ticks`` this node asks for as a fetcher, and the most it grants as leader).
    #: ``0`` answers every fetch at once and fetches every tick. A follower hears from its
    #: leader only through fetch answers, so it must stay well below the election timeout:
    #: at most half of it.
    fetch_max_wait_ticks: int = 0
    pre_vote: bool = True
    check_quorum: bool = True
    max_fetch_entries: int = 256
    max_committed_entries: int = 1024

    def __post_init__(self) -> None:
        if not self.voters:
            raise ValueError("voters must not be empty")
        if min(self.voters) < 0 or self.node_id < 0:
            raise ValueError("node ids must be >= 0")
        if self.election_timeout_ticks < 2 or self.fetch_timeout_ticks < 1:
            raise ValueError("election_timeout_ticks must be >= 2, fetch_timeout_ticks >= 1")
        if not 0 <= 2 * self.fetch_max_wait_ticks <= self.election_timeout_ticks:
            raise ValueError("fetch_max_wait_ticks must be in [0, election_timeout_ticks / 2]")
        if self.max_fetch_entries < 1 or self.max_committed_entries < 1:
            raise ValueError("max_fetch_entries and max_committed_entries must be >= 1")
