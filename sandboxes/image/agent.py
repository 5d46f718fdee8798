"""The in-container half of codecoder's @docker environment: run requests arriving on stdin.

The host starts one long-lived container per workspace mode and attaches to its stdin/stdout;
this agent is the container's main process (under docker-init). Dispatching a call is then one
write and one read on an already-open stream, instead of an `exec_create`/`exec_start` round trip
through the engine or a whole `docker run`. The stream is the only way in or out (but for the
egress relay below, when the project allows hosts). The agent needs nothing of its image but a
Linux kernel, /proc and starting as root: it runs on the interpreter bundled with it
(`bundle.py`: its own loader, C library and standard library, under /opt/codecoder/python), so
any image can be made a sandbox (`install.py`); it brings runas (runas.c), a static helper it
starts commands through, and does without it (slower) where it cannot run.

Out of reach of what it runs. The container starts as root with only CAP_SETUID, CAP_SETGID,
CAP_KILL and CAP_SETPCAP, under no-new-privileges (the agent refuses to run with any other
set). The agent makes itself non-dumpable (so its /proc/PID/{fd,mem,environ} are closed and
ptrace refused even to root without capabilities), empties the capability bounding set but for
what runas needs (SETUID, SETGID, SETPCAP), and runs every command through runas (runas.c) as
the unprivileged workspace uid: an empty bounding set, no supplementary groups, no capability
left, a new session, no descriptor but its own pipes. A command can therefore not signal, trace
or read the agent or docker-init (both root), nor reach their stdin and stdout.

One call at a time. A call owns the container: when it ends (its main process exits, its
deadline passes, its disk budget is spent or the host hangs up) every other process in the
container is killed (kill(-1) by root reaches all but init and the agent) and /proc is checked
until none is left; the answer is sent only then, and says how many survived (the host
discards a container where any did). Before a call made under another grant than the one
before (`"fresh"`), every place the command uid can write besides the workspace (the tmpfs
mounts found in /proc/self/mountinfo, POSIX message queues, System V IPC) is emptied and checked
empty, so nothing planted by one grant's calls runs under another's.

Egress. When the set-up names an egress proxy (a Unix socket the host mounted into the
container, `environments.docker.egress`), the agent listens on 127.0.0.1:PORT in the container's own
network namespace (which has nothing but loopback) and relays each connection to that socket,
unread: the proxy decides where, if anywhere, it goes. Commands find it in HTTP(S)_PROXY.

Sync. In a container whose workspace is a volume the host keeps in step (a remote engine), a
writable call's changes go back to the host through the outbox (a second volume, root's only):
before the call the workspace is listed, after it (once every process of the call is gone) it
is listed again, and what changed is written there as a tar (`changes.tar`) with a summary
(`changes.json`: deleted paths, unreadable ones, whether the disk budget was exceeded), for the
host to fetch (or, when both are small, sent inline in the answer). Listing and reading happen
in a child that is the command uid, since the agent holds no capability to read what that uid
keeps private.

Protocol: one JSON document per line, each line `<HMAC-SHA256 hex> <JSON>` keyed by a secret
the host sends first (plain JSON: {"key": hex, "uid": int, "gid": int, "egress": {"port": int,
"socket": str} | null, "outbox": str | null}) over stdin, which no command can read. The MAC
covers a direction byte (b"H" host to agent, b"A" agent to host) and the JSON; request ids only
grow, and an answer carries its request's id, so a frame cannot be forged, reflected or
replayed.

    agent -> host, once at start:
        {"hello": PROTOCOL, "problem": str | null, "limits": {...}, "oom_counter": bool,
         "pids_counter": bool, "state_dirs": [str], "wipe_complete": bool, "pidfd": bool,
         "runas": bool, "bash": bool, "egress": bool}
    host -> agent, one per call:
        {"id": int, "argv": [str, ...], "cwd": str, "env": {str: str}, "stdin": base64 str,
         "timeout": float, "max_output": int, "fresh": bool, "disk_budget": int | null,
         "capability": {"digest": str, "files": {path: base64} | null} | null,
         "sync": bool, "unchanged": bool (nothing entered the volume since the last call)}
      or, to remove paths of the workspace volume (what the host deleted since it last synced):
        {"id": int, "delete": [relative path, ...]}
    agent -> host, one per call:
        {"id": int, "exit_code": int, "signal": int | null, "stdout": str, "stderr": str,
         "stdout_bytes": int, "stderr_bytes": int, "truncated": bool, "timed_out": bool,
         "oom_killed": bool, "pids_limit_hit": bool, "disk_used": int | null,
         "disk_budget_hit": bool, "survivors": int, "duration": float,
         "changes": {"entries": int, "files": int, "bytes": int, "deleted": int,
                     "over_budget": bool,
                     "inline": {"tar": base64 str, "summary": str} (small ones only)} | null}
      or, when the request could not be run at all:
        {"id": int, "error": str, "discard": bool, "ran": false (nothing of it started)}
      or, for a delete request: {"id": int, "deleted": int}

Output is capped per stream: the head and the tail are kept and the cut is marked.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import hashlib
import hmac
import json
import os
import platform
import selectors
import shutil
import signal
import socket
import stat
import subprocess
import tarfile
import threading
import time
from typing import Any

PROTOCOL = 3
WORKSPACE = "/workspace"
HOME = "/opt/codecoder"
SNAPSHOT_DIR = f"{HOME}/capability"
# Drops to the command's user and runs the command (runas.c); started with vfork, it costs a
# fraction of subprocess's own `user=`, which forks the whole interpreter.
RUNAS = f"{HOME}/runas-{platform.machine()}"
# The bundled interpreter's own loader (bundle.py): a program any image can execute, which is
# what tells that runas works.
LOADER = f"{HOME}/python/ld.so"
# Compound commands are keyed as bash parses them, so they run in bash or not at all.
BASH = "/bin/bash"

# After the main process is gone and everything else killed, how long to keep reading output
# that is already in flight.
DRAIN_SECONDS = 0.5
READ_CHUNK = 65536
# A writable call's changes (sync mode) go back inline in its answer when they are this small;
# larger ones are fetched from the outbox (the host's line cap leaves 1 MiB for the rest).
INLINE_TAR = 256 * 1024
INLINE_SUMMARY = 64 * 1024
MAX_REQUEST_LINE = 256 * 1024 * 1024
DISK_CHECK_SECONDS = 0.1
SURVIVOR_SECONDS = 2.0

# cgroup v1 and v2 spell the counters differently; the first readable file wins.
OOM_COUNTER_FILES = (
    ("/sys/fs/cgroup/memory.events", "oom_kill"),
    ("/sys/fs/cgroup/memory/memory.oom_control", "oom_kill"),
)
PIDS_COUNTER_FILES = (
    ("/sys/fs/cgroup/pids.events", "max"),
    ("/sys/fs/cgroup/pids/pids.events", "max"),
)
SYSV_IPC = ("/proc/sysvipc/shm", "/proc/sysvipc/sem", "/proc/sysvipc/msg")
UNLIMITED = 1 << 62

CAP_KILL, CAP_SETGID, CAP_SETUID, CAP_SETPCAP = 5, 6, 7, 8
AGENT_CAPABILITIES = (1 << CAP_KILL) | (1 << CAP_SETGID) | (1 << CAP_SETUID) | (1 << CAP_SETPCAP)
RUNAS_CAPABILITIES = (1 << CAP_SETGID) | (1 << CAP_SETUID) | (1 << CAP_SETPCAP)
PR_GET_DUMPABLE, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_GET_NO_NEW_PRIVS = 3, 4, 24, 39
IPC_RMID = 0
CAPABILITY_DOMAIN = b"codecoder-capability/1\0"

Message = dict[str, Any]
_libc = ctypes.CDLL(None, use_errno=True)


# --- the stream -------------------------------------------------------------------------------


class Channel:
    """The authenticated line protocol over stdin (fd 0) and stdout (fd 1)."""

    def __init__(self) -> None:
        self.key = b""
        self._buffer = bytearray()
        self.closed = False
        self._last_id = 0

    def read_available(self) -> None:
        """Read what stdin holds now (call when select says it is readable)."""
        data = os.read(0, READ_CHUNK)
        if not data:
            self.closed = True
        self._buffer += data
        if len(self._buffer) > MAX_REQUEST_LINE and b"\n" not in self._buffer:
            raise SystemExit("a request line is larger than the agent accepts")

    def next_line(self) -> bytes | None:
        """The next complete line, reading until one arrives; None at end of input."""
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line = bytes(self._buffer[:end])
                del self._buffer[: end + 1]
                return line
            if self.closed:
                return None
            self.read_available()

    def next_request(self) -> Message | None:
        while True:
            line = self.next_line()
            if line is None:
                return None
            message = self._open(line)
            if message is None:
                log("ignored a request with a bad MAC")
                continue
            request_id = message.get("id")
            if not isinstance(request_id, int) or request_id <= self._last_id:
                log(f"ignored a request replaying or reordering id {request_id!r}")
                continue
            self._last_id = request_id
            return message

    def _mac(self, direction: bytes, body: bytes) -> bytes:
        return hmac.new(self.key, direction + body, hashlib.sha256).hexdigest().encode()

    def _open(self, line: bytes) -> Message | None:
        mac, _, body = line.partition(b" ")
        if not hmac.compare_digest(mac, self._mac(b"H", body)):
            return None
        try:
            message = json.loads(body)
        except ValueError:
            return None
        return message if isinstance(message, dict) else None

    def send(self, message: Message) -> None:
        body = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode()
        view = memoryview(self._mac(b"A", body) + b" " + body + b"\n")
        while view:
            written = os.write(1, view)
            view = view[written:]


def log(text: str) -> None:
    with contextlib.suppress(OSError):
        os.write(2, f"codecoder agent: {text}\n".encode())


# --- what the agent checks at start -----------------------------------------------------------


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
    return None


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


def read_text(path: str) -> str | None:
    try:
        with open(path) as file:
            return file.read().strip()
    except OSError:
        return None


def proc_status(pid: int | str) -> dict[str, str]:
    fields: dict[str, str] = {}
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            fields[name] = value.strip()
    return fields


def read_counter(candidates: tuple[tuple[str, str], ...]) -> int | None:
    for path, key in candidates:
        try:
            with open(path) as counters:
                for line in counters:
                    name, _, value = line.partition(" ")
                    if name == key:
                        return int(value)
        except (OSError, ValueError):
            continue
    return None


def _limit(text: str | None) -> int | None:
    """A cgroup limit in bytes or units; None when unlimited ("max", -1, huge) or unreadable."""
    if text is None or text in ("max", "-1"):
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return None if value < 0 or value >= UNLIMITED else value


def limits() -> dict[str, Any]:
    """The memory, swap, pids and CPU limits as the kernel enforces them on this container."""
    swap_total = 0
    for line in (read_text("/proc/meminfo") or "").splitlines():
        if line.startswith("SwapTotal:"):
            swap_total = int(line.split()[1]) * 1024
    if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):  # v2
        memory = _limit(read_text("/sys/fs/cgroup/memory.max"))
        swap = _limit(read_text("/sys/fs/cgroup/memory.swap.max"))
        cpu = (read_text("/sys/fs/cgroup/cpu.max") or "max").split()
        quota, period = _limit(cpu[0]), _limit(cpu[1] if len(cpu) > 1 else None)
        return {
            "cgroup": "v2",
            "memory": memory,
            "memory_swap": memory + swap if memory is not None and swap is not None else None,
            "pids": _limit(read_text("/sys/fs/cgroup/pids.max")),
            "cpus": quota / period if quota and period else None,
            "swap_total": swap_total,
        }
    cpu_dir = next(
        (d for d in ("/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct") if os.path.isdir(d)),
        "/sys/fs/cgroup/cpu",
    )
    quota = _limit(read_text(f"{cpu_dir}/cpu.cfs_quota_us"))
    period = _limit(read_text(f"{cpu_dir}/cpu.cfs_period_us"))
    return {
        "cgroup": "v1",
        "memory": _limit(read_text("/sys/fs/cgroup/memory/memory.limit_in_bytes")),
        "memory_swap": _limit(read_text("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes")),
        "pids": _limit(read_text("/sys/fs/cgroup/pids/pids.max")),
        "cpus": quota / period if quota and period else None,
        "swap_total": swap_total,
    }


def mounts() -> list[tuple[str, str, str]]:
    """(mount point, options, filesystem type) of every mount this container sees."""
    found = []
    for line in (read_text("/proc/self/mountinfo") or "").splitlines():
        before, _, after = line.partition(" - ")
        fields = before.split()
        point = fields[4].encode().decode("unicode_escape")  # \040 and friends
        found.append((point, fields[5], after.split()[0]))
    return found


def writable_by(path: str, uid: int, gid: int) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode):
        return False
    if st.st_uid == uid:
        return bool(st.st_mode & stat.S_IWUSR)
    if st.st_gid == gid:
        return bool(st.st_mode & stat.S_IWGRP)
    return bool(st.st_mode & stat.S_IWOTH)


def state_directories(uid: int, gid: int) -> tuple[list[str], bool]:
    """Every directory outside the workspace the command uid can write, and whether that list
    is complete (it is not when the root filesystem is writable: any image directory could be).

    Walks each writable mount: they are small at start (empty tmpfs, /dev).
    """
    found: list[str] = []
    complete = True
    for point, options, fstype in mounts():
        if "rw" not in options.split(","):
            continue
        if point == "/":
            complete = False
            continue
        if point == WORKSPACE or point.startswith(WORKSPACE + "/") or fstype in ("proc", "sysfs"):
            continue
        if point == SNAPSHOT_DIR:
            continue
        for directory, subdirs, _ in os.walk(point):
            if writable_by(directory, uid, gid):
                found.append(directory)
                subdirs.clear()  # wiped as a whole
    return sorted(set(found)), complete


# --- state of earlier calls -------------------------------------------------------------------


def sysv_ids() -> list[tuple[str, int]]:
    ids = []
    for path in SYSV_IPC:
        for line in (read_text(path) or "").splitlines()[1:]:
            fields = line.split()
            if len(fields) > 1 and fields[1].isdigit():
                ids.append((path.rsplit("/", 1)[1], int(fields[1])))
    return ids


def leftovers(state_dirs: list[str]) -> list[str]:
    found = []
    for directory in state_dirs:
        with contextlib.suppress(OSError):
            found += [f"{directory}/{name}" for name in os.listdir(directory)]
    found += [f"System V {kind} {ident}" for kind, ident in sysv_ids()]
    return found


def _remove(path: str) -> None:
    st = os.lstat(path)
    if stat.S_ISDIR(st.st_mode):
        os.chmod(path, 0o700)
        for name in os.listdir(path):
            _remove(f"{path}/{name}")
        os.rmdir(path)
    else:
        os.unlink(path)


def _wipe_as(uid: int, gid: int, state_dirs: list[str]) -> None:
    """In a child: become the command uid (the owner of everything there) and remove it all."""
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid, uid, uid):
        os._exit(3)
    for directory in state_dirs:
        for name in os.listdir(directory):
            with contextlib.suppress(OSError):
                _remove(f"{directory}/{name}")
    for kind, ident in sysv_ids():
        if kind == "sem":
            _libc.semctl(ident, 0, IPC_RMID)
        elif kind == "shm":
            _libc.shmctl(ident, IPC_RMID, None)
        else:
            _libc.msgctl(ident, IPC_RMID, None)


def wipe(uid: int, gid: int, state_dirs: list[str]) -> str | None:
    """Empty every state directory and the IPC namespace; what is still there, or None."""
    if not leftovers(state_dirs):
        return None
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            _wipe_as(uid, gid, state_dirs)
            code = 0
        finally:
            os._exit(code)
    os.waitpid(pid, 0)
    left = leftovers(state_dirs)
    return ", ".join(left[:5]) if left else None


# --- as the command user ----------------------------------------------------------------------


def become(uid: int, gid: int) -> None:
    """Drop to `uid`:`gid` alone, for good (in a child of the agent)."""
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid):
        os._exit(3)


def as_user(uid: int, gid: int, function: Any, *args: Any) -> Any:
    """`function(*args)`, run in a child that is the command user: what it returns (as JSON).

    Used for what the agent must not do with its own identity: reading and removing what the
    command user owns, which may be private to it."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read)
            become(uid, gid)
            data = json.dumps(function(*args)).encode()
            view = memoryview(data)
            while view:
                view = view[os.write(write, view) :]
            code = 0
        except BaseException as exc:  # the child must never return into the agent's loop
            log(f"{function.__name__} failed as the command user: {type(exc).__name__}: {exc}")
        finally:
            os._exit(code)
    os.close(write)
    chunks = []
    while True:
        chunk = os.read(read, READ_CHUNK)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        raise RuntimeError(f"{function.__name__} failed as the command user (status {status})")
    return json.loads(b"".join(chunks))


