"""Node processes: start them, tell whether a pid is one of ours, signal, wait for and stop them.

The launcher only ever signals processes it started: a pid is signalled only while
``/proc/<pid>/cmdline`` shows ``cluster.node`` with that node's data directory, and through
a pidfd, so that a pid reused by another process is left alone. Processes started here are
remembered so that they can be reaped (and their exit codes reported).
"""

from __future__ import annotations

import errno
import logging
import os
import random
import select
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from cluster.launcher.spec import NODE_MODULE, LauncherError, NodeRecord
from lograft.durable import create_directories

__all__ = [
    "DEFAULT_STOP_TIMEOUT_S",
    "KILL_WAIT_S",
    "describe_dead",
    "free_base_port",
    "is_alive",
    "is_our_node",
    "is_port_free",
    "process_state",
    "signal_node",
    "start_node",
    "state_word",
    "stop_nodes",
    "tail_lines",
    "wait_for_exit",
]

log = logging.getLogger(__name__)

DEFAULT_STOP_TIMEOUT_S = 15.0
"""How long (s) a node has after SIGTERM for its controlled shutdown before SIGKILL."""
KILL_WAIT_S = 5.0
"""How long (s) a node may take to exit after a kill signal before it counts as still running."""

# /proc/<pid>/stat state letters as status shows them: the point is to tell paused
# (SIGSTOP) nodes from running ones.
_PROCESS_STATES = {
    "R": "running",
    "S": "running",
    "D": "running",
    "I": "running",
    "T": "paused",
    "t": "paused",
    "Z": "exited",
    "X": "exited",
}

# Node processes started by this process, by pid, so that they can be reaped (a child that
# exits stays a zombie, and looks alive to kill(pid, 0), until its parent waits for it).
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}
# Exit codes of reaped children, by pid, for error messages.
_EXIT_CODES: dict[int, int] = {}


def _reap(pid: int) -> None:
    child = _CHILDREN.get(pid)
    if child is not None:
        code = child.poll()
        if code is not None:
            del _CHILDREN[pid]
            _EXIT_CODES[pid] = code


def process_state(pid: int) -> str | None:
    """The state letter from ``/proc/<pid>/stat`` (``None`` when there is no such process)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # FileNotFoundError or ProcessLookupError: no such process
        return None
    # "pid (comm) S ...": comm may contain spaces and parentheses, the state follows the last ")".
    rest = stat[stat.rfind(")") + 1 :].split()
    return rest[0] if rest else None


def state_word(state: str | None) -> str:
    """How status shows a :func:`process_state` letter: running, paused, exited, ..."""
    if state is None:
        return "not running"
    return _PROCESS_STATES.get(state, state)


def is_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie is not: it has exited)."""
    if pid <= 0:
        return False
    _reap(pid)
    state = process_state(pid)
    return state is not None and state not in ("Z", "X")


