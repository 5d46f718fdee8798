"""inotify(7), as the runtime uses it: one instance, watches on directories, and the events
queued so far read without blocking.

Two watchers stand on it: the decision server noticing that its code changed on disk
(`interfaces.forkserver.codewatch`) and @docker's record of what a call wrote
(`environments.changewatch`). Called through libc with ctypes: the standard library has no
binding, and the calls are three.
"""

from __future__ import annotations

import ctypes
import os
import struct
import threading
from dataclasses import dataclass
from typing import Final

__all__ = [
    "IN_ATTRIB",
    "IN_CLOSE_WRITE",
    "IN_CREATE",
    "IN_DELETE",
    "IN_DELETE_SELF",
    "IN_DONTFOLLOW",
    "IN_EXCL_UNLINK",
    "IN_IGNORED",
    "IN_ISDIR",
    "IN_MODIFY",
    "IN_MOVED_FROM",
    "IN_MOVED_TO",
    "IN_MOVE_SELF",
    "IN_ONLYDIR",
    "IN_Q_OVERFLOW",
    "Event",
    "Inotify",
]

# What happened (to a file in a watched directory, or to the directory itself).
IN_MODIFY: Final = 0x00000002
IN_ATTRIB: Final = 0x00000004
IN_CLOSE_WRITE: Final = 0x00000008
IN_MOVED_FROM: Final = 0x00000040
IN_MOVED_TO: Final = 0x00000080
IN_CREATE: Final = 0x00000100
IN_DELETE: Final = 0x00000200
IN_DELETE_SELF: Final = 0x00000400
IN_MOVE_SELF: Final = 0x00000800
# What the kernel says of the queue and the watch.
IN_Q_OVERFLOW: Final = 0x00004000
IN_IGNORED: Final = 0x00008000
IN_ISDIR: Final = 0x40000000
# How a watch is made.
IN_ONLYDIR: Final = 0x01000000
IN_DONTFOLLOW: Final = 0x02000000
IN_EXCL_UNLINK: Final = 0x04000000

_EVENT: Final = struct.Struct("iIII")  # wd, mask, cookie, length of the name that follows
_READ: Final = 1 << 16
_libc = ctypes.CDLL(None, use_errno=True)


@dataclass(frozen=True, slots=True)
class Event:
    """One event: the watch it came from, what happened, and the name of the file in the
    watched directory (empty when it happened to the directory itself)."""

    wd: int
    mask: int
    name: bytes


class Inotify:
    """An inotify instance, non-blocking and close-on-exec. OSError when the kernel has none
    left to give (or no inotify at all)."""

    def __init__(self) -> None:
        fd = int(_libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC))
        if fd < 0:
            error = ctypes.get_errno()
            raise OSError(error, f"inotify_init1: {os.strerror(error)}")
        self.fd: int = fd

    def add_watch(self, path: str | os.PathLike[str], mask: int) -> int:
        """Watch `path` for `mask`; its watch descriptor. OSError with the errno (ENOENT,
        ENOTDIR, EACCES for a path gone or not ours, ENOSPC at the watch limit)."""
        wd = int(_libc.inotify_add_watch(self.fd, os.fsencode(path), mask))
        if wd < 0:
            error = ctypes.get_errno()
            raise OSError(error, f"inotify_add_watch {os.fspath(path)}: {os.strerror(error)}")
        return wd

    def read(self) -> list[Event]:
        """Every event queued now; none when there are none (never blocks)."""
        events: list[Event] = []
        while True:
            try:
                data = os.read(self.fd, _READ)
            except BlockingIOError:
                return events
            if not data:
                return events
            offset = 0
            while offset + _EVENT.size <= len(data):
                wd, mask, _, length = _EVENT.unpack_from(data, offset)
                start = offset + _EVENT.size
                events.append(Event(wd, mask, data[start : start + length].rstrip(b"\0")))
                offset = start + length

    def close(self, *, in_background: bool = False) -> None:
        """Close the instance. Closing one that holds watches waits for the kernel to retire
        them (an RCU grace period, 10-20 ms measured here): `in_background` closes it in a
        thread of its own, for a caller that need not wait."""
        fd, self.fd = self.fd, -1
        if fd < 0:
            return
        if in_background:
            threading.Thread(
                target=os.close, args=(fd,), name="codecoder-unwatch", daemon=True
            ).start()
        else:
            os.close(fd)
