"""Opening a path beneath a directory, with the kernel refusing any resolution that leaves it.

`open_beneath(root, path)` opens `path` relative to `root` with openat2(2) and
RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS: the kernel resolves every component, symlinks included,
and fails the call (EXDEV) if resolution would leave `root` at any step: `..` above it, an
absolute path, a symlink whose target is absolute or climbs out, a directory renamed away or
swapped for such a symlink during the walk (the kernel retries or fails, it never completes
outside), and `/proc` magic links (`/proc/self/root`, `/proc/self/fd/N`). Symlinks that stay
inside are followed, as for any reader of the workspace.

Files are opened O_NONBLOCK | O_NOCTTY, so a FIFO or a terminal opens without blocking or
becoming anyone's controlling terminal; callers fstat the descriptor and refuse what is not a
regular file or directory before reading from it.

This is the in-process half of @landlock (single-file reads and listings, in microseconds);
the walks and searches run in a Landlock-restricted worker (environments/landlock.py).
"""

from __future__ import annotations

import ctypes
import errno
import os
from pathlib import Path

__all__ = ["OUTSIDE", "open_beneath", "openat2_available"]

SYS_OPENAT2 = 437  # the same on every architecture
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_BENEATH = 0x08

# What openat2 says when resolution would have left the root.
OUTSIDE = errno.EXDEV

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class _OpenHow(ctypes.Structure):
    _fields_ = (
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    )


_HOW_SIZE = ctypes.c_size_t(ctypes.sizeof(_OpenHow))


def open_beneath(root: int, path: str | bytes, *, directory: bool = False) -> int:
    """A read-only descriptor for `path` (relative, "." for `root` itself) beneath the open
    directory `root`. Raises OSError: EXDEV when resolution would leave `root`, ENOENT, …"""
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
    if directory:
        flags |= os.O_DIRECTORY
    how = _OpenHow(flags, 0, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)
    name = os.fsencode(path)
    fd = int(_libc.syscall(SYS_OPENAT2, ctypes.c_int(root), name, ctypes.byref(how), _HOW_SIZE))
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), os.fsdecode(name))
    return fd


def open_root(path: Path) -> int:
    """A descriptor for the directory a confined path is resolved beneath."""
    return os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)


def openat2_available() -> bool:
    """Whether this kernel (and any seccomp filter around us) lets openat2 resolve beneath."""
    try:
        root = open_root(Path("/"))
    except OSError:
        return False
    try:
        os.close(open_beneath(root, ".", directory=True))
    except OSError:
        return False
    finally:
        os.close(root)
    return True