# --- the workspace volume (sync mode) ---------------------------------------------------------


def listing(root: str) -> dict[str, list[Any]]:
    """Every entry beneath `root`: relative path -> [kind, mode, size, mtime_ns, ctime_ns,
    inode, link target]. kind: d(irectory), f(ile), l(ink), o(ther); a directory that cannot
    be listed is kind u. No symlink is followed. A ctime cannot be set back by anyone but the
    clock, so an entry whose listing is unchanged was not written."""
    found: dict[str, list[Any]] = {}
    pending = [""]
    while pending:
        relative = pending.pop()
        try:
            with os.scandir(f"{root}/{relative}" if relative else root) as entries:
                items = list(entries)
        except OSError:
            if relative:
                found[relative][0] = "u"
            continue
        for entry in items:
            path = f"{relative}/{entry.name}" if relative else entry.name
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            mode = st.st_mode
            kind = (
                "d"
                if stat.S_ISDIR(mode)
                else "f"
                if stat.S_ISREG(mode)
                else "l"
                if stat.S_ISLNK(mode)
                else "o"
            )
            link = os.readlink(entry.path) if kind == "l" else None
            found[path] = [
                kind,
                stat.S_IMODE(mode),
                st.st_size,
                st.st_mtime_ns,
                st.st_ctime_ns,
                st.st_ino,
                link,
            ]
            if kind == "d":
                pending.append(path)
    return found


