"""One command, run as the workspace user: started, fed, read, timed and ended with its call.

Every command runs through runas (runas.c), started with vfork, as the unprivileged workspace
uid: an empty bounding set, no supplementary groups, no capability left, a new session, no
descriptor but its own pipes. A command can therefore not signal, trace or read the agent or
docker-init (both root), nor reach their stdin and stdout. Where runas cannot run, subprocess's
`user=` drops to that uid from a fork of the agent (slower; the agent then checks the result).

The call ends when its main process exits, its deadline passes, its disk budget is spent (what
it wrote: diskbudget.py) or the host hangs up; then every other process is killed
(processes.py) before the answer is made.

A request with `"stream": true` has its output sent as it comes, in `output` lines before the
answer (`OutputStream`), so the host can show it and keep it should the call be interrupted.
"""

from __future__ import annotations

import base64
import os
import selectors
import signal
import subprocess
import time
from typing import Any

from capture import Capture
from cgroups import OOM_COUNTER_FILES, PIDS_COUNTER_FILES, read_counter
from channel import READ_CHUNK, Channel, Message
from diskbudget import DiskBudget
from exitwatch import ExitWatch
from image import LOADER, RUNAS
from processes import end_everything, kill_all
from procfs import proc_status

# After the main process is gone and everything else killed, how long to keep reading output
# that is already in flight.
DRAIN_SECONDS = 0.5
DISK_CHECK_SECONDS = 0.1
# Output is streamed once the call has run this long, then at most this often: a short call
# (most calls) sends nothing but its answer.
STREAM_EVERY = 0.1
# At most this much of each stream per `output` line; what came on top is counted, not sent.
STREAM_CHUNK = 64 * 1024


class OutputStream:
    """A call's output sent to the host as it comes (channel.py: the `output` lines).

    Nothing is sent in the call's first `STREAM_EVERY` seconds, then what arrived is sent at
    most every `STREAM_EVERY` seconds, each stream's piece capped at `STREAM_CHUNK` bytes (its
    last bytes; what was left out is counted in `skipped`). Once anything was sent, everything
    left is sent before the answer (`finish`), so the host has the whole stream or none of it.
    """

    def __init__(self, channel: Channel, request_id: int, fds: dict[int, str], now: float):
        self.channel = channel
        self.request_id = request_id
        self.names = fds
        self.pending = {fd: bytearray() for fd in fds}
        self.skipped = dict.fromkeys(fds, 0)
        self.due = now + STREAM_EVERY
        self.started = False

    def feed(self, fd: int, data: bytes) -> None:
        pending = self.pending[fd]
        pending += data
        excess = len(pending) - STREAM_CHUNK
        if excess > 0:
            del pending[:excess]
            self.skipped[fd] += excess

    def wait(self, now: float) -> float | None:
        """Seconds until something is due to be sent; None when nothing waits."""
        if not any(self.pending.values()):
            return None
        return max(self.due - now, 0.0)

    def send_due(self, now: float) -> None:
        if now >= self.due and any(self.pending.values()):
            self.flush()
            self.due = now + STREAM_EVERY

    def finish(self) -> None:
        if self.started:
            self.flush()

    def flush(self) -> None:
        for fd, pending in self.pending.items():
            if not pending and not self.skipped[fd]:
                continue
            self.channel.send(
                {
                    "id": self.request_id,
                    "output": {
                        "stream": self.names[fd],
                        "data": base64.b64encode(bytes(pending)).decode(),
                        "skipped": self.skipped[fd],
                    },
                }
            )
            pending.clear()
            self.skipped[fd] = 0
            self.started = True


