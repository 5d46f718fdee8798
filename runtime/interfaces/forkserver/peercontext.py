"""What a process is allowed and confined by, as another process of the same user reads it.

The decision server (`interfaces.forkserver.protocol`) runs commands for other processes. What it
runs must be what a fresh process of its client would run: with the client's uid, groups and
capabilities, its namespaces (mount, network, PID …), its root directory, its cgroup (memory and
CPU limits), its resource limits, niceness, CPU affinity, seccomp and no_new_privs state and its
security label. A forked child inherits all of that from the server, not from the client, so
the server serves only a client whose context is exactly its own: `fingerprint()` is that
context as one text, read from /proc.

Two processes are compared: the one that connected and the one that sent the request, which
need not be the same (a connection can be inherited by a child that then confines itself).
Some confinement cannot be compared from outside. Two seccomp filters of the same depth are not
told apart, and a Landlock domain is not visible in /proc at all. So `Peer.runs_tools` is true
only for a peer that has no seccomp filter and whose processes were identified race-free
(through the pidfds the kernel gives for them, SO_PEERPIDFD and SCM_PIDFD, Linux 6.5): other
peers may still be answered what runs nothing (a decision, a key), and the rest is run in the
client itself.
Codecoder's own sandboxes never reach the server: its socket is in the state directory, which
they do not see.

Only the standard library is imported: the client computes its own fingerprint before it knows
whether a server will answer.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys

TYPE_CHECKING = False  # typing itself is not imported: the client's start-up is its cost
if TYPE_CHECKING:
    from typing import Final

__all__ = ["Peer", "fingerprint", "identify"]

# The lines of /proc/PID/status that say what the process may do and where it may run.
_STATUS_FIELDS: Final = (
    "Uid",
    "Gid",
    "Groups",
    "CapInh",
    "CapPrm",
    "CapEff",
    "CapBnd",
    "CapAmb",
    "NoNewPrivs",
    "Seccomp",
    "Seccomp_filters",
    "Cpus_allowed_list",
    "Mems_allowed_list",
)
_FILES: Final = ("cgroup", "limits", "oom_score_adj", "attr/current")
_SO_PEERPIDFD: Final = 77  # Linux 6.5; not named by Python 3.11's socket module


def fingerprint(pid: int | str = "self") -> str:
    """The context of process `pid` (this one by default); OSError when it cannot be read
    (another user's process, a process that is gone, /proc not mounted)."""
    proc = f"/proc/{pid}"
    parts: list[str] = []
    with open(f"{proc}/status", encoding="utf-8", errors="replace") as handle:
        status = dict(line.partition(":")[::2] for line in handle.read().splitlines())
    parts += [f"{name}:{status.get(name, '?').strip()}" for name in _STATUS_FIELDS]
    with open(f"{proc}/stat", "rb") as handle:
        stat = handle.read().rpartition(b")")[2].split()
    # After the command's name: nice (the 19th field) and the scheduling policy (the 41st).
    parts.append(f"nice:{stat[16].decode()} policy:{stat[38].decode()}")
    for name in sorted(os.listdir(f"{proc}/ns")):
        parts.append(f"ns/{name}:{os.readlink(f'{proc}/ns/{name}')}")
    root = os.stat(f"{proc}/root")
    parts.append(f"root:{root.st_dev}:{root.st_ino}")
    for name in _FILES:
        try:
            with open(f"{proc}/{name}", encoding="utf-8", errors="replace") as handle:
                text = handle.read()
        except OSError as exc:
            if name != "attr/current":
                raise
            text = f"({exc.errno})"  # no security module gives this process a label
        parts.append(f"{name}:{text.strip()}")
    return "\n".join(parts)


class Peer:
    """The process at the other end of a Unix socket, as far as it could be identified.

    `same` says its context is the reader's own; `runs_tools` that it is also safe to run tools
    for it (identified race-free, no seccomp filter that could differ unseen). A plain class:
    dataclasses would import `inspect` into every client."""

    __slots__ = ("pid", "runs_tools", "same")

    def __init__(self, pid: int, same: bool, runs_tools: bool) -> None:
        self.pid = pid
        self.same = same
        self.runs_tools = runs_tools

    def __repr__(self) -> str:
        return f"Peer(pid={self.pid}, same={self.same}, runs_tools={self.runs_tools})"


def identify(sock: socket.socket, own: str, sender: int | None) -> Peer | None:
    """Who is on the other end of `sock`, compared with the context `own` (this process's
    fingerprint): the process that connected (the kernel's pidfd for it, SO_PEERPIDFD) and the
    one that sent the request read from it (`sender`, the pidfd the kernel attached to that
    message, SCM_PIDFD), which need not be the same process: a connection can be inherited,
    or kept by a process that then confined itself. Both must be alive and in `own`'s context.
    None when the connecting process cannot be read at all. Read after the request, so that a
    connecting process that is already gone counts as unknown."""
    try:
        pidfd = sock.getsockopt(socket.SOL_SOCKET, _SO_PEERPIDFD)
    except OSError:
        pidfd = -1  # an older kernel: the pid alone, which could be reused meanwhile
    try:
        if pidfd >= 0:
            connector = _context_of(pidfd)
        else:
            creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
            connector = _context_of(None, int.from_bytes(creds[0:4], sys.byteorder))
    finally:
        if pidfd >= 0:
            os.close(pidfd)
    if connector is None:
        return None
    pid, theirs = connector
    same = theirs == own
    verified = pidfd >= 0 and sender is not None
    if sender is not None:
        sent_by = _context_of(sender)
        same = same and sent_by is not None and sent_by[1] == own
    filtered = "\nSeccomp:0\n" not in f"\n{own}\n"
    return Peer(pid, same, same and verified and not filtered)


def _context_of(pidfd: int | None, pid: int = -1) -> tuple[int, str] | None:
    """(pid, fingerprint) of the process a pidfd (or, without one, a pid) refers to; None when
    it is gone or cannot be read. With a pidfd, the process is checked to be alive after its
    context was read, so a pid reused meanwhile is never taken for it."""
    try:
        if pidfd is not None:
            pid = _pid_of(pidfd)
        if pid <= 0:
            return None  # gone, or in a PID namespace this one cannot see into
        context = fingerprint(pid)
        if pidfd is not None:
            signal.pidfd_send_signal(pidfd, 0)
    except (OSError, IndexError, ValueError):
        return None
    return pid, context


def _pid_of(pidfd: int) -> int:
    with open(f"/proc/self/fdinfo/{pidfd}", encoding="ascii") as handle:
        for line in handle:
            name, _, value = line.partition(":")
            if name == "Pid":
                with contextlib.suppress(ValueError):
                    return int(value)
    return -1
