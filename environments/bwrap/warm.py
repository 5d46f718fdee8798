"""Warm @bwrap sandboxes: the next call's bubblewrap sandbox, built in the background after a
call, waiting in the confine helper for the one request it will serve.

A cold call pays for bubblewrap's namespaces and mounts and the helper's Landlock and seccomp
before its command starts (`benchmarks/bwrap.py` measures how much). After a call, the
environment starts one sandbox with the same plan (`WarmSandboxes.refill`): bubblewrap builds
it, the helper restricts itself, says it is ready and blocks on a Unix socket (`--request`). The
next call whose plan is the same claims it and sends only its request: argv, environment,
working directory and its three standard streams (`send_request`); what remains is the command.

The rules, each attacked in tests/environments/test_bwrap_warm.py and `codecoder audit`:

- one call per sandbox: the helper reads one request, closes the socket and every other
  descriptor, then runs the command; when it ends the runtime kills bubblewrap's whole tree, as
  for a cold call (bubblewrap's init is PID 1: a daemon it left dies with it, its /tmp and home
  were its own tmpfs). A sandbox is never reused, whatever happened;
- claimed only when its plan is the plan the call would get cold, computed at claim time: the
  same mounts (every protected path found now, a nested repository a call just created
  included), read-only or writable, the same helper options, the same session, no snapshot;
  and the file system objects it bound are still the same ones (device, inode and type of each
  bound source: a protected directory swapped on the host since the build would no longer be
  covered by its mount). Anything else discards it and the call runs cold: a mismatch costs a
  cold call, never a wrong sandbox;
- owned by one session: a claim names its session, `end_session` and `close` kill what the
  session or the environment still holds; bubblewrap runs with `--die-with-parent`, started from
  the environment's own long-lived thread, so it dies with the runtime;
- the channel carries nothing back: the runtime only writes the request on its end and closes
  it; the command never holds the sandbox's end (closed before the exec), and a sandbox's
  socket belongs to that sandbox alone. Its egress listener comes over a pair of its own
  before the helper restricts itself, and is served, for the call that claims it, through that
  call's gate only.
"""

from __future__ import annotations

import contextlib
import os
import queue
import socket
import struct
import subprocess
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from codecoder.environments.bwrap.ending import end_sandbox

__all__ = ["REQUEST_LIMIT", "WarmKey", "WarmSandbox", "WarmSandboxes", "encode_request"]

REQUEST_MAGIC: Final = 0x51524343
REQUEST_LIMIT: Final = 2 << 20  # the helper's buffer (sandboxes/bwrap/confine.c)
REQUEST_ITEMS: Final = 65536
# How many warm sandboxes one environment keeps at most (a read-only and a writable one per
# session; the oldest goes first).
MAX_WARM: Final = 4
# How long a claim waits for a sandbox still being built before it gives up on it.
READY_WAIT: Final = 10.0
# How many ended sessions are remembered, so that a refill queued just before a session ended
# builds nothing for it (session ids are never reused).
_ENDED_KEPT: Final = 1024

_Identity = tuple[int, int, int] | None


def identities(paths: Sequence[Path]) -> tuple[_Identity, ...]:
    """Device, inode and file type of each path (None where it is missing)."""
    found: list[_Identity] = []
    for path in paths:
        try:
            st = os.lstat(path)
        except OSError:
            found.append(None)
            continue
        found.append((st.st_dev, st.st_ino, st.st_mode & 0o170000))
    return tuple(found)


@dataclass(frozen=True, slots=True)
class WarmKey:
    """What makes two calls' sandboxes the same: equal keys, interchangeable sandboxes."""

    session: str | None
    writable: bool
    mounts: tuple[str, ...]  # bubblewrap's mount options, the working directory left out
    helper: tuple[str, ...]  # the confine helper's options, descriptors left out
    sources: tuple[Path, ...]  # what the mounts bind, whose identities are compared
    identities: tuple[_Identity, ...] = field(compare=False, default=())

    def still_bound(self) -> bool:
        """Whether every bound source is still the object it was when the sandbox was built."""
        return identities(self.sources) == self.identities


def encode_request(cwd: Path, argv: Sequence[str], env: dict[str, str]) -> bytes | None:
    """The helper's request for a command (header without the descriptors), or None when it
    does not fit the helper's buffer (the call then runs cold)."""
    strings = [os.fsencode(str(cwd)), *map(os.fsencode, argv)]
    strings += [os.fsencode(f"{k}={v}") for k, v in env.items()]
    if any(b"\0" in s for s in strings) or len(strings) - 1 > REQUEST_ITEMS:
        return None
    body = b"".join(s + b"\0" for s in strings)
    if len(body) > REQUEST_LIMIT:
        return None
    return struct.pack("=IIII", REQUEST_MAGIC, len(body), len(argv), len(env)) + body


