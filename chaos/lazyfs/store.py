"""The power-loss model behind LazyFS: what a process sees, and what survives a crash.

A :class:`LazyStore` keeps two states of one directory tree:

* the **durable store**, a plain directory on the host (``backing``): exactly what was
  synced. Regular files there are hard links to one internal file per inode
  (``backing/.lazyfs/inodes/<ino>``), so a file's synced data has an identity apart from
  its names, as an inode has on a real disk; a directory that no durable entry names yet
  waits in ``backing/.lazyfs/dirs/<ino>``. Nothing under ``.lazyfs`` survives a crash: it
  is what a power loss leaves unreachable.
* the **live state**, in memory: the whole namespace (directories, their entries, the
  inodes they name) and, per file, the pages written since its last ``fsync`` and its
  size. Reads see the live state (a process sees its own writes).

What makes what durable (the model of POSIX that Jepsen's LazyFS uses, stricter than
ext4's ``data=ordered``):

* ``fsync``/``fdatasync`` of a file: its data and size. Not its name: a created file
  becomes reachable after a crash only once its directory is fsynced.
* ``fsync`` of a directory (``fsyncdir``): its entries. Each durable entry then names
  the inode the live entry names, with whatever that inode had synced. A directory's
  entries are durable independently of its own entry in its parent.
* nothing else: not ``close``, not time. Metadata (mode, owner, times) is not modelled:
  ``chmod``/``chown`` reach the durable inode at once, times live in memory only.

:meth:`LazyStore.crash` drops the live state: every open handle becomes stale (EIO), the
internal directory is removed and the live state is read anew from the durable store.
Thread-safe: one lock serialises every operation.
"""

# Over 600 lines: one power-loss model: LazyStore changes its durable and unsynced states together.
from __future__ import annotations

import errno
import logging
import os
import shutil
import stat
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "INTERNAL_DIR",
    "PAGE_SIZE",
    "RENAME_EXCHANGE",
    "RENAME_NOREPLACE",
    "DirEntry",
    "FileAttributes",
    "LazyStore",
    "Unsynced",
]

log = logging.getLogger(__name__)

PAGE_SIZE = 64 * 1024
"""Unsynced data is kept in pages of this size (a page's untouched bytes are read from the
durable store when it is first written)."""

INTERNAL_DIR = ".lazyfs"
"""The durable store's internal directory; reserved: the live root cannot name it."""

RENAME_NOREPLACE = 1
"""``renameat2`` flag (Linux's value): fail with ``EEXIST`` rather than replace the new name."""
RENAME_EXCHANGE = 2
"""``renameat2`` flag (Linux's value): swap the two names atomically; both must exist."""
UTIME_NOW = (1 << 30) - 1
UTIME_OMIT = (1 << 30) - 2
ROOT_INO = 1


@dataclass(frozen=True, slots=True)
class FileAttributes:
    """What ``stat`` shows of one inode in the live state."""

    ino: int
    mode: int
    nlink: int
    size: int
    uid: int
    gid: int
    atime_ns: int
    mtime_ns: int
    ctime_ns: int


@dataclass(frozen=True, slots=True)
class DirEntry:
    """One name in a directory listing."""

    name: str
    mode: int
    ino: int


@dataclass(frozen=True, slots=True)
class Unsynced:
    """The live state a crash would drop (or, returned by :meth:`LazyStore.crash`, dropped).

    ``unsynced_bytes``: bytes written and not fsynced; ``files``: files whose data or size
    differ from the durable store; ``directories``: directories whose entries changed since
    their last fsync; ``open_handles``: handles a crash makes stale; ``crashes``: crashes
    so far (a ``status`` after a crash sent by signal shows that it happened)."""

    unsynced_bytes: int
    files: int
    directories: int
    open_handles: int
    crashes: int


class _Inode:
    __slots__ = ("atime_ns", "ctime_ns", "gid", "ino", "mode", "mtime_ns", "nlink", "uid")

    def __init__(self, ino: int, mode: int, uid: int, gid: int, now_ns: int) -> None:
        self.ino = ino
        self.mode = mode
        self.uid = uid
        self.gid = gid
        self.atime_ns = now_ns
        self.mtime_ns = now_ns
        self.ctime_ns = now_ns
        self.nlink = 0


class _Page:
    """One page of unsynced data: its whole live content, and the range written into it."""

    __slots__ = ("buf", "hi", "lo")

    def __init__(self, buf: bytearray) -> None:
        self.buf = buf
        self.lo = PAGE_SIZE
        self.hi = 0


