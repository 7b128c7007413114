"""Real network partitions for a local cluster: a network namespace per node, nftables rules.

Each node runs in a network namespace of its own with an address of its own; every packet a
node sends or receives passes one nftables table, where the faults drop it. Needs root, ``ip``
(iproute2) and ``nft``. Layout of ``NetnsNetwork("lgc", 3)`` (subnet ``10.231.0.0/24``)::

    root namespace (clients)       namespace lgc-sw            namespace lgc-<i>, i = 1..3
    lgc-h 10.231.0.254/24 ==veth== host --+
                                          br0 (bridge)
                                   n<i> --+         ==veth== eth0 10.231.0.<i>/24, lo

* Clients (producers, consumers, the launcher's health probes) stay in the root namespace
  and reach node ``i`` at ``10.231.0.i`` from ``10.231.0.254``
  (:attr:`NetnsNetwork.host_address`) through the bridge.
* The bridge sits in a namespace of its own (``lgc-sw``), not in the root namespace: with
  ``br_netfilter`` loaded and ``net.bridge.bridge-nf-call-iptables=1`` (Docker's setting),
  frames bridged between two ports traverse the root namespace's iptables ``FORWARD`` chain,
  whose policy Docker sets to ``DROP`` -- node-to-node traffic on a root-namespace bridge was
  dropped (seen here). Those sysctls and iptables rules are per namespace: the switch
  namespace has no rules, and its ``bridge-nf-call-*`` and ``ip_forward`` are set to 0. No
  host firewall rule or host sysctl is touched.
* Nothing leaves the subnet: nodes have no default route (a connection elsewhere fails
  with "network unreachable"), the switch namespace has no address and does not route, and
  each node's rules accept only loopback and the subnet's addresses.
* A node is started inside its namespace with ``ip netns exec NAME ...`` (:meth:`popen_in`;
  for a :class:`~cluster.launcher.LocalCluster`, :meth:`NetnsNetwork.cluster_spec` sets the
  spec's per-node ``hosts`` and ``netns``). ``ip netns exec`` execs the command, so the pid is
  the node's and the launcher's /proc guard and signals work as for any node.

Rules: each node namespace holds table ``inet lograft_chaos``: input and output chains with
policy drop that accept loopback and the subnet, after a ``drop`` for the addresses in the sets
``blocked_from`` / ``blocked_to``. A fault rewrites those sets in every node namespace (one
``nft -f`` transaction per namespace); the root namespace gets no rules, so a fault between
the clients and a node is enforced on the node's side. Established connections are not reset:
their packets are dropped, as on a real network, until the peers' timeouts notice.

Faults (each replaces the one in force; every call returns the :class:`NetFault` it applied
and appends it to :attr:`NetnsNetwork.faults`). Endpoints are node ids (1..N) and
:data:`CLIENTS` (0), the processes of the root namespace:

* ``isolate(node, cut_clients=True)``: ``node`` is cut from every other node and, unless
  ``cut_clients=False``, from the clients.
* ``partition(groups, cut_clients=False)``: nodes talk only to nodes sharing a group with them:
  ``[[1], [2, 3]]`` splits a minority off, ``[[1, 2], [2, 3]]`` is a bridge (2 sees both sides,
  1 and 3 do not see each other). Every node must be in some group. By default the clients
  still reach every node (Jepsen's usual choice: the clients stand for an application that
  sees both sides); with ``cut_clients=True`` they stay with the largest group (the first of
  equal size) and lose the others.
* ``one_way(src, dst)``: packets from ``src`` to ``dst`` (one endpoint or several) are
  dropped, the reverse direction passes (TCP between the two fails both ways all the same, its
  handshake needs both; a connection already open stalls one way). Either end may be
  :data:`CLIENTS`.
* ``heal()``: nothing is dropped.

Use::

    net = NetnsNetwork("lgc", 3)
    net.setup()                                  # also removes leftovers of a crashed run
    try:
        cluster = LocalCluster(net.cluster_spec(data_dir, configs={...}))
        cluster.up()
        try:
            fault = net.isolate(2, cut_clients=False)    # fault.description for a history
            ...
            net.heal()
        finally:
            cluster.down()
    finally:
        net.teardown()                           # idempotent

Stop the nodes before :meth:`NetnsNetwork.teardown`: a process left in a deleted namespace
keeps running, cut off (teardown logs such pids; it signals nothing). Two networks that exist
at the same time need different prefixes and subnets (:func:`free_subnet`).
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Final

from cluster.launcher import DEFAULT_BASE_PORT, ClusterSpec
from cluster.launcher.spec import NETNS_EXEC
from lograft.protocol.errors import LograftError

__all__ = [
    "CLIENTS",
    "DEFAULT_SUBNET",
    "NFT_TABLE",
    "NetFault",
    "NetnsError",
    "NetnsNetwork",
    "free_subnet",
    "netns_unavailable",
]

log = logging.getLogger(__name__)

CLIENTS: Final = 0
"""The endpoint id of the processes in the root namespace (clients), beside node ids 1..N."""

DEFAULT_SUBNET: Final = "10.231.0.0/24"
"""The subnet of a network given none: node i at its i-th address, the clients at ``.254``.
Two networks that exist at the same time need different ones (:func:`free_subnet`)."""
NFT_TABLE: Final = "lograft_chaos"
"""The nftables table (family ``inet``) in each node namespace."""

_SWITCH_BRIDGE = "br0"
_SWITCH_HOST_PORT = "host"
_NODE_IFACE = "eth0"
_IFNAMSIZ = 15  # longest interface name Linux takes
_PREFIX_RE = re.compile(r"[a-z0-9][a-z0-9-]*")
_COMMAND_TIMEOUT_S = 30.0


class NetnsError(LograftError):
    """A network namespace, link or nftables rule could not be set up, changed or removed."""

    error_name = "CHAOS_NETNS_ERROR"


def netns_unavailable() -> str | None:
    """Why namespaces cannot be used here (not root, ``ip`` or ``nft`` missing), or ``None``."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    missing = [tool for tool in ("ip", "nft") if shutil.which(tool) is None]
    if missing:
        return f"{' and '.join(missing)} not found on PATH"
    if not Path("/proc/self/ns/net").exists():
        return "this kernel has no network namespaces"
    return None


