"""What the agent drops and checks of itself at start, before it runs anything.

The container starts as root with only CAP_SETUID, CAP_SETGID, CAP_KILL and CAP_SETPCAP, under
no-new-privileges (the agent refuses to run with any other set). The agent makes itself
non-dumpable (so its /proc/PID/{fd,mem,environ} are closed and ptrace refused even to root
without capabilities) and empties the capability bounding set but for what runas needs (SETUID,
SETGID, SETPCAP); where runas cannot run, it empties it entirely. Last, it installs the
seccomp filter every command inherits, which refuses set-uid and set-gid bits (setid.py).
"""

from __future__ import annotations

import ctypes
import os

from procfs import proc_status, read_text
from setid import refuse_set_id

CAP_KILL, CAP_SETGID, CAP_SETUID, CAP_SETPCAP = 5, 6, 7, 8
AGENT_CAPABILITIES = (1 << CAP_KILL) | (1 << CAP_SETGID) | (1 << CAP_SETUID) | (1 << CAP_SETPCAP)
RUNAS_CAPABILITIES = (1 << CAP_SETGID) | (1 << CAP_SETUID) | (1 << CAP_SETPCAP)
PR_GET_DUMPABLE, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_GET_NO_NEW_PRIVS = 3, 4, 24, 39

_libc = ctypes.CDLL(None, use_errno=True)


def harden() -> str | None:
    """Drop what the agent does not need and close itself to other processes; why not, or None."""
    if os.geteuid() != 0:
        return (
            f"the agent runs as uid {os.geteuid()}, not root: it cannot run commands as "
            "another user (an engine or image that overrides the container user?)"
        )
    started_with = proc_status("self").get("CapEff")
    if started_with != f"{AGENT_CAPABILITIES:016x}":
        return (
            "the container did not start with exactly CAP_SETUID, CAP_SETGID, CAP_KILL and "
            f"CAP_SETPCAP (its effective set is {started_with})"
        )
    if _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 or _libc.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0):
        return "cannot make the agent non-dumpable (prctl PR_SET_DUMPABLE)"
    problem = drop_bounding_set(keep=RUNAS_CAPABILITIES)
    if problem is not None:
        return problem
    # prctl, not /proc/self/status: gVisor's status file has no NoNewPrivs line.
    if _libc.prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1:
        return "the container runs without no-new-privileges"
    return refuse_set_id()


def drop_bounding_set(keep: int) -> str | None:
    """Empty the capability bounding set but for `keep`: no program executed later gets more.

    What the agent itself holds is unchanged (its permitted set). runas, executed by it as
    root, gets what the bounding set keeps (RUNAS_CAPABILITIES), and drops even that.
    """
    last_cap = int(read_text("/proc/sys/kernel/cap_last_cap") or "40")
    for cap in range(last_cap + 1):
        if keep & (1 << cap):
            continue
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            errno = ctypes.get_errno()
            if errno != 22:  # EINVAL: a capability this kernel does not know
                return f"cannot empty the capability bounding set ({os.strerror(errno)})"
    bounding = proc_status("self").get("CapBnd")
    if bounding != f"{keep:016x}":
        return f"the capability bounding set is {bounding}, not {keep:016x}"
    return None