def _changed(old: list[Any] | None, new: list[Any]) -> bool:
    if old is None or old[0] != new[0]:
        return True
    if new[0] == "d":
        return bool(old[1] != new[1])  # what changes inside a directory is listed on its own
    return old != new


def write_changes(
    before: dict[str, list[Any]], tar_fd: int, summary_fd: int, budget: int | None
) -> Message:
    """What changed in the workspace since `before`, as a tar (regular files, directories,
    symlinks) and a summary; stops adding files once they exceed `budget` bytes. Returns the
    counts and the listing it compared with (the next call's `before`, while nothing else
    changes the volume)."""
    after = listing(WORKSPACE)
    changed = sorted(p for p, entry in after.items() if _changed(before.get(p), entry))
    # What lies in a directory that can no longer be listed is unknown, not deleted.
    hidden = tuple(f"{p}/" for p, entry in after.items() if entry[0] == "u")
    deleted = sorted(p for p in before if p not in after and not p.startswith(hidden))
    unreadable, skipped = [p.rstrip("/") for p in hidden], []
    total = files = entries = 0
    over = False
    with (
        os.fdopen(tar_fd, "wb", closefd=False) as out,
        tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar,
    ):
        for path in changed:
            kind, mode, size, mtime_ns = after[path][:4]
            info = tarfile.TarInfo(path)
            info.mode, info.mtime = mode, mtime_ns // 1_000_000_000
            if kind in ("d", "u"):
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
                entries += 1
            elif kind == "l":
                info.type, info.linkname = tarfile.SYMTYPE, after[path][6]
                tar.addfile(info)
                entries += 1
            elif kind == "f":
                if budget is not None and total + size > budget:
                    over = True
                    break
                try:
                    with open(f"{WORKSPACE}/{path}", "rb") as source:
                        info.size = os.fstat(source.fileno()).st_size
                        tar.addfile(info, source)
                except OSError:
                    unreadable.append(path)
                    continue
                total += info.size
                files += 1
                entries += 1
            else:
                skipped.append(path)  # FIFOs, sockets, devices never leave the sandbox
    summary = {"deleted": deleted, "unreadable": unreadable, "skipped": skipped, "over": over}
    data = json.dumps(summary).encode()
    while data:
        data = data[os.write(summary_fd, data) :]
    return {
        "summary": {
            "entries": entries,
            "files": files,
            "bytes": total,
            "deleted": len(deleted),
            "over_budget": over,
        },
        "after": after,
    }