class _File(_Inode):
    """A regular file: its durable data is ``.lazyfs/inodes/<ino>`` (``durable_size``
    bytes); durable bytes at or past ``floor`` were cut by an unsynced truncate and read as
    zeros; ``pages`` hold what was written since the last sync; ``size`` is the live size.
    Invariants: ``floor <= durable_size``, ``floor <= size``, page bytes past ``size`` are
    zero."""

    __slots__ = ("backing_ino", "durable_size", "fd", "floor", "open_count", "pages", "size")

    def __init__(
        self, ino: int, mode: int, uid: int, gid: int, now_ns: int, backing_ino: int, size: int
    ) -> None:
        super().__init__(ino, mode, uid, gid, now_ns)
        self.backing_ino = backing_ino
        self.size = size
        self.durable_size = size
        self.floor = size
        self.pages: dict[int, _Page] = {}
        self.fd: int | None = None
        self.open_count = 0

    def unsynced(self) -> bool:
        return bool(self.pages) or self.floor != self.durable_size or self.size != self.floor

    def unsynced_bytes(self) -> int:
        written = sum(max(0, page.hi - page.lo) for page in self.pages.values())
        return written + (self.durable_size - self.floor)


class _Dir(_Inode):
    """A directory: live ``entries``; where its durable twin is (``durable_parent`` and
    ``durable_name``, or detached under ``.lazyfs/dirs``, or the root); the directories
    durably inside that twin (``durable_children``); whether entries changed since the
    last fsync (``dirty``)."""

    __slots__ = (
        "dirty",
        "durable_children",
        "durable_name",
        "durable_parent",
        "entries",
        "open_count",
    )

    def __init__(self, ino: int, mode: int, uid: int, gid: int, now_ns: int) -> None:
        super().__init__(ino, mode, uid, gid, now_ns)
        self.entries: dict[str, _Inode] = {}
        self.durable_parent: _Dir | None = None
        self.durable_name = ""
        self.durable_children: dict[str, _Dir] = {}
        self.dirty = False
        self.open_count = 0


class _Symlink(_Inode):
    __slots__ = ("target",)

    def __init__(self, ino: int, mode: int, uid: int, gid: int, now_ns: int, target: str) -> None:
        super().__init__(ino, mode, uid, gid, now_ns)
        self.target = target


@dataclass(slots=True)
class _Handle:
    inode: _Inode
    flags: int


def _own(target: str | int, uid: int, gid: int) -> None:
    """Give a new durable inode its creator's owner, so that it still has it when a crash
    reloads the tree from the durable store (a mount used by another user, e.g. a
    container's). Only root can; a mount of one user needs no such thing."""
    if os.geteuid() == 0:
        os.chown(target, uid, gid)


def _error(code: int, what: str = "") -> OSError:
    return OSError(code, os.strerror(code), what) if what else OSError(code, os.strerror(code))


