"""Which files of a directory tree changed, told by the kernel (inotify) instead of a walk.

A writable @docker call in bind mode writes the host's workspace directly; its disk budget must
count the apparent size of what it wrote (`environments.apparent`), which takes knowing what it
changed. Walking a large workspace after every call costs a fraction of a second; a watch on
every directory of it, set up once when the writable container starts (beside the protected-path
scan, which walks the tree then anyway), costs nothing per call: the kernel queues an event for
each file created, written, truncated, linked or renamed in, and `changed()` reads them.

Whenever the watch cannot vouch for what changed, `changed()` returns None and the caller walks
instead: the kernel's limits (watches, instances, the event queue) were reached, or a directory
was renamed within the tree (its watch would keep reporting the old name; the watches are set up
again afterwards). A directory created during the call is watched from then on, and everything
already in it counts as changed.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
import threading
from pathlib import Path
from typing import Final

__all__ = ["ChangeWatch"]

_IN_MODIFY: Final = 0x00000002
_IN_ATTRIB: Final = 0x00000004
_IN_CLOSE_WRITE: Final = 0x00000008
_IN_MOVED_FROM: Final = 0x00000040
_IN_MOVED_TO: Final = 0x00000080
_IN_CREATE: Final = 0x00000100
_IN_DELETE_SELF: Final = 0x00000400
_IN_MOVE_SELF: Final = 0x00000800
_IN_Q_OVERFLOW: Final = 0x00004000
_IN_IGNORED: Final = 0x00008000
_IN_ONLYDIR: Final = 0x01000000
_IN_DONTFOLLOW: Final = 0x02000000
_IN_EXCL_UNLINK: Final = 0x04000000
_IN_ISDIR: Final = 0x40000000
_MASK: Final = (
    _IN_MODIFY
    | _IN_ATTRIB
    | _IN_CLOSE_WRITE
    | _IN_MOVED_FROM
    | _IN_MOVED_TO
    | _IN_CREATE
    | _IN_DELETE_SELF
    | _IN_MOVE_SELF
    | _IN_ONLYDIR
    | _IN_DONTFOLLOW
    | _IN_EXCL_UNLINK
)
_FILE_EVENTS: Final = _IN_MODIFY | _IN_ATTRIB | _IN_CLOSE_WRITE | _IN_CREATE | _IN_MOVED_TO
_EVENT: Final = struct.Struct("iIII")

_libc = ctypes.CDLL(None, use_errno=True)


class ChangeWatch:
    """The regular files changed beneath `root` since the last `reset()`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._fd = -1
        self._dirs: dict[int, str] = {}
        self._complete = False
        self._start()

    def _start(self) -> None:
        self.close()
        self._dirs = {}
        fd = _libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            self._complete = False  # no instance left: every call walks
            return
        self._fd = fd
        self._complete = True
        self._watch_tree("")

    def close(self) -> None:
        """Stop watching. Closing an instance that holds watches waits for the kernel to retire
        them (an RCU grace period, 10–20 ms measured here), which a session's end need not wait
        for: the descriptor is closed by a thread of its own."""
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            closing = threading.Thread(target=os.close, args=(fd,), name="codecoder-unwatch")
            closing.daemon = True
            closing.start()

    def _watch_tree(self, relative: str) -> set[str]:
        """Watch the directory `relative` and every one beneath it; the regular files in them."""
        files: set[str] = set()
        pending = [relative]
        while pending and self._complete:
            current = pending.pop()
            path = self.root / current if current else self.root
            wd = _libc.inotify_add_watch(self._fd, os.fsencode(path), _MASK)
            if wd < 0:
                code = ctypes.get_errno()
                if code in (errno.ENOENT, errno.ENOTDIR, errno.EACCES):
                    continue  # gone or replaced meanwhile, or not ours to read: not watched
                self._complete = False  # ENOSPC: the watch limit
                return files
            self._dirs[wd] = current
            try:
                with os.scandir(path) as entries:
                    for entry in entries:
                        child = f"{current}/{entry.name}" if current else entry.name
                        if entry.is_dir(follow_symlinks=False):
                            pending.append(child)
                        elif entry.is_file(follow_symlinks=False):
                            files.add(child)
            except OSError:
                continue
        return files

    def reset(self) -> None:
        """Forget what changed until now (what the host itself did between calls)."""
        self.changed()

    def changed(self) -> set[str] | None:
        """The workspace-relative paths of files created, written, truncated, linked or renamed
        in since the last look (what is at them now may be anything: look beneath the root
        without following links); None when the watch cannot tell (then the caller walks, and
        the watches are set up again)."""
        if not self._complete:
            self._start()
            return None
        found: set[str] = set()
        rebuild = False
        while True:
            try:
                data = os.read(self._fd, 1 << 16)
            except BlockingIOError:
                break
            offset = 0
            while offset + _EVENT.size <= len(data):
                wd, mask, _, length = _EVENT.unpack_from(data, offset)
                name = data[offset + _EVENT.size : offset + _EVENT.size + length].rstrip(b"\0")
                offset += _EVENT.size + length
                if mask & _IN_Q_OVERFLOW:
                    rebuild = True
                    continue
                if mask & _IN_IGNORED:
                    self._dirs.pop(wd, None)
                    continue
                directory = self._dirs.get(wd)
                if directory is None:
                    continue
                if mask & (_IN_MOVE_SELF | _IN_DELETE_SELF) and not name:
                    rebuild = rebuild or bool(mask & _IN_MOVE_SELF)
                    continue
                child = os.fsdecode(name)
                path = f"{directory}/{child}" if directory else child
                if mask & _IN_ISDIR:
                    if mask & (_IN_MOVED_FROM | _IN_MOVED_TO):
                        rebuild = True  # a renamed directory's watch keeps its old name
                    elif mask & _IN_CREATE:
                        found |= self._watch_tree(path)
                elif mask & _FILE_EVENTS:
                    found.add(path)
        if rebuild or not self._complete:
            self._start()
            return None
        return found
