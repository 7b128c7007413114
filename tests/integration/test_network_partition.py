"""Real network partitions (chaos.network): a network namespace per node, nftables faults.

The namespace tests need root, ``ip`` and ``nft``: they are skipped without them, and fail
instead when ``LOGRAFT_REQUIRE_NETNS=1`` (CI, where the partitions must be exercised). The
first tests check the spec and the fault arguments and run anywhere.

Connectivity is measured, not assumed: from every endpoint (each node's namespace and the
root namespace, where the clients are) a probe sends UDP datagrams to every other endpoint's
listener (one direction at a time, for one-way faults) and opens TCP connections to a port
nobody listens on (a refusal proves packets go both ways, a timeout that they do not).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos.network import CLIENTS, NetFault, NetnsNetwork, free_subnet, netns_unavailable
from cluster.client import AdminClient, Consumer, NewTopic, Producer, TopicPartition
from cluster.launcher import LauncherError, LocalCluster
from cluster.launcher.spec import NETNS_EXEC
from lograft.protocol.errors import LograftError
from replica.group import partition_for_group
from replica.group_service import OFFSETS_TOPIC
from tests.integration.nodes import wait_until

pytestmark = pytest.mark.integration

NODES = (1, 2, 3)
ENDPOINTS = (CLIENTS, *NODES)
TOPIC = "netsplit"
CLUSTER_TIMEOUT_S = 120.0
PROBE_TIMEOUT_S = 60.0

# Run in a namespace: "listen ADDR" binds a UDP socket, prints its port, then the sources it
# hears from until stdin closes; "send ADDR:PORT..." sends datagrams to each listener (a few
# rounds, paced, so none is lost to a busy moment) and connects over TCP to port 9 of each
# address, printing what each connection did.
_PROBE = r"""
import json, select, socket, sys, threading, time
if sys.argv[1] == "listen":
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((sys.argv[2], 0))
    print(sock.getsockname()[1], flush=True)
    heard = set()
    while True:
        ready, _, _ = select.select([sock, sys.stdin], [], [])
        if sock in ready:
            heard.add(sock.recvfrom(64)[1][0])
        if sys.stdin in ready and not sys.stdin.readline():
            break
    sock.setblocking(False)
    try:
        while True:
            heard.add(sock.recvfrom(64)[1][0])
    except BlockingIOError:
        pass
    print(json.dumps(sorted(heard)), flush=True)
else:
    targets = [t.rsplit(":", 1) for t in sys.argv[2:]]
    tcp = {}
    def connect(address):
        probe = socket.socket()
        probe.settimeout(1.0)
        try:
            probe.connect((address, 9))
            tcp[address] = "open"
        except ConnectionRefusedError:
            tcp[address] = "refused"
        except OSError as exc:
            tcp[address] = type(exc).__name__
        finally:
            probe.close()
    threads = [threading.Thread(target=connect, args=(a,)) for a, _ in targets]
    for thread in threads:
        thread.start()
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind((sys.argv[1], 0))
    for _ in range(10):
        for address, port in targets:
            try:
                udp.sendto(b"probe", (address, int(port)))
            except OSError:
                pass
        time.sleep(0.02)
    for thread in threads:
        thread.join()
    print(json.dumps(tcp), flush=True)