class LazyStore:
    """The live state over a durable store in ``backing``; every method may raise ``OSError``
    with the errno a file system would give (``EIO`` for a handle a crash made stale)."""

    def __init__(self, backing: Path) -> None:
        self._backing = Path(os.path.abspath(backing))
        self._internal = self._backing / INTERNAL_DIR
        self._lock = threading.RLock()
        self._next_ino = ROOT_INO + 1
        self._next_fh = 1
        self._handles: dict[int, _Handle] = {}
        self._crashes = 0
        self._closed = False
        self._backing.mkdir(parents=True, exist_ok=True)
        self._root = self._load()

    @property
    def backing(self) -> Path:
        """The durable store's directory."""
        return self._backing

    # -- loading -----------------------------------------------------------------------

    def _new_ino(self) -> int:
        ino = self._next_ino
        self._next_ino += 1
        return ino

    def _inode_path(self, ino: int) -> str:
        return os.path.join(self._internal, "inodes", str(ino))

    def _detached_path(self, ino: int) -> str:
        return os.path.join(self._internal, "dirs", str(ino))

    def _load(self) -> _Dir:
        """Read the live state from the durable store (and start a fresh internal dir)."""
        if self._internal.exists():
            shutil.rmtree(self._internal)
        (self._internal / "inodes").mkdir(parents=True)
        (self._internal / "dirs").mkdir()
        now_ns = time.time_ns()
        st = os.stat(self._backing)
        root = _Dir(ROOT_INO, st.st_mode, st.st_uid, st.st_gid, now_ns)
        self._root = root
        files: dict[int, _File] = {}
        stack: list[tuple[_Dir, str]] = [(root, str(self._backing))]
        while stack:
            directory, path = stack.pop()
            with os.scandir(path) as scan:
                found = list(scan)
            for entry in found:
                if directory is root and entry.name == INTERNAL_DIR:
                    continue
                st = entry.stat(follow_symlinks=False)
                child: _Inode
                if stat.S_ISDIR(st.st_mode):
                    sub = _Dir(self._new_ino(), st.st_mode, st.st_uid, st.st_gid, now_ns)
                    sub.durable_parent = directory
                    sub.durable_name = entry.name
                    directory.durable_children[entry.name] = sub
                    stack.append((sub, entry.path))
                    child = sub
                elif stat.S_ISREG(st.st_mode):
                    known = files.get(st.st_ino)
                    if known is None:
                        known = _File(
                            self._new_ino(),
                            st.st_mode,
                            st.st_uid,
                            st.st_gid,
                            now_ns,
                            st.st_ino,
                            st.st_size,
                        )
                        os.link(entry.path, self._inode_path(known.ino))
                        files[st.st_ino] = known
                    child = known
                elif stat.S_ISLNK(st.st_mode):
                    target = os.readlink(entry.path)
                    child = _Symlink(
                        self._new_ino(), st.st_mode, st.st_uid, st.st_gid, now_ns, target
                    )
                else:
                    log.warning("lazyfs ignores path=%s mode=%o", entry.path, st.st_mode)
                    continue
                child.atime_ns = st.st_atime_ns
                child.mtime_ns = st.st_mtime_ns
                child.ctime_ns = st.st_ctime_ns
                child.nlink += 1
                directory.entries[entry.name] = child
        log.info(
            "lazyfs loaded backing=%s files=%d next_ino=%d",
            self._backing,
            len(files),
            self._next_ino,
        )
        return root

    # -- resolution --------------------------------------------------------------------

    def _resolve(self, path: str) -> _Inode:
        node: _Inode = self._root
        for part in path.split("/"):
            if not part:
                continue
            if not isinstance(node, _Dir):
                raise _error(errno.ENOTDIR, path)
            child = node.entries.get(part)
            if child is None:
                raise _error(errno.ENOENT, path)
            node = child
        return node

    def _resolve_parent(self, path: str) -> tuple[_Dir, str]:
        head, _, name = path.rstrip("/").rpartition("/")
        if not name:
            raise _error(errno.EBUSY, path)
        parent = self._resolve(head)
        if not isinstance(parent, _Dir):
            raise _error(errno.ENOTDIR, path)
        return parent, name

    def _check_new_name(self, parent: _Dir, name: str) -> None:
        if parent is self._root and name == INTERNAL_DIR:
            raise _error(errno.EPERM, f"{name} is reserved by lazyfs")
        if name in parent.entries:
            raise _error(errno.EEXIST, name)

    def _handle(self, fh: int) -> _Handle:
        handle = self._handles.get(fh)
        if handle is None:
            raise _error(errno.EIO, f"stale handle {fh}")
        return handle

    def _file_handle(self, fh: int) -> _File:
        inode = self._handle(fh).inode
        if not isinstance(inode, _File):
            raise _error(errno.EISDIR)
        return inode

    def _inode_of(self, path: str | None, fh: int | None) -> _Inode:
        if fh is not None:
            return self._handle(fh).inode
        if path is None:
            raise _error(errno.EIO, "neither path nor handle")
        return self._resolve(path)

    def _add_handle(self, inode: _Inode, flags: int) -> int:
        fh = self._next_fh
        self._next_fh += 1
        self._handles[fh] = _Handle(inode, flags)
        return fh

    @staticmethod
    def _touch_dir(directory: _Dir) -> None:
        now_ns = time.time_ns()
        directory.mtime_ns = now_ns
        directory.ctime_ns = now_ns
        directory.dirty = True

    # -- attributes --------------------------------------------------------------------

    def getattr(self, path: str | None, fh: int | None = None) -> FileAttributes:
        """``stat`` of the inode a handle or (without one) a path names."""
        with self._lock:
            inode = self._inode_of(path, fh)
            if isinstance(inode, _Dir):
                nlink = 2 + sum(1 for c in inode.entries.values() if isinstance(c, _Dir))
                size = 4096
            elif isinstance(inode, _File):
                nlink = inode.nlink
                size = inode.size
            else:
                assert isinstance(inode, _Symlink)
                nlink = inode.nlink
                size = len(os.fsencode(inode.target))
            return FileAttributes(
                ino=inode.ino,
                mode=inode.mode,
                nlink=nlink,
                size=size,
                uid=inode.uid,
                gid=inode.gid,
                atime_ns=inode.atime_ns,
                mtime_ns=inode.mtime_ns,
                ctime_ns=inode.ctime_ns,
            )

    def chmod(self, path: str | None, mode: int) -> None:
        """Change the permission bits (durable at once: metadata is not modelled)."""
        with self._lock:
            if path is None:
                return
            inode = self._resolve(path)
            inode.mode = stat.S_IFMT(inode.mode) | stat.S_IMODE(mode)
            inode.ctime_ns = time.time_ns()
            if isinstance(inode, _File):
                os.chmod(self._inode_path(inode.ino), stat.S_IMODE(mode))
            elif isinstance(inode, _Dir):
                os.chmod(self._durable_path(inode), stat.S_IMODE(mode))

    def chown(self, path: str | None, uid: int, gid: int) -> None:
        """Change owner and group (-1 keeps one); durable at once."""
        with self._lock:
            if path is None:
                return
            inode = self._resolve(path)
            if uid != -1:
                inode.uid = uid
            if gid != -1:
                inode.gid = gid
            inode.ctime_ns = time.time_ns()
            if isinstance(inode, _File):
                os.chown(self._inode_path(inode.ino), uid, gid)
            elif isinstance(inode, _Dir):
                os.chown(self._durable_path(inode), uid, gid)

    def utimens(self, path: str | None, times_ns: tuple[int, int] | None) -> None:
        """Set access and modification times (in memory only); ``None``: now."""
        with self._lock:
            if path is None:
                return
            inode = self._resolve(path)
            now_ns = time.time_ns()
            atime_ns, mtime_ns = times_ns if times_ns is not None else (now_ns, now_ns)
            if atime_ns != UTIME_OMIT:
                inode.atime_ns = now_ns if atime_ns == UTIME_NOW else atime_ns
            if mtime_ns != UTIME_OMIT:
                inode.mtime_ns = now_ns if mtime_ns == UTIME_NOW else mtime_ns
            inode.ctime_ns = now_ns

    def statfs(self) -> os.statvfs_result:
        """The durable store's file system figures."""
        return os.statvfs(self._backing)

    # -- directories -------------------------------------------------------------------

    def mkdir(self, path: str, mode: int, uid: int, gid: int) -> None:
        """Create a directory (its entry durable once its parent is fsynced)."""
        with self._lock:
            parent, name = self._resolve_parent(path)
            self._check_new_name(parent, name)
            directory = _Dir(
                self._new_ino(), stat.S_IFDIR | stat.S_IMODE(mode), uid, gid, time.time_ns()
            )
            detached = self._detached_path(directory.ino)
            os.mkdir(detached)
            os.chmod(detached, stat.S_IMODE(mode))
            _own(detached, uid, gid)
            directory.nlink = 1
            parent.entries[name] = directory
            self._touch_dir(parent)

    def rmdir(self, path: str) -> None:
        """Remove an empty directory."""
        with self._lock:
            parent, name = self._resolve_parent(path)
            inode = parent.entries.get(name)
            if inode is None:
                raise _error(errno.ENOENT, path)
            if not isinstance(inode, _Dir):
                raise _error(errno.ENOTDIR, path)
            if inode.entries:
                raise _error(errno.ENOTEMPTY, path)
            del parent.entries[name]
            inode.nlink = 0
            self._touch_dir(parent)

    def opendir(self, path: str) -> int:
        """A handle on a directory (for ``readdir`` and ``fsyncdir``)."""
        with self._lock:
            inode = self._resolve(path)
            if not isinstance(inode, _Dir):
                raise _error(errno.ENOTDIR, path)
            inode.open_count += 1
            return self._add_handle(inode, os.O_RDONLY)

    def readdir(self, fh: int) -> list[DirEntry]:
        """The live entries of the directory ``fh`` names, ``.`` and ``..`` first."""
        with self._lock:
            inode = self._handle(fh).inode
            if not isinstance(inode, _Dir):
                raise _error(errno.ENOTDIR)
            listing = [DirEntry(".", inode.mode, inode.ino), DirEntry("..", stat.S_IFDIR, ROOT_INO)]
            listing.extend(DirEntry(n, c.mode, c.ino) for n, c in inode.entries.items())
            return listing

    def releasedir(self, fh: int) -> None:
        """Close a directory handle (a stale one is ignored)."""
        with self._lock:
            handle = self._handles.pop(fh, None)
            if handle is not None and isinstance(handle.inode, _Dir):
                handle.inode.open_count -= 1

    def fsyncdir(self, fh: int) -> None:
        """Make the directory's entries durable, each naming its live inode."""
        with self._lock:
            inode = self._handle(fh).inode
            if not isinstance(inode, _Dir):
                raise _error(errno.ENOTDIR)
            self._sync_dir(inode)

    # -- names -------------------------------------------------------------------------

    def unlink(self, path: str) -> None:
        """Remove a name of a file or symlink."""
        with self._lock:
            parent, name = self._resolve_parent(path)
            inode = parent.entries.get(name)
            if inode is None:
                raise _error(errno.ENOENT, path)
            if isinstance(inode, _Dir):
                raise _error(errno.EISDIR, path)
            del parent.entries[name]
            inode.nlink -= 1
            inode.ctime_ns = time.time_ns()
            self._touch_dir(parent)
            self._maybe_forget(inode)

    def rename(self, old: str, new: str, flags: int = 0) -> None:
        """``renameat2``: move a name (``RENAME_NOREPLACE``, ``RENAME_EXCHANGE`` honoured)."""
        with self._lock:
            if flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE) or flags == (
                RENAME_NOREPLACE | RENAME_EXCHANGE
            ):
                raise _error(errno.EINVAL, "rename flags")
            old_parent, old_name = self._resolve_parent(old)
            new_parent, new_name = self._resolve_parent(new)
            source = old_parent.entries.get(old_name)
            if source is None:
                raise _error(errno.ENOENT, old)
            if new_parent is self._root and new_name == INTERNAL_DIR:
                raise _error(errno.EPERM, f"{new_name} is reserved by lazyfs")
            target = new_parent.entries.get(new_name)
            old_key = old.rstrip("/")
            new_key = new.rstrip("/")
            if isinstance(source, _Dir) and new_key.startswith(old_key + "/"):
                raise _error(errno.EINVAL, new)
            now_ns = time.time_ns()
            if flags & RENAME_EXCHANGE:
                if target is None:
                    raise _error(errno.ENOENT, new)
                if isinstance(target, _Dir) and old_key.startswith(new_key + "/"):
                    raise _error(errno.EINVAL, old)
                old_parent.entries[old_name] = target
                new_parent.entries[new_name] = source
                self._touch_dir(old_parent)
                self._touch_dir(new_parent)
                source.ctime_ns = target.ctime_ns = now_ns
                return
            if target is source:
                return
            if target is not None:
                if flags & RENAME_NOREPLACE:
                    raise _error(errno.EEXIST, new)
                if isinstance(source, _Dir):
                    if not isinstance(target, _Dir):
                        raise _error(errno.ENOTDIR, new)
                    if target.entries:
                        raise _error(errno.ENOTEMPTY, new)
                elif isinstance(target, _Dir):
                    raise _error(errno.EISDIR, new)
                target.nlink -= 1
                target.ctime_ns = now_ns
            del old_parent.entries[old_name]
            new_parent.entries[new_name] = source
            source.ctime_ns = now_ns
            self._touch_dir(old_parent)
            self._touch_dir(new_parent)
            if target is not None:
                if isinstance(target, _Dir):
                    target.nlink = 0
                else:
                    self._maybe_forget(target)

    def link(self, new: str, existing: str) -> None:
        """Add a hard link ``new`` to the file ``existing``."""
        with self._lock:
            inode = self._resolve(existing)
            if isinstance(inode, _Dir):
                raise _error(errno.EPERM, existing)
            parent, name = self._resolve_parent(new)
            self._check_new_name(parent, name)
            parent.entries[name] = inode
            inode.nlink += 1
            inode.ctime_ns = time.time_ns()
            self._touch_dir(parent)

    def symlink(self, path: str, target: str, uid: int, gid: int) -> None:
        """Create the symbolic link ``path`` pointing at ``target``."""
        with self._lock:
            parent, name = self._resolve_parent(path)
            self._check_new_name(parent, name)
            inode = _Symlink(
                self._new_ino(), stat.S_IFLNK | 0o777, uid, gid, time.time_ns(), target
            )
            inode.nlink = 1
            parent.entries[name] = inode
            self._touch_dir(parent)

    def readlink(self, path: str) -> str:
        """The target of a symbolic link."""
        with self._lock:
            inode = self._resolve(path)
            if not isinstance(inode, _Symlink):
                raise _error(errno.EINVAL, path)
            return inode.target

    # -- files -------------------------------------------------------------------------

    def create(self, path: str, mode: int, flags: int, uid: int, gid: int) -> int:
        """``open(O_CREAT)``: a handle on a new (or, without ``O_EXCL``, the existing) file."""
        with self._lock:
            parent, name = self._resolve_parent(path)
            existing = parent.entries.get(name)
            if existing is not None:
                if flags & os.O_EXCL:
                    raise _error(errno.EEXIST, path)
                return self._open_inode(existing, flags, path)
            self._check_new_name(parent, name)
            ino = self._new_ino()
            fd = os.open(
                self._inode_path(ino), os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600
            )
            os.fchmod(fd, stat.S_IMODE(mode))
            _own(fd, uid, gid)
            inode = _File(
                ino,
                stat.S_IFREG | stat.S_IMODE(mode),
                uid,
                gid,
                time.time_ns(),
                os.fstat(fd).st_ino,
                0,
            )
            inode.fd = fd
            inode.nlink = 1
            parent.entries[name] = inode
            self._touch_dir(parent)
            inode.open_count += 1
            return self._add_handle(inode, flags)

    def open(self, path: str, flags: int) -> int:
        """A handle on an existing file (``O_TRUNC`` truncates, unsynced)."""
        with self._lock:
            return self._open_inode(self._resolve(path), flags, path)

    def _open_inode(self, inode: _Inode, flags: int, path: str) -> int:
        if isinstance(inode, _Dir):
            raise _error(errno.EISDIR, path)
        if not isinstance(inode, _File):
            raise _error(errno.ELOOP, path)
        if flags & os.O_TRUNC:
            self._truncate(inode, 0)
        inode.open_count += 1
        return self._add_handle(inode, flags)

    def release(self, fh: int) -> None:
        """Close a file handle (a stale one is ignored)."""
        with self._lock:
            handle = self._handles.pop(fh, None)
            if handle is None or not isinstance(handle.inode, _File):
                return
            inode = handle.inode
            inode.open_count -= 1
            if inode.open_count == 0:
                self._close_fd(inode)
                self._maybe_forget(inode)

    def read(self, fh: int, size: int, offset: int) -> bytes:
        """Up to ``size`` bytes at ``offset`` of the live content."""
        with self._lock:
            inode = self._file_handle(fh)
            end = min(offset + size, inode.size)
            if offset >= end:
                return b""
            durable_end = min(end, inode.floor)
            fd = self._fd(inode)
            if not inode.pages and durable_end == end:
                data = os.pread(fd, end - offset, offset)
                return data if len(data) == end - offset else data.ljust(end - offset, b"\0")
            out = bytearray(end - offset)
            if durable_end > offset:
                chunk = os.pread(fd, durable_end - offset, offset)
                out[: len(chunk)] = chunk
            first, last = offset // PAGE_SIZE, (end - 1) // PAGE_SIZE
            if len(inode.pages) < last - first + 1:
                numbers: Iterator[int] = (p for p in inode.pages if first <= p <= last)
            else:
                numbers = (p for p in range(first, last + 1) if p in inode.pages)
            for number in numbers:
                page = inode.pages[number]
                start = number * PAGE_SIZE
                a, b = max(offset, start), min(end, start + PAGE_SIZE)
                out[a - offset : b - offset] = page.buf[a - start : b - start]
            return bytes(out)

    def write(self, fh: int, data: bytes, offset: int) -> int:
        """Write ``data`` at ``offset`` into the file's unsynced pages; returns its length."""
        with self._lock:
            inode = self._file_handle(fh)
            view = memoryview(data)
            end = offset + len(data)
            position = offset
            while position < end:
                number = position // PAGE_SIZE
                start = number * PAGE_SIZE
                a = position - start
                b = min(PAGE_SIZE, end - start)
                chunk = view[position - offset : position - offset + b - a]
                page = inode.pages.get(number)
                if page is None:
                    if a == 0 and b == PAGE_SIZE:
                        page = _Page(bytearray(chunk))  # a whole page: nothing to read first
                    else:
                        page = _Page(self._base_page(inode, start))
                        page.buf[a:b] = chunk
                    inode.pages[number] = page
                else:
                    page.buf[a:b] = chunk
                page.lo = min(page.lo, a)
                page.hi = max(page.hi, b)
                position = start + b
            inode.size = max(inode.size, end)
            now_ns = time.time_ns()
            inode.mtime_ns = now_ns
            inode.ctime_ns = now_ns
            return len(data)

    def _base_page(self, inode: _File, start: int) -> bytearray:
        """A page's content before this write: durable bytes below ``floor``, zeros above."""
        buf = bytearray(PAGE_SIZE)
        if start < inode.floor:
            chunk = os.pread(self._fd(inode), min(PAGE_SIZE, inode.floor - start), start)
            buf[: len(chunk)] = chunk
        return buf

    def truncate(self, path: str | None, length: int, fh: int | None = None) -> None:
        """Set the live size of a file (unsynced until an fsync of the file)."""
        with self._lock:
            inode = self._inode_of(path, fh)
            if isinstance(inode, _Dir):
                raise _error(errno.EISDIR, path or "")
            if not isinstance(inode, _File):
                raise _error(errno.EINVAL, path or "")
            if length < 0:
                raise _error(errno.EINVAL, path or "")
            self._truncate(inode, length)

    @staticmethod
    def _truncate(inode: _File, length: int) -> None:
        if length < inode.size:
            for number in [n for n in inode.pages if n * PAGE_SIZE >= length]:
                del inode.pages[number]
            number, cut = divmod(length, PAGE_SIZE)
            page = inode.pages.get(number)
            if page is not None and cut:
                page.buf[cut:] = bytes(PAGE_SIZE - cut)
                page.hi = min(page.hi, cut)
                page.lo = min(page.lo, page.hi)
            inode.floor = min(inode.floor, length)
        inode.size = length
        now_ns = time.time_ns()
        inode.mtime_ns = now_ns
        inode.ctime_ns = now_ns

    def fsync(self, fh: int) -> None:
        """``fsync``/``fdatasync``: make the file's data and size durable (not its names)."""
        with self._lock:
            self._sync_file(self._file_handle(fh))

    # -- control -----------------------------------------------------------------------

    def status(self) -> Unsynced:
        """What a crash now would drop."""
        with self._lock:
            files = self._live_files()
            directories = list(self._live_dirs())
            return Unsynced(
                unsynced_bytes=sum(f.unsynced_bytes() for f in files),
                files=sum(1 for f in files if f.unsynced()),
                directories=sum(1 for d in directories if d.dirty),
                open_handles=len(self._handles),
                crashes=self._crashes,
            )

    def crash(self) -> Unsynced:
        """Power loss: drop every unsynced write and directory change, make every handle
        stale, and read the live state anew from the durable store. Returns what it dropped."""
        with self._lock:
            before = self.status()
            for inode in self._live_files():
                self._close_fd(inode)
            self._handles.clear()
            self._crashes += 1
            self._root = self._load()
            dropped = Unsynced(
                unsynced_bytes=before.unsynced_bytes,
                files=before.files,
                directories=before.directories,
                open_handles=before.open_handles,
                crashes=self._crashes,
            )
            log.info(
                "lazyfs crash dropped_bytes=%d files=%d directories=%d stale_handles=%d",
                dropped.unsynced_bytes,
                dropped.files,
                dropped.directories,
                dropped.open_handles,
            )
            return dropped

    def sync_all(self) -> None:
        """Make the whole live state durable (as ``sync`` and a clean unmount would)."""
        with self._lock:
            for inode in self._live_files():
                self._sync_file(inode)
                if inode.open_count == 0:
                    self._close_fd(inode)
            for directory in self._live_dirs():
                self._sync_dir(directory)

    def close(self, sync: bool = True) -> None:
        """Stop: sync everything (unless ``sync`` is false: then it is a crash) and remove
        the internal directory, leaving the durable store a plain tree."""
        with self._lock:
            if self._closed:
                return
            if sync:
                self.sync_all()
            for inode in self._live_files():
                self._close_fd(inode)
            self._handles.clear()
            shutil.rmtree(self._internal, ignore_errors=True)
            self._closed = True

    # -- durability internals ----------------------------------------------------------

    def _fd(self, inode: _File) -> int:
        if inode.fd is None:
            inode.fd = os.open(self._inode_path(inode.ino), os.O_RDWR | os.O_CLOEXEC)
        return inode.fd

    @staticmethod
    def _close_fd(inode: _File) -> None:
        if inode.fd is not None:
            os.close(inode.fd)
            inode.fd = None

    def _maybe_forget(self, inode: _Inode) -> None:
        """A file with no live name and no open handle: drop its unsynced data, and its
        internal link unless a durable name still needs its synced data."""
        if not isinstance(inode, _File) or inode.nlink > 0 or inode.open_count > 0:
            return
        inode.pages.clear()
        self._close_fd(inode)
        path = self._inode_path(inode.ino)
        try:
            if os.stat(path).st_nlink == 1:
                os.unlink(path)
        except FileNotFoundError:
            pass

    def _sync_file(self, inode: _File) -> None:
        if not inode.unsynced():
            return
        fd = self._fd(inode)
        durable_size = inode.durable_size
        if inode.floor < durable_size:
            os.ftruncate(fd, inode.floor)
            durable_size = inode.floor
        for number, page in inode.pages.items():
            start = number * PAGE_SIZE
            hi = min(page.hi, inode.size - start)
            if hi > page.lo:
                os.pwrite(fd, memoryview(page.buf)[page.lo : hi], start + page.lo)
                durable_size = max(durable_size, start + hi)
        if durable_size != inode.size:
            os.ftruncate(fd, inode.size)
        inode.pages.clear()
        inode.durable_size = inode.floor = inode.size

    def _durable_path(self, directory: _Dir) -> str:
        names: list[str] = []
        node = directory
        while node is not self._root:
            parent = node.durable_parent
            if parent is None:
                return os.path.join(self._detached_path(node.ino), *reversed(names))
            names.append(node.durable_name)
            node = parent
        return os.path.join(self._backing, *reversed(names))

    def _sync_dir(self, directory: _Dir) -> None:
        """Make the durable twin's entries those of the live directory."""
        path = self._durable_path(directory)
        with os.scandir(path) as scan:
            durable = {e.name: e for e in scan}
        if directory is self._root:
            durable.pop(INTERNAL_DIR, None)
        matched: set[str] = set()
        for name, entry in durable.items():
            live = directory.entries.get(name)
            if live is not None and self._same(directory, name, entry, live):
                matched.add(name)
            else:
                self._remove_durable(directory, name, entry)
        for name, live in directory.entries.items():
            if name not in matched:
                self._add_durable(directory, name, live)
        directory.dirty = False

    @staticmethod
    def _same(directory: _Dir, name: str, entry: os.DirEntry[str], live: _Inode) -> bool:
        if isinstance(live, _Dir):
            return directory.durable_children.get(name) is live
        if isinstance(live, _File):
            # lstat, not DirEntry.inode(): overlayfs may list another inode number than stat.
            st = entry.stat(follow_symlinks=False)
            return stat.S_ISREG(st.st_mode) and st.st_ino == live.backing_ino
        assert isinstance(live, _Symlink)
        return entry.is_symlink() and os.readlink(entry.path) == live.target

    def _remove_durable(self, directory: _Dir, name: str, entry: os.DirEntry[str]) -> None:
        child = directory.durable_children.pop(name, None)
        if child is not None:
            os.rename(entry.path, self._detached_path(child.ino))
            child.durable_parent = None
            child.durable_name = ""
        else:
            os.unlink(entry.path)

    def _add_durable(self, directory: _Dir, name: str, live: _Inode) -> None:
        if isinstance(live, _File):
            os.link(self._inode_path(live.ino), os.path.join(self._durable_path(directory), name))
        elif isinstance(live, _Symlink):
            os.symlink(live.target, os.path.join(self._durable_path(directory), name))
        else:
            assert isinstance(live, _Dir)
            source = self._durable_path(live)
            if (self._durable_path(directory) + "/").startswith(source + "/"):
                # The live tree moved a directory into its own durable descendant: detach
                # the descendant first (its durable entry goes early; see the decision record).
                self._detach(directory)
            if live.durable_parent is not None:
                # Taken from its old durable parent: rename is atomic on the disks we model.
                del live.durable_parent.durable_children[live.durable_name]
            os.rename(source, os.path.join(self._durable_path(directory), name))
            live.durable_parent = directory
            live.durable_name = name
            directory.durable_children[name] = live

    def _detach(self, directory: _Dir) -> None:
        parent = directory.durable_parent
        if parent is None:
            return
        source = self._durable_path(directory)
        del parent.durable_children[directory.durable_name]
        os.rename(source, self._detached_path(directory.ino))
        directory.durable_parent = None
        directory.durable_name = ""

    def _live_dirs(self) -> Iterator[_Dir]:
        """Every live directory reachable from the root, parents first."""
        stack = [self._root]
        while stack:
            directory = stack.pop()
            yield directory
            stack.extend(c for c in directory.entries.values() if isinstance(c, _Dir))

    def _live_files(self) -> list[_File]:
        """Every file with a live name or an open handle, once each."""
        seen: dict[int, _File] = {}
        for directory in self._live_dirs():
            for child in directory.entries.values():
                if isinstance(child, _File):
                    seen[child.ino] = child
        for handle in self._handles.values():
            if isinstance(handle.inode, _File):
                seen[handle.inode.ino] = handle.inode
        return list(seen.values())
