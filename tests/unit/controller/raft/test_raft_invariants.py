"""``RaftNode.check_invariants`` passes on a correct run and halts on a broken state.

Each broken state is made by hand (the core never makes one: the simulation checks every
step of every node), and must raise :class:`RaftInvariantError`, the error that halts a
node. A last test pins that the core logs only through the logger its shell passes in.
"""

from __future__ import annotations

import ast

import pytest

from controller.raft import RaftInvariantError, Role
from controller.raft._state import LeaderState, Progress
from tests.paths import REPO_ROOT
from tests.unit.raft_fixtures import Net, make_node

RAFT_DIR = REPO_ROOT / "controller" / "raft"


def test_a_correct_run_keeps_every_invariant() -> None:
    """Election, proposals and replication: checked at every node after every round."""
    net = Net(observers=(4,))
    leader = net.elect(1)
    for i in range(5):
        leader.propose(f"v{i}".encode())
        net.tick()
        for node in net.nodes.values():
            node.check_invariants()
    assert all(node.high_watermark == leader.log_end_offset for node in net.nodes.values())


def test_high_watermark_past_the_log_end_halts() -> None:
    """Raft's commit index never passes the last entry."""
    node, _ = make_node(1)
    node._core.high_watermark = node.log_end_offset + 1
    with pytest.raises(RaftInvariantError, match="high watermark"):
        node.check_invariants()


def test_a_high_watermark_going_back_halts() -> None:
    """Committed stays committed: the high watermark never decreases."""
    net = Net()
    leader = net.elect(1)
    leader.check_invariants()
    leader._core.high_watermark -= 1
    leader._core.applied_end = leader._core.high_watermark  # only the going back is wrong
    with pytest.raises(RaftInvariantError, match="went back"):
        leader.check_invariants()


def test_a_second_vote_in_one_epoch_halts() -> None:
    """One vote per epoch (section 5.2)."""
    net = Net()
    net.elect(1)
    follower = net.nodes[2]
    follower.check_invariants()
    follower._core.quorum._voted_for = 3
    with pytest.raises(RaftInvariantError, match="voted for"):
        follower.check_invariants()


def test_leader_state_outside_the_leader_role_halts() -> None:
    """Role objects exist exactly in their role: a follower holds no leader state."""
    net = Net()
    net.elect(1)
    follower = net.nodes[2]
    assert follower.role is Role.FOLLOWER
    follower._core.leader = LeaderState(epoch_start_offset=0)
    with pytest.raises(RaftInvariantError, match="leader state"):
        follower.check_invariants()


def test_a_leader_counting_itself_as_a_replica_halts() -> None:
    """The leader's own match is its persisted log end, not a progress entry."""
    net = Net()
    leader = net.elect(1)
    state = leader._core.leader
    assert state is not None
    state.progress[1] = Progress(end_offset=leader.log_end_offset)
    with pytest.raises(RaftInvariantError, match="own progress"):
        leader.check_invariants()


def test_no_module_level_logger_in_the_core() -> None:
    """The core logs to the logger its shell injects; no module creates one of its own."""
    for path in sorted(RAFT_DIR.glob("*.py")):
        for statement in ast.parse(path.read_text()).body:
            for node in ast.walk(statement):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    break
                if isinstance(node, ast.Attribute) and node.attr == "getLogger":
                    raise AssertionError(f"{path.name}:{node.lineno} calls getLogger")
