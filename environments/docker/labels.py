"""The labels on every container and volume of the runtime, and whose they say it is.

Every container and volume is labelled `codecoder=1`, with its session, its mode and the
host process that made it (the machine, its boot, the pid and the pid's start time), so the
runtime can remove its own and the leftovers of runtimes that died without touching another
runtime's live containers. A warm pool's containers (`environments.docker.pool`) also carry
`codecoder.pool=1`: their host process is the pool's server, but once claimed a container is
the claiming session's, so it is a leftover only when it no longer runs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final

__all__ = [
    "LABEL_BOOT",
    "LABEL_HOST",
    "LABEL_MODE",
    "LABEL_PID",
    "LABEL_PID_START",
    "LABEL_POOL",
    "LABEL_RUNTIME",
    "LABEL_SESSION",
]

LABEL_RUNTIME: Final = "codecoder"
LABEL_SESSION: Final = "codecoder.session"
LABEL_MODE: Final = "codecoder.mode"
LABEL_HOST: Final = "codecoder.host"
LABEL_BOOT: Final = "codecoder.boot"
LABEL_PID: Final = "codecoder.pid"
LABEL_PID_START: Final = "codecoder.pid-start"
LABEL_POOL: Final = "codecoder.pool"


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


def _process_start(pid: int) -> str | None:
    """The start time of `pid` in clock ticks since boot, which tells a reused pid apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses; fields after it do not.
    return stat.rsplit(")", 1)[1].split()[19]


def _owner_alive(labels: Mapping[str, str], boot: str) -> bool:
    if labels.get(LABEL_BOOT) != boot:
        return False  # the machine rebooted since: its creator is certainly gone
    try:
        pid = int(labels.get(LABEL_PID, ""))
    except ValueError:
        return False
    recorded = labels.get(LABEL_PID_START)
    if recorded and Path("/proc/self/stat").exists():
        return _process_start(pid) == recorded
    # Without /proc (or a start time) only existence can be checked; a reused pid then keeps
    # a leftover alive until the next start, which errs on the side of not killing live work.
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
