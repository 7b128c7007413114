"""``python -m chaos.lazyfs MOUNTPOINT --backing DIR [--control SOCKET]``: mount in the
foreground until SIGTERM/SIGINT/SIGHUP (then unmount cleanly: everything is synced).

Signals: SIGUSR1 crashes (drops every unsynced write and directory change), SIGUSR2 syncs
everything. The control socket does the same with an answer once done (see
:mod:`chaos.lazyfs.control`). SIGKILL of this process is a power loss as well: the backing
directory only ever holds what was synced.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from chaos.lazyfs.control import ControlServer
from chaos.lazyfs.delays import FsyncDelays
from chaos.lazyfs.mount import unmount
from chaos.lazyfs.store import LazyStore

log = logging.getLogger("chaos.lazyfs")

MOUNT_TIMEOUT_S = 30.0
SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2}


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m chaos.lazyfs",
        description="A FUSE file system that loses every unsynced write on command "
        "(a power loss): data not fsynced, directory changes whose directory was not fsynced.",
    )
    parser.add_argument("mountpoint", type=Path, help="where to mount (created if missing)")
    parser.add_argument(
        "--backing", type=Path, required=True, help="the durable store: what was synced"
    )
    parser.add_argument("--control", type=Path, help="unix socket for crash/sync/status")
    parser.add_argument(
        "--allow-other",
        action="store_true",
        help="let other users in (a container's user through a bind mount); mode bits apply",
    )
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING (default INFO)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Mount, serve until a stop signal, unmount; 0 after a clean unmount."""
    args = _parse(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    # Every thread started from here on (libfuse's included) inherits the blocked mask, so
    # only the main loop's sigtimedwait takes these signals, and libfuse's own handlers
    # never run.
    signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    from chaos.lazyfs.fuse_adapter import serve  # loads libfuse: only in the mount process

    mountpoint: Path = args.mountpoint.absolute()
    mountpoint.mkdir(parents=True, exist_ok=True)
    store = LazyStore(args.backing)
    delays = FsyncDelays()
    mounted = threading.Event()
    stopped = threading.Event()
    failures: list[BaseException] = []

    def run() -> None:
        try:
            serve(store, mountpoint, mounted.set, delays, allow_other=args.allow_other)
        except BaseException as exc:
            failures.append(exc)
        finally:
            stopped.set()
            mounted.set()

    fuse_thread = threading.Thread(target=run, name="lazyfs-fuse", daemon=True)
    fuse_thread.start()
    if not mounted.wait(MOUNT_TIMEOUT_S) or stopped.is_set():
        log.error("lazyfs mount failed mountpoint=%s error=%s", mountpoint, failures)
        store.close(sync=True)
        return 1
    control = ControlServer(store, args.control, delays) if args.control else None
    if control is not None:
        control.start()
    log.info("lazyfs mounted mountpoint=%s backing=%s", mountpoint, store.backing)
    try:
        while not stopped.is_set():
            received = signal.sigtimedwait(SIGNALS, 0.5)
            if received is None:
                continue
            if received.si_signo == signal.SIGUSR1:
                store.crash()
            elif received.si_signo == signal.SIGUSR2:
                store.sync_all()
            else:
                log.info("lazyfs stopping signal=%s", signal.Signals(received.si_signo).name)
                break
    finally:
        if control is not None:
            control.close()
        if not stopped.is_set():
            unmount(mountpoint)
            fuse_thread.join(timeout=10.0)
            if fuse_thread.is_alive():
                log.warning("lazyfs still served after the unmount mountpoint=%s", mountpoint)
        store.close(sync=True)
        log.info("lazyfs unmounted mountpoint=%s", mountpoint)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
