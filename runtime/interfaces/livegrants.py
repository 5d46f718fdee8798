"""The session grants of running processes, where `codecoder allowlist` can see and revoke them.

A process that holds a session (`codecoder serve`, `codecoder session`, a running `call` or
`replay`) publishes its session grants, each with its tool, entry, environment, expiry and
origin (`answer`, `--allow`), in the runtime's state directory:

    $XDG_STATE_HOME/codecoder/projects/<id>/sessions/<pid>.json     (0600, in 0700 directories)

written whole (temp file and rename) after every change, and removed when the process ends. A
file whose process is gone, or whose pid now names another process (its start time differs),
is stale: it is ignored and removed. Nothing in the workspace can reach it, so no tool can
forge or hide a grant there; the runtime's own user reads it.

A file is believed only as far as the kernel confirms it (`LiveProcess.find`): its name and its
content name the same pid, a real one (above 1: 0 and negative numbers address process groups,
1 is init), alive, of this user, started when the file says. A damaged or forged file is not
shown, and nothing is signalled on its word; a process is signalled through a pidfd opened and
then checked again, so not even a pid reused in between is hit.

Revoking. `codecoder allowlist revoke KEY` leaves a request beside the file
(`<pid>.revoke.<token>.json`, one per request, so none is lost to another) and sends the process
SIGUSR1; the process drops the grant, removes the request and publishes again, which is how the
revoker knows it was done. A process installs its SIGUSR1 handler before it first publishes, so
a published process never meets the signal's default action (which ends it).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codecoder.foundation.atomicfile import temporary_name
from codecoder.foundation.regularfile import STATE_FILE_LIMIT, read_regular_file
from codecoder.foundation.state import project_state_directory
from codecoder.permissions.allowlist import SessionAllowlist

__all__ = [
    "LiveProcess",
    "Published",
    "Publisher",
    "is_alive",
    "live_sessions",
    "published",
    "revoke_live",
    "start_time",
]

SESSIONS = "sessions"
REVOKE_WAIT = 5.0  # seconds a revoker waits for a process to confirm


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), to tell a reused pid apart."""
    if not _real_pid(pid):
        return None
    try:
        stat = read_regular_file(f"/proc/{pid}/stat", limit=4096).decode(errors="replace")
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: fields after its last ')'.
    fields = stat.rpartition(")")[2].split()
    return fields[19] if len(fields) > 19 else None


def _real_pid(pid: object) -> bool:
    """A number that names one process other than init: 0 and negative numbers name process
    groups (or every process), and a bool is not a pid."""
    return isinstance(pid, int) and not isinstance(pid, bool) and 1 < pid < 1 << 22


def is_alive(pid: int) -> bool | None:
    """True, False, or None for a process of another user (neither ours to signal nor clean)."""
    if not _real_pid(pid):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return None
    try:
        owner = os.stat(f"/proc/{pid}").st_uid
    except FileNotFoundError:
        return False
    except OSError:
        return None
    # Root may signal anyone: whose the process is, the kernel says in /proc.
    return True if owner == os.geteuid() else None


@dataclass(frozen=True, slots=True)
class LiveProcess:
    """A process a state file names, confirmed by the kernel (see the module docstring)."""

    pid: int
    started: str

    @classmethod
    def find(cls, pid: object, started: object) -> LiveProcess | bool | None:
        """The process a file names (`pid`, its `started` time), if it is a live process of
        this user started then; False when the file is stale (that process is gone: the file
        may be removed); None when it is not ours to judge (another user's process)."""
        if not _real_pid(pid) or not isinstance(started, str) or not started:
            return False
        assert isinstance(pid, int)
        alive = is_alive(pid)
        if alive is None:
            return None
        if not alive or start_time(pid) != started:
            return False
        return cls(pid, started)

    def signal(self, signum: int) -> bool:
        """Send `signum` to this very process (a pidfd, checked after it was opened); False
        when it is gone."""
        try:
            pidfd = os.pidfd_open(self.pid)
        except OSError:
            return False
        try:
            if start_time(self.pid) != self.started:
                return False  # the pid was reused between the check and the pidfd
            signal.pidfd_send_signal(pidfd, signum)
        except ProcessLookupError:
            return False
        finally:
            os.close(pidfd)
        return True


def _write(path: Path, data: bytes) -> None:
    """`data` at `path`, whole or not at all (a temp file renamed), readable by this user only.
    Not synced to disk: what it records lives only as long as the process anyway."""
    temporary = path.with_name(temporary_name(path))
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def sessions_directory(project: Path) -> Path:
    return project_state_directory(project) / SESSIONS


@dataclass(frozen=True, slots=True)
class Published:
    """What one running process published: its pid, what it is (`codecoder serve`), since
    when, and its grants (`tool`, `entry`, `environment`, `expiry`, `origin`, `granted`)."""

    pid: int
    kind: str
    since: float
    grants: tuple[dict[str, Any], ...]
    path: Path
    process: LiveProcess

    def holds(self, entry: str) -> bool:
        return any(grant.get("entry") == entry for grant in self.grants)


