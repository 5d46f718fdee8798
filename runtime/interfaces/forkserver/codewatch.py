"""Noticing that the code a long-lived process runs has changed on disk (an upgrade, an edit).

The decision server (`interfaces.forkserver.server`) must run what a fresh process would: once
the code it imported is no longer what is installed, it refuses and exits, and the next client
starts a new one. `CodeWatch` watches, with inotify, every directory holding a module the
process loaded and every directory of codecoder's own packages (modules a command imports
later included): any file of code created, written, touched, moved or deleted there, or the
directory itself removed or moved, counts as a change. Asking costs one poll, not a stat of
every module (about 2 ms for the ~700 modules the server holds). Where inotify is not
available, it compares the modification time and size of every loaded module's file instead.
"""

from __future__ import annotations

import ctypes
import os
import select
import struct
from collections.abc import Iterable
from typing import Final

from codecoder.foundation.loadedcode import loaded_code

__all__ = ["CodeWatch"]

# inotify(7): what happens to a file in a watched directory, or to the directory itself.
_IN_MODIFY: Final = 0x2
_IN_ATTRIB: Final = 0x4
_IN_CLOSE_WRITE: Final = 0x8
_IN_MOVED_FROM: Final = 0x40
_IN_MOVED_TO: Final = 0x80
_IN_CREATE: Final = 0x100
_IN_DELETE: Final = 0x200
_IN_DELETE_SELF: Final = 0x400
_IN_MOVE_SELF: Final = 0x800
_IN_Q_OVERFLOW: Final = 0x4000
_IN_ONLYDIR: Final = 0x01000000
_MASK: Final = (
    _IN_MODIFY
    | _IN_ATTRIB
    | _IN_CLOSE_WRITE
    | _IN_MOVED_FROM
    | _IN_MOVED_TO
    | _IN_CREATE
    | _IN_DELETE
    | _IN_DELETE_SELF
    | _IN_MOVE_SELF
    | _IN_ONLYDIR
)
_IN_NONBLOCK: Final = os.O_NONBLOCK
_IN_CLOEXEC: Final = os.O_CLOEXEC
_EVENT: Final = struct.Struct("iIII")  # wd, mask, cookie, len; then the name
# What a process runs: Python sources and extension modules, import hooks, and the data files
# codecoder loads (the WASI modules, the Landlock worker's ruleset, the escape corpus).
_CODE_SUFFIXES: Final = (".py", ".so", ".pth", ".wasm", ".json")


class CodeWatch:
    """Whether the code of this process (the modules loaded now, and the packages under
    `roots`) has changed since the watch was made."""

    def __init__(self, roots: Iterable[str] = ()) -> None:
        self._snapshot = loaded_code()
        self._changed = False
        self.fd: int | None = None
        directories = {os.path.dirname(path) for path in self._snapshot}
        for root in roots:
            for folder, subfolders, _ in os.walk(root):
                subfolders[:] = [name for name in subfolders if name != "__pycache__"]
                directories.add(folder)
        try:
            self.fd = _watch(sorted(directories))
        except OSError:
            self.fd = None  # no inotify here: compare the files on every question

    def changed(self) -> bool:
        if self._changed:
            return True
        if self.fd is None:
            self._changed = loaded_code() != self._snapshot
            return self._changed
        while select.select([self.fd], [], [], 0)[0]:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            if _touches_code(data):
                self._changed = True
                break
        return self._changed

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _watch(directories: list[str]) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = int(libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC))
    if fd < 0:
        raise OSError(ctypes.get_errno(), "inotify_init1")
    try:
        for directory in directories:
            if libc.inotify_add_watch(fd, os.fsencode(directory), _MASK) < 0:
                error = ctypes.get_errno()
                raise OSError(error, f"inotify_add_watch {directory}: {os.strerror(error)}")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _touches_code(data: bytes) -> bool:
    """Whether a batch of inotify events says a file of code (or a watched directory itself)
    changed; events about other files (a cache, a log) do not count."""
    offset = 0
    while offset + _EVENT.size <= len(data):
        _, mask, _, length = _EVENT.unpack_from(data, offset)
        name = data[offset + _EVENT.size : offset + _EVENT.size + length].rstrip(b"\0")
        offset += _EVENT.size + length
        if mask & (_IN_Q_OVERFLOW | _IN_DELETE_SELF | _IN_MOVE_SELF):
            return True  # events were lost, or a whole directory went
        if not name or name.decode("utf-8", "surrogateescape").endswith(_CODE_SUFFIXES):
            return True
    return False