def _run(argv: Sequence[str], stdin: str | None = None, check: bool = True) -> str:
    """Run a command; its stdout. ``NetnsError`` with its stderr when it fails and ``check``."""
    log.debug("run argv=%s", " ".join(argv))
    try:
        done = subprocess.run(
            list(argv),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=_COMMAND_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NetnsError(f"`{' '.join(argv)}` failed: {exc}") from exc
    if check and done.returncode != 0:
        raise NetnsError(
            f"`{' '.join(argv)}` exited {done.returncode}: {done.stderr.strip() or done.stdout}"
        )
    return done.stdout


def _ip(command: str) -> str:
    """Run ``ip COMMAND`` (words split on spaces: every name here is a single word)."""
    return _run(["ip", *command.split()])


def _root_networks() -> list[tuple[ipaddress.IPv4Network, str]]:
    """The IPv4 routes of the root namespace's main table: (destination, device)."""
    routes: list[dict[str, Any]] = json.loads(_ip("-j -4 route show") or "[]")
    found = []
    for route in routes:
        dst = str(route.get("dst", ""))
        if dst in ("", "default"):
            continue
        try:
            network = ipaddress.IPv4Network(dst, strict=False)
        except ValueError:
            continue
        found.append((network, str(route.get("dev", "?"))))
    return found


def free_subnet(within: str = "10.231.0.0/16", prefixlen: int = 24) -> str:
    """The first ``/prefixlen`` of ``within`` that no root-namespace route overlaps now.

    For networks that exist at the same time (a test beside a chaos run); two callers racing
    may still pick the same one, which :meth:`NetnsNetwork.setup` then refuses.
    """
    taken = [network for network, _dev in _root_networks()]
    for candidate in ipaddress.IPv4Network(within).subnets(new_prefix=prefixlen):
        if not any(candidate.overlaps(network) for network in taken):
            return str(candidate)
    raise NetnsError(f"every /{prefixlen} of {within} overlaps a route of this host")


@dataclass(frozen=True, slots=True)
class NetFault:
    """A network fault as applied: which packets are dropped.

    ``blocked`` holds the (source, destination) endpoint pairs whose packets are dropped;
    endpoints are node ids and :data:`CLIENTS`. ``targets`` are the nodes the fault is
    about (for a history's ``fault`` op), ``description`` says it in words.
    """

    kind: str
    """``"isolate"``, ``"partition"``, ``"one-way"`` or ``"heal"``."""
    targets: tuple[int, ...]
    description: str
    blocked: frozenset[tuple[int, int]]

    def reachable(self, src: int, dst: int) -> bool:
        """Whether packets from endpoint ``src`` reach endpoint ``dst`` under this fault."""
        return src == dst or (src, dst) not in self.blocked


_HEALED = NetFault("heal", (), "no fault: every endpoint reaches every other", frozenset())


class NetnsNetwork:
    """N nodes, each in network namespace ``{prefix}-{i}`` at the subnet's i-th address.

    See the module docstring for the layout, the rules and the faults. Not thread-safe: one
    caller (the nemesis) changes the faults.
    """

    def __init__(self, name_prefix: str, nodes: int, subnet: str = DEFAULT_SUBNET) -> None:
        if not _PREFIX_RE.fullmatch(name_prefix) or len(f"{name_prefix}-h") > _IFNAMSIZ:
            raise ValueError(
                f"name prefix {name_prefix!r}: lower-case letters, digits and '-', "
                f"at most {_IFNAMSIZ - 2} characters"
            )
        network = ipaddress.IPv4Network(subnet)
        if nodes < 1 or nodes + 3 > network.num_addresses:
            raise ValueError(f"{nodes} nodes do not fit in {subnet} (plus the host's address)")
        self.prefix = name_prefix
        self.subnet = network
        self.node_ids: tuple[int, ...] = tuple(range(1, nodes + 1))
        self.faults: list[NetFault] = []
        """Every fault applied since :meth:`setup`, in order (heals included)."""
        self._current = _HEALED

    # -- names and addresses ---------------------------------------------------------------

    def namespace(self, node_id: int) -> str:
        """The network namespace of ``node_id``: ``{prefix}-{node_id}``."""
        self._check_node(node_id)
        return f"{self.prefix}-{node_id}"

    @property
    def switch_namespace(self) -> str:
        """The namespace holding the bridge: ``{prefix}-sw``."""
        return f"{self.prefix}-sw"

    @property
    def host_link(self) -> str:
        """The root namespace's end of the link to the bridge: ``{prefix}-h``."""
        return f"{self.prefix}-h"

    def address(self, endpoint: int) -> str:
        """The IPv4 address of node ``endpoint``, or the clients' (:data:`CLIENTS`)."""
        if endpoint == CLIENTS:
            return self.host_address
        self._check_node(endpoint)
        return str(self.subnet.network_address + endpoint)

    @property
    def host_address(self) -> str:
        """The root namespace's address on the bridge (the clients' source address)."""
        return str(self.subnet.broadcast_address - 1)

    def addresses(self) -> dict[int, str]:
        """Every node's address, by id."""
        return {node: self.address(node) for node in self.node_ids}

    def namespaces(self) -> dict[int, str]:
        """Every node's namespace, by id."""
        return {node: self.namespace(node) for node in self.node_ids}

    def cluster_spec(
        self, data_dir: Path, base_port: int = DEFAULT_BASE_PORT, **fields: Any
    ) -> ClusterSpec:
        """A :class:`ClusterSpec` that runs node i in namespace i, listening on address i.

        Ports need not be free in the root namespace (each node has its namespace to
        itself); ``fields`` are further spec fields (``configs``, ``roles``).
        """
        return ClusterSpec(
            data_dir=data_dir,
            nodes=len(self.node_ids),
            base_port=base_port,
            hosts=self.addresses(),
            netns=self.namespaces(),
            **fields,
        )

    # -- processes in a namespace ----------------------------------------------------------

    def netns_command(self, node_id: int, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside ``node_id``'s namespace: ``ip netns exec NAME argv...``."""
        return [*NETNS_EXEC, self.namespace(node_id), *argv]

    def popen_in(
        self, node_id: int, argv: Sequence[str], **popen_kwargs: Any
    ) -> subprocess.Popen[Any]:
        """Start ``argv`` in ``node_id``'s namespace (``subprocess.Popen`` arguments pass on).

        ``ip netns exec`` execs ``argv``: the returned process's pid is ``argv``'s.
        """
        return subprocess.Popen(self.netns_command(node_id, argv), **popen_kwargs)

    def run_in(
        self, node_id: int, argv: Sequence[str], **run_kwargs: Any
    ) -> subprocess.CompletedProcess[Any]:
        """Run ``argv`` to its end in ``node_id``'s namespace (``subprocess.run`` arguments)."""
        return subprocess.run(self.netns_command(node_id, argv), **run_kwargs)

    # -- setup and teardown ----------------------------------------------------------------

    def setup(self) -> None:
        """Create the namespaces, the bridge, the links, addresses and each node's rules.

        Removes the leftovers of an earlier run with this prefix first. ``NetnsError`` when
        the subnet overlaps a route of the root namespace, or a command fails (what was
        created so far is removed again).
        """
        reason = netns_unavailable()
        if reason is not None:
            raise NetnsError(reason)
        self.teardown()
        for network, dev in _root_networks():
            if network.overlaps(self.subnet):
                raise NetnsError(
                    f"subnet {self.subnet} overlaps route {network} on {dev}; pick another "
                    "(chaos.network.free_subnet())"
                )
        try:
            self._create()
        except BaseException:
            self.teardown()
            raise
        self.faults = []
        self._current = _HEALED
        log.info(
            "network up prefix=%s subnet=%s nodes=%s host=%s",
            self.prefix,
            self.subnet,
            ",".join(f"{n}={a}" for n, a in self.addresses().items()),
            self.host_address,
        )

    def _create(self) -> None:
        cidr = f"/{self.subnet.prefixlen}"
        switch, bridge, host_port = self.switch_namespace, _SWITCH_BRIDGE, _SWITCH_HOST_PORT
        _ip(f"netns add {switch}")
        # Bridge-netfilter and forwarding are per namespace: off in the switch's (-e: the
        # bridge-nf keys exist only while br_netfilter is loaded).
        sysctls = [
            "net.ipv4.ip_forward=0",
            "net.bridge.bridge-nf-call-iptables=0",
            "net.bridge.bridge-nf-call-ip6tables=0",
            "net.bridge.bridge-nf-call-arptables=0",
        ]
        _run([*self._in(switch), "sysctl", "-q", "-e", "-w", *sysctls])
        _ip(f"-n {switch} link add {bridge} type bridge stp_state 0 forward_delay 0")
        _ip(f"-n {switch} link set {bridge} up")
        _ip(f"link add {self.host_link} type veth peer name {host_port} netns {switch}")
        _ip(f"-n {switch} link set {host_port} master {bridge} up")
        _ip(f"addr add {self.host_address}{cidr} dev {self.host_link}")
        _ip(f"link set {self.host_link} up")
        for node in self.node_ids:
            name, port = self.namespace(node), f"n{node}"
            _ip(f"netns add {name}")
            _ip(f"-n {switch} link add {port} type veth peer name {_NODE_IFACE} netns {name}")
            _ip(f"-n {switch} link set {port} master {bridge} up")
            _ip(f"-n {name} addr add {self.address(node)}{cidr} dev {_NODE_IFACE}")
            _ip(f"-n {name} link set lo up")
            _ip(f"-n {name} link set {_NODE_IFACE} up")
            _run([*self._in(name), "nft", "-f", "-"], stdin=self._table_script())

    def _table_script(self) -> str:
        subnet = str(self.subnet)
        return f"""
table inet {NFT_TABLE} {{
    set blocked_from {{ type ipv4_addr; }}
    set blocked_to {{ type ipv4_addr; }}
    chain input {{
        type filter hook input priority filter; policy drop;
        iif "lo" accept
        ip saddr @blocked_from counter drop
        ip saddr {subnet} accept
    }}
    chain output {{
        type filter hook output priority filter; policy drop;
        oif "lo" accept
        ip daddr @blocked_to counter drop
        ip daddr {subnet} accept
    }}
}}
"""

    def teardown(self) -> None:
        """Remove the namespaces and links of this prefix, if any (idempotent).

        Also removes what a crashed earlier run with this prefix left. Processes still
        inside a namespace are not signalled: they keep running, cut off (logged).
        """
        _run(["ip", "link", "del", self.host_link], check=False)  # gone already: fine
        for name in self._existing_namespaces():
            pids = _run(["ip", "netns", "pids", name], check=False).split()
            if pids:
                log.warning(
                    "deleting namespace=%s with processes still in it pids=%s",
                    name,
                    ",".join(pids),
                )
            _run(["ip", "netns", "delete", name], check=False)  # gone already: fine
        left = self._existing_namespaces()
        if left:
            raise NetnsError(f"could not delete network namespaces {', '.join(left)}")
        self._current = _HEALED

    def _existing_namespaces(self) -> list[str]:
        own = re.compile(re.escape(self.prefix) + r"-(?:\d+|sw)")
        listed = _ip("netns list").splitlines()
        names = [line.split()[0] for line in listed if line.strip()]
        return [name for name in names if own.fullmatch(name)]

    def exists(self) -> bool:
        """Whether any namespace of this prefix exists (set up, or left over)."""
        return bool(self._existing_namespaces())

    def __enter__(self) -> NetnsNetwork:
        self.setup()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.teardown()

    # -- faults ----------------------------------------------------------------------------

    @property
    def current(self) -> NetFault:
        """The fault in force (a ``heal`` fault when none)."""
        return self._current

    def isolate(self, node: int, cut_clients: bool = True) -> NetFault:
        """Cut ``node`` from every other node and (unless ``cut_clients=False``) the clients."""
        self._check_node(node)
        others = [n for n in self.node_ids if n != node]
        if cut_clients:
            others.append(CLIENTS)
        blocked = {(node, o) for o in others} | {(o, node) for o in others}
        clients = "clients cut too" if cut_clients else "clients still reach it"
        return self._apply(
            NetFault("isolate", (node,), f"isolate node {node} ({clients})", frozenset(blocked))
        )

    def partition(self, groups: Sequence[Iterable[int]], cut_clients: bool = False) -> NetFault:
        """Nodes reach only nodes that share a group with them (groups may overlap: a bridge).

        The clients reach every node, or with ``cut_clients`` only the largest group's
        (the first of equal size). ``ValueError`` for an unknown node or one in no group.
        """
        sets = [frozenset(group) for group in groups]
        if not sets or not all(sets):
            raise ValueError(f"partition needs non-empty groups, got {groups!r}")
        for group in sets:
            for node in group:
                self._check_node(node)
        missing = set(self.node_ids) - set().union(*sets)
        if missing:
            raise ValueError(f"nodes {sorted(missing)} are in no group of {groups!r}")
        blocked = {
            (a, b)
            for a in self.node_ids
            for b in self.node_ids
            if a != b and not any(a in group and b in group for group in sets)
        }
        shown = " | ".join(",".join(str(n) for n in sorted(group)) for group in sets)
        if cut_clients:
            biggest = max(sets, key=len)  # max keeps the first of equal size
            for node in set(self.node_ids) - biggest:
                blocked |= {(CLIENTS, node), (node, CLIENTS)}
            clients = f"clients with {','.join(str(n) for n in sorted(biggest))}"
        else:
            clients = "clients reach every node"
        cut_off = tuple(sorted({a for a, b in blocked if CLIENTS not in (a, b)}))
        return self._apply(
            NetFault("partition", cut_off, f"partition {shown} ({clients})", frozenset(blocked))
        )

    def one_way(self, src: int, dst: int | Iterable[int]) -> NetFault:
        """Drop packets from ``src`` to ``dst`` (node ids or :data:`CLIENTS`; ``dst`` may be
        several); not the reverse."""
        dsts = sorted({dst} if isinstance(dst, int) else set(dst))
        for endpoint in (src, *dsts):
            if endpoint != CLIENTS:
                self._check_node(endpoint)
        if not dsts or src in dsts:
            raise ValueError(f"one_way needs two endpoints that differ, got {src} to {dsts}")
        name = {CLIENTS: "clients"}
        shown = ", ".join(name.get(d, f"node {d}") for d in dsts)
        description = (
            f"drop packets from {name.get(src, f'node {src}')} to {shown} (the reverse passes)"
        )
        targets = tuple(sorted(n for n in (src, *dsts) if n != CLIENTS))
        blocked = frozenset((src, d) for d in dsts)
        return self._apply(NetFault("one-way", targets, description, blocked))

    def heal(self) -> NetFault:
        """Drop nothing any more."""
        return self._apply(_HEALED)

    def _apply(self, fault: NetFault) -> NetFault:
        for node in self.node_ids:
            blocked_from = sorted(self.address(a) for a, b in fault.blocked if b == node)
            blocked_to = sorted(self.address(b) for a, b in fault.blocked if a == node)
            lines = [
                f"flush set inet {NFT_TABLE} blocked_from",
                f"flush set inet {NFT_TABLE} blocked_to",
            ]
            if blocked_from:
                lines.append(
                    f"add element inet {NFT_TABLE} blocked_from {{ {', '.join(blocked_from)} }}"
                )
            if blocked_to:
                lines.append(
                    f"add element inet {NFT_TABLE} blocked_to {{ {', '.join(blocked_to)} }}"
                )
            _run([*self._in(self.namespace(node)), "nft", "-f", "-"], stdin="\n".join(lines) + "\n")
        self._current = fault
        self.faults.append(fault)
        log.info(
            "network fault kind=%s targets=%s detail=%r",
            fault.kind,
            ",".join(str(t) for t in fault.targets),
            fault.description,
        )
        return fault

    def rules(self, node_id: int) -> str:
        """``nft list table inet lograft_chaos`` in ``node_id``'s namespace (for reports)."""
        return _run([*self._in(self.namespace(node_id)), "nft", "list", "table", "inet", NFT_TABLE])

    # -- helpers ---------------------------------------------------------------------------

    @staticmethod
    def _in(namespace: str) -> list[str]:
        return [*NETNS_EXEC, namespace]

    def _check_node(self, node_id: int) -> None:
        if node_id not in self.node_ids:
            raise ValueError(f"no node {node_id} (nodes {self.node_ids[0]}..{self.node_ids[-1]})")
