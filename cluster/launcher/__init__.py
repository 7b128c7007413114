"""A local multi-process cluster: the engine behind ``lograft cluster up|down|status|...``.

``lograft cluster up`` starts N nodes (three by default, combined ``broker,controller``
roles) as detached local processes with their data under one directory, waits until the
cluster is healthy and prints the bootstrap address::

    lograft cluster up [--nodes 3] [--data-dir ./data/cluster] [--base-port 9092]
                       [--config NAME=VALUE ...] [--timeout-s 60]
    lograft cluster status [--json]
    lograft cluster logs NODE [--lines 50]
    lograft cluster kill NODE [--signal KILL|TERM|STOP|CONT]
    lograft cluster restart NODE
    lograft cluster down

Node ``i`` (1..N) listens on ``127.0.0.1:<base port + i - 1>``, keeps its data in
``DIR/node-i`` and writes its output to ``DIR/node-i/node.log``. ``DIR/cluster.json``
describes the cluster (node ids, pids, ports, data paths, the controller quorum) so that
tools and tests can find the nodes; it is rewritten atomically, and commands that change it
hold ``DIR/.cluster.lock``.

The launcher only ever signals processes it started: a pid from ``cluster.json`` is
signalled only while ``/proc/<pid>/cmdline`` shows ``cluster.node`` with that node's data
directory, and through a pidfd, so that a pid reused by another process is left alone.

Library use (tests, chaos tools)::

    cluster = LocalCluster(ClusterSpec(data_dir=tmp_path, base_port=port))
    cluster.up()                       # returns once healthy
    cluster.kill(2, signal.SIGKILL)
    cluster.restart(2)
    print(cluster.status().to_json())
    cluster.down()

The modules, each importable on its own; every public name is re-exported here:

- ``spec``: :class:`ClusterSpec`, :class:`NodeRecord`, the port and voter layout, and
  reading, writing and locking ``cluster.json``;
- ``processes``: starting node processes, the ``/proc`` + pidfd guard, signalling, waiting
  for exits, stopping (SIGTERM, then SIGKILL);
- ``health``: Metadata probes, :class:`NodeStatus`, :class:`ClusterStatus` and
  :func:`health_problems`;
- ``local_cluster``: :class:`LocalCluster`, the operations up, down, kill, restart, status
  and the health waits;
- ``commands``: the ``cluster`` argparse commands and their handlers
  (``python -m cluster.launcher`` runs :func:`main`).
"""

from cluster.launcher.commands import (
    CLUSTER_DESCRIPTION,
    CLUSTER_EPILOG,
    DEFAULT_LOG_LINES,
    add_cluster_commands,
    build_parser,
    cmd_down,
    cmd_kill,
    cmd_logs,
    cmd_restart,
    cmd_status,
    cmd_up,
    main,
    run_cluster_command,
)
from cluster.launcher.health import (
    MAX_METADATA_BYTES,
    PROBE_TIMEOUT_S,
    BrokerView,
    ClusterStatus,
    MetadataView,
    NodeStatus,
    health_problems,
    probe_metadata,
)
from cluster.launcher.local_cluster import (
    DEFAULT_HEALTH_TIMEOUT_S,
    HEALTH_POLL_INTERVAL_S,
    LocalCluster,
)
from cluster.launcher.processes import (
    DEFAULT_STOP_TIMEOUT_S,
    KILL_WAIT_S,
    free_base_port,
    is_alive,
    is_our_node,
    is_port_free,
    signal_node,
    tail_lines,
    wait_for_exit,
)
from cluster.launcher.spec import (
    CLUSTER_FILE,
    CLUSTER_FILE_VERSION,
    DEFAULT_BASE_PORT,
    DEFAULT_DATA_DIR,
    DEFAULT_HOST,
    DEFAULT_NODES,
    DEFAULT_ROLES,
    LOCK_FILE,
    LOCK_TIMEOUT_S,
    NODE_LOG,
    NODE_MODULE,
    ClusterSpec,
    LauncherError,
    NodeRecord,
    build_voters,
    node_port,
)

__all__ = [
    "CLUSTER_DESCRIPTION",
    "CLUSTER_EPILOG",
    "CLUSTER_FILE",
    "CLUSTER_FILE_VERSION",
    "DEFAULT_BASE_PORT",
    "DEFAULT_DATA_DIR",
    "DEFAULT_HEALTH_TIMEOUT_S",
    "DEFAULT_HOST",
    "DEFAULT_LOG_LINES",
    "DEFAULT_NODES",
    "DEFAULT_ROLES",
    "DEFAULT_STOP_TIMEOUT_S",
    "HEALTH_POLL_INTERVAL_S",
    "KILL_WAIT_S",
    "LOCK_FILE",
    "LOCK_TIMEOUT_S",
    "MAX_METADATA_BYTES",
    "NODE_LOG",
    "NODE_MODULE",
    "PROBE_TIMEOUT_S",
    "BrokerView",
    "ClusterSpec",
    "ClusterStatus",
    "LauncherError",
    "LocalCluster",
    "MetadataView",
    "NodeRecord",
    "NodeStatus",
    "add_cluster_commands",
    "build_parser",
    "build_voters",
    "cmd_down",
    "cmd_kill",
    "cmd_logs",
    "cmd_restart",
    "cmd_status",
    "cmd_up",
    "free_base_port",
    "health_problems",
    "is_alive",
    "is_our_node",
    "is_port_free",
    "main",
    "node_port",
    "probe_metadata",
    "run_cluster_command",
    "signal_node",
    "tail_lines",
    "wait_for_exit",
]