class WarmSandbox:
    """One built sandbox waiting for its request: bubblewrap's process, the runtime's end of
    the request socket, the ready pipe, and what bubblewrap said (a memfd, for failures)."""

    def __init__(
        self,
        key: WarmKey,
        proc: subprocess.Popen[bytes],
        channel: socket.socket,
        ready: int,
        *,
        egress: socket.socket | None = None,
    ) -> None:
        """`egress`: the runtime's end of the pair the helper hands its egress listener over
        (before it restricts itself, so before it says it is ready)."""
        self.key = key
        self.proc = proc
        self.channel = channel
        self._ready: int | None = ready
        self._egress = egress

    def take_listener(self, timeout: float) -> socket.socket | None:
        """The sandbox's egress listener (127.0.0.1:3128 in its network namespace), or None
        when it handed none over; the pair it came through is closed either way."""
        egress, self._egress = self._egress, None
        if egress is None:
            return None
        try:
            egress.settimeout(timeout)
            _, fds, _, _ = socket.recv_fds(egress, 1, 1)
        except OSError:
            return None
        finally:
            egress.close()
        listeners = [socket.socket(fileno=fd) for fd in fds]
        for extra in listeners[1:]:
            extra.close()
        return listeners[0] if listeners else None

    def wait_ready(self, timeout: float) -> bool:
        """Whether the helper said it is ready (built and restricted) within `timeout`."""
        import select

        if self._ready is None:
            return False
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            readable, _, _ = select.select([self._ready], [], [], max(left, 0.0))
            if not readable:
                return False
            try:
                return bool(os.read(self._ready, 1))
            except BlockingIOError:
                continue
            except OSError:
                return False

    def send(self, request: bytes, streams: Sequence[int]) -> bool:
        """Hand the request and the call's three streams to the helper; False when the sandbox
        is gone (nothing ran: the helper runs nothing without the whole request)."""
        try:
            sent = self.channel.sendmsg(
                [request[:16]], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, bytes(_fds(streams)))]
            )
            if sent != 16:
                return False
            self.channel.sendall(request[16:])
        except OSError:
            return False
        finally:
            self.channel.close()
            self._close_ready()
        return True

    def _close_ready(self) -> None:
        if self._ready is not None:
            _close(self._ready)
            self._ready = None

    def discard(self) -> None:
        """Kill the sandbox's whole tree and release what the runtime holds of it."""
        end_sandbox(self.proc.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=2)
        self.channel.close()
        self._close_ready()
        if self._egress is not None:
            self._egress.close()
            self._egress = None


def _fds(streams: Sequence[int]) -> bytes:
    return struct.pack(f"={len(streams)}i", *streams)


Builder = Callable[[WarmKey, object], WarmSandbox | None]


class WarmSandboxes:
    """The warm sandboxes of one environment, by (session, read-only or writable); refilled by
    a thread of their own (bubblewrap's `--die-with-parent` follows the thread that started it,
    so a short-lived thread must not start one)."""

    def __init__(self, build: Builder) -> None:
        self._build = build
        self._lock = threading.Lock()
        self._slots: OrderedDict[tuple[str | None, bool], WarmSandbox] = OrderedDict()
        self._wanted: queue.SimpleQueue[tuple[WarmKey, object] | None] = queue.SimpleQueue()
        self._closed = False
        self._ended: OrderedDict[str | None, None] = OrderedDict()
        self._thread: threading.Thread | None = None
        self.built = 0  # how many were started, and claimed: tests and the benchmark read them
        self.claimed = 0

    def claim(self, key: WarmKey) -> WarmSandbox | None:
        """The warm sandbox for `key`, ready, or None (the call runs cold). A sandbox in the
        slot whose plan or bound objects differ is discarded."""
        with self._lock:
            sandbox = self._slots.pop((key.session, key.writable), None)
        if sandbox is None:
            return None
        if sandbox.key != key or not sandbox.key.still_bound():
            sandbox.discard()
            return None
        try:
            ready = sandbox.wait_ready(READY_WAIT)
        except BaseException:  # interrupted while waiting: the sandbox goes with the call
            sandbox.discard()
            raise
        if not ready:
            sandbox.discard()
            return None
        with self._lock:
            self.claimed += 1
        return sandbox

    def refill(self, key: WarmKey, plan: object) -> None:
        """Start, in the background, a sandbox for the next call like this one."""
        with self._lock:
            if self._closed or key.session in self._ended:
                return
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._serve, name="codecoder-bwrap-warm", daemon=True
                )
                self._thread.start()
        self._wanted.put((key, plan))

    def end_session(self, session: str | None) -> None:
        """Kill the session's warm sandboxes; none is built for it afterwards."""
        with self._lock:
            self._ended[session] = None
            while len(self._ended) > _ENDED_KEPT:
                self._ended.popitem(last=False)
            gone = [s for k, s in self._slots.items() if k[0] == session]
            for sandbox in gone:
                del self._slots[(sandbox.key.session, sandbox.key.writable)]
        for sandbox in gone:
            sandbox.discard()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            gone = list(self._slots.values())
            self._slots.clear()
            thread = self._thread
        self._wanted.put(None)
        for sandbox in gone:
            sandbox.discard()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    def _serve(self) -> None:
        while True:
            wanted = self._wanted.get()
            if wanted is None:
                return
            key, plan = wanted
            with self._lock:
                if self._closed:
                    return
                if key.session in self._ended or (key.session, key.writable) in self._slots:
                    continue  # a call is still to claim the one there
            sandbox = self._build(key, plan)
            if sandbox is None:
                continue
            self.built += 1
            evicted: list[WarmSandbox] = []
            with self._lock:
                if self._closed or key.session in self._ended:
                    evicted.append(sandbox)
                else:
                    old = self._slots.pop((key.session, key.writable), None)
                    if old is not None:
                        evicted.append(old)
                    self._slots[(key.session, key.writable)] = sandbox
                    while len(self._slots) > MAX_WARM:
                        evicted.append(self._slots.popitem(last=False)[1])
            for gone in evicted:
                gone.discard()

    def held(self) -> list[WarmSandbox]:
        """The sandboxes waiting now (tests look at them)."""
        with self._lock:
            return list(self._slots.values())


def _close(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)
