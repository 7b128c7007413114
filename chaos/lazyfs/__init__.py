"""LazyFS: a FUSE file system that simulates a power loss (issue 12's "power loss" nemesis).

Nodes keep their data directories on the mount; :meth:`LazyFS.crash` then drops every write
that was not fsynced and rolls back every directory change (create, mkdir, rename, unlink,
rmdir, link, symlink) whose directory was not fsynced, as Jepsen's LazyFS does. See
``docs/decisions/0005-power-loss-filesystem.md`` for what it models and what not.

* :class:`LazyStore` (:mod:`chaos.lazyfs.store`): the model, usable without FUSE.
* :class:`LazyFS` (:mod:`chaos.lazyfs.mount`): a mount served by a child process
  (``python -m chaos.lazyfs MOUNTPOINT --backing DIR [--control SOCKET]``), with
  ``crash()``, ``sync_all()``, ``status()``, ``unmount()``, ``kill()``.
"""

from chaos.lazyfs.errors import LazyFSControlError, LazyFSError, LazyFSMountError
from chaos.lazyfs.mount import LazyFS, fuse_available, unmount
from chaos.lazyfs.store import LazyStore, Unsynced

__all__ = [
    "LazyFS",
    "LazyFSControlError",
    "LazyFSError",
    "LazyFSMountError",
    "LazyStore",
    "Unsynced",
    "fuse_available",
    "unmount",
]
