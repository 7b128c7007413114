"""Fake brokers for the consumer's tests: the fake broker as the coordinator of every group
(:class:`FakeGroupBroker`), one whose group calls hang until thawed
(:class:`FreezingBroker`), and the configs and recorder the tests share."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent import futures
from typing import Any

import grpc

from cluster.client import (
    Consumer,
    ConsumerRecord,
    Producer,
    TopicPartition,
)
from lograft.protocol.wire import broker_pb2 as pb
from lograft.protocol.wire import broker_pb2_grpc as pb_grpc
from tests.unit.client_fixtures import FakeBroker

STALE_MEMBER_EPOCH = 113


WAIT_S = 20.0


class FakeGroupBroker(FakeBroker):
    """The fake broker, and the coordinator of every group, with one member at a time."""

    def __init__(self) -> None:
        super().__init__()
        self.find_calls = 0
        self.heartbeats: list[Any] = []
        self.heartbeat_errors: deque[int] = deque()
        self.heartbeat_interval_ms = 20
        self.target: frozenset[TopicPartition] = frozenset()
        self.target_version = 0
        self.sent_version = -1
        self.sent_in = -1
        """Which heartbeat (index) the assignment was last sent in."""
        self.member_id = ""
        self.member_epoch = 0
        self.members_joined = 0
        self.commits: list[Any] = []
        self.commit_errors: deque[tuple[int, bool]] = deque()
        """(error code, for the whole call rather than per partition)"""
        self.committed: dict[TopicPartition, int] = {}
        self.bump_epoch_on_stale = False
        """Answering STALE_MEMBER_EPOCH also gives the member a new epoch (next heartbeat)."""

    # -- test controls

    def set_target(self, partitions: set[TopicPartition]) -> None:
        with self.cond:
            self.target = frozenset(partitions)
            self.target_version += 1
            self.cond.notify_all()

    def wait_until_received(self) -> None:
        """Until the member has taken in the current target: it heartbeats once more after."""
        self.wait_for(
            lambda: (
                self.sent_version == self.target_version and len(self.heartbeats) > self.sent_in + 1
            ),
            "the member to take the assignment",
        )

    def reported(self, owned: set[TopicPartition], since: int = 0) -> bool:
        """Whether a heartbeat (from index ``since`` on) reported owning exactly ``owned``."""
        return any(owned_partitions(h) == owned for h in self.heartbeats[since:])

    def wait_for(self, predicate: Callable[[], bool], what: str) -> None:
        with self.cond:
            assert self.cond.wait_for(predicate, WAIT_S), f"timed out waiting for {what}"

    def produce(self, tp: TopicPartition, count: int) -> None:
        with Producer(bootstrap_servers=f"127.0.0.1:{self.port}") as producer:
            values = [f"{tp}/{i}".encode() for i in range(count)]
            producer.send_bulk(tp.topic, values, partition=tp.partition).result(timeout=10)

    # -- the group RPCs

    def FindCoordinator(self, request: Any, context: Any) -> Any:
        with self.cond:
            self.find_calls += 1
            self.cond.notify_all()
        return pb.FindCoordinatorResponse(node_id=1, host="127.0.0.1", port=self.port)

    def ConsumerGroupHeartbeat(self, request: Any, context: Any) -> Any:
        with self.cond:
            self.heartbeats.append(request)
            self.cond.notify_all()
            if self.heartbeat_errors:
                code = self.heartbeat_errors.popleft()
                return pb.ConsumerGroupHeartbeatResponse(error_code=code, error_message="scripted")
            if request.member_epoch == -1:
                self.member_epoch = 0
                return pb.ConsumerGroupHeartbeatResponse(
                    member_id=request.member_id, member_epoch=-1
                )
            if request.member_epoch == 0:
                if not request.member_id:
                    self.members_joined += 1
                    self.member_id = f"m-{self.members_joined}"
                self.sent_version = -1  # a (re)joining member gets its whole assignment
            response = pb.ConsumerGroupHeartbeatResponse(
                member_id=self.member_id, heartbeat_interval_ms=self.heartbeat_interval_ms
            )
            if self.sent_version != self.target_version:
                self.member_epoch += 1
                self.sent_version = self.target_version
                self.sent_in = len(self.heartbeats) - 1
                by_topic: dict[str, list[int]] = {}
                for tp in sorted(self.target):
                    by_topic.setdefault(tp.topic, []).append(tp.partition)
                response.assignment.SetInParent()
                for topic, partitions in by_topic.items():
                    response.assignment.topics.add(topic=topic, partitions=partitions)
            response.member_epoch = self.member_epoch
            return response

    def OffsetCommit(self, request: Any, context: Any) -> Any:
        with self.cond:
            self.commits.append(request)
            self.cond.notify_all()
            response = pb.OffsetCommitResponse()
            code, whole_call = self.commit_errors.popleft() if self.commit_errors else (0, False)
            if code == STALE_MEMBER_EPOCH and self.bump_epoch_on_stale:
                self.target_version += 1
            if code and whole_call:
                response.error_code = code
                return response
            for topic in request.topics:
                result = response.topics.add(name=topic.name)
                for p in topic.partitions:
                    result.partitions.add(partition=p.partition, error_code=code)
                    if not code:
                        self.committed[TopicPartition(topic.name, p.partition)] = p.committed_offset
            return response

    def OffsetFetch(self, request: Any, context: Any) -> Any:
        response = pb.OffsetFetchResponse()
        with self.cond:
            for topic in request.topics:
                result = response.topics.add(name=topic.topic)
                for partition in topic.partitions:
                    offset = self.committed.get(TopicPartition(topic.topic, partition), -1)
                    result.partitions.add(partition=partition, committed_offset=offset)
        return response


def serve(broker: FakeBroker) -> Any:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    pb_grpc.add_BrokerServicer_to_server(broker, server)
    broker.port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server


def consumer_config(fake: FakeBroker, **extra: object) -> dict[str, object]:
    config: dict[str, object] = {
        "bootstrap.servers": f"127.0.0.1:{fake.port}",
        "group.id": "g",
        "client.id": "c-1",
        "auto.offset.reset": "earliest",
        "fetch.max.wait.ms": 20,
        "max.poll.records": 1,
        "retry.backoff.ms": 10,
        "request.timeout.ms": 5000,
    }
    config.update({name.replace("_", "."): value for name, value in extra.items()})
    return config


class Recorder:
    """What the application sees, in order: callbacks and records."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.events.append(("assign", partitions))

    def on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.events.append(("revoke", partitions))

    def on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.events.append(("lost", partitions))

    def callbacks(self) -> list[tuple[str, Any]]:
        return [e for e in self.events if e[0] != "record"]

    def records(self, tp: TopicPartition) -> list[int]:
        return [e[1][1] for e in self.events if e[0] == "record" and e[1][0] == tp]

    def poll_until(self, consumer: Consumer, done: Callable[[], bool], what: str) -> None:
        for _ in range(1000):
            if done():
                return
            for record in consumer.poll(timeout_ms=20):
                self.record(record)
        raise AssertionError(f"poll never saw {what}; events: {self.callbacks()}")

    def record(self, record: ConsumerRecord) -> None:
        self.events.append(
            ("record", (TopicPartition(record.topic, record.partition), record.offset))
        )


