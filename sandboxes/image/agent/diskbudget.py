"""A writable call's disk budget: what the call wrote, never what its file system grew by.

The workspace's file system (the host's directory, bind-mounted, or a volume in the engine's
data root) is shared with everything else on the engine's host: another process writing 2 GB
there while a call runs `true` must not make `true` fail. Its used space (statvfs) is cheap to
read and grows whenever the call writes, so it is the trigger, read every `DISK_CHECK_SECONDS`;
once it grew past the budget, what the call itself wrote is measured (`written`): the apparent
size (or, where larger, the space taken) of every regular file of the workspace changed since
the call began, each name of a hard-linked file in full, and the space held by files the call's
processes deleted but keep open (which no walk finds). Only that is held against the budget;
the rest of the growth is someone else's, and is not looked at again until the file system
grows by another budget's worth.

The measurement runs as the command user (what the call wrote may be private to it; a root
without capabilities could neither walk it nor look into the call's processes).
"""

from __future__ import annotations

import os
import stat
import sys
import time

from command_user import as_user
from image import WORKSPACE
from processes import others

# Linux's coarse realtime clock, which ctimes are stamped from.
_CLOCK_REALTIME_COARSE = 5


def call_start() -> int:
    """Now, by the clock the kernel stamps ctimes with: a file changed from now on has a ctime
    at least this."""
    if sys.platform == "linux":
        return time.clock_gettime_ns(_CLOCK_REALTIME_COARSE)
    return time.time_ns() - 10_000_000


def workspace_used() -> int | None:
    try:
        st = os.statvfs(WORKSPACE)
    except OSError:
        return None
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def written_since(since_ns: int, pids: list[int]) -> int:
    """What a call that began at `since_ns` wrote to the workspace (see the module docstring);
    `pids` are its processes still running."""
    total = 0
    try:
        device = os.stat(WORKSPACE).st_dev
    except OSError:
        return 0
    pending = [WORKSPACE]
    while pending:
        directory = pending.pop()
        try:
            with os.scandir(directory) as entries:
                items = list(entries)
        except OSError:
            continue
        for entry in items:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(info.st_mode):
                if info.st_dev == device:
                    pending.append(entry.path)
            elif stat.S_ISREG(info.st_mode) and info.st_ctime_ns >= since_ns:
                total += max(info.st_size, info.st_blocks * 512)
    held: set[tuple[int, int]] = set()
    for pid in pids:
        try:
            descriptors = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in descriptors:
            try:
                info = os.stat(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            key = (info.st_dev, info.st_ino)
            if (
                stat.S_ISREG(info.st_mode)
                and info.st_nlink == 0
                and info.st_dev == device
                and key not in held
            ):
                held.add(key)
                total += info.st_blocks * 512
    return total


class DiskBudget:
    """The budget of one call: `over()` while it runs, `used()` when it ended."""

    def __init__(self, budget: int, uid: int, gid: int) -> None:
        self.budget = budget
        self.uid, self.gid = uid, gid
        self.started_ns = call_start()
        self.before = workspace_used()
        self.others = 0  # growth found to be someone else's
        self.written: int | None = None  # what the call wrote, when it was measured

    def over(self) -> bool:
        """Whether the call has written more than its budget (measured only once the file
        system grew past it)."""
        if self.before is None:
            return False
        now = workspace_used()
        if now is None or now - self.before - self.others <= self.budget:
            return False
        return self._measure(now, others()) > self.budget

    def used(self) -> int | None:
        """What the call wrote, once it ended: measured when the file system grew past the
        budget, else that growth (no more than it wrote, and cheap)."""
        if self.before is None:
            return None
        now = workspace_used()
        if now is None:
            return self.written
        grew = now - self.before
        if grew - self.others <= self.budget:
            return max(grew, 0) if self.written is None else min(max(grew, 0), self.written)
        return self._measure(now, [])

    def _measure(self, now: int, pids: list[int]) -> int:
        try:
            written = as_user(self.uid, self.gid, written_since, self.started_ns, pids)
        except (OSError, RuntimeError, ValueError):
            # What cannot be measured is not given the benefit of the doubt: all the growth
            # since the last measurement counts, as before there was one.
            written = now - (self.before or 0) - self.others
        measured = self.written = int(written) if isinstance(written, int) else 0
        # Whatever else the file system grew by is not the call's: looked at again only once
        # it grew by another budget's worth.
        self.others = max(now - (self.before or 0) - measured, 0)
        return measured
