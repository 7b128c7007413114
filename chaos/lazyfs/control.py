"""The control channel of a LazyFS mount: a unix socket taking one command per connection.

A client sends one line (``crash``, ``sync``, ``status``, ``ping``, ``slow PREFIX MS`` or
``fast``) and reads one JSON line back: ``{"ok": true, ...}`` with the
:class:`~chaos.lazyfs.store.Unsynced` figures (for ``crash``: what it dropped), or
``{"ok": false, "error": "..."}``. ``slow PREFIX MS`` holds every fsync of a path under
``PREFIX`` (``/node-2``; ``/`` for all) up by ``MS`` milliseconds
(:class:`~chaos.lazyfs.delays.FsyncDelays`); ``fast`` removes every delay. The reply to
``crash`` comes after the crash is done, so a harness knows the layer lost what it had to
lose before it restarts anything. :func:`request` is the client.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import socket
import threading
from pathlib import Path
from typing import Any

from chaos.lazyfs.delays import FsyncDelays
from chaos.lazyfs.errors import LazyFSControlError
from chaos.lazyfs.store import LazyStore, Unsynced

__all__ = ["COMMANDS", "ControlServer", "request"]

log = logging.getLogger(__name__)

COMMANDS = ("crash", "sync", "status", "ping", "slow", "fast")
"""The commands the control socket takes."""


class ControlServer:
    """Serves the control socket at ``path`` for ``store`` on a daemon thread."""

    def __init__(self, store: LazyStore, path: Path, delays: FsyncDelays | None = None) -> None:
        self._store = store
        self._delays = delays
        self._path = path
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._socket.bind(str(path))
        self._socket.listen(16)
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="lazyfs-control", daemon=True)

    def start(self) -> None:
        """Start answering."""
        self._thread.start()
        log.info("lazyfs control socket=%s", self._path)

    def close(self) -> None:
        """Stop answering and remove the socket file."""
        self._closed = True
        with contextlib.suppress(OSError):
            self._socket.shutdown(socket.SHUT_RDWR)
        self._socket.close()
        with contextlib.suppress(FileNotFoundError):
            self._path.unlink()

    def _serve(self) -> None:
        while not self._closed:
            try:
                connection, _ = self._socket.accept()
            except OSError:
                return
            with connection:
                try:
                    self._answer(connection)
                except OSError as exc:
                    log.warning("lazyfs control connection failed error=%s", exc)

    def _answer(self, connection: socket.socket) -> None:
        with connection.makefile("rwb") as stream:
            command = stream.readline().decode(errors="replace").strip()
            reply: dict[str, Any]
            try:
                reply = {"ok": True, **self.execute(command)}
            except (OSError, ValueError) as exc:
                log.error("lazyfs control command=%s failed error=%s", command, exc)
                reply = {"ok": False, "error": f"{command}: {exc}"}
            stream.write(json.dumps(reply).encode() + b"\n")
            stream.flush()

    def execute(self, command: str) -> dict[str, Any]:
        """Run one command; the figures it returns."""
        result: Unsynced
        if command == "crash":
            result = self._store.crash()
        elif command == "sync":
            self._store.sync_all()
            result = self._store.status()
        elif command in ("status", "ping"):
            result = self._store.status()
        elif command.startswith("slow ") or command == "fast":
            self._set_delay(command)
            result = self._store.status()
        else:
            raise ValueError(f"unknown command {command!r}; one of {', '.join(COMMANDS)}")
        return dataclasses.asdict(result)

    def _set_delay(self, command: str) -> None:
        if self._delays is None:
            raise ValueError("this mount serves no slow disk")
        if command == "fast":
            self._delays.clear()
            return
        words = command.split()
        if len(words) != 3:
            raise ValueError(f"usage: slow PREFIX MS, got {command!r}")
        try:
            milliseconds = float(words[2])
        except ValueError:
            raise ValueError(f"slow: {words[2]!r} is not a number of milliseconds") from None
        self._delays.set(words[1], milliseconds / 1000.0)
        log.info("lazyfs fsync delay prefix=%s ms=%g", words[1], milliseconds)


def request(path: Path, command: str, timeout_s: float = 60.0) -> Unsynced:
    """Send ``command`` to the control socket at ``path`` and return the figures it answers.

    Raises :class:`LazyFSControlError` when the socket does not answer or the command
    failed."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.settimeout(timeout_s)
            client.connect(os.fspath(path))
            client.sendall(command.encode() + b"\n")
            with client.makefile("rb") as stream:
                line = stream.readline()
    except OSError as exc:
        raise LazyFSControlError(f"lazyfs control {path}: {command}: {exc}") from exc
    if not line:
        raise LazyFSControlError(f"lazyfs control {path}: {command}: no answer")
    reply = json.loads(line)
    if not reply.pop("ok", False):
        raise LazyFSControlError(f"lazyfs control {path}: {reply.get('error')}")
    return Unsynced(**reply)
