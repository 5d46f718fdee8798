"""Ending every process of a call: a call owns the container, and nothing of it outlives it.

When a call ends every other process in the container is killed (kill(-1) by root reaches all
but init and the agent) and /proc is checked until none is left; the answer says how many
survived (the host discards a container where any did).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

from channel import log
from procfs import read_text

SURVIVOR_SECONDS = 2.0


def kill_all() -> None:
    # kill(-1) by root reaches every process in the pid namespace but init and the caller.
    with contextlib.suppress(ProcessLookupError):
        os.kill(-1, signal.SIGKILL)


def others() -> list[int]:
    """Processes besides init and the agent that have not exited (zombies do not count)."""
    me = os.getpid()
    alive = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in (1, me):
            continue
        stat_line = read_text(f"/proc/{name}/stat")
        if stat_line is not None and stat_line.rsplit(")", 1)[1].split()[0] != "Z":
            alive.append(int(name))
    return alive


def end_everything() -> int:
    """Kill every process but init and the agent; how many could not be made to go."""
    deadline = time.monotonic() + SURVIVOR_SECONDS
    while True:
        kill_all()
        alive = others()
        if not alive:
            return 0
        if time.monotonic() > deadline:
            log(f"processes survived SIGKILL: {alive}")
            return len(alive)
        time.sleep(0.001)