def runas_works(uid: int, gid: int) -> bool:
    """Whether runas can start a program here as `uid`:`gid` (the bundled loader, which any
    image can execute)."""
    try:
        done = subprocess.run(
            [RUNAS, str(uid), str(gid), "/", LOADER, "--version"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def identity_problem(pid: int, uid: int, gid: int) -> str | None:
    status = proc_status(pid)
    ids = f"{uid}\t{uid}\t{uid}\t{uid}", f"{gid}\t{gid}\t{gid}\t{gid}"
    if (status.get("Uid"), status.get("Gid")) != ids or status.get("Groups"):
        return f"the command did not run as {uid}:{gid} alone ({status.get('Uid')!r})"
    caps = [status.get(name) for name in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")]
    if any(value != "0" * 16 for value in caps):
        return f"the command kept capabilities ({caps})"
    return None


def run_command(
    request: Message, channel: Channel, exits: ExitWatch, uid: int, gid: int, runas: bool
) -> Message:
    """Run the request's command to its end, as `uid`:`gid`, and answer for it (channel.py)."""
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
    if not runas and not os.path.isdir(cwd):
        return {"error": f"working directory {cwd} does not exist in the sandbox"}

    oom_before = read_counter(OOM_COUNTER_FILES)
    pids_before = read_counter(PIDS_COUNTER_FILES)
    # What the call writes, never the shared file system's growth, counts (diskbudget.py).
    disk = DiskBudget(int(budget), uid, gid) if budget is not None else None
    started = time.monotonic()
    # As the command's user, with no supplementary group and no capability left (the
    # bounding set is empty and none survives the uid change; runas checks, or CPython
    # checks each step of `user=` where runas cannot run), in a new session, with no
    # descriptor but its own pipes.
    drop: dict[str, Any] = {} if runas else {"user": uid, "group": gid, "extra_groups": []}
    command = [RUNAS, str(uid), str(gid), cwd, *argv] if runas else argv
    try:
        proc = subprocess.Popen(
            command,
            cwd=None if runas else cwd,
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

    problem = None if runas else identity_problem(proc.pid, uid, gid)
    if problem is not None:
        kill_all()
        proc.wait()
        return {"error": problem, "discard": end_everything() > 0}

    assert proc.stdout is not None and proc.stderr is not None  # both are PIPE above
    out, err = Capture(cap), Capture(cap)
    captures = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
    streaming = None
    if request.get("stream") and isinstance(request.get("id"), int):
        names = {proc.stdout.fileno(): "stdout", proc.stderr.fileno(): "stderr"}
        streaming = OutputStream(channel, request["id"], names, started)
    selector = selectors.DefaultSelector()
    for fd in captures:
        selector.register(fd, selectors.EVENT_READ)
    exit_fd = exits.open(proc.pid)
    selector.register(exit_fd, selectors.EVENT_READ)
    if not channel.closed:
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
            if disk is not None and now >= next_disk_check and drain_until is None:
                if disk.over():
                    budget_hit = True
                    stop(now)
                next_disk_check = time.monotonic() + DISK_CHECK_SECONDS
            if drain_until is not None and now >= drain_until:
                break
            if streaming is not None:
                streaming.send_due(now)
            limit = (deadline if drain_until is None else drain_until) - now
            if disk is not None:
                limit = min(limit, next_disk_check - now)
            due = streaming.wait(now) if streaming is not None else None
            if due is not None:
                limit = min(limit, due)
            for key, _ in selector.select(timeout=max(limit, 0)):
                fd = key.fd
                if fd == exit_fd:
                    if exits.exited(fd, proc):
                        selector.unregister(fd)
                        stop(time.monotonic())
                elif fd == 0:
                    channel.read_available()
                    if channel.closed:  # the host is gone: so is the call
                        selector.unregister(0)
                        stop(time.monotonic())
                elif fd in captures:
                    data = os.read(fd, READ_CHUNK)
                    if data:
                        captures[fd].feed(data)
                        if streaming is not None:
                            streaming.feed(fd, data)
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
        exits.close(exit_fd)
        kill_all()
        proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None and not stream.closed:
                stream.close()
    survivors = end_everything()
    if streaming is not None:
        streaming.finish()

    code = proc.returncode
    sig = -code if code < 0 else None
    oom_after = read_counter(OOM_COUNTER_FILES)
    pids_after = read_counter(PIDS_COUNTER_FILES)
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
    disk_used = disk.used() if disk is not None else None
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
