"""Reading beneath a directory without following a symlink out of it.

A tool that needs no permission (the git read tools, and anything else that reads the workspace
on the host) must never reveal a file outside the workspace, whatever a sandbox has planted in
it: a symlinked file or directory pointing out, `/proc/self/root`, a directory swapped for a
symlink in the middle of a call. Checking a path first and opening it afterwards loses that
race, so resolution happens in the kernel, relative to a descriptor of the root:

* `openat2(2)` with `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS` (Linux 5.6), plus
  `RESOLVE_NO_SYMLINKS` unless symlinks that stay beneath the root are wanted;
* where openat2 is missing (older kernels, a seccomp profile that refuses it), a walk that opens
  one component at a time with `O_NOFOLLOW` relative to the directory opened before it, reading
  and resolving symlinks itself when they are wanted (an absolute target or a `..` above the
  root is refused, as RESOLVE_BENEATH refuses it).

`Beneath(root)` is the interface: `lstat`, `read`, `readlink` and `scandir` of relative paths,
each either answering about an entry that really is beneath the root or saying it is not there.
With `symlinks=False` (git's view of a work tree, where a path behind a symlinked directory is
simply not there) no component but the last may be a symlink; the last is reported, never
followed. Directory descriptors are cached, so walking an index of thousands of paths opens each
directory about once; at most `MAX_OPEN_DIRECTORIES` are held (the least recently used closed
first), so a tree of any size never runs the process out of descriptors. A directory swapped
while its descriptor is held does not change what the descriptor refers to.

Hard links are not refused: a sandbox can only link files that are already in the workspace
(links never cross the mount of a container or a WASI preopen, and the kernel's
protected_hardlinks keeps an unprivileged process from linking files it cannot write), so a
file with several links reveals nothing the workspace did not already hold.
"""

from __future__ import annotations

import collections
import ctypes
import errno
import os
import stat
import threading
from pathlib import Path
from typing import BinaryIO, Final

__all__ = [
    "Beneath",
    "NotBeneath",
    "check_pinned",
    "open_beneath",
    "open_root",
    "openat2_available",
]

_SYS_OPENAT2 = 437  # the same number on every architecture (the unified syscall table)
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_MAX_SYMLINKS = 40  # what the kernel allows in one lookup
MAX_OPEN_DIRECTORIES: Final = 64


class NotBeneath(OSError):
    """The path leaves the root, or passes through a symlink where none may be followed."""


class _OpenHow(ctypes.Structure):
    _fields_ = (
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    )


_libc = ctypes.CDLL(None, use_errno=True)
_openat2_missing = threading.Event()  # set once openat2 answered ENOSYS (or EPERM from seccomp)


def open_beneath(dir_fd: int, path: str | bytes, flags: int, *, symlinks: bool = False) -> int:
    """A descriptor for `path` resolved beneath `dir_fd`, or an OSError.

    `flags` are open(2) flags; O_CLOEXEC is always added. With `symlinks=False` no component
    may be a symlink (ELOOP, ENOTDIR); with `symlinks=True` symlinks are followed as long as
    they stay beneath (NotBeneath otherwise). Magic links (`/proc/self/root`) never resolve.
    """
    name = os.fsencode(path)
    if not name or name.startswith(b"/"):
        raise NotBeneath(errno.EXDEV, "not a relative path", os.fsdecode(name))
    flags |= os.O_CLOEXEC
    if not _openat2_missing.is_set():
        resolve = _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS
        if not symlinks:
            resolve |= _RESOLVE_NO_SYMLINKS
        how = _OpenHow(flags, 0, resolve)
        for _ in range(16):
            fd = _libc.syscall(_SYS_OPENAT2, dir_fd, name, ctypes.byref(how), ctypes.sizeof(how))
            if fd >= 0:
                return int(fd)
            code = ctypes.get_errno()
            if code == errno.EAGAIN:  # a rename raced the lookup: the kernel asks to retry
                continue
            if code in (errno.ENOSYS, errno.EPERM):
                _openat2_missing.set()
                break
            if code == errno.EXDEV:
                raise NotBeneath(code, "leaves the directory it is read beneath", os.fsdecode(name))
            raise OSError(code, os.strerror(code), os.fsdecode(name))
        else:
            raise OSError(errno.EAGAIN, "the directory kept changing", os.fsdecode(name))
    return _walk(dir_fd, name, flags, symlinks)


