"""Coordinators whose partition moves answer nothing stale (issue 40, item 4), on three real
nodes.

The leadership of a group's ``__consumer_offsets`` partition and of a transactional id's
``__transaction_state`` partition (with the same preferred leader) moves twice while clients
commit, read and probe every node: their preferred leader is killed (``kill -9``: the next
in-sync replica takes over once the controller fences it), then started again (the
controller gives the partitions back once it is in sync: the interim leader is deposed
while it runs). Throughout:

* no node answers as a coordinator while its own metadata, before and after the request,
  names another leader of the partition at the same leader epoch: it answers
  ``NOT_COORDINATOR`` and the client finds the new coordinator;
* no committed offset read, and no transactional id's state read, is older than a commit
  (an ``InitProducerId``) acknowledged before the read was sent;
* a coordinator answers a client with success or a refusal that sends it to
  ``FindCoordinator``: a write under way when the partition moves is answered
  ``NOT_COORDINATOR`` (as Kafka's coordinators map it), not with the partition's
  ``NOT_LEADER_OR_FOLLOWER``;
* the Spark sink's replay check (``write_partition`` reads the progress committed with a
  batch) finds a batch committed under one leader when it is replayed under the next.
"""

# Over 600 lines: two scenarios on one cluster and the probes and history they share.
from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest

from lograft.protocol.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    NotCoordinatorError,
)
from lograft.protocol.wire import broker_pb2 as pb
from lograft.protocol.wire import broker_pb2_grpc as pb_grpc
from replica.group import partition_for_group
from replica.group_service import OFFSETS_TOPIC
from replica.txn import partition_for_transactional_id
from replica.txn_service import TRANSACTION_STATE_TOPIC
from tests.integration.nodes import wait_until
from tests.integration.quorum import CLUSTER_TIMEOUT_S, OFFSETS_PARTITIONS, QuorumCluster
from tests.spark.conftest import require_spark
from tests.spark.helpers import read_topic

pytestmark = pytest.mark.integration

TOPIC = "events"
SINK_TOPIC = "sink-out"
SINK_ROWS = 20
GROUP_KEY, TRANSACTION_KEY = 0, 1
RPC_TIMEOUT_S = 10.0
RETRY_BACKOFF_S = 0.02
"""Between a refused coordinator call and the next FindCoordinator (``retry.backoff.ms``)."""
REFUSED = frozenset(
    {
        NotCoordinatorError.code,
        CoordinatorLoadInProgressError.code,
        CoordinatorNotAvailableError.code,
    }
)
PROGRESS_PER_LEADER = 5
"""Commits and InitProducerIds acknowledged under each leadership before it moves on."""
PROBES_OF_THE_DEPOSED = 5
"""Probes of the interim leader after it lost the partitions, before the stream stops."""
_CHANNEL_OPTIONS = [
    # A restarted node is called again soon, not after gRPC's reconnect backoff (up to 120 s).
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 500),
]

Leadership = tuple[int, int]
"""(leader, leader epoch) of a partition, in one node's metadata."""


# ---- reaching the nodes -----------------------------------------------------------------


class Stubs:
    """One channel per node, shared by the threads (gRPC channels are thread-safe)."""

    def __init__(self, cluster: QuorumCluster) -> None:
        self._channels = {
            n: grpc.insecure_channel(p.address, options=_CHANNEL_OPTIONS)
            for n, p in cluster.nodes.items()
        }
        self.of = {n: pb_grpc.BrokerStub(c) for n, c in self._channels.items()}

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()


@pytest.fixture
def stubs(grouped: QuorumCluster) -> Iterator[Stubs]:
    opened = Stubs(grouped)
    try:
        yield opened
    finally:
        opened.close()


def _ask(method: Callable[..., Any], request: Any) -> Any | None:
    """The answer, or None if the node gave none (killed, starting)."""
    try:
        return method(request, timeout=RPC_TIMEOUT_S)
    except grpc.RpcError:
        return None


def _partitions(stub: pb_grpc.BrokerStub, topic: str) -> dict[int, pb.PartitionMetadata]:
    metadata = _ask(stub.Metadata, pb.MetadataRequest(topics=[topic]))
    if metadata is None or not metadata.topics or metadata.topics[0].error_code:
        return {}
    return {p.partition: p for p in metadata.topics[0].partitions}


@dataclass(frozen=True)
class Keys:
    """A group and a transactional id whose internal partitions have the same preferred
    leader (the first of their replicas)."""

    group_id: str
    transactional_id: str
    offsets_partition: int
    state_partition: int
    preferred_leader: int


