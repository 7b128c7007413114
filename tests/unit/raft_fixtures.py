"""Raft nodes for the core's tests: a node over memory storage, and a network that
delivers what nodes send (:class:`Net`)."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterable

from controller.raft import (
    Entry,
    MemoryStorage,
    RaftConfig,
    RaftMessage,
    RaftNode,
    Ready,
    Role,
)

CLUSTER = "paper"


TIMEOUT = 10


def make_node(
    node_id: int,
    voters: Iterable[int] = (1, 2, 3),
    storage: MemoryStorage | None = None,
    seed: int = 0,
    **overrides: int,
) -> tuple[RaftNode, MemoryStorage]:
    """A node over (a copy of) ``storage``, with a seeded generator."""
    store = storage if storage is not None else MemoryStorage()
    config = RaftConfig(
        node_id=node_id,
        cluster_id=CLUSTER,
        voters=frozenset(voters),
        election_timeout_ticks=TIMEOUT,
        **overrides,  # type: ignore[arg-type]
    )
    rng = random.Random(seed * 1000 + node_id)
    return RaftNode(config, store, rng, logging.getLogger("controller.raft")), store


def drain(
    node: RaftNode,
    storage: MemoryStorage,
    applied: list[Entry] | None = None,
    readies: list[Ready] | None = None,
) -> list[RaftMessage]:
    """Run the Ready loop to quiescence; returns the messages to send."""
    out: list[RaftMessage] = []
    for _ in range(1000):
        if not node.has_ready():
            return out
        ready = node.ready()
        if readies is not None:
            readies.append(ready)
        storage.write(ready)
        out.extend(ready.messages)
        if applied is not None:
            applied.extend(ready.committed_entries)
        node.advance(ready)
    raise AssertionError("the node never stops producing Ready batches")


class Net:
    """Nodes wired together by a perfect network that tests can cut."""

    def __init__(
        self, voters: Iterable[int] = (1, 2, 3), observers: Iterable[int] = (), **overrides: int
    ) -> None:
        self.voters = tuple(voters)
        ids = self.voters + tuple(observers)
        self.nodes: dict[int, RaftNode] = {}
        self.stores: dict[int, MemoryStorage] = {}
        self.applied: dict[int, list[Entry]] = {i: [] for i in ids}
        self.readies: dict[int, list[Ready]] = {i: [] for i in ids}
        self.sent: list[RaftMessage] = []
        for i in ids:
            self.nodes[i], self.stores[i] = make_node(i, self.voters, **overrides)
        self.cut: set[int] = set()
        self.pending: list[RaftMessage] = []

    def flush(self, drop: Callable[[RaftMessage], bool] = lambda m: False) -> None:
        """Deliver messages until none are left (cut nodes send and receive nothing)."""
        for _ in range(10_000):
            for i, node in self.nodes.items():
                self.pending.extend(drain(node, self.stores[i], self.applied[i], self.readies[i]))
            if not self.pending:
                return
            batch, self.pending = self.pending, []
            self.sent.extend(batch)
            for m in batch:
                if m.src in self.cut or m.dst in self.cut or drop(m):
                    continue
                self.nodes[m.dst].step(m)
        raise AssertionError("messages never stopped")

    def tick(self, times: int = 1, only: Iterable[int] | None = None) -> None:
        """Tick nodes (all, or ``only``) and deliver after each tick."""
        targets = list(only) if only is not None else list(self.nodes)
        for _ in range(times):
            for i in targets:
                self.nodes[i].tick()
            self.flush()

    def elect(self, node_id: int) -> RaftNode:
        """Let ``node_id`` time out first and win."""
        node = self.nodes[node_id]
        for _ in range(3 * TIMEOUT):
            node.tick()
            self.flush()
            if node.role is Role.LEADER:
                return node
        raise AssertionError(f"node {node_id} did not win: {node.role}")

    def leaders(self) -> list[int]:
        """Ids of nodes that think they lead."""
        return [i for i, n in self.nodes.items() if n.role is Role.LEADER]