def open_root(path: str | os.PathLike[str]) -> int:
    """A descriptor for the directory at `path`, which paths are then resolved beneath.

    `path` must be absolute and have no symlink in it (a root is checked when it is configured
    and resolved then): the descriptor is compared with it after opening, and a path that now
    leads elsewhere, because a directory in it was swapped for a symlink since it was checked,
    raises NotBeneath. So a read root inside the workspace that a sandbox replaced with a link
    to `/` opens nothing. The descriptor pins the directory: what happens to the path later does
    not change what it refers to.
    """
    fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        check_pinned(fd, path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_pinned(fd: int, path: str | os.PathLike[str]) -> None:
    """Raise NotBeneath unless the kernel's name for the open `fd` is `path` (absolute, no
    symlink, normalised): the check that `open_root` and the sandboxes' roots rely on."""
    wanted = os.path.normpath(os.fspath(path))
    try:
        actual = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        actual = os.path.realpath(wanted)  # no /proc: the path's own resolution, checked now
    if actual != wanted:
        raise NotBeneath(
            errno.ELOOP,
            f"it leads to {actual} now (a directory in it was replaced by a symlink, or the "
            "path is not the resolved one)",
            wanted,
        )


def openat2_available() -> bool:
    """Whether this kernel (and any seccomp filter around us) lets openat2 resolve beneath, so
    that confinement is the kernel's and not the component walk's (what @landlock requires)."""
    if _openat2_missing.is_set():
        return False
    try:
        root = open_root("/")
    except OSError:
        return False
    how = _OpenHow(os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, 0, _RESOLVE_BENEATH)
    try:
        fd = _libc.syscall(_SYS_OPENAT2, root, b".", ctypes.byref(how), ctypes.sizeof(how))
    finally:
        os.close(root)
    if fd < 0:
        return False
    os.close(fd)
    return True


def _walk(dir_fd: int, path: bytes, flags: int, symlinks: bool) -> int:
    """openat2's resolution, one component at a time (see the module docstring)."""
    pending = [part for part in path.split(b"/") if part not in (b"", b".")]
    held: list[int] = []  # the directories walked through, so `..` can return to one
    current = dir_fd
    followed = 0
    try:
        while pending:
            part = pending.pop(0)
            if part == b"..":
                if not held:
                    raise NotBeneath(errno.EXDEV, "`..` leaves the directory", os.fsdecode(path))
                os.close(held.pop())
                current = held[-1] if held else dir_fd
                continue
            last = not pending
            try:
                fd = os.open(
                    part,
                    (flags if last else os.O_PATH | os.O_DIRECTORY) | os.O_NOFOLLOW | os.O_CLOEXEC,
                    dir_fd=current,
                )
            except OSError as exc:
                if not symlinks or exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                try:
                    target = os.readlink(part, dir_fd=current)
                except OSError:
                    raise exc from None  # not a symlink after all: a file where a dir should be
                followed += 1
                if followed > _MAX_SYMLINKS:
                    raise OSError(errno.ELOOP, "too many symlinks", os.fsdecode(path)) from None
                target_bytes = os.fsencode(target)
                if target_bytes.startswith(b"/"):
                    raise NotBeneath(
                        errno.EXDEV, "a symlink leads out of the directory", os.fsdecode(path)
                    ) from None
                pending[:0] = [p for p in target_bytes.split(b"/") if p not in (b"", b".")]
                continue
            if last:
                return fd
            held.append(fd)
            current = fd
        # The path named the starting directory itself (`a/..`).
        return os.open(".", flags | os.O_CLOEXEC, dir_fd=current)
    finally:
        for fd in held:
            os.close(fd)


class Beneath:
    """Entries of one directory tree, read without following a symlink out of it."""

    def __init__(self, root: str | os.PathLike[str], *, symlinks: bool = False) -> None:
        self.root = Path(root)
        self.symlinks = symlinks
        self._root_fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self._directories: collections.OrderedDict[bytes, int] = collections.OrderedDict()

    def close(self) -> None:
        for fd in self._directories.values():
            os.close(fd)
        self._directories.clear()
        if self._root_fd >= 0:
            os.close(self._root_fd)
            self._root_fd = -1

    def __enter__(self) -> Beneath:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def directory(self, path: str | bytes) -> int | None:
        """A descriptor of the directory at `path` (cached; closed with this object), or None
        when there is no real directory there beneath the root."""
        key = os.fsencode(path).strip(b"/")
        if not key:
            return self._root_fd
        cached = self._directories.get(key)
        if cached is not None:
            self._directories.move_to_end(key)
            return cached
        if self.symlinks:
            # A symlink may lead anywhere beneath the root, so it is resolved from the root.
            start, name = self._root_fd, key
        else:
            parent, _, name = key.rpartition(b"/")
            parent_fd = self.directory(parent)
            if parent_fd is None:
                return None
            start = parent_fd
        try:
            fd = open_beneath(start, name, os.O_RDONLY | os.O_DIRECTORY, symlinks=self.symlinks)
        except OSError:
            return None
        self._directories[key] = fd
        while len(self._directories) > MAX_OPEN_DIRECTORIES:
            # Never the one just opened: the caller uses it next.
            _, oldest = self._directories.popitem(last=False)
            os.close(oldest)
        return fd

    def _split(self, path: str | bytes) -> tuple[int | None, bytes]:
        parent, _, name = os.fsencode(path).strip(b"/").rpartition(b"/")
        return self.directory(parent), name

    def lstat(self, path: str | bytes) -> os.stat_result | None:
        """The entry at `path` itself (a symlink is reported, not followed), or None when it is
        missing or lies behind something that is not a real directory beneath the root."""
        parent_fd, name = self._split(path)
        if parent_fd is None or not name:
            return None
        try:
            return os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return None

    def open(self, path: str | bytes) -> BinaryIO:
        """The regular file at `path`, open for reading (to be read in chunks). OSError when it
        is not one beneath the root (a symlink as the last component is ELOOP unless
        `symlinks`)."""
        if self.symlinks:
            start, name = self._root_fd, os.fsencode(path).strip(b"/")
        else:
            parent_fd, name = self._split(path)
            if parent_fd is None or not name:
                raise FileNotFoundError(errno.ENOENT, "no such file beneath the root", str(path))
            start = parent_fd
        # O_NONBLOCK: opening a FIFO planted where a file was must not hang the call.
        fd = open_beneath(start, name, os.O_RDONLY | os.O_NONBLOCK, symlinks=self.symlinks)
        file = os.fdopen(fd, "rb")
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            file.close()
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        return file

    def read(self, path: str | bytes, limit: int | None = None) -> bytes:
        """The content of the regular file at `path` (at most `limit` bytes). OSError when it
        is not one beneath the root (a symlink as the last component is ELOOP unless
        `symlinks`)."""
        with self.open(path) as file:
            return file.read() if limit is None else file.read(limit)

    def readlink(self, path: str | bytes) -> bytes:
        """The text of the symlink at `path` (never followed)."""
        parent_fd, name = self._split(path)
        if parent_fd is None or not name:
            raise FileNotFoundError(errno.ENOENT, "no such symlink beneath the root", str(path))
        return os.fsencode(os.readlink(name, dir_fd=parent_fd))

    def scandir(self, path: str | bytes) -> list[tuple[str, os.stat_result]]:
        """The entries of the directory at `path`, sorted by name, each with its lstat; empty
        when there is no such directory beneath the root."""
        fd = self.directory(path)
        if fd is None:
            return []
        found: list[tuple[str, os.stat_result]] = []
        try:
            with os.scandir(fd) as entries:
                for entry in entries:
                    try:
                        found.append((entry.name, entry.stat(follow_symlinks=False)))
                    except FileNotFoundError:
                        continue
        except OSError:
            return []
        return sorted(found)