def delete_paths(paths: list[str]) -> int:
    """Remove these workspace paths (what the host deleted since its last sync)."""
    removed = 0
    for relative in paths:
        parts = relative.split("/")
        if not relative or relative.startswith("/") or ".." in parts or "" in parts:
            continue
        path = f"{WORKSPACE}/{relative}"
        try:
            if stat.S_ISDIR(os.lstat(path).st_mode):
                shutil.rmtree(path)
            else:
                os.unlink(path)
            removed += 1
        except FileNotFoundError:
            pass
    return removed


# --- egress -----------------------------------------------------------------------------------


class Relay:
    """127.0.0.1:PORT (and [::1]:PORT) inside the container, relayed to the host's egress proxy.

    The container's network namespace has loopback only; this is its one way out. Bytes are
    copied, never read: the proxy on the host decides where a connection may go. Listening
    starts before any command runs, so no command can take the port first."""

    MAX_CONNECTIONS = 128

    def __init__(self, port: int, target: str) -> None:
        self.target = target
        self.active = threading.BoundedSemaphore(self.MAX_CONNECTIONS)
        self.listeners = []
        for family, address in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
            listener = socket.socket(family, socket.SOCK_STREAM)
            try:
                listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                listener.bind((address, port))
                listener.listen(64)
            except OSError:
                listener.close()
                if family == socket.AF_INET:
                    raise
                continue  # no IPv6 loopback in this container
            self.listeners.append(listener)
        for listener in self.listeners:
            threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                continue
            if not self.active.acquire(blocking=False):
                client.close()  # a command opening connections without end gets no more
                continue
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(self.target)
            back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
            back.start()
            _pump(client, upstream)
            back.join()
        except OSError as exc:
            log(f"the egress proxy cannot be reached: {exc}")
        finally:
            client.close()
            upstream.close()
            self.active.release()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(READ_CHUNK):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


