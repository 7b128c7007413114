"""The small state objects a :class:`~controller.raft._core.Core` is composed of.

Each field of a Raft node has one home. The ones here outlive role changes on purpose:
the election timer runs in every role but the leader's, the fetcher's state is judged
against fetches sent in an earlier role (an answer that arrives after a pre-candidate
went back to following still counts how long it was held), and the outbox collects what
any role wants sent. The role objects exist only in their role: :class:`Candidacy` while
the node is a pre-candidate or a candidate, :class:`LeaderState` (with each fetcher's
:class:`Progress` and the :class:`HeldFetch` long polls) while it leads.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from controller.raft.messages import ErrorCode, FetchRequest, RaftMessage, SnapshotId

if TYPE_CHECKING:
    # Only the type: the generator itself is injected, never the global one.
    from random import Random

__all__ = [
    "Candidacy",
    "ElectionTimer",
    "FetchState",
    "HeldFetch",
    "LeaderState",
    "Outbox",
    "Progress",
]


class ElectionTimer:
    """Ticks since the node last heard from a leader or granted a vote, and the randomised
    timeout after which a voter campaigns (an observer forgets its leader instead)."""

    __slots__ = ("_base_ticks", "_rng", "elapsed", "timeout")

    def __init__(self, base_ticks: int, rng: Random) -> None:
        self._base_ticks = base_ticks
        self._rng = rng
        self.elapsed = 0
        self.timeout = self._draw()

    def _draw(self) -> int:
        # Randomised in [base, 2 * base) so that split votes do not repeat (section 5.2).
        return self._base_ticks + self._rng.randrange(self._base_ticks)

    def reset(self) -> None:
        """Start a new election timeout (drawing a new random length)."""
        self.elapsed = 0
        self.timeout = self._draw()

    @property
    def expired(self) -> bool:
        """Whether the randomised timeout has run out."""
        return self.elapsed >= self.timeout


@dataclass(slots=True)
class FetchState:
    """The fetcher side of a follower, an observer or a pre-candidate (KIP-996)."""

    #: A fetch is to be built at the next ``ready()``.
    want_fetch: bool = False
    #: A fetch was sent and not answered yet.
    pending: bool = False
    #: Ticks since the last fetch was sent.
    age: int = 0
    #: The leader's snapshot to fetch instead of entries (KIP-630).
    want_snapshot: SnapshotId | None = None
    #: The voter an observer that knows no leader asks (drawn with the injected generator).
    observer_target: int | None = None


@dataclass(slots=True)
class Candidacy:
    """What a pre-candidate or candidate keeps for its round of (pre-)votes."""

    #: Who granted this round's (pre-)vote, this node included.
    votes: set[int]
    #: KIP-996: the (epoch, leader) a follower followed when its election timer fired. As
    #: a pre-candidate it keeps fetching from that leader, and an answer makes it a
    #: follower again; only the epoch it was taken in counts.
    prospective_leader: tuple[int, int] | None = None


@dataclass(slots=True)
class Outbox:
    """Messages waiting for the next ``Ready`` and the count of refused messages."""

    messages: list[RaftMessage] = field(default_factory=list)
    #: Messages refused by ``step``, by error (wrong cluster, stale epoch, malformed...).
    rejections: Counter[ErrorCode] = field(default_factory=Counter)


@dataclass(slots=True)
class Progress:
    """The leader's knowledge of one fetcher in the current epoch."""

    end_offset: int = 0
    #: The last tick the fetcher was heard from: it fetched, or a fetch of it was held.
    last_fetch_tick: int = -1


@dataclass(slots=True)
class HeldFetch:
    """A fetch the leader holds until there is something new for it (long poll)."""

    request: FetchRequest
    #: Ticks left before it is answered anyway (empty).
    ticks_left: int


@dataclass(slots=True)
class LeaderState:
    """State a leader keeps for its epoch only (Kafka's ``LeaderState``)."""

    epoch_start_offset: int
    progress: dict[int, Progress] = field(default_factory=dict)
    #: Ticks since this node became leader (the clock of ``last_fetch_tick``).
    ticks: int = 0
