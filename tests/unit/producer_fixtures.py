"""A fake partition leader for producer tests: an in-process gRPC servicer on 127.0.0.1.

It leads every partition and checks produced batches with ``replica.producer_state`` as a
real leader does (last five batches per producer, duplicates answered with their original
offset, OUT_OF_ORDER_SEQUENCE_NUMBER for gaps). Each produce request can be scripted: answer
an error, lose the response after appending, or wait (on an event, never a sleep) so that a
later request overtakes it. The fake also records every batch header it received and flags
protocol violations: a retried duplicate sent together with other batches, or more than
five unresolved batches of one partition.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import grpc

from lograft.protocol.batch_header import (
    BatchHeader,
    assign_offsets,
    iter_headers,
    validate_batches,
)
from lograft.protocol.errors import LograftError, UnknownTopicOrPartitionError
from lograft.protocol.records import iter_records
from lograft.protocol.wire import broker_pb2 as pb
from lograft.protocol.wire import broker_pb2_grpc as pb_grpc
from replica.producer_state import Duplicate, ProducerStateManager

TIMEOUT_S = 30.0
"""Real seconds a test waits for something that should happen at once."""
PRODUCER_ID = 1000
"""The first producer id the fake hands out."""


@dataclass
class Plan:
    """What the fake does with one produce request."""

    error: int = 0
    """Answer every partition with this code and append nothing."""
    lose_response: bool = False
    """Append, then fail the call with UNAVAILABLE, as if the response was lost."""
    hold_until_another_answered: bool = False
    """Wait until another produce request has been answered, then handle this one."""
    gate: threading.Event | None = None
    """Wait until the test sets this event, then handle the request."""


@dataclass
class Received:
    """One partition's data in one produce request, as the fake received it."""

    topic: str
    partition: int
    headers: list[BatchHeader]
    data: bytes


@dataclass
class FakeLeader(pb_grpc.BrokerServicer):  # type: ignore[misc]
    """A single node leading every partition, with Kafka's idempotence checks."""

    port: int = 0
    cond: threading.Condition = field(default_factory=threading.Condition)
    topics: dict[str, int] = field(default_factory=dict)
    logs: dict[tuple[str, int], list[bytes]] = field(default_factory=dict)
    end: dict[tuple[str, int], int] = field(default_factory=dict)
    states: dict[tuple[str, int], ProducerStateManager] = field(default_factory=dict)
    plans: deque[Plan] = field(default_factory=deque)
    received: list[Received] = field(default_factory=list)
    requests: list[list[Received]] = field(default_factory=list)
    duplicates: int = 0
    violations: list[str] = field(default_factory=list)
    held: threading.Event = field(default_factory=threading.Event)
    answered: int = 0
    init_errors: deque[int] = field(default_factory=deque)
    init_always_fails: int = 0
    init_calls: int = 0
    next_producer_id: int = PRODUCER_ID
    lose_nth_append: int = 0
    """Lose the response of the n-th request (counting from 1) that appended something."""
    appends: int = 0
    pending: dict[tuple[str, int], set[tuple[int, int, int]]] = field(default_factory=dict)
    """Per partition, (producer id, epoch, first sequence) of batches received and neither
    appended nor found to be duplicates."""

    def add_topic(self, name: str, partitions: int) -> None:
        with self.cond:
            self.topics[name] = partitions
            for p in range(partitions):
                self.logs[(name, p)] = []
                self.end[(name, p)] = 0
                self.states[(name, p)] = ProducerStateManager()
                self.pending[(name, p)] = set()

    def values(self, topic: str, partition: int) -> list[bytes | None]:
        with self.cond:
            data = b"".join(self.logs[(topic, partition)])
        return [record.value for record in iter_records(data)]

    def headers(self, topic: str, partition: int) -> list[BatchHeader]:
        with self.cond:
            data = b"".join(self.logs[(topic, partition)])
        return list(iter_headers(data))

    # -- RPCs

    def InitProducerId(self, request: Any, context: Any) -> Any:
        with self.cond:
            self.init_calls += 1
            code = self.init_errors.popleft() if self.init_errors else self.init_always_fails
            if code:
                return pb.InitProducerIdResponse(error_code=code, error_message="scripted")
            producer_id = self.next_producer_id
            self.next_producer_id += 1
        return pb.InitProducerIdResponse(producer_id=producer_id, producer_epoch=0)

    def Metadata(self, request: Any, context: Any) -> Any:
        response = pb.MetadataResponse(
            cluster_id="fake",
            controller_id=1,
            brokers=[pb.BrokerMetadata(node_id=1, host="127.0.0.1", port=self.port)],
        )
        with self.cond:
            for name in list(request.topics) or sorted(self.topics):
                if name not in self.topics:
                    response.topics.add(name=name, error_code=UnknownTopicOrPartitionError.code)
                    continue
                topic = response.topics.add(name=name)
                for p in range(self.topics[name]):
                    topic.partitions.add(partition=p, leader_id=1, replica_nodes=[1], isr_nodes=[1])
        return response

    def Produce(self, request: Any, context: Any) -> Any:
        response = pb.ProduceResponse()
        with self.cond:
            plan = self.plans.popleft() if self.plans else Plan()
            if plan.hold_until_another_answered:
                answered = self.answered
                self.held.set()
                if not self.cond.wait_for(lambda: self.answered > answered, TIMEOUT_S):
                    self.violations.append("held request was never overtaken")
        if plan.gate is not None:
            self.held.set()
            if not plan.gate.wait(TIMEOUT_S):
                self.violations.append("gate never opened")
        with self.cond:
            parts: list[Received] = []
            appends = self.appends
            for topic in request.topics:
                topic_response = response.topics.add(name=topic.name)
                for data in topic.partitions:
                    result = topic_response.partitions.add(
                        partition=data.partition, base_offset=-1, log_append_time_ms=-1
                    )
                    self._produce_partition(topic.name, data, result, plan, parts)
            self.requests.append(parts)
            self.answered += 1
            lose = plan.lose_response or (
                self.appends > appends and self.appends == self.lose_nth_append
            )
            self.cond.notify_all()
        if lose:
            context.abort(grpc.StatusCode.UNAVAILABLE, "response lost (test)")
        return response

    def _produce_partition(
        self, topic: str, data: Any, result: Any, plan: Plan, parts: list[Received]
    ) -> None:
        key = (topic, data.partition)
        if key not in self.end:
            result.error_code = UnknownTopicOrPartitionError.code
            return
        buf = bytearray(data.records)
        headers = validate_batches(buf, 1 << 30)
        received = Received(topic, data.partition, headers, bytes(data.records))
        self.received.append(received)
        parts.append(received)
        pending = self.pending[key]
        for header in headers:
            if header.producer_id >= 0:
                pending.add((header.producer_id, header.producer_epoch, header.base_sequence))
        if len(pending) > 5:
            self.violations.append(f"{len(pending)} unresolved batches of {key}")
        if plan.error:
            result.error_code = plan.error
            return
        state = self.states[key]
        try:
            outcomes = state.check_batches(headers)
        except LograftError as exc:
            result.error_code = exc.code
            result.error_message = str(exc)
            return
        duplicates = [o for o in outcomes if isinstance(o, Duplicate)]
        if duplicates:
            if len(outcomes) != 1:
                self.violations.append("a duplicate was sent with other batches")
            self.duplicates += 1
            first = headers[0]
            pending.discard((first.producer_id, first.producer_epoch, first.base_sequence))
            result.base_offset = duplicates[0].first_offset
            return
        base = self.end[key]
        self.appends += 1
        self.end[key] = assign_offsets(buf, headers, base, 0)
        appended = list(iter_headers(buf))
        for header in appended:
            state.on_appended(header)
            pending.discard((header.producer_id, header.producer_epoch, header.base_sequence))
            self.logs[key].append(bytes(buf[header.position : header.position + header.size]))
        result.base_offset = base
        if len(appended) > 1:  # as the real broker answers several batches
            result.batch_base_offsets.extend(h.base_offset for h in appended)