def self_check() -> str | None:
    """What the agent needs of this image, checked when the image is built (install.py)."""
    if not os.access(RUNAS, os.X_OK):
        return f"{RUNAS} is missing or not executable (only x86_64 and aarch64 are built)"
    if not os.access(LOADER, os.X_OK):
        return f"{LOADER}, the bundled interpreter's loader, is missing"
    if not os.path.exists("/proc/self/status"):
        return "/proc is not mounted while building (the agent reads it at run time)"
    try:
        b"\\040".decode("unicode_escape")  # how mount points with spaces are read
    except LookupError as exc:
        return f"the bundled standard library is incomplete: {exc}"
    return None


# --- processes --------------------------------------------------------------------------------


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


def identity_problem(pid: int, uid: int, gid: int) -> str | None:
    status = proc_status(pid)
    ids = f"{uid}\t{uid}\t{uid}\t{uid}", f"{gid}\t{gid}\t{gid}\t{gid}"
    if (status.get("Uid"), status.get("Gid")) != ids or status.get("Groups"):
        return f"the command did not run as {uid}:{gid} alone ({status.get('Uid')!r})"
    caps = [status.get(name) for name in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")]
    if any(value != "0" * 16 for value in caps):
        return f"the command kept capabilities ({caps})"
    return None


class Capture:
    """Keep the first and the last bytes of a stream, counting what falls in between."""

    def __init__(self, cap: int) -> None:
        self.head_cap = cap // 2
        self.tail_cap = cap - self.head_cap
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            excess = len(self.tail) - self.tail_cap
            if excess > 0:
                del self.tail[:excess]

    @property
    def truncated(self) -> bool:
        return self.total > len(self.head) + len(self.tail)

    def text(self) -> str:
        if not self.truncated:
            # Decoded in one piece, so a character split between head and tail stays whole.
            return (self.head + self.tail).decode(errors="replace")
        dropped = self.total - len(self.head) - len(self.tail)
        return (
            self.head.decode(errors="replace")
            + f"\n[... {dropped} bytes truncated ...]\n"
            + self.tail.decode(errors="replace")
        )


class ExitWatch:
    """Readable when a child exits: a pidfd, or (where pidfd_open is missing, e.g. gVisor) the
    wake-up pipe of a SIGCHLD handler."""

    def __init__(self) -> None:
        self.pidfd_works = True
        try:
            os.close(os.pidfd_open(os.getpid()))
        except (AttributeError, OSError):
            self.pidfd_works = False
            self._read, write = os.pipe()
            os.set_blocking(self._read, False)
            os.set_blocking(write, False)
            signal.signal(signal.SIGCHLD, lambda *_: None)
            signal.set_wakeup_fd(write)

    def open(self, pid: int) -> int:
        return os.pidfd_open(pid) if self.pidfd_works else self._read

    def exited(self, fd: int, proc: subprocess.Popen[bytes]) -> bool:
        if self.pidfd_works:
            return True
        with contextlib.suppress(BlockingIOError):
            os.read(fd, 4096)
        return proc.poll() is not None

    def close(self, fd: int) -> None:
        if self.pidfd_works:
            os.close(fd)


# --- one call ---------------------------------------------------------------------------------


def workspace_used() -> int | None:
    try:
        st = os.statvfs(WORKSPACE)
    except OSError:
        return None
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def capability_digest(root: str) -> str:
    """The digest runtime.config.capabilities gives these files (read back from where they run)."""
    files: dict[str, bytes] = {}
    for directory, _, names in os.walk(root):
        for name in names:
            path = os.path.join(directory, name)
            with open(path, "rb") as file:
                files[os.path.relpath(path, root)] = file.read()
    hasher = hashlib.sha256(CAPABILITY_DOMAIN)
    for path in sorted(files):
        encoded, data = path.encode("utf-8"), files[path]
        hasher.update(len(encoded).to_bytes(8, "big") + encoded)
        hasher.update(len(data).to_bytes(8, "big"))
        hasher.update(data)
    return "sha256:" + hasher.hexdigest()


class Agent:
    def __init__(self, channel: Channel, uid: int, gid: int, outbox: str | None = None) -> None:
        self.channel = channel
        self.uid = uid
        self.gid = gid
        self.outbox = outbox
        self.listing: dict[str, list[Any]] | None = None  # the workspace after the last call
        self.state_dirs, self.wipe_complete = state_directories(uid, gid)
        self.exits = ExitWatch()
        self.snapshot_digest: str | None = None
        self.runas = False
        self.relay: Relay | None = None

    def choose_launcher(self) -> str | None:
        """Start commands through runas where it works; else through subprocess's `user=`
        (from a fork of this process: then nothing executed needs a capability)."""
        self.runas = self._runas_works()
        return None if self.runas else drop_bounding_set(keep=0)

    def _runas_works(self) -> bool:
        try:
            done = subprocess.run(
                [RUNAS, str(self.uid), str(self.gid), "/", LOADER, "--version"],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=10,
            )
        except (OSError, subprocess.SubprocessError):
            return False
        return done.returncode == 0

    def hello(self, problem: str | None) -> Message:
        return {
            "hello": PROTOCOL,
            "problem": problem,
            "limits": limits(),
            "oom_counter": read_counter(OOM_COUNTER_FILES) is not None,
            "pids_counter": read_counter(PIDS_COUNTER_FILES) is not None,
            "state_dirs": self.state_dirs,
            "wipe_complete": self.wipe_complete,
            "pidfd": self.exits.pidfd_works,
            "runas": self.runas,
            "bash": os.path.exists(BASH),
            "egress": self.relay is not None,
        }

    def serve(self, request: Message) -> Message:
        if "delete" in request:
            self.listing = None
            return {"deleted": as_user(self.uid, self.gid, delete_paths, request["delete"])}
        if request.get("fresh"):
            left = wipe(self.uid, self.gid, self.state_dirs)
            if left is not None:
                return {
                    "error": f"what earlier calls left could not be removed: {left}",
                    "discard": True,
                    "ran": False,
                }
        capability = request.get("capability")
        if capability is not None:
            problem = self.place_snapshot(capability)
            if problem is not None:
                return {"error": problem}
        if not (request.get("sync") and self.outbox):
            return self.run(request)
        # The host says when nothing went into the volume since this agent last listed it
        # (after its last writable call): that listing is then the one before this call.
        before = self.listing if request.get("unchanged") else None
        self.listing = None
        if before is None:
            before = as_user(self.uid, self.gid, listing, WORKSPACE)
        response = self.run(request)
        budget = request.get("disk_budget")
        response["changes"] = self.collect_changes(before, budget)
        return response

    def collect_changes(self, before: dict[str, list[Any]], budget: int | None) -> Message:
        """Write what the call changed in the workspace to the outbox, for the host to fetch."""
        assert self.outbox is not None
        paths = {name: f"{self.outbox}/{name}" for name in ("changes.tar", "changes.json")}
        for path in paths.values():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        # Opened here, as root, in a directory only root can reach; written by the child.
        files = {
            name: os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            for name, path in paths.items()
        }
        try:
            written = as_user(
                self.uid,
                self.gid,
                write_changes,
                before,
                files["changes.tar"],
                files["changes.json"],
                budget,
            )
        finally:
            for descriptor in files.values():
                os.close(descriptor)
        changes = dict(written["summary"])
        self.listing = written["after"]
        # Small change sets (most calls) ride on the answer: fetching the outbox through the
        # engine's archive API costs tens of milliseconds. The host checks them the same way.
        sizes = {name: os.stat(path).st_size for name, path in paths.items()}
        if sizes["changes.tar"] <= INLINE_TAR and sizes["changes.json"] <= INLINE_SUMMARY:
            with open(paths["changes.tar"], "rb") as tar, open(paths["changes.json"], "rb") as js:
                changes["inline"] = {
                    "tar": base64.b64encode(tar.read()).decode(),
                    "summary": js.read().decode(),
                }
        return changes

    def place_snapshot(self, capability: Message) -> str | None:
        files = capability.get("files")
        if files is not None:
            self.snapshot_digest = None
            for name in os.listdir(SNAPSHOT_DIR):
                path = os.path.join(SNAPSHOT_DIR, name)
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)
                else:
                    os.unlink(path)
            for relative, encoded in files.items():
                parts = relative.split("/")
                if relative.startswith("/") or ".." in parts or "" in parts:
                    return f"refusing capability file name {relative!r}"
                path = os.path.join(SNAPSHOT_DIR, *parts)
                os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
                descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o555)
                with os.fdopen(descriptor, "wb") as file:
                    file.write(base64.b64decode(encoded))
            self.snapshot_digest = capability_digest(SNAPSHOT_DIR)
        if self.snapshot_digest != capability.get("digest"):
            return (
                f"the capability's snapshot has digest {self.snapshot_digest}, not the approved "
                f"{capability.get('digest')}"
            )
        return None

    def run(self, request: Message) -> Message:
        argv = request["argv"]
        cwd = request["cwd"]
        timeout = float(request["timeout"])
        cap = int(request["max_output"])
        budget = request.get("disk_budget")
        stdin = base64.b64decode(request.get("stdin") or "")
        env = dict(os.environ)
        env.update(request.get("env") or {})
        # runas enters the working directory as the command user (a workspace only its owner
        # may enter is entered by its owner); the agent itself, root without CAP_DAC_OVERRIDE,
        # may not be able to, so it checks only what it can see.
        if not self.runas and not os.path.isdir(cwd):
            return {"error": f"working directory {cwd} does not exist in the sandbox"}

        oom_before = read_counter(OOM_COUNTER_FILES)
        pids_before = read_counter(PIDS_COUNTER_FILES)
        used_before = workspace_used() if budget is not None else None
        started = time.monotonic()
        # As the command's user, with no supplementary group and no capability left (the
        # bounding set is empty and none survives the uid change; runas checks, or CPython
        # checks each step of `user=` where runas cannot run), in a new session, with no
        # descriptor but its own pipes.
        drop: dict[str, Any] = (
            {} if self.runas else {"user": self.uid, "group": self.gid, "extra_groups": []}
        )
        command = [RUNAS, str(self.uid), str(self.gid), cwd, *argv] if self.runas else argv
        try:
            proc = subprocess.Popen(
                command,
                cwd=None if self.runas else cwd,
                env=env,
                stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                close_fds=True,
                **drop,
            )
        except FileNotFoundError:
            return finished(127, f"{argv[0]}: command not found\n", started)
        except PermissionError:
            return finished(126, f"{argv[0]}: permission denied\n", started)
        except (OSError, subprocess.SubprocessError) as exc:
            return {"error": f"cannot start {argv[0]}: {getattr(exc, 'strerror', None) or exc}"}

        problem = None if self.runas else identity_problem(proc.pid, self.uid, self.gid)
        if problem is not None:
            kill_all()
            proc.wait()
            return {"error": problem, "discard": end_everything() > 0}

        assert proc.stdout is not None and proc.stderr is not None  # both are PIPE above
        out, err = Capture(cap), Capture(cap)
        captures = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
        selector = selectors.DefaultSelector()
        for fd in captures:
            selector.register(fd, selectors.EVENT_READ)
        exit_fd = self.exits.open(proc.pid)
        selector.register(exit_fd, selectors.EVENT_READ)
        if not self.channel.closed:
            selector.register(0, selectors.EVENT_READ)
        pending_stdin = memoryview(stdin)
        if proc.stdin is not None:
            os.set_blocking(proc.stdin.fileno(), False)
            selector.register(proc.stdin.fileno(), selectors.EVENT_WRITE)

        deadline = started + timeout
        next_disk_check = started + DISK_CHECK_SECONDS
        drain_until: float | None = None
        timed_out = budget_hit = False

        def stop(now: float) -> None:
            nonlocal drain_until
            if drain_until is None:
                kill_all()
                drain_until = now + DRAIN_SECONDS

        try:
            while len(selector.get_map()) > (0 in selector.get_map()):
                now = time.monotonic()
                if drain_until is None and now >= deadline:
                    timed_out = True
                    stop(now)
                if budget is not None and used_before is not None and now >= next_disk_check:
                    next_disk_check = now + DISK_CHECK_SECONDS
                    used = workspace_used()
                    if used is not None and used - used_before > budget:
                        budget_hit = True
                        stop(now)
                if drain_until is not None and now >= drain_until:
                    break
                limit = (deadline if drain_until is None else drain_until) - now
                if budget is not None:
                    limit = min(limit, next_disk_check - now)
                for key, _ in selector.select(timeout=max(limit, 0)):
                    fd = key.fd
                    if fd == exit_fd:
                        if self.exits.exited(fd, proc):
                            selector.unregister(fd)
                            stop(time.monotonic())
                    elif fd == 0:
                        self.channel.read_available()
                        if self.channel.closed:  # the host is gone: so is the call
                            selector.unregister(0)
                            stop(time.monotonic())
                    elif fd in captures:
                        data = os.read(fd, READ_CHUNK)
                        if data:
                            captures[fd].feed(data)
                        else:
                            selector.unregister(fd)
                    else:
                        try:
                            written = os.write(fd, pending_stdin[:READ_CHUNK])
                            pending_stdin = pending_stdin[written:]
                        except BrokenPipeError:
                            pending_stdin = pending_stdin[:0]
                        if not pending_stdin and proc.stdin is not None:
                            selector.unregister(fd)
                            proc.stdin.close()
        finally:
            selector.close()
            self.exits.close(exit_fd)
            kill_all()
            proc.wait()
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None and not stream.closed:
                    stream.close()
        survivors = end_everything()

        code = proc.returncode
        sig = -code if code < 0 else None
        oom_after = read_counter(OOM_COUNTER_FILES)
        pids_after = read_counter(PIDS_COUNTER_FILES)
        used_after = workspace_used() if used_before is not None else None
        # SIGKILL reaches the call either directly (exit by signal 9) or through a shell that
        # reports its killed child as 137; only with a new OOM kill in the cgroup is it an OOM.
        killed = sig == signal.SIGKILL or code == 128 + signal.SIGKILL
        oom = (
            killed
            and not timed_out
            and oom_before is not None
            and oom_after is not None
            and oom_after > oom_before
        )
        disk_used = (
            used_after - used_before if used_after is not None and used_before is not None else None
        )
        return {
            "exit_code": 128 + sig if sig is not None else code,
            "signal": sig,
            "stdout": out.text(),
            "stderr": err.text(),
            "stdout_bytes": out.total,
            "stderr_bytes": err.total,
            "truncated": out.truncated or err.truncated,
            "timed_out": timed_out,
            "oom_killed": oom,
            "pids_limit_hit": (
                pids_before is not None and pids_after is not None and pids_after > pids_before
            ),
            "disk_used": disk_used,
            "disk_budget_hit": budget_hit
            or (budget is not None and disk_used is not None and disk_used > budget),
            "survivors": survivors,
            "duration": time.monotonic() - started,
        }


