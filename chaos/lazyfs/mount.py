"""Run a LazyFS mount in a child process: :class:`LazyFS` and :func:`unmount`."""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

from chaos.lazyfs.control import request
from chaos.lazyfs.errors import LazyFSControlError, LazyFSMountError
from chaos.lazyfs.store import Unsynced

__all__ = ["LazyFS", "fuse_available", "unmount"]

log = logging.getLogger(__name__)

MNT_DETACH = 2
READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0
POLL_INTERVAL_S = 0.05


def fuse_available() -> bool:
    """Whether this machine can mount a LazyFS: ``/dev/fuse`` exists (and, unless root,
    ``fusermount3`` does)."""
    if not os.path.exists("/dev/fuse"):
        return False
    return os.geteuid() == 0 or shutil.which("fusermount3") is not None


def unmount(mountpoint: Path, lazy: bool = False) -> None:
    """Unmount a FUSE mount (``umount2``, as root; ``fusermount3 -u`` otherwise); busy, it
    is detached lazily. Not mounted: nothing happens. Raises ``OSError``."""
    if os.geteuid() != 0:
        command = ["fusermount3", "-u", "-q"] + (["-z"] if lazy else []) + [str(mountpoint)]
        subprocess.run(command, check=False)
        return
    libc = ctypes.CDLL(None, use_errno=True)
    target = os.fsencode(mountpoint)
    if libc.umount2(target, MNT_DETACH if lazy else 0) == 0:
        return
    code = ctypes.get_errno()
    if code == errno.EBUSY and not lazy:
        log.warning("lazyfs mount busy, detaching it lazily mountpoint=%s", mountpoint)
        unmount(mountpoint, lazy=True)
    elif code not in (errno.EINVAL, errno.ENOENT):
        raise OSError(code, os.strerror(code), str(mountpoint))


class LazyFS:
    """A LazyFS mount of ``backing`` on ``mountpoint``, served by a child process
    (``python -m chaos.lazyfs``). A context manager: mounted on entry, unmounted cleanly
    (everything synced) on exit.

    For a power loss: SIGKILL every process using the mount, wait for them, then
    :meth:`crash` (the mount stays; restart the processes on it), or :meth:`kill` and
    :meth:`mount` again (a remount). Not thread-safe."""

    def __init__(
        self,
        backing: Path,
        mountpoint: Path,
        *,
        log_path: Path | None = None,
        log_level: str = "INFO",
        allow_other: bool = False,
    ) -> None:
        self.backing = Path(os.path.abspath(backing))
        self.mountpoint = Path(os.path.abspath(mountpoint))
        self.log_path = log_path or self.backing.parent / f"{self.backing.name}.lazyfs.log"
        self._log_level = log_level
        self._allow_other = allow_other
        # A unix socket path must stay short (108 bytes): not under a test's tmp_path.
        self._control_dir = Path(tempfile.mkdtemp(prefix="lazyfs-"))
        self.control_path = self._control_dir / "control.sock"
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> LazyFS:
        self.mount()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.unmount()
        shutil.rmtree(self._control_dir, ignore_errors=True)

    @property
    def pid(self) -> int | None:
        """The mount process's pid while it runs."""
        running = self._process is not None and self._process.poll() is None
        return self._process.pid if running and self._process is not None else None

    def mount(self) -> None:
        """Start the mount process; return once the mount answers. Raises
        :class:`LazyFSMountError` (with the process's log) if it does not come up."""
        if self.pid is not None:
            raise LazyFSMountError(f"{self.mountpoint} is already mounted by pid {self.pid}")
        unmount(self.mountpoint, lazy=True)  # a dead earlier mount ("not connected")
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        command = [
            sys.executable,
            "-m",
            "chaos.lazyfs",
            str(self.mountpoint),
            "--backing",
            str(self.backing),
            "--control",
            str(self.control_path),
            "--log-level",
            self._log_level,
            *(["--allow-other"] if self._allow_other else []),
        ]
        with open(self.log_path, "ab") as log_file:
            self._process = subprocess.Popen(
                command, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            if self._process.poll() is not None:
                raise LazyFSMountError(
                    f"lazyfs exited with {self._process.returncode}:\n{self.read_log()}"
                )
            if os.path.ismount(self.mountpoint) and self.control_path.exists():
                try:
                    request(self.control_path, "ping", timeout_s=5.0)
                    return
                except LazyFSControlError:
                    pass
            if time.monotonic() > deadline:
                self.kill()
                raise LazyFSMountError(f"lazyfs not mounted in time:\n{self.read_log()}")
            time.sleep(POLL_INTERVAL_S)

    def read_log(self) -> str:
        """The mount process's log so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def crash(self) -> Unsynced:
        """Power loss in place: drop every unsynced write and directory change; returns
        what was dropped. Processes still holding files get EIO on them."""
        return request(self.control_path, "crash")

    def sync_all(self) -> Unsynced:
        """Make everything durable (``sync``); returns the state after (nothing unsynced)."""
        return request(self.control_path, "sync")

    def status(self) -> Unsynced:
        """What a crash now would drop."""
        return request(self.control_path, "status")

    def slow(self, prefix: str, milliseconds: float) -> None:
        """Hold every fsync under ``prefix`` of the mount (``/node-2``; ``/`` for all) up by
        ``milliseconds`` (0: no longer); a slow disk."""
        request(self.control_path, f"slow {prefix} {milliseconds:g}")

    def fast(self) -> None:
        """No fsync is held up any more."""
        request(self.control_path, "fast")

    def unmount(self, sync: bool = True) -> None:
        """Stop the mount process: unmount, with everything synced first (a clean shutdown),
        or with ``sync=False`` after a crash."""
        if self.pid is None:
            self._process = None
            unmount(self.mountpoint, lazy=True)
            return
        if not sync:
            self.crash()
        assert self._process is not None
        self._process.send_signal(signal.SIGTERM)
        try:
            self._process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            log.warning("lazyfs pid=%d ignored SIGTERM; killing it", self._process.pid)
            self.kill()
        self._process = None

    def kill(self) -> None:
        """SIGKILL the mount process: a power loss of the layer itself (the backing dir keeps
        what was synced); the dead mount is detached. :meth:`mount` mounts again."""
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGKILL)
            self._process.wait(timeout=STOP_TIMEOUT_S)
        self._process = None
        unmount(self.mountpoint, lazy=True)