@dataclass
class FakeTxnCoordinator(FakeLeader):
    """``FakeLeader`` that is also every transactional id's and group's coordinator.

    ``InitProducerId`` of a transactional id bumps its epoch; ``EndTxn`` answers the next
    epoch (transactions version 2). Each transactional call can be scripted to fail:
    ``errors[method]`` holds the codes its next calls answer.
    """

    errors: dict[str, deque[int]] = field(default_factory=dict)
    epochs: dict[str, tuple[int, int]] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)

    def fail_next(self, method: str, code: int) -> None:
        """The next call of ``method`` answers ``code``."""
        with self.cond:
            self.errors.setdefault(method, deque()).append(code)

    def _scripted(self, method: str) -> int:
        with self.cond:
            self.calls.append(method)
            queued = self.errors.get(method)
            return queued.popleft() if queued else 0

    def FindCoordinator(self, request: Any, context: Any) -> Any:
        return pb.FindCoordinatorResponse(node_id=1, host="127.0.0.1", port=self.port)

    def InitProducerId(self, request: Any, context: Any) -> Any:
        if not request.transactional_id:
            return super().InitProducerId(request, context)
        code = self._scripted("InitProducerId")
        if code:
            return pb.InitProducerIdResponse(error_code=code, error_message="scripted")
        with self.cond:
            known = self.epochs.get(request.transactional_id)
            if known is None:
                known = (self.next_producer_id, -1)
                self.next_producer_id += 1
            producer_id, epoch = known[0], known[1] + 1
            self.epochs[request.transactional_id] = (producer_id, epoch)
        return pb.InitProducerIdResponse(
            producer_id=producer_id,
            producer_epoch=epoch,
            ongoing_txn_producer_id=-1,
            ongoing_txn_producer_epoch=-1,
        )

    def AddPartitionsToTxn(self, request: Any, context: Any) -> Any:
        code = self._scripted("AddPartitionsToTxn")
        return pb.AddPartitionsToTxnResponse(error_code=code, error_message=_message(code))

    def AddOffsetsToTxn(self, request: Any, context: Any) -> Any:
        code = self._scripted("AddOffsetsToTxn")
        return pb.AddOffsetsToTxnResponse(error_code=code, error_message=_message(code))

    def TxnOffsetCommit(self, request: Any, context: Any) -> Any:
        code = self._scripted("TxnOffsetCommit")
        return pb.TxnOffsetCommitResponse(error_code=code, error_message=_message(code))

    def EndTxn(self, request: Any, context: Any) -> Any:
        code = self._scripted("EndTxn")
        if code:
            return pb.EndTxnResponse(error_code=code, error_message="scripted")
        with self.cond:
            producer_id, epoch = self.epochs[request.transactional_id]
            self.epochs[request.transactional_id] = (producer_id, epoch + 1)
        return pb.EndTxnResponse(producer_id=producer_id, producer_epoch=epoch + 1)


@contextmanager
def fake_leader(kind: type[FakeLeader] = FakeLeader, port: int = 0) -> Iterator[FakeLeader]:
    """A running ``FakeLeader`` (or ``kind``) on ``port`` (0: a free one); on a clean exit,
    asserts it saw no protocol violation."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    leader = kind()
    pb_grpc.add_BrokerServicer_to_server(leader, server)
    leader.port = server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    try:
        yield leader
    finally:
        server.stop(grace=None)
    assert leader.violations == []


def _message(code: int) -> str:
    return "scripted" if code else ""