def finished(code: int, stderr: str, started: float) -> Message:
    return {
        "exit_code": code,
        "signal": None,
        "stdout": "",
        "stderr": stderr,
        "stdout_bytes": 0,
        "stderr_bytes": len(stderr.encode()),
        "truncated": False,
        "timed_out": False,
        "oom_killed": False,
        "pids_limit_hit": False,
        "disk_used": None,
        "disk_budget_hit": False,
        "survivors": end_everything(),
        "duration": time.monotonic() - started,
    }


def main() -> None:
    channel = Channel()
    first = channel.next_line()
    if first is None:
        return
    try:
        setup = json.loads(first)
        channel.key = bytes.fromhex(setup["key"])
        uid, gid = int(setup["uid"]), int(setup["gid"])
        egress = setup.get("egress")
        outbox = setup.get("outbox")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        log(f"unreadable set-up line: {exc}")
        return
    if len(channel.key) < 32:
        log("the session key is too short")
        return
    problem = harden()
    if problem is None and (uid == 0 or gid == 0):
        problem = "commands never run as root (uid or gid 0): the agent must stay out of reach"
    agent = Agent(channel, uid, gid, outbox if isinstance(outbox, str) else None)
    if problem is None:
        problem = agent.choose_launcher()
    if problem is None and egress:
        try:
            agent.relay = Relay(int(egress["port"]), str(egress["socket"]))
        except (OSError, KeyError, TypeError, ValueError) as exc:
            problem = f"cannot listen for the egress relay: {exc}"
    channel.send(agent.hello(problem))
    if problem is not None:
        return
    while True:
        request = channel.next_request()
        if request is None:
            break
        try:
            response = agent.serve(request)
        except Exception as exc:  # one bad request must not take the warm container down
            response = {
                "error": f"agent failure: {type(exc).__name__}: {exc}",
                "discard": end_everything() > 0,
            }
        response["id"] = request["id"]
        channel.send(response)
    # stdin closes when the host detaches (it attached with stdin_once) or dies.
    kill_all()


if __name__ == "__main__":
    main()