def _keys(
    stubs: Stubs, group_ids: Iterator[str], transactional_ids: Callable[[str], Iterator[str]]
) -> Keys:
    """The first group, and a transactional id for it, whose partitions have the same
    preferred leader."""
    offsets = _partitions(stubs.of[1], OFFSETS_TOPIC)
    states = _partitions(stubs.of[1], TRANSACTION_STATE_TOPIC)
    for group_id in group_ids:
        p = partition_for_group(group_id, OFFSETS_PARTITIONS)
        preferred = offsets[p].replica_nodes[0]
        for transactional_id in transactional_ids(group_id):
            q = partition_for_transactional_id(transactional_id, OFFSETS_PARTITIONS)
            if states[q].replica_nodes[0] == preferred:
                return Keys(group_id, transactional_id, p, q, preferred)
    raise AssertionError(f"no keys with the same preferred leader: {offsets} {states}")


def _create_internal_topics(cluster: QuorumCluster, stubs: Stubs) -> None:
    """FindCoordinator creates both internal topics; wait until every partition has a
    leader in every node's metadata."""

    def created() -> bool:
        for key_type in (GROUP_KEY, TRANSACTION_KEY):
            found = _ask(
                stubs.of[1].FindCoordinator,
                pb.FindCoordinatorRequest(group_id="any", key_type=key_type),
            )
            if found is None or found.error_code:
                return False
        return all(
            len(leaders := _partitions(stubs.of[n], topic)) == OFFSETS_PARTITIONS
            and all(p.leader_id >= 0 for p in leaders.values())
            for n in cluster.broker_ids
            for topic in (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC)
        )

    wait_until(created, CLUSTER_TIMEOUT_S, "both internal topics")


def _leadership(stub: pb_grpc.BrokerStub, keys: Keys) -> tuple[Leadership, Leadership] | None:
    """The two partitions' leaderships in one node's metadata (None: no answer)."""
    metadata = _ask(
        stub.Metadata, pb.MetadataRequest(topics=[OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC])
    )
    if metadata is None:
        return None
    found = {
        (t.name, p.partition): (p.leader_id, p.leader_epoch)
        for t in metadata.topics
        for p in t.partitions
    }
    offsets = found.get((OFFSETS_TOPIC, keys.offsets_partition))
    state = found.get((TRANSACTION_STATE_TOPIC, keys.state_partition))
    return None if offsets is None or state is None else (offsets, state)


def _leaders(cluster: QuorumCluster, stubs: Stubs, keys: Keys) -> tuple[int, int] | None:
    """The two partitions' leaders, when every live node's metadata names them alike."""
    seen = {_leadership(stubs.of[n.node_id], keys) for n in cluster.alive_brokers()}
    if len(seen) != 1:
        return None
    (leaderships,) = seen
    return None if leaderships is None else (leaderships[0][0], leaderships[1][0])


class Coordinated:
    """Calls to the coordinator of one key as a client makes them: FindCoordinator (any
    live node), then the call; a refusal or no answer starts again."""

    def __init__(self, cluster: QuorumCluster, stubs: Stubs, key: str, key_type: int) -> None:
        self._cluster = cluster
        self._stubs = stubs
        self._key = key
        self._key_type = key_type

    def call(
        self,
        send: Callable[[pb_grpc.BrokerStub], Any],
        error_of: Callable[[Any], int],
        stop: threading.Event,
    ) -> Any | None:
        """The coordinator's answer (anything but a refusal); None once ``stop`` is set."""
        while not stop.is_set():
            coordinator = self._find()
            if coordinator is not None:
                try:
                    answer = send(self._stubs.of[coordinator])
                except grpc.RpcError:
                    answer = None
                if answer is not None and error_of(answer) not in REFUSED:
                    return answer
            stop.wait(RETRY_BACKOFF_S)
        return None

    def _find(self) -> int | None:
        for node in self._cluster.alive_brokers():
            found = _ask(
                self._stubs.of[node.node_id].FindCoordinator,
                pb.FindCoordinatorRequest(group_id=self._key, key_type=self._key_type),
            )
            if found is not None and found.error_code == 0:
                return int(found.node_id)
        return None


# ---- the stream -------------------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    """One node asked, between two looks at its own metadata, as a coordinator."""

    node_id: int
    before: tuple[Leadership, Leadership]
    after: tuple[Leadership, Leadership]
    offset_fetch_error: int
    describe_error: int


