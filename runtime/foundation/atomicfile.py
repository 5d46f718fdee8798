"""Files that are replaced whole, never half-written: temp file + fsync + rename, under a lock.

Used by everything that rewrites a file a person or another process may be reading at the same
moment: codecoder.json grants, the agent's memory notes, the Wasm module cache.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
from collections.abc import Iterator
from pathlib import Path


def temporary_name(path: Path) -> str:
    """The name a write of `path` goes through: `.NAME.<16 hex>.tmp` beside it."""
    return f".{path.name}.{secrets.token_hex(8)}.tmp"


def replace_atomically(path: Path, data: bytes, mode: int | None = None) -> None:
    """Put `data` at `path` so that a crash at any moment leaves the old file or the new one.

    `mode` sets the new file's permission bits; None gives the usual ones (0666 less umask).
    """
    temporary = path.with_name(temporary_name(path))
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    descriptor = os.open(temporary, flags, 0o666 if mode is None else 0o600)
    try:
        with os.fdopen(descriptor, "wb") as file:
            if mode is not None:
                os.fchmod(file.fileno(), mode)
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise
    # The rename itself is only durable once the directory entry is on disk.
    directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


@contextlib.contextmanager
def exclusive_lock(lock_path: Path, mode: int = 0o666) -> Iterator[None]:
    """Hold an exclusive flock on `lock_path` (created if missing) for the block.

    The lock lives in a file of its own that is never replaced: the data file's inode changes
    with every rename, and a lock on it would not exclude a writer that opened the new one.
    """
    descriptor = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, mode)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # releases the lock; the kernel also does if we are killed
