"""Raft's safety properties for the seeded simulation, checked after every event.

:class:`InvariantChecker` is the simulator's judge (election safety, log matching, leader
completeness, state machine safety, one vote per epoch, committed entries that never roll
back), on top of each core's own ``RaftNode.check_invariants``. A broken property fails
the schedule with its seed (:meth:`Simulator.fail <tests.sim.simulator.Simulator.fail>`).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from controller.raft import EntryKind, RaftInvariantError, RaftNode, Ready, Role

if TYPE_CHECKING:
    from tests.sim.simulator import SimNode, Simulator

__all__ = ["InvariantChecker"]


class InvariantChecker:
    """Raft's safety properties, checked incrementally after every event.

    ``checks`` counts every check that passed, by property.
    """

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.checks: Counter[str] = Counter()
        self.leader_of_epoch: dict[int, int] = {}
        # Globally committed entries by offset, and the epoch in which each was first known
        # committed (leaders of later epochs must hold it: leader completeness).
        self.committed: list[tuple[int, EntryKind, bytes]] = []
        self.committed_in_epoch: list[int] = []
        self.log_entries: dict[tuple[int, int], tuple[EntryKind, bytes, int]] = {}
        self.applied: dict[int, tuple[int, EntryKind, bytes]] = {}
        self.digest_at: dict[int, bytes] = {0: b""}
        self.votes: dict[tuple[int, int], int] = {}
        self._checked_end: dict[int, int] = {}
        self._checked_tail_epoch: dict[int, int | None] = {}
        self._last_hw: dict[int, int] = {}
        self._seen_leader: set[tuple[int, int]] = set()

    def fail(self, what: str, detail: str) -> None:
        """Raise with the seed and how to replay it."""
        self.sim.fail(f"{what}: {detail}")

    def on_start(self, node: SimNode) -> None:
        """A node (re)started: its high watermark may reset, never its applied entries."""
        self._checked_end[node.node_id] = 0
        self._checked_tail_epoch[node.node_id] = None
        raft = node.raft
        assert raft is not None
        self._last_hw[node.node_id] = raft.high_watermark
        self.on_applied_state(node)

    def on_persisted(self, node: SimNode, ready: Ready) -> None:
        """A voter's durable vote never changes within an epoch, even across restarts."""
        hard_state = ready.hard_state
        if hard_state is not None and hard_state.voted_for is not None:
            key = (node.node_id, hard_state.epoch)
            previous = self.votes.setdefault(key, hard_state.voted_for)
            if previous != hard_state.voted_for:
                self.fail(
                    "one vote per epoch",
                    f"node {node.node_id} voted for {previous} and {hard_state.voted_for} "
                    f"in epoch {hard_state.epoch}",
                )
            self.checks["one_vote_per_epoch"] += 1

    def on_apply(
        self, node: SimNode, offset: int, epoch: int, kind: EntryKind, data: bytes
    ) -> None:
        """State machine safety: every replica applies the same entry at each offset."""
        applied = self.applied.setdefault(offset, (epoch, kind, data))
        if applied != (epoch, kind, data):
            self.fail(
                "state machine safety",
                f"node {node.node_id} applies {(epoch, kind, data)!r} at {offset}, "
                f"another replica applied {applied!r}",
            )
        self.checks["state_machine_safety"] += 1

    def on_applied_state(self, node: SimNode) -> None:
        """The state machine at an offset is the same everywhere (covers snapshots too)."""
        known = self.digest_at.setdefault(node.applied_end, node.digest)
        if known != node.digest:
            self.fail(
                "state machine safety",
                f"node {node.node_id} state at {node.applied_end} differs from another replica's",
            )
        self.checks["state_machine_safety"] += 1

    def on_restore(self, node: SimNode) -> None:
        """A snapshot install must land on a state some replica really had."""
        self.on_applied_state(node)

    def check_core(self, raft: RaftNode) -> None:
        """The core's own invariants (``RaftNode.check_invariants``), after every step.

        A broken one raises :class:`RaftInvariantError`, which halts a real node; here it
        fails the schedule with the seed to replay.
        """
        try:
            raft.check_invariants()
        except RaftInvariantError as broken:
            self.fail("core invariant", str(broken))
        self.checks["core_invariants"] += 1

    def check_node(self, node: SimNode) -> None:
        """Everything about one node after an event touched it."""
        raft = node.raft
        if raft is None:
            return
        self.check_core(raft)
        nid = node.node_id
        epoch = raft.epoch
        # Election safety: at most one leader per epoch, ever.
        if raft.role is Role.LEADER:
            leader = self.leader_of_epoch.setdefault(epoch, nid)
            if leader != nid:
                self.fail("election safety", f"nodes {leader} and {nid} both led epoch {epoch}")
            if (epoch, nid) not in self._seen_leader:
                self._seen_leader.add((epoch, nid))
                self._check_leader_completeness(node, raft)
        self.checks["election_safety"] += 1
        self._check_log_matching(node, raft)
        self._check_high_watermark(node, raft)

    def _check_leader_completeness(self, node: SimNode, raft: RaftNode) -> None:
        """Section 5.4: a leader of epoch e holds every entry committed before e."""
        start = raft.log_start_offset
        end = raft.log_end_offset
        for offset, (committed_epoch, kind, data) in enumerate(self.committed):
            if self.committed_in_epoch[offset] >= raft.epoch or offset < start:
                continue  # committed by a later leader, or inside our snapshot
            if offset >= end:
                self.fail(
                    "leader completeness",
                    f"leader {node.node_id} of epoch {raft.epoch} lacks committed offset {offset}",
                )
            entry = raft.entries(offset, offset + 1)[0]
            if (entry.epoch, entry.kind, entry.data) != (committed_epoch, kind, data):
                self.fail(
                    "leader completeness",
                    f"leader {node.node_id} of epoch {raft.epoch} has {entry!r} at committed "
                    f"offset {offset}",
                )
        self.checks["leader_completeness"] += 1

    def _check_log_matching(self, node: SimNode, raft: RaftNode) -> None:
        """Section 5.3: same offset and epoch means same entry and same history before it.

        Each (offset, epoch) is bound to its data and to the epoch before it; by induction
        two logs that share an (offset, epoch) then share the whole prefix.
        """
        nid = node.node_id
        start, end = raft.log_start_offset, raft.log_end_offset
        checked = self._checked_end[nid]
        if (
            checked > end
            or checked < start
            or (checked > start and raft.epoch_at(checked - 1) != self._checked_tail_epoch[nid])
        ):
            checked = start  # truncated, replaced or compacted: look again from the start
        if checked < end:
            previous_epoch = raft.epoch_at(checked - 1)
            for entry in raft.entries(checked, end):
                assert previous_epoch is not None
                bound = self.log_entries.setdefault(
                    (entry.offset, entry.epoch), (entry.kind, entry.data, previous_epoch)
                )
                if bound != (entry.kind, entry.data, previous_epoch):
                    self.fail(
                        "log matching",
                        f"node {nid} has {entry!r} after epoch {previous_epoch}; another log "
                        f"has {bound!r} at the same offset and epoch",
                    )
                previous_epoch = entry.epoch
                self.checks["log_matching"] += 1
        self._checked_end[nid] = end
        self._checked_tail_epoch[nid] = raft.epoch_at(end - 1) if end > start else None

    def _check_high_watermark(self, node: SimNode, raft: RaftNode) -> None:
        """Committed entries agree everywhere, never roll back, and the HW only grows."""
        nid = node.node_id
        hw = raft.high_watermark
        last = self._last_hw[nid]
        if hw < last:
            self.fail("high watermark monotonic", f"node {nid} went from {last} to {hw}")
        self.checks["high_watermark_monotonic"] += 1
        if hw > raft.log_end_offset:
            self.fail("high watermark", f"node {nid} hw {hw} beyond log end {raft.log_end_offset}")
        if hw > last:
            first = max(last, raft.log_start_offset)
            for entry in raft.entries(first, hw):
                self._agree_committed(
                    nid, entry.offset, entry.epoch, entry.kind, entry.data, raft.epoch
                )
            if hw > len(self.committed):
                self.fail("committed entries", f"node {nid} committed {hw} but offsets are unknown")
        self._last_hw[nid] = hw
        # Committed never rolls back: the last committed entry this node holds is intact.
        if hw > raft.log_start_offset:
            tail = raft.entries(hw - 1, hw)[0]
            self._agree_committed(nid, tail.offset, tail.epoch, tail.kind, tail.data, raft.epoch)
            self.checks["committed_never_rolled_back"] += 1

    def _agree_committed(
        self, nid: int, offset: int, epoch: int, kind: EntryKind, data: bytes, known_in: int
    ) -> None:
        if offset < len(self.committed):
            if self.committed[offset] != (epoch, kind, data):
                self.fail(
                    "committed entries",
                    f"node {nid} committed {(epoch, kind, data)!r} at {offset}; "
                    f"{self.committed[offset]!r} was committed there before",
                )
            self.committed_in_epoch[offset] = min(self.committed_in_epoch[offset], known_in)
        elif offset == len(self.committed):
            self.committed.append((epoch, kind, data))
            self.committed_in_epoch.append(known_in)
        else:
            self.fail("committed entries", f"node {nid} committed {offset} past a gap")
        self.checks["committed_agreement"] += 1
