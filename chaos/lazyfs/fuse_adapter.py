"""The FUSE side of LazyFS: libfuse 3's high-level API (through ``mfusepy``) calling a
:class:`~chaos.lazyfs.store.LazyStore`.

Importing this module loads libfuse (``libfuse3.so.3``; ``FUSE_LIBRARY_NAME=fuse3`` is set
unless the environment names another), so only the mount process imports it.

Mount settings, and why:

* ``entry_timeout``, ``attr_timeout``, ``negative_timeout`` 0: the kernel caches no name
  and no size, so after a crash nothing dropped is still visible through a cached entry.
* no ``kernel_cache``/``auto_cache``: every ``open`` drops the kernel's cached pages of
  the file, so a process started after a crash reads what the store now holds.
  ``direct_io`` stays off, so shared ``mmap`` works; writes made through a mapping reach
  the store when the kernel writes the pages back (``msync``, ``fsync``, ``munmap``).
  No writeback cache: each ``write`` reaches the store before it returns.
* ``hard_remove``: an unlinked open file stays open without libfuse's ``.fuse_hidden``
  renames (which would be directory changes of their own); ``nullpath_ok``: operations on
  open files go by handle (the store resolves inodes, not names, for them).
* ``use_ino``: ``st_ino`` is the store's inode number.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("FUSE_LIBRARY_NAME", "fuse3")

import mfusepy  # type: ignore[import-untyped]  # after FUSE_LIBRARY_NAME is set

from chaos.lazyfs.delays import FsyncDelays
from chaos.lazyfs.store import FileAttributes, LazyStore

__all__ = ["serve"]

log = logging.getLogger(__name__)

if mfusepy.fuse_version_major != 3:
    raise ImportError(f"lazyfs needs libfuse 3, found {mfusepy.fuse_version_major}")


def _attributes(attributes: FileAttributes) -> dict[str, int]:
    return {
        "st_ino": attributes.ino,
        "st_mode": attributes.mode,
        "st_nlink": attributes.nlink,
        "st_size": attributes.size,
        "st_uid": attributes.uid,
        "st_gid": attributes.gid,
        "st_atime": attributes.atime_ns,
        "st_mtime": attributes.mtime_ns,
        "st_ctime": attributes.ctime_ns,
        "st_blksize": 4096,
        "st_blocks": (attributes.size + 511) // 512,
    }


class _Fuse(mfusepy.FUSE):  # type: ignore[misc]
    """mfusepy's FUSE with two libfuse 3 arguments it drops passed on: the flags of
    ``rename`` (``RENAME_NOREPLACE``/``RENAME_EXCHANGE``) and the handle of ``ftruncate``
    (an unlinked open file has no path)."""

    def rename_fuse_3(self, old: bytes, new: bytes, flags: int) -> int:
        result: int = self.operations.rename(
            old.decode(self.encoding, self.errors), new.decode(self.encoding, self.errors), flags
        )
        return result

    def truncate_fuse_3(self, path: bytes | None, length: int, fip: Any) -> int:
        fh = fip.contents.fh if fip else None
        decoded = None if path is None else path.decode(self.encoding, self.errors)
        result: int = self.operations.truncate(decoded, length, fh)
        return result


class _Operations(mfusepy.Operations):  # type: ignore[misc]
    """Each FUSE call, translated to the store."""

    use_ns = True

    def __init__(
        self, store: LazyStore, on_mounted: Callable[[], None], delays: FsyncDelays
    ) -> None:
        self._store = store
        self._on_mounted = on_mounted
        self._delays = delays
        # The path each handle was opened by: fsync comes by handle (nullpath_ok), and a
        # slow disk is chosen by path. A rename later does not move a delay: fine for a
        # node's whole data directory.
        self._opened: dict[int, str] = {}

    def _delay(self, path: str | None, fh: int) -> None:
        self._delays.hold(path or self._opened.get(fh))

    @staticmethod
    def _caller() -> tuple[int, int]:
        uid, gid, _pid = mfusepy.fuse_get_context()
        return int(uid), int(gid)

    def init_with_config(self, conn_info: Any, config: Any) -> None:
        if config is not None:
            config.use_ino = 1
            config.hard_remove = 1
            config.nullpath_ok = 1
            config.entry_timeout = 0.0
            config.attr_timeout = 0.0
            config.negative_timeout = 0.0
            config.direct_io = 0
            config.kernel_cache = 0
            config.auto_cache = 0
        self._on_mounted()

    def getattr(self, path: str | None, fh: int | None = None) -> dict[str, int]:
        return _attributes(self._store.getattr(path, fh))

    def statfs(self, path: str) -> dict[str, int]:
        figures = self._store.statfs()
        return {
            "f_bsize": figures.f_bsize,
            "f_frsize": figures.f_frsize,
            "f_blocks": figures.f_blocks,
            "f_bfree": figures.f_bfree,
            "f_bavail": figures.f_bavail,
            "f_files": figures.f_files,
            "f_ffree": figures.f_ffree,
            "f_favail": figures.f_favail,
            "f_namemax": figures.f_namemax,
        }

    def chmod(self, path: str | None, mode: int) -> int:
        self._store.chmod(path, mode)
        return 0

    def chown(self, path: str | None, uid: int, gid: int) -> int:
        self._store.chown(path, uid, gid)
        return 0

    def utimens(self, path: str | None, times: tuple[int, int] | None = None) -> int:
        self._store.utimens(path, None if times is None else (int(times[0]), int(times[1])))
        return 0

    def mkdir(self, path: str, mode: int) -> int:
        uid, gid = self._caller()
        self._store.mkdir(path, mode, uid, gid)
        return 0

    def rmdir(self, path: str) -> int:
        self._store.rmdir(path)
        return 0

    def opendir(self, path: str) -> int:
        fh = self._store.opendir(path)
        self._opened[fh] = path
        return fh

    def readdir(self, path: str | None, fh: int) -> list[tuple[str, dict[str, int], int]]:
        return [(e.name, {"st_mode": e.mode, "st_ino": e.ino}, 0) for e in self._store.readdir(fh)]

    def releasedir(self, path: str | None, fh: int) -> int:
        self._opened.pop(fh, None)
        self._store.releasedir(fh)
        return 0

    def fsyncdir(self, path: str | None, datasync: int, fh: int) -> int:
        self._delay(path, fh)
        self._store.fsyncdir(fh)
        return 0

    def unlink(self, path: str) -> int:
        self._store.unlink(path)
        return 0

    def rename(self, old: str, new: str, flags: int = 0) -> int:
        self._store.rename(old, new, flags)
        return 0

    def link(self, target: str, source: str) -> int:
        # mfusepy's order: the new name first, then the existing file.
        self._store.link(target, source)
        return 0

    def symlink(self, target: str, source: str) -> int:
        # mfusepy's order: the link's path first, then what it points at.
        uid, gid = self._caller()
        self._store.symlink(target, source, uid, gid)
        return 0

    def readlink(self, path: str) -> str:
        return self._store.readlink(path)

    def mknod(self, path: str, mode: int, dev: int) -> int:
        raise OSError(errno.EPERM, "lazyfs holds regular files, directories and symlinks")

    def create(self, path: str, mode: int, flags: int) -> int:
        uid, gid = self._caller()
        fh = self._store.create(path, mode, flags, uid, gid)
        self._opened[fh] = path
        return fh

    def open(self, path: str, flags: int) -> int:
        fh = self._store.open(path, flags)
        self._opened[fh] = path
        return fh

    def read(self, path: str | None, size: int, offset: int, fh: int) -> bytes:
        return self._store.read(fh, size, offset)

    def write(self, path: str | None, data: bytes, offset: int, fh: int) -> int:
        return self._store.write(fh, data, offset)

    def truncate(self, path: str | None, length: int, fh: int | None = None) -> int:
        self._store.truncate(path, length, fh)
        return 0

    def flush(self, path: str | None, fh: int) -> int:
        return 0

    def release(self, path: str | None, fh: int) -> int:
        self._opened.pop(fh, None)
        self._store.release(fh)
        return 0

    def fsync(self, path: str | None, datasync: int, fh: int) -> int:
        self._delay(path, fh)
        self._store.fsync(fh)
        return 0


def serve(
    store: LazyStore,
    mountpoint: Path,
    on_mounted: Callable[[], None],
    delays: FsyncDelays | None = None,
    allow_other: bool = False,
) -> None:
    """Mount ``store`` on ``mountpoint`` and serve it (multi-threaded) until unmounted.

    ``on_mounted`` is called once the kernel has the mount; ``delays`` slow fsyncs down by
    path; ``allow_other`` lets users other than the mounting one in (a container's user
    through a bind mount), with the kernel checking each file's mode bits
    (``default_permissions``). Raises ``RuntimeError`` if libfuse fails (e.g. no
    ``/dev/fuse``)."""
    log.info("lazyfs mounting mountpoint=%s backing=%s", mountpoint, store.backing)
    others = {"allow_other": True, "default_permissions": True} if allow_other else {}
    _Fuse(
        _Operations(store, on_mounted, delays or FsyncDelays()),
        str(mountpoint),
        foreground=True,
        fsname="lazyfs",
        subtype="lazyfs",
        **others,
    )
