"""Opening the files the runtime reads for itself so that none can block it or flood it.

codecoder.json, the user's file, trust records, session files, the audit log, the agents'
settings, caches: each is a path something else could have replaced with a FIFO (opening it
waits for a writer, forever), a device (`/dev/zero` never ends, a terminal waits for a line) or
a file of gigabytes. So every such file is opened here: without blocking (`O_NONBLOCK`: opening
a FIFO returns at once), then checked with `fstat` on what was opened (no race with a swap after
a check by name), refused unless it is a regular file, and read no further than a limit. A
refusal is an `OSError` (its `filename` the path; `str()` of it names both) that says what is
there instead, so every caller
that already handles an unreadable file (a broken codecoder.json fails closed, a damaged
session file is ignored) handles this one the same way, with a message worth reading.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Final

__all__ = [
    "DEFAULT_LIMIT",
    "STATE_FILE_LIMIT",
    "FileTooLarge",
    "NotARegularFile",
    "open_regular",
    "read_regular_file",
]

# What a configuration or state file the runtime reads whole may hold: far more than any real
# one (a 10,000-entry codecoder.json is about 500 KB), far less than memory.
DEFAULT_LIMIT: Final = 64 * 1024 * 1024
# A state file the runtime writes for itself (a session's grants, a server's pid file): small.
STATE_FILE_LIMIT: Final = 16 * 1024 * 1024


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


class NotARegularFile(OSError):
    """What the runtime was to read is a FIFO, a device, a directory or a socket."""

    def __init__(self, path: str | os.PathLike[str], mode: int) -> None:
        if stat.S_ISDIR(mode):
            super().__init__(errno.EISDIR, os.strerror(errno.EISDIR), os.fspath(path))
            return
        super().__init__(
            errno.EINVAL,
            f"it is {_kind(mode)}, not a regular file: refused (reading it could block or "
            "never end)",
            os.fspath(path),
        )


class FileTooLarge(OSError):
    """What the runtime was to read is larger than anything it reads could sanely be."""

    def __init__(self, path: str | os.PathLike[str], limit: int) -> None:
        super().__init__(
            errno.EFBIG,
            f"it is larger than {limit:,} bytes: refused",
            os.fspath(path),
        )


def open_regular(
    path: str | os.PathLike[str],
    flags: int = os.O_RDONLY,
    mode: int = 0o666,
    *,
    dir_fd: int | None = None,
) -> int:
    """A descriptor of the regular file at `path`, opened with `flags` without blocking (a FIFO
    opens at once and is then refused); raises `NotARegularFile` for anything else, or the
    `OSError` of the open. The descriptor is non-blocking, which changes nothing for a regular
    file."""
    fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY, mode, dir_fd=dir_fd)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotARegularFile(path, info.st_mode)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular_file(
    path: str | os.PathLike[str],
    *,
    limit: int | None = DEFAULT_LIMIT,
    dir_fd: int | None = None,
) -> bytes:
    """The bytes of the regular file at `path` (see the module docstring), at most `limit` of
    them (None: no limit; more raises `FileTooLarge`)."""
    fd = open_regular(path, dir_fd=dir_fd)
    try:
        if limit is not None and os.fstat(fd).st_size > limit:
            raise FileTooLarge(path, limit)
        chunks: list[bytes] = []
        total = 0
        while True:
            # A file that grows while it is read is read up to the limit, and no further.
            want = 1 << 20 if limit is None else min(1 << 20, limit + 1 - total)
            chunk = os.read(fd, max(want, 1))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if limit is not None and total > limit:
                raise FileTooLarge(path, limit)
        return b"".join(chunks)
    finally:
        os.close(fd)