"""


def _require_netns() -> None:
    reason = netns_unavailable()
    if reason is None:
        return
    if os.environ.get("LOGRAFT_REQUIRE_NETNS") == "1":
        pytest.fail(f"LOGRAFT_REQUIRE_NETNS=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture
def net() -> Iterator[NetnsNetwork]:
    """Three node namespaces on a subnet no route of this host uses; removed at teardown."""
    _require_netns()
    network = NetnsNetwork(f"lgt{os.getpid()}", len(NODES), free_subnet())
    network.setup()
    try:
        yield network
    finally:
        network.teardown()


def _argv(net: NetnsNetwork, endpoint: int, argv: list[str]) -> list[str]:
    return argv if endpoint == CLIENTS else net.netns_command(endpoint, argv)


def _measure(net: NetnsNetwork) -> tuple[set[tuple[int, int]], set[frozenset[int]]]:
    """The UDP (source, destination) pairs whose datagrams arrive, and the endpoint pairs
    between which a TCP connection gets an answer."""
    by_address = {net.address(e): e for e in ENDPOINTS}
    listeners: dict[int, subprocess.Popen[str]] = {}
    try:
        for endpoint in ENDPOINTS:
            listeners[endpoint] = subprocess.Popen(
                _argv(
                    net, endpoint, [sys.executable, "-c", _PROBE, "listen", net.address(endpoint)]
                ),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        ports = {}
        for endpoint, listener in listeners.items():
            assert listener.stdout is not None
            line = listener.stdout.readline()
            assert line.strip().isdigit(), f"listener of {endpoint} did not start: {line!r}"
            ports[endpoint] = int(line)
        senders = {
            src: subprocess.Popen(
                _argv(
                    net,
                    src,
                    [sys.executable, "-c", _PROBE, net.address(src)]
                    + [f"{net.address(dst)}:{ports[dst]}" for dst in ENDPOINTS if dst != src],
                ),
                stdout=subprocess.PIPE,
                text=True,
            )
            for src in ENDPOINTS
        }
        tcp: set[frozenset[int]] = set()
        for src, sender in senders.items():
            out, _ = sender.communicate(timeout=PROBE_TIMEOUT_S)
            for address, outcome in json.loads(out).items():
                if outcome in ("open", "refused"):
                    tcp.add(frozenset((src, by_address[address])))
        udp: set[tuple[int, int]] = set()
        for dst, listener in listeners.items():
            out, _ = listener.communicate("", timeout=PROBE_TIMEOUT_S)
            udp |= {(by_address[a], dst) for a in json.loads(out) if a in by_address}
        return udp, tcp
    finally:
        for listener in listeners.values():
            if listener.poll() is None:
                listener.kill()
                listener.wait()


def _assert_connectivity(net: NetnsNetwork, blocked: set[tuple[int, int]]) -> None:
    """Packets pass between every two endpoints except from a to b for (a, b) in ``blocked``."""
    pairs = [(a, b) for a in ENDPOINTS for b in ENDPOINTS if a != b]
    udp, tcp = _measure(net)
    assert udp == {p for p in pairs if p not in blocked}, f"UDP with {blocked} dropped"
    assert tcp == {frozenset(p) for p in pairs if p not in blocked and p[::-1] not in blocked}, (
        f"TCP with {blocked} dropped"
    )


def _both_ways(*pairs: tuple[int, int]) -> set[tuple[int, int]]:
    return {p for a, b in pairs for p in ((a, b), (b, a))}


# ---- without namespaces ------------------------------------------------------------------


def test_a_cluster_spec_starts_each_node_in_its_namespace_on_its_address(tmp_path: Path) -> None:
    net = NetnsNetwork("lgspec", 3, "10.231.9.0/24")
    cluster = LocalCluster(net.cluster_spec(tmp_path, base_port=9092))
    assert cluster.bootstrap == "10.231.9.1:9092,10.231.9.2:9093,10.231.9.3:9094"
    assert cluster.controller_quorum_voters == (
        "1@10.231.9.1:9092,2@10.231.9.2:9093,3@10.231.9.3:9094"
    )
    argv = cluster.node(2).command(cluster.controller_quorum_voters, {})
    assert argv[:5] == [*NETNS_EXEC, "lgspec-2", sys.executable]
    assert argv[argv.index("--listen") + 1] == "10.231.9.2:9093"
    cluster.save()
    loaded = LocalCluster.load(tmp_path)
    assert [(n.host, n.netns) for n in loaded.nodes] == [
        ("10.231.9.1", "lgspec-1"),
        ("10.231.9.2", "lgspec-2"),
        ("10.231.9.3", "lgspec-3"),
    ]
    assert loaded.to_json() == cluster.to_json()
    with pytest.raises(LauncherError, match="another cluster"):
        LocalCluster(net.cluster_spec(tmp_path, base_port=9100)).up(wait=False)


def test_fault_arguments_are_checked_before_anything_changes() -> None:
    net = NetnsNetwork("lgargs", 3, "10.231.9.0/24")
    with pytest.raises(ValueError, match="no group"):
        net.partition([[1], [2]])
    with pytest.raises(ValueError, match="no node 4"):
        net.partition([[1, 4], [2, 3]])
    with pytest.raises(ValueError, match="no node 5"):
        net.isolate(5)
    with pytest.raises(ValueError, match="two endpoints"):
        net.one_way(2, 2)
    with pytest.raises(ValueError, match="prefix"):
        NetnsNetwork("a-prefix-far-too-long", 3)
    assert net.faults == []


# ---- namespaces --------------------------------------------------------------------------


def test_namespaces_come_up_reach_each_other_only_and_tear_down_cleanly() -> None:
    _require_netns()
    net = NetnsNetwork(f"lgt{os.getpid()}", len(NODES), free_subnet())
    try:
        net.setup()
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert {f"{net.prefix}-{n}" for n in NODES} <= {
            line.split()[0] for line in listed.splitlines()
        }
        _assert_connectivity(net, set())
        # ip netns exec execs the command: the pid is the command's own.
        child = net.popen_in(
            2, [sys.executable, "-c", "import os; print(os.getpid())"], stdout=subprocess.PIPE
        )
        assert int(child.communicate(timeout=PROBE_TIMEOUT_S)[0]) == child.pid
        # Nothing outside the subnet: a node has no route elsewhere.
        outside = net.run_in(
            1,
            [sys.executable, "-c", "import socket; socket.create_connection(('192.0.2.1', 80), 2)"],
            capture_output=True,
            text=True,
        )
        assert outside.returncode != 0 and "unreachable" in outside.stderr, outside.stderr

        # A crashed run leaves everything behind; the next setup with the prefix starts clean.
        again = NetnsNetwork(net.prefix, len(NODES), str(net.subnet))
        again.setup()
        _assert_connectivity(again, set())
    finally:
        net.teardown()
    assert not net.exists()
    links = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout
    assert net.host_link not in links
    net.teardown()  # idempotent


def test_connectivity_follows_each_fault(net: NetnsNetwork) -> None:
    cases: list[tuple[NetFault, set[tuple[int, int]]]] = []

    def check(fault: NetFault, blocked: set[tuple[int, int]]) -> None:
        assert fault.blocked == blocked
        assert net.current == fault
        _assert_connectivity(net, blocked)
        cases.append((fault, blocked))

    check(net.isolate(2), _both_ways((2, 1), (2, 3), (2, CLIENTS)))
    check(net.isolate(2, cut_clients=False), _both_ways((2, 1), (2, 3)))
    check(net.partition([[1], [2, 3]]), _both_ways((1, 2), (1, 3)))
    check(net.partition([[1], [2, 3]], cut_clients=True), _both_ways((1, 2), (1, 3), (1, CLIENTS)))
    check(net.partition([[1, 2], [2, 3]]), _both_ways((1, 3)))  # a bridge: 2 sees both sides
    check(net.one_way(1, 3), {(1, 3)})
    check(net.one_way(CLIENTS, 2), {(CLIENTS, 2)})
    check(net.one_way(2, [1, 3]), {(2, 1), (2, 3)})
    check(net.heal(), set())
    assert [f.kind for f in net.faults] == [
        "isolate",
        "isolate",
        "partition",
        "partition",
        "partition",
        "one-way",
        "one-way",
        "one-way",
        "heal",
    ]
    assert net.faults[0].targets == (2,) and "isolate node 2" in net.faults[0].description


# ---- a lograft cluster in namespaces -----------------------------------------------------


def _partition_state(
    bootstrap: str, topic: str = TOPIC, partition: int = 0
) -> tuple[int, tuple[int, ...]] | None:
    """(leader, ISR) of ``topic``-``partition`` as the brokers of ``bootstrap`` see it; None
    if unknown."""
    try:
        with AdminClient({"bootstrap.servers": bootstrap, "default.api.timeout.ms": 5000}) as admin:
            (description,) = admin.describe_topics([topic])
    except LograftError:
        return None
    state = description.partitions[partition]
    return state.leader, tuple(sorted(state.isr))


def _create_topic_on_every_node(cluster: LocalCluster) -> None:
    """The test topic, one partition on all three nodes, once every node sees its ISR whole."""
    with AdminClient({"bootstrap.servers": cluster.bootstrap}) as admin:
        admin.create_topics([NewTopic(TOPIC, 1, 3, {"min.insync.replicas": "2"})])[TOPIC].result()
    wait_until(lambda: _fully_replicated(cluster), CLUSTER_TIMEOUT_S, "ISR 3")


def _fully_replicated(cluster: LocalCluster) -> bool:
    """Whether every node sees the same leader of partition 0 and all nodes in its ISR (a
    node just back from isolation may still show its stale view)."""
    views = {_partition_state(node.address) for node in cluster.nodes}
    return len(views) == 1 and all(v is not None and v[0] in NODES and v[1] == NODES for v in views)


def _read_all(bootstrap: str) -> list[str]:
    """Every value of partition 0, from its first offset to its end."""
    tp = TopicPartition(TOPIC, 0)
    values: list[str] = []
    with Consumer({"bootstrap.servers": bootstrap, "enable.auto.commit": False}) as consumer:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        end = consumer.end_offsets([tp])[tp]
        deadline = time.monotonic() + CLUSTER_TIMEOUT_S
        while consumer.position(tp) < end:
            assert time.monotonic() < deadline, f"{TOPIC}-0 not read to its end offset {end}"
            values += [r.value.decode() for r in consumer.poll(500) if r.value is not None]
    return values


def _send_all(bootstrap: str, values: list[str]) -> None:
    with Producer({"bootstrap.servers": bootstrap, "acks": "all"}) as producer:
        futures = [producer.send(TOPIC, v.encode(), partition=0) for v in values]
        for future in futures:
            future.result(timeout=CLUSTER_TIMEOUT_S)


def test_an_isolated_leader_cannot_acknowledge_and_the_others_take_over(
    net: NetnsNetwork, tmp_path: Path
) -> None:
    cluster = LocalCluster(net.cluster_spec(tmp_path / "cluster"))
    try:
        cluster.up(wait=True, timeout_s=CLUSTER_TIMEOUT_S)
        # The nodes run in their namespaces, on their own addresses, and the /proc guard
        # recognises them.
        for node in cluster.nodes:
            assert node.pid is not None and cluster.running(node)
            assert os.readlink(f"/proc/{node.pid}/ns/net") != os.readlink("/proc/self/ns/net")
        bootstrap = cluster.bootstrap
        _create_topic_on_every_node(cluster)
        acknowledged = [f"before-{i}" for i in range(5)]
        _send_all(bootstrap, acknowledged)

        found = _partition_state(bootstrap)
        assert found is not None
        old_leader = found[0]
        others = [n for n in NODES if n != old_leader]
        others_bootstrap = ",".join(cluster.node(n).address for n in others)
        net.isolate(old_leader, cut_clients=False)

        def new_leader() -> bool:
            seen = _partition_state(others_bootstrap)
            return seen is not None and seen[0] in others

        wait_until(new_leader, CLUSTER_TIMEOUT_S, f"a leader other than node {old_leader}")
        during = [f"during-{i}" for i in range(5)]
        _send_all(others_bootstrap, during)
        acknowledged += during

        # The old leader still takes the client's request (clients reach it), but cannot get
        # it replicated: an error or a timeout, never an acknowledgement.
        with Producer(
            {
                "bootstrap.servers": cluster.node(old_leader).address,
                "acks": "all",
                "enable.idempotence": False,
                "retries": 0,
                "request.timeout.ms": 5000,
                "delivery.timeout.ms": 10000,
                "max.block.ms": 10000,
            }
        ) as stale:
            future = stale.send(TOPIC, b"old-leader", partition=0)
            with pytest.raises((LograftError, TimeoutError)):
                future.result(timeout=CLUSTER_TIMEOUT_S)

        net.heal()
        wait_until(
            lambda: _fully_replicated(cluster),
            CLUSTER_TIMEOUT_S,
            f"node {old_leader} back in the ISR, as every node sees it",
        )
        values = _read_all(bootstrap)
        assert [v for v in acknowledged if v not in values] == []
        assert "old-leader" not in values  # the stale leader's append was truncated away
        assert len(values) == len(set(values))
    finally:
        try:
            cluster.down(timeout_s=15)
        except LauncherError as exc:
            pytest.fail(f"could not stop the cluster: {exc}")


GROUP = "netsplit-group"


def _leader_of(bootstrap: str, topic: str, partition: int) -> int | None:
    """The leader of ``topic``-``partition`` as the brokers of ``bootstrap`` see it."""
    state = _partition_state(bootstrap, topic, partition)
    return None if state is None else state[0]


def _commit(bootstrap: str, offset: int) -> None:
    tp = TopicPartition(TOPIC, 0)
    config = {"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False}
    with Consumer(config) as consumer:
        assert consumer.commit({tp: offset}) == {tp: offset}


def _committed(bootstrap: str) -> int | None:
    """The group's committed offset of partition 0 as the brokers of ``bootstrap`` answer
    it (retrying retriable refusals for 5 s)."""
    tp = TopicPartition(TOPIC, 0)
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": GROUP,
        "enable.auto.commit": False,
        "request.timeout.ms": 5000,
    }
    with Consumer(config) as consumer:
        return consumer.committed([tp])[tp]


def test_an_isolated_coordinator_answers_no_offset_its_successor_moved_past(
    net: NetnsNetwork, tmp_path: Path
) -> None:
    """A broker cut off from the controller still names itself coordinator in its own
    metadata. Once its session may have lapsed it must not answer from its state: the
    controller may have fenced it and another leader taken commits since (the chaos suite's
    txn-pipeline read a committed offset going backwards so, under partition-leader)."""
    cluster = LocalCluster(net.cluster_spec(tmp_path / "cluster"))
    try:
        cluster.up(wait=True, timeout_s=CLUSTER_TIMEOUT_S)
        bootstrap = cluster.bootstrap
        _create_topic_on_every_node(cluster)
        _commit(bootstrap, 1)  # creates __consumer_offsets
        offsets_partition = partition_for_group(GROUP, 50)
        coordinator = _leader_of(bootstrap, OFFSETS_TOPIC, offsets_partition)
        assert coordinator in NODES
        others = [n for n in NODES if n != coordinator]
        others_bootstrap = ",".join(cluster.node(n).address for n in others)
        wait_until(lambda: _committed(others_bootstrap) == 1, CLUSTER_TIMEOUT_S, "offset 1")

        net.isolate(coordinator, cut_clients=False)
        wait_until(
            lambda: _leader_of(others_bootstrap, OFFSETS_TOPIC, offsets_partition) in others,
            CLUSTER_TIMEOUT_S,
            f"a coordinator other than node {coordinator}",
        )
        _commit(others_bootstrap, 2)

        # The cut-off node still takes the client's calls and its image still names it
        # coordinator: it may refuse (the client retries, then raises), never answer 1.
        try:
            stale = _committed(cluster.node(coordinator).address)
        except LograftError:
            stale = None
        assert stale in (None, 2), f"node {coordinator} answered committed offset {stale}"

        net.heal()
        wait_until(
            lambda: all(_committed(node.address) == 2 for node in cluster.nodes),
            CLUSTER_TIMEOUT_S,
            "every node's answer the group's last commit",
        )
    finally:
        try:
            cluster.down(timeout_s=15)
        except LauncherError as exc:
            pytest.fail(f"could not stop the cluster: {exc}")
