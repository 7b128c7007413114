"""The container entrypoint: ``lograft node`` configured from the environment, as PID 1's child.

The image (docker/Dockerfile) runs ``python -m cluster.container``::

    python -m cluster.container run        the default command: start the node, wait for it
    python -m cluster.container health     the health check: ask the node itself (exit 0/1)
    python -m cluster.container settings   every environment variable read, with its setting

**One mapping, computed.** Every setting ``lograft node --config`` accepts is read from the
environment variable ``LOGRAFT_`` + the setting's name upper-cased with dots and dashes as
underscores: ``node.id`` ← ``LOGRAFT_NODE_ID``, ``controller.quorum.voters`` ←
``LOGRAFT_CONTROLLER_QUORUM_VOTERS``, ``min.insync.replicas`` ← ``LOGRAFT_MIN_INSYNC_REPLICAS``.
The names come from :func:`lograft.protocol.node_config.node_setting_names`, the node's own list, so
the mapping cannot drift from what the node accepts. A ``LOGRAFT_*`` variable that names no
setting (a typo) stops the container with an error naming it, rather than being ignored;
:data:`OTHER_VARIABLES` are the few that are not node settings. An empty value counts as
unset. ``LOGRAFT_LOG_LEVEL`` sets the node's log level (default ``INFO``). A listener that
binds every interface (``0.0.0.0``) and is not in ``advertised.listeners`` is advertised as
the container's hostname, which is what other containers on its network dial.

**Defaults** (:data:`CONTAINER_DEFAULTS`) make a bare ``docker run -p 127.0.0.1:9092:9092
lograft`` a working single node (combined broker and controller, id 1): data under
``/var/lib/lograft/data`` (the image's volume), an ``INTERNAL`` listener on port 19092 for
other containers, replication and the controller quorum, advertised as this container's
hostname, and an ``EXTERNAL`` listener on port 9092 advertised as ``127.0.0.1:9092`` for
clients on the host. docker-compose.yml overrides what a three-node cluster needs.

**Signals.** ``run`` starts the node as its child and forwards SIGTERM, SIGINT, SIGHUP,
SIGQUIT, SIGUSR1 and SIGUSR2 to it, so ``docker stop`` (SIGTERM, then SIGKILL after the grace
period) is the node's controlled shutdown: it hands its partition leaderships over, flushes
and exits. As PID 1 it also reaps orphaned processes, and it exits with the node's exit code
(128 + the signal number if a signal ended the node).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from types import FrameType
from typing import TextIO

from lograft.protocol.errors import InvalidConfigError
from lograft.protocol.node_config import UNROUTABLE_HOSTS, node_setting_names, parse_listener_list

__all__ = [
    "CONTAINER_DEFAULTS",
    "ENV_PREFIX",
    "FORWARDED_SIGNALS",
    "OTHER_VARIABLES",
    "container_settings",
    "env_name",
    "health_address",
    "main",
    "node_command",
]

log = logging.getLogger(__name__)

ENV_PREFIX = "LOGRAFT_"
"""What the environment variables of node settings start with (:func:`env_name`); any other
variable with it, not in :data:`OTHER_VARIABLES`, stops the container."""
DATA_DIR = "/var/lib/lograft/data"
INTERNAL_PORT = 19092
EXTERNAL_PORT = 9092
HEALTH_TIMEOUT_S = 5.0

OTHER_VARIABLES: Mapping[str, str] = {
    "LOGRAFT_LOG_LEVEL": "the node's log level: DEBUG, INFO (default), WARNING, ERROR",
    "LOGRAFT_BOOTSTRAP": "bootstrap.servers of the lograft CLI run inside the container",
    "LOGRAFT_CONFIG": "client config file of the lograft CLI run inside the container",
}
"""``LOGRAFT_*`` variables that are not node settings, and what they are for."""

FORWARDED_SIGNALS = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)
"""Signals ``run`` passes on to the node."""


def _container_defaults(hostname: str) -> dict[str, str]:
    return {
        "node.id": "1",
        "process.roles": "broker,controller",
        "controller.quorum.voters": f"1@{hostname}:{INTERNAL_PORT}",
        "log.dir": DATA_DIR,
        "listeners": f"INTERNAL://0.0.0.0:{INTERNAL_PORT},EXTERNAL://0.0.0.0:{EXTERNAL_PORT}",
        "advertised.listeners": (
            f"INTERNAL://{hostname}:{INTERNAL_PORT},EXTERNAL://127.0.0.1:{EXTERNAL_PORT}"
        ),
        "inter.broker.listener.name": "INTERNAL",
    }


CONTAINER_DEFAULTS: Mapping[str, str] = _container_defaults("HOSTNAME")
"""The settings a container has unless its environment says otherwise (``HOSTNAME`` stands
for the container's hostname)."""


def env_name(setting: str) -> str:
    """The environment variable of a node setting: ``node.id`` → ``LOGRAFT_NODE_ID``."""
    return ENV_PREFIX + setting.upper().replace(".", "_").replace("-", "_")


def _by_env_name() -> dict[str, str]:
    return {env_name(name): name for name in node_setting_names()}


def container_settings(environ: Mapping[str, str], hostname: str) -> dict[str, str]:
    """The node settings of a container: :data:`CONTAINER_DEFAULTS` overlaid by ``environ``.

    Raises ``InvalidConfigError`` naming every ``LOGRAFT_*`` variable that is neither a
    setting nor one of :data:`OTHER_VARIABLES`.
    """
    known = _by_env_name()
    settings = _container_defaults(hostname)
    unknown: list[str] = []
    for variable, value in sorted(environ.items()):
        if not variable.startswith(ENV_PREFIX) or variable in OTHER_VARIABLES:
            continue
        name = known.get(variable)
        if name is None:
            close = difflib.get_close_matches(variable, [*known, *OTHER_VARIABLES], n=1)
            unknown.append(variable + (f" (did you mean {close[0]}?)" if close else ""))
        elif value.strip():
            settings[name] = value.strip()
    if unknown:
        raise InvalidConfigError(
            "unknown environment variable(s): " + ", ".join(unknown) + "; `python -m "
            "cluster.container settings` lists the ones the node reads"
        )
    settings["advertised.listeners"] = _advertise_wildcards(
        settings["listeners"], settings["advertised.listeners"], hostname
    )
    return settings


def _advertise_wildcards(listeners: str, advertised: str, hostname: str) -> str:
    """``advertised`` plus ``NAME://HOSTNAME:PORT`` for each listener that binds every
    interface and is not advertised: in a container the hostname is what its network dials."""
    named = {name for name, _, _ in parse_listener_list("advertised.listeners", advertised)}
    added = [advertised] if advertised.strip() else []
    for name, host, port in parse_listener_list("listeners", listeners):
        if name not in named and host in UNROUTABLE_HOSTS:
            added.append(f"{name}://{hostname}:{port}")
    return ",".join(added)


def node_command(settings: Mapping[str, str], log_level: str) -> list[str]:
    """The ``lograft node`` command line for ``settings``."""
    command = [sys.executable, "-m", "cluster.node", "--log-level", log_level]
    for name, value in settings.items():
        command += ["--config", f"{name}={value}"]
    return command


def health_address(settings: Mapping[str, str]) -> str:
    """Where the health check asks: this container's first listener, on the loopback."""
    bound = parse_listener_list("listeners", settings["listeners"])
    if not bound:
        raise InvalidConfigError("listeners: at least one NAME://HOST:PORT is needed")
    return f"127.0.0.1:{bound[0][2]}"


def _run(settings: Mapping[str, str], log_level: str) -> int:
    command = node_command(settings, log_level)
    log.info(
        "starting node node_id=%s roles=%s listeners=%s",
        settings.get("node.id"),
        settings.get("process.roles"),
        settings.get("advertised.listeners"),
    )
    child = subprocess.Popen(command)

    def forward(signum: int, _frame: FrameType | None) -> None:
        log.info("forwarding signal=%s pid=%d", signal.Signals(signum).name, child.pid)
        with contextlib.suppress(ProcessLookupError):  # it has just exited
            os.kill(child.pid, signum)

    for signum in FORWARDED_SIGNALS:
        signal.signal(signum, forward)
    # As PID 1 every orphan of the container becomes ours: reap them all until the node ends.
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == child.pid:
            code = os.waitstatus_to_exitcode(status)
            exit_code = code if code >= 0 else 128 - code
            log.info("node exited code=%d", exit_code)
            return exit_code


def _health(settings: Mapping[str, str], timeout_s: float) -> int:
    # Only the light health client: Docker runs this every few seconds in every container.
    from cluster.node_health import check_health

    verdict = check_health(health_address(settings), timeout_s)
    print(verdict.reason, file=sys.stdout)
    return 0 if verdict.healthy else 1


def _print_settings(out: TextIO) -> None:
    described = node_setting_names()
    defaults = _container_defaults("HOSTNAME")
    width = max(len(env_name(name)) for name in described)
    for name in sorted(described):
        default = f" (container default: {defaults[name]})" if name in defaults else ""
        print(f"{env_name(name):<{width}}  {name}: {described[name]}{default}", file=out)
    for variable, meaning in OTHER_VARIABLES.items():
        print(f"{variable:<{width}}  {meaning}", file=out)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m cluster.container``; returns the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m cluster.container",
        description="Run a lograft node in a container, configured from LOGRAFT_* variables.",
    )
    parser.add_argument("action", choices=["run", "health", "settings"], nargs="?", default="run")
    parser.add_argument("--timeout-s", type=float, default=HEALTH_TIMEOUT_S)
    args = parser.parse_args(argv)
    log_level = os.environ.get("LOGRAFT_LOG_LEVEL", "").strip().upper() or "INFO"
    logging.basicConfig(
        level=log_level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    if args.action == "settings":
        _print_settings(sys.stdout)
        return 0
    try:
        settings = container_settings(os.environ, socket.gethostname())
        if args.action == "health":
            return _health(settings, args.timeout_s)
    except InvalidConfigError as exc:
        print(f"lograft container: {exc}", file=sys.stderr)
        return 2
    return _run(settings, log_level)


if __name__ == "__main__":
    raise SystemExit(main())