def owned_partitions(heartbeat: Any) -> set[TopicPartition] | None:
    if not heartbeat.HasField("owned_partitions"):
        return None
    return {
        TopicPartition(t.topic, p) for t in heartbeat.owned_partitions.topics for p in t.partitions
    }


HANG_MS = 60_000
"""request.timeout.ms: how long a consumer that waits on the frozen coordinator would wait."""


class FreezingBroker(FakeGroupBroker):
    """The fake coordinator; ``freeze`` makes its group RPCs hang until ``thaw``."""

    def __init__(self) -> None:
        super().__init__()
        self.thawed = threading.Event()
        self.thawed.set()
        self.offset_fetches = 0

    def freeze(self) -> None:
        self.thawed.clear()

    def thaw(self) -> None:
        self.thawed.set()

    def ConsumerGroupHeartbeat(self, request: Any, context: Any) -> Any:
        self.thawed.wait(HANG_MS / 1000.0)
        return super().ConsumerGroupHeartbeat(request, context)

    def OffsetCommit(self, request: Any, context: Any) -> Any:
        self.thawed.wait(HANG_MS / 1000.0)
        return super().OffsetCommit(request, context)

    def OffsetFetch(self, request: Any, context: Any) -> Any:
        with self.cond:
            self.offset_fetches += 1
            self.cond.notify_all()
        self.thawed.wait(HANG_MS / 1000.0)
        return super().OffsetFetch(request, context)