class Publisher:
    """Publishes one session's grants while its process runs, and applies revocations.

    `start()` once the SIGUSR1 handler is in place (`published()` installs one for a process
    whose main thread holds the session; the MCP server handles the signal in its event loop
    and calls `apply_revocations`)."""

    def __init__(self, project: Path, kind: str, allowlist: SessionAllowlist) -> None:
        self.directory = sessions_directory(project)
        self.kind = kind
        self.allowlist = allowlist
        self.pid = os.getpid()
        self.path = self.directory / f"{self.pid}.json"
        self._since = time.time()
        # Reentrant: a revocation's signal may arrive while this thread publishes.
        self._lock = threading.RLock()
        self._started = False

    def start(self) -> None:
        self._started = True
        self.allowlist.on_change = self.publish
        self.publish()

    def publish(self) -> None:
        """Write the grants as they are now (nothing while there are none and nothing was
        published): a process that never granted anything leaves no file."""
        if not self._started:
            return
        grants = [
            {
                "tool": g.tool,
                "entry": g.entry,
                "environment": g.environment.value,
                "expiry": g.expiry,
                "origin": g.origin,
                "granted": g.granted,
            }
            for g in self.allowlist.granted()
        ]
        with self._lock:
            if not grants and not self.path.exists():
                return
            record = {
                "pid": self.pid,
                "started": start_time(self.pid),
                "kind": self.kind,
                "since": self._since,
                "grants": grants,
            }
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            _write(self.path, json.dumps(record, indent=1).encode())

    def apply_revocations(self) -> list[str]:
        """Drop every grant a revoker asked for; returns the entries dropped."""
        dropped: list[str] = []
        for request in sorted(self.directory.glob(f"{self.pid}.revoke.*.json")):
            try:
                entry = json.loads(read_regular_file(request, limit=STATE_FILE_LIMIT)).get("entry")
            except (OSError, ValueError, AttributeError):
                entry = None
            if isinstance(entry, str) and self.allowlist.revoke(entry):
                dropped.append(entry)
            request.unlink(missing_ok=True)
        self.publish()  # also when nothing was held: the revoker waits for the file
        return dropped

    def close(self) -> None:
        self._started = False
        if self.allowlist.on_change == self.publish:
            self.allowlist.on_change = None
        self.path.unlink(missing_ok=True)
        for request in self.directory.glob(f"{self.pid}.revoke.*.json"):
            request.unlink(missing_ok=True)


@contextlib.contextmanager
def published(project: Path, kind: str, allowlist: SessionAllowlist) -> Iterator[Publisher]:
    """Publish `allowlist` while the block runs, revocations applied on SIGUSR1 (main thread
    only; elsewhere nothing is published, since no handler could be installed)."""
    publisher = Publisher(project, kind, allowlist)
    if threading.current_thread() is not threading.main_thread():
        yield publisher
        return

    def on_signal(signum: int, frame: object) -> None:
        publisher.apply_revocations()

    previous = signal.signal(signal.SIGUSR1, on_signal)
    try:
        publisher.start()
        yield publisher
    finally:
        publisher.close()
        signal.signal(signal.SIGUSR1, previous)


def live_sessions(project: Path) -> list[Published]:
    """What the project's running processes published, each confirmed by the kernel (see the
    module docstring); stale and damaged files are removed."""
    directory = sessions_directory(project)
    found: list[Published] = []
    for path in sorted(directory.glob("[0-9]*.json")):
        if ".revoke." in path.name:
            continue
        try:
            record = json.loads(read_regular_file(path, limit=STATE_FILE_LIMIT))
            named = int(path.name.removesuffix(".json"))
            pid = record["pid"]
            grants = tuple(g for g in record.get("grants", ()) if isinstance(g, dict))
            kind = str(record.get("kind") or "a codecoder process")
            since = float(record.get("since") or 0.0)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            _remove(directory, path)
            continue
        process = LiveProcess.find(pid, record.get("started")) if pid == named else False
        if process is None:
            continue  # another user's process: neither ours to show, signal nor clean
        if process is False:
            _remove(directory, path, pid if _real_pid(pid) and pid == named else None)
            continue
        assert isinstance(process, LiveProcess)
        found.append(Published(process.pid, kind, since, grants, path, process))
    return found


def _remove(directory: Path, path: Path, pid: int | None = None) -> None:
    """Remove a stale or damaged session file (and the requests left for its process)."""
    with contextlib.suppress(OSError):
        path.unlink(missing_ok=True)
    for request in directory.glob(f"{pid}.revoke.*.json") if pid is not None else ():
        request.unlink(missing_ok=True)


def revoke_live(
    project: Path, entry: str, wait: float = REVOKE_WAIT
) -> tuple[list[Published], list[Published]]:
    """Ask every running process that holds `entry` to drop it; returns (the processes that
    confirmed, those that did not within `wait` seconds)."""
    holders = [p for p in live_sessions(project) if p.holds(entry)]
    for holder in holders:
        request = holder.path.with_name(f"{holder.pid}.revoke.{secrets.token_hex(8)}.json")
        _write(request, json.dumps({"entry": entry}).encode())
        holder.process.signal(signal.SIGUSR1)
    confirmed: list[Published] = []
    pending = list(holders)
    deadline = time.monotonic() + wait
    while pending and time.monotonic() < deadline:
        time.sleep(0.05)
        current = {p.pid: p for p in live_sessions(project)}
        for holder in list(pending):
            now = current.get(holder.pid)
            if now is None or not now.holds(entry):
                confirmed.append(holder)
                pending.remove(holder)
    return confirmed, pending
