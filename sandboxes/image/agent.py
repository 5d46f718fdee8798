"""The in-container half of codecoder's @docker environment: run requests arriving on stdin.

The host starts one long-lived container per workspace mode and attaches to its stdin/stdout;
this agent is the container's main process (under docker-init). Dispatching a call is then one
write and one read on an already-open stream, instead of an `exec_create`/`exec_start` round trip
through the engine or a whole `docker run`. The container has no network, so the stream is the
only way in or out, and the agent needs nothing beyond the Python standard library.

Protocol: newline-delimited JSON in both directions.

    agent -> host, once at start:
        {"hello": PROTOCOL, "oom_counter": bool, "pids_counter": bool}
    host -> agent, one per call:
        {"id": int, "argv": [str, ...], "cwd": str, "env": {str: str},
         "stdin": base64 str, "timeout": float, "max_output": int}
    agent -> host, one per call (in completion order, not request order):
        {"id": int, "exit_code": int, "signal": int | null, "stdout": str, "stderr": str,
         "stdout_bytes": int, "stderr_bytes": int, "truncated": bool, "timed_out": bool,
         "oom_killed": bool, "pids_limit_hit": bool, "duration": float}
      or, when the request could not be started at all:
        {"id": int, "error": str}

Each call runs in its own session (process group) with its own deadline; at the deadline, and as
soon as the main process exits, the whole group is killed so no background process outlives its
call. When no call is in flight, every other process in the container is killed as well, which
also catches processes that escaped their group with setsid. Output is capped per stream: the
head and the tail are kept and the cut is marked.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from typing import Any

PROTOCOL = 1

# After the main process is gone, how long to keep reading output that is already in flight;
# a process that escaped the group could otherwise hold the pipes open for ever.
DRAIN_SECONDS = 0.5
READ_CHUNK = 65536

# cgroup v1 and v2 spell the counters differently; the first readable file wins.
OOM_COUNTER_FILES = (
    ("/sys/fs/cgroup/memory.events", "oom_kill"),
    ("/sys/fs/cgroup/memory/memory.oom_control", "oom_kill"),
)
PIDS_COUNTER_FILES = (
    ("/sys/fs/cgroup/pids.events", "max"),
    ("/sys/fs/cgroup/pids/pids.events", "max"),
)

Message = dict[str, Any]

_write_lock = threading.Lock()
_flight_lock = threading.Lock()
_in_flight = 0


def send(message: Message) -> None:
    data = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
    with _write_lock:
        view = memoryview(data)
        while view:
            written = os.write(1, view)
            view = view[written:]


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


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def run(request: Message) -> Message:
    argv = request["argv"]
    cwd = request["cwd"]
    timeout = float(request["timeout"])
    cap = int(request["max_output"])
    stdin = base64.b64decode(request.get("stdin") or "")
    env = dict(os.environ)
    env.update(request.get("env") or {})
    if not os.path.isdir(cwd):
        return {"error": f"working directory {cwd} does not exist in the sandbox"}

    oom_before = read_counter(OOM_COUNTER_FILES)
    pids_before = read_counter(PIDS_COUNTER_FILES)
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            # No preexec_fn (e.g. to raise the child's oom_score_adj): it forces fork instead of
            # vfork and triples the cost of a call. At the memory limit the kernel kills the
            # largest process, which is the call's allocator, not this small agent; if the agent
            # is the victim after all, the host sees the container OOM-killed and reports that.
            start_new_session=True,
        )
    except FileNotFoundError:
        return finished(127, None, b"", f"{argv[0]}: command not found\n".encode(), started)
    except PermissionError:
        return finished(126, None, b"", f"{argv[0]}: permission denied\n".encode(), started)
    except OSError as exc:
        return {"error": f"cannot start {argv[0]}: {exc.strerror or exc}"}

    assert proc.stdout is not None and proc.stderr is not None  # both are PIPE above
    out, err = Capture(cap), Capture(cap)
    captures = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
    selector = selectors.DefaultSelector()
    for fd in captures:
        selector.register(fd, selectors.EVENT_READ)
    # A pidfd becomes readable when the process exits, which lets one select() wait for output,
    # exit and deadline together without polling.
    pidfd = os.pidfd_open(proc.pid)
    selector.register(pidfd, selectors.EVENT_READ)
    pending_stdin = memoryview(stdin)
    if proc.stdin is not None:
        os.set_blocking(proc.stdin.fileno(), False)
        selector.register(proc.stdin.fileno(), selectors.EVENT_WRITE)

    deadline = started + timeout
    drain_until: float | None = None
    timed_out = False
    try:
        while selector.get_map():
            now = time.monotonic()
            if drain_until is None and now >= deadline:
                timed_out = True
                kill_group(proc.pid)
                drain_until = now + DRAIN_SECONDS
            if drain_until is not None and now >= drain_until:
                break
            limit = (deadline if drain_until is None else drain_until) - now
            for key, _ in selector.select(timeout=max(limit, 0)):
                fd = key.fd
                if fd == pidfd:
                    # Kill the rest of the group while the leader is still an unreaped zombie,
                    # so its pid (the group id) cannot have been reused by anybody else.
                    kill_group(proc.pid)
                    selector.unregister(pidfd)
                    drain_until = time.monotonic() + DRAIN_SECONDS
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
        os.close(pidfd)
        kill_group(proc.pid)
        proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None and not stream.closed:
                stream.close()

    code = proc.returncode
    sig = -code if code < 0 else None
    oom_after = read_counter(OOM_COUNTER_FILES)
    pids_after = read_counter(PIDS_COUNTER_FILES)
    # SIGKILL reaches the call either directly (exit by signal 9) or through a shell that reports
    # its killed child as 137; only together with a new OOM kill in the cgroup is it an OOM.
    killed = sig == signal.SIGKILL or code == 128 + signal.SIGKILL
    oom = (
        killed
        and not timed_out
        and oom_before is not None
        and oom_after is not None
        and oom_after > oom_before
    )
    pids_hit = pids_before is not None and pids_after is not None and pids_after > pids_before
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
        "pids_limit_hit": pids_hit,
        "duration": time.monotonic() - started,
    }


def finished(code: int, sig: int | None, stdout: bytes, stderr: bytes, started: float) -> Message:
    return {
        "exit_code": code,
        "signal": sig,
        "stdout": stdout.decode(errors="replace"),
        "stderr": stderr.decode(errors="replace"),
        "stdout_bytes": len(stdout),
        "stderr_bytes": len(stderr),
        "truncated": False,
        "timed_out": False,
        "oom_killed": False,
        "pids_limit_hit": False,
        "duration": time.monotonic() - started,
    }


def kill_everything_else() -> None:
    # kill(-1) reaches every process this user may signal in the container's pid namespace,
    # except init and the agent itself.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(-1, signal.SIGKILL)


def serve(request: Message) -> None:
    global _in_flight
    try:
        response = run(request)
    except Exception as exc:  # one bad request must not take the warm container down
        response = {"error": f"agent failure: {type(exc).__name__}: {exc}"}
    response["id"] = request.get("id")
    with _flight_lock:
        _in_flight -= 1
        if _in_flight == 0:
            # Before answering, so that when the host sees the answer nothing the call started is
            # still running (unless other calls are in flight and share the container).
            kill_everything_else()
    send(response)


def main() -> None:
    global _in_flight
    send(
        {
            "hello": PROTOCOL,
            "oom_counter": read_counter(OOM_COUNTER_FILES) is not None,
            "pids_counter": read_counter(PIDS_COUNTER_FILES) is not None,
        }
    )
    for line in sys.stdin.buffer:
        try:
            request = json.loads(line)
        except ValueError as exc:
            send({"id": None, "error": f"malformed request: {exc}"})
            continue
        with _flight_lock:
            _in_flight += 1
        try:
            threading.Thread(target=serve, args=(request,), daemon=True).start()
        except RuntimeError as exc:
            # Under a fork bomb the pids limit also stops the agent from starting threads.
            with _flight_lock:
                _in_flight -= 1
            send({"id": request.get("id"), "error": f"cannot start the call: {exc}"})
    # stdin closes when the host detaches (it attached with stdin_once) or dies.
    kill_everything_else()


if __name__ == "__main__":
    main()