def _read_cmdline(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def is_our_node(pid: int, node_data_dir: Path) -> bool:
    """Whether ``pid`` is alive and is a lograft node serving ``node_data_dir``.

    ``/proc/<pid>/cmdline`` must hold ``cluster.node`` and the data directory as whole
    arguments, so a reused pid (or a node of another cluster) never matches.
    """
    if not is_alive(pid):
        return False
    argv = _read_cmdline(pid)
    if not argv:
        return False
    wanted = os.path.normpath(os.path.abspath(node_data_dir))
    has_dir = any(os.path.normpath(arg) == wanted for arg in argv if arg.startswith("/"))
    return NODE_MODULE in argv and has_dir


def _open_pidfd(pid: int) -> int | None:
    """A pidfd for ``pid``, ``None`` if there is no such process; raises if unsupported."""
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        return None


def signal_node(pid: int, node_data_dir: Path, sig: int) -> bool:
    """Send ``sig`` to ``pid`` if (and only if) it is our node for ``node_data_dir``.

    The check and the signal go through one pidfd: if the pid is reused after the check, the
    signal cannot reach the new process. Returns whether the signal was sent.
    """
    if pid <= 0:
        return False
    try:
        pidfd = _open_pidfd(pid)
    except OSError as exc:
        if exc.errno not in (errno.ENOSYS, errno.EINVAL, errno.EPERM):
            raise
        pidfd = -1  # no pidfd support: check, then plain kill
    if pidfd is None:
        return False
    try:
        if not is_our_node(pid, node_data_dir):
            log.info("not signalling pid=%d: not a live node of %s", pid, node_data_dir)
            return False
        try:
            if pidfd >= 0:
                signal.pidfd_send_signal(pidfd, sig)
            else:
                os.kill(pid, sig)
        except ProcessLookupError:
            return False
        log.info(
            "signalled pid=%d signal=%s data_dir=%s", pid, signal.Signals(sig).name, node_data_dir
        )
        return True
    finally:
        if pidfd >= 0:
            os.close(pidfd)


def wait_for_pause_state(pid: int, paused: bool, timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` until ``pid`` shows as paused (or not); returns whether so.

    A signal is delivered when the process is next scheduled: on a busy machine a
    ``status`` right after ``kill -STOP`` would otherwise still show it running.
    """
    deadline = time.monotonic() + timeout_s
    while (state_word(process_state(pid)) == "paused") != paused:
        if time.monotonic() >= deadline or not is_alive(pid):
            return False
        time.sleep(0.01)
    return True


def wait_for_exit(pid: int, timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for ``pid`` to exit; returns whether it did."""
    child = _CHILDREN.get(pid)
    if child is not None:
        try:
            child.wait(timeout=max(0.0, timeout_s))
        except subprocess.TimeoutExpired:
            return False
        _reap(pid)
        return True
    try:
        pidfd = _open_pidfd(pid)
    except OSError:
        pidfd = -1
    if pidfd is None:
        return True
    if pidfd < 0:  # no pidfd support: poll
        deadline = time.monotonic() + timeout_s
        while is_alive(pid):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        # A pidfd becomes readable when the process exits (zombie or reaped).
        return bool(poller.poll(max(0, int(timeout_s * 1000)))) or not is_alive(pid)
    finally:
        os.close(pidfd)


def is_port_free(host: str, port: int) -> bool:
    """Whether nothing listens on ``host:port`` (a bind with SO_REUSEADDR succeeds)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def free_base_port(count: int, host: str = "127.0.0.1") -> int:
    """A port ``p`` such that ``p .. p+count-1`` are free on ``host`` now.

    Chosen below Linux's ephemeral range (32768 and up), so that a node restarted on its
    port does not find it taken by some client's outgoing connection.
    """
    rng = random.Random()
    for _ in range(500):
        base = rng.randrange(20000, 32000 - count)
        if all(is_port_free(host, port) for port in range(base, base + count)):
            return base
    raise LauncherError(f"no {count} consecutive free ports found on {host}")


def tail_lines(path: Path, lines: int) -> list[str]:
    """The last ``lines`` lines of ``path`` (reads backwards, so huge logs are cheap)."""
    if lines <= 0:
        return []
    block = 64 * 1024
    with open(path, "rb") as file:
        file.seek(0, os.SEEK_END)
        end = file.tell()
        data = b""
        position = end
        while position > 0 and data.count(b"\n") <= lines:
            step = min(block, position)
            position -= step
            file.seek(position)
            data = file.read(step) + data
    text = data.decode(errors="replace")
    parts = text.splitlines()
    return parts[-lines:]


def start_node(node: NodeRecord, voters: str, configs: Mapping[str, str]) -> None:
    """Start ``node`` as a detached process logging to its ``node.log``; sets ``node.pid``.

    ``LauncherError`` when another process listens on the node's port. (A node in a network
    namespace of its own listens on that namespace's address, which cannot be probed from
    here: a port taken there shows as the node exiting.)
    """
    if node.netns is None and not is_port_free(node.host, node.client_port):
        raise LauncherError(
            f"port {node.client_port} of node {node.node_id} is in use by another "
            "process; stop it or pick another --base-port"
        )
    create_directories(node.data_dir)
    argv = node.command(voters, configs)
    env = dict(os.environ, PYTHONUNBUFFERED="1", **node.env)
    with open(node.log_path, "ab") as log_file:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        log_file.write(f"---- {stamp} lograft cluster: {' '.join(argv)}\n".encode())
        log_file.flush()
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            close_fds=True,
            start_new_session=True,  # outlives the launcher, not in its process group
            env=env,
        )
    _CHILDREN[process.pid] = process
    _EXIT_CODES.pop(process.pid, None)
    node.pid = process.pid
    log.info("started node_id=%d pid=%d listen=%s", node.node_id, node.pid, node.address)


def stop_nodes(nodes: Sequence[NodeRecord], timeout_s: float) -> dict[int, str]:
    """SIGTERM (then SIGKILL after ``timeout_s``) each node; sets pids to ``None``.

    Returns what happened to each node, by id.
    """
    outcome: dict[int, str] = {}
    signalled: list[NodeRecord] = []
    for node in nodes:
        if node.pid is None:
            outcome[node.node_id] = "not running"
        elif not is_alive(node.pid):
            outcome[node.node_id] = "not running (had exited)"
            node.pid = None
        elif not signal_node(node.pid, node.data_dir, signal.SIGTERM):
            outcome[node.node_id] = f"not running (pid {node.pid} is another process, left alone)"
            node.pid = None
        else:
            # A paused (SIGSTOP) node acts on SIGTERM only once continued.
            signal_node(node.pid, node.data_dir, signal.SIGCONT)
            signalled.append(node)
    deadline = time.monotonic() + timeout_s
    stragglers: list[NodeRecord] = []
    for node in signalled:
        assert node.pid is not None
        if wait_for_exit(node.pid, deadline - time.monotonic()):
            outcome[node.node_id] = "stopped"
            node.pid = None
        else:
            stragglers.append(node)
    for node in stragglers:
        assert node.pid is not None
        log.warning("node_id=%d pid=%d ignored SIGTERM; SIGKILL", node.node_id, node.pid)
        signal_node(node.pid, node.data_dir, signal.SIGKILL)
        if wait_for_exit(node.pid, KILL_WAIT_S):
            outcome[node.node_id] = f"killed (no exit within {timeout_s:g} s of SIGTERM)"
            node.pid = None
        else:
            outcome[node.node_id] = f"still running after SIGKILL (pid {node.pid})"
    return outcome


def describe_dead(dead: Sequence[NodeRecord]) -> str:
    """Why ``dead`` nodes are not running: exit codes (of nodes started here), log tails."""
    parts = []
    for node in dead:
        code = _EXIT_CODES.get(node.pid) if node.pid is not None else None
        exit_note = f" (exit code {code})" if code is not None else ""
        try:
            tail = "\n    ".join(tail_lines(node.log_path, 15))
        except OSError:
            tail = "(no log)"
        parts.append(
            f"node {node.node_id} is not running{exit_note}; last lines of "
            f"{node.log_path}:\n    {tail}"
        )
    return "\n".join(parts)