@dataclass
class History:
    """What the clients saw; written under ``lock``."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    committed_offset: int = -1
    """The highest offset whose OffsetCommit was acknowledged."""
    producer_epoch: int = -1
    """The highest producer epoch an InitProducerId answered."""
    commits: int = 0
    inits: int = 0
    offset_reads: list[tuple[int, int]] = field(default_factory=list)
    """(committed_offset when the OffsetFetch was sent, offset it answered)."""
    state_reads: list[tuple[int, int]] = field(default_factory=list)
    """(producer_epoch when the DescribeTransactions was sent, epoch it answered)."""
    probes: list[Probe] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)


def _commit_error(response: pb.OffsetCommitResponse) -> int:
    codes = [p.error_code for t in response.topics for p in t.partitions if p.error_code]
    return int(response.error_code or (codes[0] if codes else 0))


def _offset_commit(group_id: str, offset: int) -> pb.OffsetCommitRequest:
    """An admin commit (the group has no members) of ``events``-0."""
    return pb.OffsetCommitRequest(
        group_id=group_id,
        member_epoch=-1,
        topics=[
            pb.OffsetCommitTopic(
                name=TOPIC,
                partitions=[pb.OffsetCommitPartition(partition=0, committed_offset=offset)],
            )
        ],
    )


def _offset_fetch(group_id: str) -> pb.OffsetFetchRequest:
    return pb.OffsetFetchRequest(
        group_id=group_id, topics=[pb.TopicPartitions(topic=TOPIC, partitions=[0])]
    )


def _describe(transactional_id: str) -> pb.DescribeTransactionsRequest:
    return pb.DescribeTransactionsRequest(transactional_ids=[transactional_id])


def _init(transactional_id: str) -> pb.InitProducerIdRequest:
    return pb.InitProducerIdRequest(
        transactional_id=transactional_id, transaction_timeout_ms=60_000
    )


class Stream:
    """Five client threads: a committer, an offset reader, an InitProducerId writer, a
    transaction-state reader, and a prober of every node."""

    def __init__(self, cluster: QuorumCluster, stubs: Stubs, keys: Keys) -> None:
        self.history = History()
        self._cluster = cluster
        self._stubs = stubs
        self._keys = keys
        self._group = Coordinated(cluster, stubs, keys.group_id, GROUP_KEY)
        self._txn = Coordinated(cluster, stubs, keys.transactional_id, TRANSACTION_KEY)
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(loop,), name=loop.__name__)
            for loop in (self._commit, self._read_offset, self._init, self._read_state, self._probe)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def check(self) -> None:
        """Raise what a client thread failed with, if one did."""
        with self.history.lock:
            if self.history.errors:
                raise self.history.errors[0]

    def _run(self, loop: Callable[[], bool]) -> None:
        try:
            while not self._stop.is_set() and loop():
                pass
        except BaseException as exc:  # re-raised by check(), in the test's thread
            with self.history.lock:
                self.history.errors.append(exc)

    def _commit(self) -> bool:
        history = self.history
        with history.lock:
            offset = history.committed_offset + 1
        answer = self._group.call(
            lambda s: s.OffsetCommit(
                _offset_commit(self._keys.group_id, offset), timeout=RPC_TIMEOUT_S
            ),
            _commit_error,
            self._stop,
        )
        if answer is None:
            return False
        assert _commit_error(answer) == 0, answer
        with history.lock:
            history.committed_offset = offset
            history.commits += 1
        return True

    def _read_offset(self) -> bool:
        history = self.history
        with history.lock:
            floor = history.committed_offset
        answer = self._group.call(
            lambda s: s.OffsetFetch(_offset_fetch(self._keys.group_id), timeout=RPC_TIMEOUT_S),
            lambda r: int(r.error_code),
            self._stop,
        )
        if answer is None:
            return False
        assert answer.error_code == 0, answer
        with history.lock:
            history.offset_reads.append((floor, answer.topics[0].partitions[0].committed_offset))
        return True

    def _init(self) -> bool:
        answer = self._txn.call(
            lambda s: s.InitProducerId(_init(self._keys.transactional_id), timeout=RPC_TIMEOUT_S),
            lambda r: int(r.error_code),
            self._stop,
        )
        if answer is None:
            return False
        assert answer.error_code == 0, answer
        with self.history.lock:
            self.history.producer_epoch = max(self.history.producer_epoch, answer.producer_epoch)
            self.history.inits += 1
        return True

    def _read_state(self) -> bool:
        history = self.history
        with history.lock:
            floor = history.producer_epoch
        if floor < 0:  # the id has no state before its first InitProducerId
            self._stop.wait(RETRY_BACKOFF_S)
            return True
        answer = self._txn.call(
            lambda s: s.DescribeTransactions(
                _describe(self._keys.transactional_id), timeout=RPC_TIMEOUT_S
            ),
            lambda r: int(r.transactions[0].error_code),
            self._stop,
        )
        if answer is None:
            return False
        assert answer.transactions[0].error_code == 0, answer
        with history.lock:
            history.state_reads.append((floor, answer.transactions[0].producer_epoch))
        return True

    def _probe(self) -> bool:
        for node_id in self._cluster.broker_ids:
            stub = self._stubs.of[node_id]
            before = _leadership(stub, self._keys)
            fetched = _ask(stub.OffsetFetch, _offset_fetch(self._keys.group_id))
            described = _ask(stub.DescribeTransactions, _describe(self._keys.transactional_id))
            after = _leadership(stub, self._keys)
            if before is None or after is None or fetched is None or described is None:
                continue  # the node is down or starting
            probe = Probe(
                node_id,
                before,
                after,
                int(fetched.error_code),
                int(described.transactions[0].error_code),
            )
            with self.history.lock:
                self.history.probes.append(probe)
        return True

    def progress(self) -> int:
        """Acknowledged commits and InitProducerIds, the fewer of the two (raises what a
        client thread failed with, if one did)."""
        self.check()
        with self.history.lock:
            return min(self.history.commits, self.history.inits)

    def probes_of(self, node_id: int, *, led_by: int) -> int:
        """Probes of ``node_id`` while its metadata named ``led_by`` the leader of both."""
        with self.history.lock:
            return sum(
                1
                for p in self.history.probes
                if p.node_id == node_id
                and all(leader == led_by for leader, _ in (*p.before, *p.after))
            )


def _stale_answers(history: History) -> list[str]:
    """Answers a node gave as a coordinator while its metadata, before and after, named
    another leader of the partition at the same epoch."""
    stale: list[str] = []
    for probe in history.probes:
        for index, (what, error) in enumerate(
            (
                ("OffsetFetch", probe.offset_fetch_error),
                ("DescribeTransactions", probe.describe_error),
            )
        ):
            leader, _ = probe.before[index]
            moved_off = probe.before[index] == probe.after[index] and leader != probe.node_id
            if moved_off and error not in REFUSED:
                stale.append(f"{what} answered by node {probe.node_id} (error {error}) {probe}")
    return stale


# Over 70 lines: a test that walks one scenario in order: two moves.
def test_no_answer_from_a_coordinator_after_its_partition_moved(
    grouped: QuorumCluster, stubs: Stubs
) -> None:
    assert grouped.create_topic(grouped.nodes[1], TOPIC, 1, 3) == 0
    _create_internal_topics(grouped, stubs)
    keys = _keys(
        stubs,
        (f"readers-{i}" for i in range(100)),
        lambda group_id: (f"{group_id}-txn-{j}" for j in range(100)),
    )
    preferred = keys.preferred_leader
    wait_until(
        lambda: _leaders(grouped, stubs, keys) == (preferred, preferred),
        CLUSTER_TIMEOUT_S,
        "the preferred leader to lead both partitions",
    )
    stream = Stream(grouped, stubs, keys)
    stream.start()
    try:
        wait_until(
            lambda: stream.progress() >= PROGRESS_PER_LEADER,
            CLUSTER_TIMEOUT_S,
            "commits under the first leader",
        )
        # 1. The preferred leader dies; the next in-sync replicas take the partitions.
        grouped.nodes[preferred].kill()
        interim: list[tuple[int, int]] = []

        def moved() -> bool:
            leaders = _leaders(grouped, stubs, keys)
            if leaders is None or preferred in leaders or -1 in leaders:
                return False
            interim.append(leaders)
            return True

        wait_until(moved, CLUSTER_TIMEOUT_S, "the partitions to move off the killed leader")
        deposed = set(interim[-1])
        mark = stream.progress()
        wait_until(
            lambda: stream.progress() >= mark + PROGRESS_PER_LEADER,
            CLUSTER_TIMEOUT_S,
            "commits under the interim leader",
        )
        # 2. It comes back; once in sync it is given both partitions back, and the interim
        # leader, still running, loses them.
        grouped.nodes[preferred].start()
        wait_until(
            lambda: _leaders(grouped, stubs, keys) == (preferred, preferred),
            CLUSTER_TIMEOUT_S,
            "the preferred leader to lead both partitions again",
        )
        mark = stream.progress()
        wait_until(
            lambda: (
                stream.progress() >= mark + PROGRESS_PER_LEADER
                and all(
                    stream.probes_of(node_id, led_by=preferred) >= PROBES_OF_THE_DEPOSED
                    for node_id in deposed
                )
            ),
            CLUSTER_TIMEOUT_S,
            "commits under the restored leader, and probes of the deposed one",
        )
    finally:
        stream.stop()
    stream.check()

    history = stream.history
    assert _stale_answers(history) == []
    older = [(floor, read) for floor, read in history.offset_reads if read < floor]
    assert older == [], "committed offsets read older than an acknowledged commit"
    older = [(floor, read) for floor, read in history.state_reads if read < floor]
    assert older == [], "producer epochs read older than an acknowledged InitProducerId"
    # Not vacuous: the deposed leader was asked, and refused, once the partitions had moved.
    for node_id in deposed:
        refused = [
            p
            for p in history.probes
            if p.node_id == node_id
            and all(leader == preferred for leader, _ in (*p.before, *p.after))
        ]
        assert refused and all(
            p.offset_fetch_error in REFUSED and p.describe_error in REFUSED for p in refused
        )


# Over 70 lines: a test that walks one scenario in order.
def test_the_sinks_replay_check_finds_batches_committed_under_earlier_leaders(
    grouped: QuorumCluster, stubs: Stubs
) -> None:
    require_spark()
    from spark.sink_transactions import (
        ALREADY_COMMITTED,
        DEFAULT_PREFIX,
        PREPARED,
        SinkSettings,
        complete_partition,
        transactional_id,
        write_partition,
    )

    assert grouped.create_topic(grouped.nodes[1], SINK_TOPIC, 1, 3) == 0
    _create_internal_topics(grouped, stubs)
    # The sink's progress group is its transactional id; its __consumer_offsets partition
    # moves, and its __transaction_state partition with it if they share a preferred leader
    # (as they do for some query id, when the placement allows).
    offsets = _partitions(stubs.of[1], OFFSETS_TOPIC)
    states = _partitions(stubs.of[1], TRANSACTION_STATE_TOPIC)

    def keys_of(txn_id: str) -> Keys:
        p = partition_for_group(txn_id, OFFSETS_PARTITIONS)
        q = partition_for_transactional_id(txn_id, OFFSETS_PARTITIONS)
        return Keys(txn_id, txn_id, p, q, offsets[p].replica_nodes[0])

    candidates = [keys_of(transactional_id(DEFAULT_PREFIX, f"query-{i}", 0)) for i in range(20)]
    keys = next(
        (k for k in candidates if states[k.state_partition].replica_nodes[0] == k.preferred_leader),
        candidates[0],
    )
    txn_id, preferred = keys.transactional_id, keys.preferred_leader

    def progress_led_by() -> int | None:
        leaders = _leaders(grouped, stubs, keys)
        return None if leaders is None else leaders[0]

    settings = SinkSettings.from_options(
        {"bootstrap.servers": grouped.bootstrap, "topic": SINK_TOPIC}, record_progress=True
    )

    def write(batch: int) -> str:
        written = write_partition(settings, txn_id, batch, _rows(batch))
        if written.outcome == PREPARED:
            complete_partition(settings, written)
        return written.outcome

    wait_until(
        lambda: progress_led_by() == preferred,
        CLUSTER_TIMEOUT_S,
        "the preferred leader to lead the progress partition",
    )
    assert write(0) == PREPARED
    grouped.nodes[preferred].kill()
    wait_until(
        lambda: progress_led_by() not in (None, -1, preferred),
        CLUSTER_TIMEOUT_S,
        "the progress partition to move off the killed leader",
    )
    assert write(0) == ALREADY_COMMITTED  # batch 0 replayed under the interim leader
    assert write(1) == PREPARED
    grouped.nodes[preferred].start()
    wait_until(
        lambda: progress_led_by() == preferred,
        CLUSTER_TIMEOUT_S,
        "the preferred leader to lead the progress partition again",
    )
    # The interim leader, deposed and running, must not answer the replays' progress reads.
    assert write(1) == ALREADY_COMMITTED
    assert write(0) == ALREADY_COMMITTED
    assert write(2) == PREPARED

    values = sorted(r.value for r in read_topic(grouped, SINK_TOPIC, 1) if r.value is not None)
    assert values == sorted(v for batch in range(3) for v in _values(batch))


def _values(batch: int) -> list[bytes]:
    return [f"b{batch}-{i}".encode() for i in range(SINK_ROWS)]


def _rows(batch: int) -> Iterator[Any]:
    import pyarrow as pa

    yield pa.RecordBatch.from_pydict({"key": [b"k"] * SINK_ROWS, "value": _values(batch)})
