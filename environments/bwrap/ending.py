"""Ending a bubblewrap sandbox: every process in it gone when the call returns.

bubblewrap forks the sandbox's init (PID 1 of its namespaces), and with `--new-session` that
init leads a session and process group of its own, which the command's processes join. Killing
bubblewrap's group therefore kills bubblewrap only; the init follows by `--die-with-parent`,
when the kernel gets to it. On a loaded machine that is a moment in which a cancelled or timed
out call has returned while its command still runs (seen: a cancelled call's sandbox alive after
`acall` raised), and if bubblewrap dies before the init has set its parent-death signal, the
init is never told at all.

So the init is killed first, by a pidfd opened while it is still bubblewrap's child (never a
reused pid), then bubblewrap's group, and the init is waited for: the init of a PID namespace
exits only after the kernel has killed and reaped every process in the namespace, so when it is
gone, so is everything the command started, whatever sessions or groups it made.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from pathlib import Path
from typing import Final

__all__ = ["end_sandbox"]

# How long the runtime waits for a killed sandbox's processes to be gone (the kernel's work: a
# sandbox with a thousand processes takes a fraction of this on two loaded cores).
GONE_WAIT: Final = 10.0


def end_sandbox(pid: int) -> None:
    """SIGKILL bubblewrap `pid`'s sandbox and bubblewrap's own group, and return when the
    sandbox's init has exited (or after `GONE_WAIT`)."""
    inits = _child_pidfds(pid)
    try:
        for fd in inits:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        deadline = time.monotonic() + GONE_WAIT
        for fd in inits:
            with contextlib.suppress(OSError, ValueError):
                select.select([fd], [], [], max(deadline - time.monotonic(), 0.0))
    finally:
        for fd in inits:
            os.close(fd)


def _child_pidfds(pid: int) -> list[int]:
    """pidfds of `pid`'s children, each checked to be its child after it was opened."""
    found: list[int] = []
    for child in _children(pid):
        try:
            fd = os.pidfd_open(child)
        except OSError:
            continue
        if _parent(child) == pid:
            found.append(fd)
        else:  # exited and its pid reused between the listing and the pidfd
            os.close(fd)
    return found


def _children(pid: int) -> list[int]:
    task = Path(f"/proc/{pid}/task/{pid}")
    try:
        listed = (task / "children").read_text()
    except OSError:
        if not task.is_dir():
            return []  # reaped already (a call that ended by itself): nothing to look for
        # A kernel without CONFIG_PROC_CHILDREN: every process's parent is read.
        return [p for p in _all_pids() if _parent(p) == pid]
    return [int(word) for word in listed.split()]


def _all_pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()
    return int(fields[1]) if len(fields) > 1 else None
