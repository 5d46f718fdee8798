"""Scratch space: what the runtime makes for a while (a Wasm call's pipes, a snapshot's files, an
egress proxy's socket, a @confined call's private home, the credential broker's CA bundle) lives
beneath one directory of the process that made it, in the runtime's state directory, never
loose in /tmp:

    $XDG_STATE_HOME/codecoder/scratch/<pid>-<start time>-<host>/<prefix>XXXXXXXX/

Whoever makes a scratch directory removes it when done, on errors too. What is left when the
process ends (a runtime never closed) goes with the process's directory at exit; what a killed
process left (SIGKILL, a crash, the power) goes when the next process makes its own: every
process directory of this host whose process is gone is removed then. The start time (from
/proc) tells a process from a later one that reuses its pid, so a live process's directory is
never taken; another host's (a home shared over the network) is left to that host.

Each directory is private (mode 0700), like everything in the state directory: no other user
can plant or read anything there, which /tmp does not promise.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import socket
import tempfile
import threading
from pathlib import Path
from typing import Final

from codecoder.foundation.state import state_directory

__all__ = ["scratch_directory", "scratch_root", "sweep_scratch"]

SCRATCH: Final = "scratch"

_lock = threading.Lock()
_made: dict[Path, int] = {}  # the process directories this process made, and its pid


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat, field 22), or
    None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces or parentheses itself.
    fields = data[data.rfind(b")") + 2 :].split()
    return fields[19].decode() if len(fields) > 19 else None


def _alive(name: str) -> bool:
    pid, start, host = [*name.split("-", 2), "", ""][:3]
    if not pid.isdigit() or not start or host != socket.gethostname():
        return True  # not a process of this host's: left alone
    return _start_time(int(pid)) == start


def sweep_scratch(root: Path | None = None) -> list[Path]:
    """Remove the process directories under `root` (the state directory's scratch) whose process
    is gone; what was removed."""
    root = root or state_directory() / SCRATCH
    removed: list[Path] = []
    if _start_time(os.getpid()) is None:
        return removed  # no /proc to tell the living from the dead: nothing is taken
    try:
        entries = list(os.scandir(root))
    except OSError:
        return removed
    for entry in entries:
        if entry.is_dir(follow_symlinks=False) and not _alive(entry.name):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(Path(entry.path))
    return removed


def scratch_root() -> Path:
    """This process's scratch directory, made (after a sweep of dead processes' ones) on first
    use in each state directory; removed at exit."""
    pid = os.getpid()
    start = _start_time(pid) or "0"
    root = state_directory() / SCRATCH
    directory = root / f"{pid}-{start}-{socket.gethostname()}"
    with _lock:
        if _made.get(directory) == pid and directory.is_dir():
            return directory
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        sweep_scratch(root)
        directory.mkdir(mode=0o700, exist_ok=True)
        if not _made:
            atexit.register(_remove_own)
        _made[directory] = pid
        return directory


def scratch_directory(prefix: str) -> Path:
    """A new private directory (0700) in this process's scratch, for the caller to remove."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=scratch_root()))


def _remove_own() -> None:
    """At exit: this process's directories (a forked child, which inherits the handler, leaves
    its parent's alone)."""
    pid = os.getpid()
    with _lock:
        for directory, owner in list(_made.items()):
            if owner == pid:
                with contextlib.suppress(OSError):
                    shutil.rmtree(directory)
                del _made[directory]
