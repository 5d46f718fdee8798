"""The @wasm environment: WASI modules run by wasmtime, confined to what each call preopens.

A `WasmRequest` names a module (a `.wasm` or `.wat` file, or its bytes), its argv and stdin,
and the host directories it may see (`Preopen`, read-only unless marked writable). Nothing else
reaches the module: no environment variables, no inherited stdio, no sockets, no other files.
Each call gets a fresh `Store`, and everything it can take is bounded:

* fuel (instructions, roughly) -> `OutOfFuel` when used up;
* time -> `ExecutionTimeout`: the call's timeout covers compiling the module (done by a worker
  process killed at the deadline, `environments.wasm.compile`) and running it (an epoch callback
  every tick, in the module's thread, stops it at the deadline; `poll_oneoff` never sleeps past
  it; a thread blocked in the host on a FIFO is freed, see `_EpochTicker`);
* cancellation -> `Cancelled`: once `WasmRequest.cancel` is set, the same epoch callback stops
  the module at its next tick and `poll_oneoff` stops sleeping;
* memory -> `OutOfMemory`: one limiter over the whole store, one linear memory (the engine
  refuses modules declaring more, or shared or 64-bit ones), at most `MAX_TABLES` tables whose
  elements take at most an eighth of the memory limit more, one instance;
* disk, for a call with writable preopens -> `ExecutionFailed` once their filesystems grew by
  more than `disk_budget`;
* output -> capped head and tail (below);
* the workspace, when the request names it: writable preopens may hold no protected path, and
  one the module creates is quarantined after the call (`environments.workspaceguard`).

`proc_exit(n)` is not an error: it is `WasmResult.exit_code`. Any other trap becomes
`ExecutionFailed` with the trap's message. No wasmtime exception leaves this module.

Output goes through pipes drained by one thread per environment into capped buffers, so a
module flooding stdout costs memory up to its cap and no disk. Compiling is the expensive part
(about 0.1 s for fileops.wasm; a warm call takes under a millisecond), so compiled modules are
cached twice: in process (digest -> `InstancePre`), and on disk so a new
process does not recompile. `Module.deserialize` trusts its input completely (it is machine
code), so the disk cache is used only if its directory is private to this user, and every entry
carries an HMAC, keyed by a secret kept in that directory, over the entry's cache key and bytes:
a corrupt, truncated, renamed or foreign entry is deleted and the module recompiled, never
loaded.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import hashlib
import hmac
import importlib.metadata
import itertools
import logging
import os
import platform
import selectors
import shutil
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import wasmtime
from wasmtime import _bindings as wasmtime_ffi

from codecoder.environments.base import Environment
from codecoder.environments.wasm.compile import (
    ENGINE_SETTINGS,
    compile_module,
    engine_config,
    error_cause,
)
from codecoder.environments.workspaceguard import ProtectedScan, quarantine
from codecoder.runtime.kernel.atomicfile import replace_atomically
from codecoder.runtime.kernel.ceiling import EnvironmentTag
from codecoder.runtime.kernel.confined import NotBeneath, check_pinned
from codecoder.runtime.kernel.errors import (
    Cancelled,
    ExecutionFailed,
    ExecutionTimeout,
    OutOfFuel,
    OutOfMemory,
    SandboxUnavailable,
)

__all__ = [
    "DEFAULT_FUEL",
    "DEFAULT_MAX_OUTPUT",
    "DEFAULT_MEMORY_LIMIT",
    "DEFAULT_TIMEOUT",
    "CacheStats",
    "Preopen",
    "WasmEnvironment",
    "WasmRequest",
    "WasmResult",
    "default_cache_dir",
]

log = logging.getLogger(__name__)

DEFAULT_FUEL = 2_000_000_000
DEFAULT_DISK_BUDGET = 1024**3
MAX_MODULE_BYTES = 64 * 1024 * 1024
MAX_TABLES = 4
DEFAULT_TIMEOUT = 30.0
DEFAULT_MEMORY_LIMIT = 256 * 1024 * 1024
DEFAULT_MAX_OUTPUT = 1024 * 1024
WASM_PAGE = 64 * 1024

_WASMTIME_VERSION = importlib.metadata.version("wasmtime")


@dataclass(frozen=True, slots=True)
class Preopen:
    """A host directory the module sees at `guest` (an absolute guest path, e.g. /workspace)."""

    host: Path
    guest: str
    writable: bool = False


@dataclass(frozen=True, slots=True)
class WasmRequest:
    """One run of a WASI command module.

    `argv` is the whole argv, program name first (an empty argv passes just a name). `module`
    is a path (`.wasm` binary or `.wat` text) or the module's bytes. Output beyond `max_output`
    bytes per stream is dropped from the middle: the head and tail are kept, with a marker.
    `timeout` covers compiling the module too. A call with writable preopens may grow their
    filesystems by `disk_budget` bytes. `workspace`, when set, guards the writable preopens
    (which must lie inside it): they may hold no protected path when the call starts, and one
    the module creates is quarantined and fails the call. The file tools leave it unset: they
    write exactly the path the permission engine approved.
    """

    module: Path | bytes
    argv: tuple[str, ...] = ()
    stdin: bytes = b""
    preopens: tuple[Preopen, ...] = ()
    fuel: int = DEFAULT_FUEL
    timeout: float = DEFAULT_TIMEOUT
    memory_limit: int = DEFAULT_MEMORY_LIMIT
    max_output: int = DEFAULT_MAX_OUTPUT
    disk_budget: int = DEFAULT_DISK_BUDGET
    workspace: Path | None = None
    cancel: threading.Event | None = field(default=None, compare=False)  # set: stop the module

    def __post_init__(self) -> None:
        if self.fuel <= 0 or self.timeout <= 0 or self.memory_limit <= 0 or self.max_output < 0:
            raise ValueError("fuel, timeout and memory_limit must be positive, max_output >= 0")
        if self.disk_budget <= 0:
            raise ValueError("disk_budget must be positive")
        if any("\0" in arg for arg in self.argv):
            raise ValueError("argv must not contain NUL characters")
        guests = [p.guest for p in self.preopens]
        if len(set(guests)) != len(guests) or not all(g.startswith("/") for g in guests):
            raise ValueError("preopen guest paths must be absolute and distinct")


@dataclass(frozen=True, slots=True)
class WasmResult:
    """How a module ended. `stdout`/`stderr` are bytes, capped head and tail."""

    exit_code: int
    stdout: bytes
    stderr: bytes
    duration: float
    fuel_consumed: int
    stdout_truncated: bool = False
    stderr_truncated: bool = False

    @property
    def truncated(self) -> bool:
        return self.stdout_truncated or self.stderr_truncated

    def stdout_text(self) -> str:
        return self.stdout.decode("utf-8", errors="replace")

    def stderr_text(self) -> str:
        return self.stderr.decode("utf-8", errors="replace")


@dataclass(slots=True)
class CacheStats:
    """What the module caches did since the environment was created (for tests and `doctor`)."""

    compiled: int = 0  # modules compiled from source
    disk_hits: int = 0  # modules deserialized from a verified disk entry
    memory_hits: int = 0  # calls served by the in-process cache
    discarded: int = 0  # disk entries deleted because they failed verification
    stored: int = 0  # disk entries written


def default_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/codecoder/wasm`, else `~/.cache/codecoder/wasm`."""
    base = os.environ.get("XDG_CACHE_HOME")
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".cache"
    return root / "codecoder" / "wasm"


class _CappedOutput:
    """Keeps the first and last bytes of what a module writes to one stream, and a count.

    A module that floods its output only burns its own fuel and time: memory here stays
    bounded by `limit`, and nothing is written to disk.
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0

    def write(self, data: bytes) -> None:
        self.total += len(data)
        room = self._limit - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if data:
            self._tail += data
            keep = self._limit // 2
            if len(self._tail) > 2 * keep + 4096:
                del self._tail[: len(self._tail) - keep]

    @property
    def truncated(self) -> bool:
        return self.total > self._limit

    def value(self) -> bytes:
        if not self.truncated:
            return bytes(self._head)
        tail_size = self._limit // 2
        head_size = self._limit - tail_size
        after_head = bytes(self._head[head_size:]) + bytes(self._tail)
        tail = after_head[len(after_head) - tail_size :]
        dropped = self.total - head_size - len(tail)
        marker = f"\n[... {dropped} bytes truncated ...]\n".encode()
        return bytes(self._head[:head_size]) + marker + tail


class _Pipe:
    """One stream of one call: the read end of the pipe the module's stdout or stderr goes to.

    wasmtime takes only a path for an output file, so it is given `/dev/fd/N` for the write end
    (it opens its own descriptor, and ours is closed at once), or, where there is no /dev/fd,
    a FIFO in the environment's private scratch directory.
    """

    def __init__(self, scratch: Path, name: str, sink: _CappedOutput) -> None:
        self.sink = sink
        self.lock = threading.Lock()
        self.finished = False
        self.registered = False
        self.closed = False
        self._write_fd: int | None = None
        self._fifo: Path | None = None
        if _HAVE_DEV_FD:
            self.fd, self._write_fd = os.pipe()
            self.path = f"/dev/fd/{self._write_fd}"
        else:
            self._fifo = scratch / name
            os.mkfifo(self._fifo, 0o600)
            # Non-blocking, so opening does not wait for a writer.
            self.fd = os.open(self._fifo, os.O_RDONLY | os.O_NONBLOCK)
            self.path = os.fspath(self._fifo)
        os.set_blocking(self.fd, False)
        if hasattr(fcntl, "F_SETPIPE_SZ"):  # Linux: fewer stalls before the pump drains it
            with contextlib.suppress(OSError):
                fcntl.fcntl(self.fd, fcntl.F_SETPIPE_SZ, 1024 * 1024)

    def release_name(self) -> None:
        """Once wasmtime has opened its end, ours (or the FIFO's name) can go."""
        if self._write_fd is not None:
            os.close(self._write_fd)
            self._write_fd = None
        if self._fifo is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._fifo)
            self._fifo = None

    def close(self) -> None:
        """Close the read end once; after that nothing reads it (its number may be reused)."""
        with self.lock:
            if not self.closed:
                self.closed = True
                os.close(self.fd)

    def drain(self) -> bool:
        """Read what is available into the sink; True at end of file. Call with `lock` held."""
        if self.closed:
            return True
        while True:
            try:
                chunk = os.read(self.fd, 1024 * 1024)
            except BlockingIOError:
                return False
            if not chunk:
                return True
            self.sink.write(chunk)


_HAVE_DEV_FD = os.path.isdir("/dev/fd")


class _OutputPump:
    """Drains the pipes that running modules write their stdout and stderr to.

    Why pipes and a thread rather than wasmtime's output callbacks: wasmtime may call such a
    callback (or its finalizer) from its own worker threads after the call has returned, and
    one that lands while the interpreter exits aborts the whole process. Why not plain files:
    a module flooding its output would fill the disk before its timeout. A pipe costs a
    flooding module nothing but CPU time, and the sink keeps memory bounded.

    One thread per environment serves every call. While it watches pipes it also polls every
    few milliseconds for new ones, so a call costs no thread wake-up unless the pump was idle
    (then it sleeps in `select` until woken).
    """

    _POLL = 0.005

    def __init__(self, scratch: Path) -> None:
        self._scratch = scratch
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._lock = threading.Lock()
        self._added: list[_Pipe] = []
        self._removed: list[_Pipe] = []
        self._names = itertools.count()
        self._thread: threading.Thread | None = None
        self._idle = True
        self._closed = False

    def open(self, sink: _CappedOutput) -> _Pipe:
        """A new pipe whose output goes to `sink`; call `release_name()` once wasmtime has it."""
        pipe = _Pipe(self._scratch, f"out-{next(self._names)}", sink)
        with self._lock:
            if self._closed:
                pipe.release_name()
                pipe.close()
                raise SandboxUnavailable("the wasm environment is closed")
            self._added.append(pipe)
            wake = self._idle
            self._idle = False
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="codecoder-wasm-output", daemon=True
                )
                self._thread.start()
        if wake:
            self._wake()
        return pipe

    def finish(self, pipe: _Pipe) -> None:
        """Collect the rest of a call's output. The call has returned, so every write it made
        has completed. The pump thread closes the descriptor, so that its number is not reused
        while it is still registered."""
        pipe.release_name()
        with pipe.lock:
            pipe.finished = True
            pipe.drain()
        with self._lock:
            if self._closed:  # no pump to hand it to any more
                pipe.close()
            else:
                self._removed.append(pipe)

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.write(self._wake_w, b"\0")

    def _loop(self) -> None:
        watching = 0
        while True:
            with self._lock:
                added, self._added = self._added, []
                removed, self._removed = self._removed, []
                closed = self._closed
            for pipe in added:
                self._selector.register(pipe.fd, selectors.EVENT_READ, pipe)
                pipe.registered = True
                watching += 1
            for pipe in removed:
                if pipe.registered:
                    self._selector.unregister(pipe.fd)
                    watching -= 1
                pipe.close()
            if closed:  # calls still running lose the rest of their output
                for key in list(self._selector.get_map().values()):
                    if key.data is not None:
                        self._selector.unregister(key.fd)
                        key.data.close()
                return
            with self._lock:
                # Decided under the lock open() takes: a pipe added after this point sees
                # `_idle` and wakes us; one added before it is in `_added`, so we poll.
                self._idle = watching == 0 and not self._added and not self._removed
                timeout = None if self._idle else self._POLL
            for key, _ in self._selector.select(timeout):
                if key.data is None:
                    with contextlib.suppress(BlockingIOError):
                        os.read(self._wake_r, 4096)
                    continue
                pipe = key.data
                with pipe.lock:
                    at_end = not pipe.finished and pipe.drain()
                if at_end or pipe.finished:  # nothing more will come: stop watching it
                    self._selector.unregister(pipe.fd)
                    pipe.registered = False
                    watching -= 1

    def close(self) -> None:
        with self._lock:
            self._closed = True
            thread = self._thread
        self._wake()
        if thread is not None:
            thread.join()
        for pipe in self._added + self._removed:  # handed over after the pump stopped
            pipe.close()
        self._selector.close()
        os.close(self._wake_r)
        os.close(self._wake_w)


class _EpochTicker:
    """Advances the engine's epoch every `interval` seconds while at least one call runs, and
    frees calls stuck in the host past their deadline.

    One thread per engine, not per call; it sleeps on a condition when nothing runs, so an
    idle runtime costs no wake-ups.

    The epoch stops a module between instructions, not inside a host call, and wasmtime opens
    files with a blocking open(2): a module opening a FIFO that nobody writes (or reading one
    that nobody fills) would wait in the host for ever. So once a call is `RESCUE_AFTER` past
    its deadline, the threads of this process blocked in open, read or write on a FIFO inside
    that call's preopened directories are found (/proc/self/task/*/syscall) and the FIFO is
    opened read-write, drained and written one byte: each such wait ends, and the module is
    stopped at its next instruction. Devices are not freed this way; no sandbox can create one
    (no CAP_MKNOD in @docker, no mknod in WASI).
    """

    RESCUE_AFTER = 0.25

    def __init__(self, engine: wasmtime.Engine, interval: float) -> None:
        self._engine = engine
        self.interval = interval
        self._cond = threading.Condition()
        self._running: dict[int, tuple[float, tuple[Path, ...], threading.Event | None]] = {}
        self._tokens = itertools.count()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._rescued_at = 0.0

    @contextlib.contextmanager
    def running(
        self, deadline: float, hosts: tuple[Path, ...], cancel: threading.Event | None = None
    ) -> Iterator[None]:
        with self._cond:
            if self._closed:
                raise SandboxUnavailable("the wasm environment is closed")
            token = next(self._tokens)
            self._running[token] = (deadline, hosts, cancel)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="codecoder-wasm-epoch", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()
        try:
            yield
        finally:
            with self._cond:
                del self._running[token]

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._running and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                self._cond.wait(self.interval)
                if self._closed:
                    return
                now = time.monotonic()
                stuck = [
                    host
                    for deadline, hosts, cancel in self._running.values()
                    if now > deadline + self.RESCUE_AFTER or (cancel and cancel.is_set())
                    for host in hosts
                ]
            self._engine.increment_epoch()
            if stuck and now - self._rescued_at > 0.1:
                self._rescued_at = now
                for fifo in _blocked_fifos(stuck):
                    _release(fifo)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()


# Syscalls a thread can block in on a FIFO, by machine: (the opens, with the index of their
# path argument), (the reads and writes, whose first argument is the descriptor).
_BLOCKING_SYSCALLS: dict[str, tuple[dict[int, int], frozenset[int]]] = {
    "x86_64": ({2: 0, 257: 1, 437: 1}, frozenset({0, 1, 17, 18, 19, 20, 295, 296})),
    "aarch64": ({56: 1, 437: 1}, frozenset({63, 64, 65, 66, 67, 68, 69, 70})),
}
_AT_FDCWD = -100


def _blocked_fifos(hosts: list[Path]) -> set[str]:
    """FIFOs under `hosts` that a thread of this process is blocked on now."""
    table = _BLOCKING_SYSCALLS.get(platform.machine())
    if table is None:
        return set()
    opens, transfers = table
    roots = [os.path.realpath(host) for host in hosts]
    found: set[str] = set()
    tasks: list[str] = []
    with contextlib.suppress(OSError):
        tasks = os.listdir("/proc/self/task")
    for task in tasks:
        try:
            fields = Path(f"/proc/self/task/{task}/syscall").read_text().split()
        except OSError:
            continue
        if not fields or not fields[0].isdigit():
            continue  # running, or not in a syscall
        number, args = int(fields[0]), [int(a, 16) for a in fields[1:7]]
        try:
            if number in opens:
                path = _string_at(args[opens[number]])
                if not path.startswith("/"):
                    dirfd = args[0] - (1 << 64) if args[0] >= 1 << 63 else args[0]
                    base = (
                        os.getcwd()
                        if number == 2 or dirfd == _AT_FDCWD
                        else os.readlink(f"/proc/self/fd/{dirfd}")
                    )
                    path = os.path.join(base, path)
            elif number in transfers:
                path = os.readlink(f"/proc/self/fd/{args[0]}")
            else:
                continue
            real = os.path.realpath(path)
            if stat.S_ISFIFO(os.stat(real).st_mode) and any(
                real.startswith(root + os.sep) for root in roots
            ):
                found.add(real)
        except (OSError, ValueError, IndexError):
            continue
    return found


def _string_at(address: int) -> str:
    with open("/proc/self/mem", "rb", buffering=0) as memory:
        memory.seek(address)
        return memory.read(4096).split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def _release(fifo: str) -> None:
    """End every wait on `fifo`: an opener gets its other end, a reader a byte, a writer room."""
    try:
        descriptor = os.open(fifo, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            for _ in range(64):
                if not os.read(descriptor, 1 << 16):
                    break
        with contextlib.suppress(OSError):
            os.write(descriptor, b"\0")
    finally:
        os.close(descriptor)
    log.warning("freed a @wasm call blocked past its deadline on the FIFO %s", fifo)


_MAGIC = b"CCWASM\x01\n"
_MAC_SIZE = 32
_HEADER_SIZE = len(_MAGIC) + _MAC_SIZE + 8
_SECRET_NAME = "hmac.key"


def _private_dir_problem(st: os.stat_result) -> str | None:
    """Why a directory cannot hold machine code we will execute, or None if it can."""
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory (or is a symlink)"
    if st.st_uid != os.geteuid():
        return f"is owned by uid {st.st_uid}, not by this user"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by group or others (mode {stat.filemode(st.st_mode)})"
    return None


def _private_file_problem(st: os.stat_result) -> str | None:
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if st.st_uid != os.geteuid():
        return f"is owned by uid {st.st_uid}, not by this user"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "is writable by group or others"
    return None


class _DiskCache:
    """Serialized modules in a private directory, each entry authenticated with an HMAC."""

    def __init__(self, directory: Path, stats: CacheStats) -> None:
        self.directory = directory
        self._stats = stats
        self._secret = self._open()

    @property
    def usable(self) -> bool:
        return self._secret is not None

    def _open(self) -> bytes | None:
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            problem = _private_dir_problem(os.lstat(self.directory))
            if problem is None:
                return self._secret_key()
        except OSError as exc:
            problem = f"cannot be used ({exc.strerror or exc})"
        log.warning("not using the wasm module cache %s: it %s", self.directory, problem)
        return None

    def _secret_key(self) -> bytes | None:
        path = self.directory / _SECRET_NAME
        for _ in range(2):
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            except FileNotFoundError:
                self._create_secret(path)
                continue
            with os.fdopen(fd, "rb") as f:
                st = os.fstat(f.fileno())
                problem = _private_file_problem(st)
                if problem is None and st.st_mode & 0o077:
                    problem = "is readable by group or others"
                secret = f.read(64)
            if problem is None and len(secret) == 32:
                return secret
            log.warning("wasm cache key %s %s", path, problem or "has the wrong size")
            return None
        return None

    def _create_secret(self, path: Path) -> None:
        # Written to a temporary name and linked into place, so that a concurrent process
        # either sees no key or the whole key, and exactly one key wins.
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".key-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(os.urandom(32))
                f.flush()
                os.fsync(f.fileno())
            with contextlib.suppress(FileExistsError):
                os.link(tmp, path)
        finally:
            os.unlink(tmp)

    def _entry(self, key: str) -> Path:
        return self.directory / f"{key}.cwasm"

    def _mac(self, key: str, payload: bytes) -> bytes:
        assert self._secret is not None
        mac = hmac.new(self._secret, key.encode() + b"\0", hashlib.sha256)
        mac.update(payload)
        return mac.digest()

    def load(self, key: str) -> bytes | None:
        """The verified payload of the entry for `key`, or None (a bad entry is deleted)."""
        if self._secret is None:
            return None
        path = self._entry(key)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return None
        except OSError:
            self._discard(path, "cannot be opened (a symlink?)")
            return None
        with os.fdopen(fd, "rb") as f:
            problem = _private_file_problem(os.fstat(f.fileno()))
            blob = f.read() if problem is None else b""
        if problem is not None:
            self._discard(path, problem)
            return None
        header, payload = blob[:_HEADER_SIZE], blob[_HEADER_SIZE:]
        if (
            len(header) != _HEADER_SIZE
            or not header.startswith(_MAGIC)
            or int.from_bytes(header[-8:], "big") != len(payload)
            or not hmac.compare_digest(header[len(_MAGIC) : -8], self._mac(key, payload))
        ):
            self._discard(path, "failed verification")
            return None
        return payload

    def store(self, key: str, payload: bytes) -> None:
        if self._secret is None:
            return
        header = _MAGIC + self._mac(key, payload) + len(payload).to_bytes(8, "big")
        try:
            replace_atomically(self._entry(key), header + payload, 0o600)
            self._stats.stored += 1
        except OSError as exc:
            log.debug("cannot write to the wasm cache: %s", exc)

    def discard(self, key: str, reason: str) -> None:
        self._discard(self._entry(key), reason)

    def _discard(self, path: Path, reason: str) -> None:
        log.warning("discarding wasm cache entry %s: it %s", path.name, reason)
        self._stats.discarded += 1
        with contextlib.suppress(OSError):
            os.unlink(path)


def _engine_fingerprint() -> str:
    described = ";".join(f"{k}={v}" for k, v in sorted(ENGINE_SETTINGS.items()))
    described += f";wasmtime={_WASMTIME_VERSION};arch={platform.machine()};os={sys.platform}"
    return hashlib.sha256(described.encode()).hexdigest()[:16]


def _table_elements(memory_limit: int) -> int:
    """Elements allowed per table: all MAX_TABLES full take an eighth of the memory limit."""
    return max(10_000, memory_limit // 8 // 8 // MAX_TABLES)


def _in(directory: str, entry: str) -> str:
    return f"{directory}/{entry}" if directory not in ("", ".") else entry


def wasmtime_cause(exc: Exception) -> str:
    """The one line of a wasmtime error that says what happened (its text leads with a trace)."""
    return error_cause(str(exc)) or type(exc).__name__


def _trace(exc: Exception) -> str:
    return str(exc).split("Caused by:", 1)[0].strip()


class WasmEnvironment(Environment[WasmRequest, WasmResult]):
    """Runs WASI command modules with wasmtime.

    `cache_dir` is the disk cache of compiled modules (`default_cache_dir()` when None; pass
    `use_disk_cache=False` to keep compiled modules in this process only). One engine per
    environment; `run()` is safe to call from several threads at once.
    """

    tag = EnvironmentTag.WASM

    def __init__(
        self,
        cache_dir: Path | None = None,
        *,
        use_disk_cache: bool = True,
        epoch_interval: float = 0.01,
    ) -> None:
        self._engine = wasmtime.Engine(engine_config())
        self._linker = wasmtime.Linker(self._engine)
        self._linker.define_wasi()
        # wasmtime's own poll_oneoff sleeps in the host, where the epoch deadline cannot reach:
        # a module asking to sleep for an hour would hold the call for an hour.
        self._linker.allow_shadowing = True
        self._linker.define_func(
            "wasi_snapshot_preview1",
            "poll_oneoff",
            _poll_oneoff_type(),
            _poll_oneoff,
            access_caller=True,
        )
        # Its clocks must be the ones poll_oneoff measures absolute timeouts against.
        self._linker.define_func(
            "wasi_snapshot_preview1",
            "clock_time_get",
            _clock_time_get_type(),
            _clock_time_get,
            access_caller=True,
        )
        self._ticker = _EpochTicker(self._engine, epoch_interval)
        self._fingerprint = _engine_fingerprint()
        self.cache_stats = CacheStats()
        self._disk: _DiskCache | None = None
        if use_disk_cache:
            try:
                directory = cache_dir or default_cache_dir()
            except RuntimeError:  # no home directory to put it in
                log.warning("no wasm module cache: no cache directory was given or found")
            else:
                disk = _DiskCache(directory, self.cache_stats)
                self._disk = disk if disk.usable else None
        self._lock = threading.Lock()
        self._modules: dict[str, wasmtime.InstancePre] = {}
        self._path_digests: dict[tuple[object, ...], str] = {}
        self._scratch = Path(tempfile.mkdtemp(prefix="codecoder-wasm-"))  # mode 0700
        self._pump = _OutputPump(self._scratch)
        self._closed = False

    @property
    def disk_cache_dir(self) -> Path | None:
        """The directory in use for compiled modules, or None if the disk cache is off."""
        return self._disk.directory if self._disk is not None else None

    # -- modules ---------------------------------------------------------------------------

    @staticmethod
    def _read(path: Path) -> bytes:
        """A module file's bytes. Opened without blocking and checked to be a regular file, so
        a FIFO or a device in its place is refused instead of waited on; size-capped."""
        try:
            descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            raise ExecutionFailed(f"cannot read module {path}: {exc.strerror or exc}") from exc
        with os.fdopen(descriptor, "rb") as file:
            if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                raise ExecutionFailed(f"module {path} is not a regular file")
            data = file.read(MAX_MODULE_BYTES + 1)
        if len(data) > MAX_MODULE_BYTES:
            raise ExecutionFailed(f"module {path} is larger than {MAX_MODULE_BYTES:,} bytes")
        return data

    def _digest(self, module: Path | bytes) -> tuple[str, bytes | None]:
        """The digest of a module, and its bytes if they had to be read to compute it."""
        if isinstance(module, bytes):
            if len(module) > MAX_MODULE_BYTES:
                raise ExecutionFailed(f"the module is larger than {MAX_MODULE_BYTES:,} bytes")
            return hashlib.sha256(module).hexdigest(), module
        try:
            st = os.stat(module)
        except OSError as exc:
            raise ExecutionFailed(f"cannot read module {module}: {exc.strerror or exc}") from exc
        # A warm process stats the file instead of rereading it: this identity changes
        # whenever the file is replaced or rewritten.
        identity = (
            os.fspath(module),
            st.st_dev,
            st.st_ino,
            st.st_size,
            st.st_mtime_ns,
            st.st_ctime_ns,
        )
        digest = self._path_digests.get(identity)
        if digest is not None:
            return digest, None
        data = self._read(module)
        digest = hashlib.sha256(data).hexdigest()
        self._path_digests[identity] = digest
        return digest, data

    def _prepared(
        self, module: Path | bytes, deadline: float, timeout: float
    ) -> wasmtime.InstancePre:
        digest, data = self._digest(module)
        with self._lock:
            pre = self._modules.get(digest)
            if pre is not None:
                self.cache_stats.memory_hits += 1
                return pre
        if data is None:  # known digest whose compilation failed before: read it again
            assert isinstance(module, Path)
            data = self._read(module)
            digest = hashlib.sha256(data).hexdigest()
        # Compiled outside the lock: calls of modules already prepared need not wait.
        compiled = self._load_or_compile(digest, data, deadline, timeout)
        try:
            pre = self._linker.instantiate_pre(compiled)
        except wasmtime.WasmtimeError as exc:
            raise ExecutionFailed(f"module cannot be linked: {wasmtime_cause(exc)}") from exc
        with self._lock:
            return self._modules.setdefault(digest, pre)

    def _load_or_compile(
        self, digest: str, data: bytes, deadline: float, timeout: float
    ) -> wasmtime.Module:
        key = hashlib.sha256(
            f"{digest}\0{_WASMTIME_VERSION}\0{self._fingerprint}".encode()
        ).hexdigest()
        if self._disk is not None:
            payload = self._disk.load(key)
            if payload is not None:
                try:
                    module = wasmtime.Module.deserialize(self._engine, payload)
                except wasmtime.WasmtimeError as exc:
                    self._disk.discard(key, f"does not deserialize ({wasmtime_cause(exc)})")
                else:
                    with self._lock:
                        self.cache_stats.disk_hits += 1
                    return module
        # Compiled by a worker process that is killed at the deadline (environments.wasm.compile):
        # compiling counts against the call's timeout.
        payload = compile_module(data, deadline, timeout)
        try:
            module = wasmtime.Module.deserialize(self._engine, payload)
        except wasmtime.WasmtimeError as exc:
            raise SandboxUnavailable(
                f"the wasm compiler's output does not load: {wasmtime_cause(exc)}"
            ) from exc
        with self._lock:
            self.cache_stats.compiled += 1
        if self._disk is not None:
            self._disk.store(key, payload)
        return module

    # -- running ---------------------------------------------------------------------------

    def run(self, request: WasmRequest) -> WasmResult:
        if self._closed:
            raise SandboxUnavailable("the wasm environment is closed")
        deadline = time.monotonic() + request.timeout
        pre = self._prepared(request.module, deadline, request.timeout)
        guards = self._guards(request)
        stdout = _CappedOutput(request.max_output)
        stderr = _CappedOutput(request.max_output)
        pipes: list[_Pipe] = []
        try:
            pipes = [self._pump.open(stdout), self._pump.open(stderr)]
            return self._run(pre, request, pipes, stdout, stderr, deadline)
        except OSError as exc:
            raise SandboxUnavailable(f"cannot set up the module's output: {exc}") from exc
        finally:
            for pipe in pipes:
                self._pump.finish(pipe)
            # Whether the module finished, failed or was stopped: it can run no more.
            self._check_plants(request, guards)

    def _guards(self, request: WasmRequest) -> list[tuple[str, ProtectedScan]]:
        """For a guarded request: each writable preopen (its workspace-relative path) and a
        scan of it, which must find no protected path now (the preopen rule)."""
        workspace = request.workspace
        if workspace is None:
            return []
        guards = []
        for preopen in request.preopens:
            if not preopen.writable:
                continue
            try:
                relative = preopen.host.resolve().relative_to(workspace.resolve()).as_posix()
            except ValueError:
                raise ExecutionFailed(
                    f"cannot preopen {preopen.host} writable: it is outside the workspace"
                ) from None
            scan = ProtectedScan(preopen.host)
            present = sorted(_in(relative, entry) for entry in scan.entries)
            if present or scan.unreadable:
                raise ExecutionFailed(
                    f"cannot preopen {preopen.host} writable: it holds "
                    + ", ".join(present or scan.unreadable)
                    + " (protected, or unreadable), which no module may write"
                )
            guards.append((relative, scan))
        return guards

    def _check_plants(self, request: WasmRequest, guards: list[tuple[str, ProtectedScan]]) -> None:
        planted: list[str] = []
        for relative, scan in guards:
            changes = scan.changes()
            planted += [_in(relative, entry) for entry in changes.appeared + changes.unreadable]
        if not planted:
            return
        assert request.workspace is not None  # there are guards only with a workspace
        why = (
            f"a writable @wasm module created {', '.join(sorted(planted))} in the workspace; "
            "sandboxed tools may never create protected paths"
        )
        where = quarantine(request.workspace, planted, why)
        raise ExecutionFailed(f"{why}. Quarantined: {where}")

    def _run(
        self,
        pre: wasmtime.InstancePre,
        request: WasmRequest,
        pipes: list[_Pipe],
        stdout: _CappedOutput,
        stderr: _CappedOutput,
        deadline: float,
    ) -> WasmResult:
        store = wasmtime.Store(self._engine)
        writable = [p.host for p in request.preopens if p.writable]
        try:
            store.set_fuel(request.fuel)
            # One limit over the whole store: its one linear memory (the engine refuses modules
            # with more), at most MAX_TABLES tables whose elements (8 bytes each) take at most
            # an eighth of the memory limit more, and one instance.
            store.set_limits(
                memory_size=request.memory_limit,
                table_elements=_table_elements(request.memory_limit),
                instances=1,
                tables=MAX_TABLES,
                memories=1,
            )
            store.set_wasi(self._wasi_config(request, pipes))
            _watch_epochs(store)
        except wasmtime.WasmtimeError as exc:
            raise ExecutionFailed(
                f"cannot configure the module's sandbox: {wasmtime_cause(exc)}"
            ) from exc
        finally:
            for pipe in pipes:  # wasmtime has opened them (or failed to): the names can go
                pipe.release_name()
        instance: wasmtime.Instance | None = None
        exit_code = 0
        started = time.monotonic()
        budget = _DiskBudget(writable, request.disk_budget) if writable else None
        hosts = tuple(p.host for p in request.preopens)
        with self._ticker.running(deadline, hosts, request.cancel):
            store.set_epoch_deadline(1)  # then every tick: see _on_epoch
            _CALL.start(deadline, budget, request.cancel)
            try:
                instance = pre.instantiate(store)
                start = instance.exports(store).get("_start")
                if not isinstance(start, wasmtime.Func):
                    raise ExecutionFailed("the module exports no _start: it is not a WASI command")
                start(store)
            except wasmtime.ExitTrap as exc:
                exit_code = exc.code
            except (wasmtime.Trap, wasmtime.WasmtimeError) as exc:
                if _CALL.stopped is None:
                    raise self._map_failure(exc, request, store, instance) from exc
            finally:
                stopped = _CALL.stopped
                _CALL.finish()
        if stopped == "disk" or (budget is not None and budget.spent()):
            assert budget is not None
            raise ExecutionFailed(
                f"the module wrote more than its disk budget of {budget.limit:,} bytes to the "
                f"workspace (its filesystem grew by {budget.grown():,} bytes) and was stopped; "
                "what it wrote is still there"
            )
        if stopped == "cancelled":
            took = time.monotonic() - started
            raise Cancelled(f"cancelled after {took:.1f}s: the module was stopped")
        if stopped == "timeout":
            raise ExecutionTimeout(f"the module ran past its timeout of {request.timeout:g}s")
        if stopped == "slept":
            raise ExecutionTimeout(f"the module slept past its timeout of {request.timeout:g}s")
        duration = time.monotonic() - started
        fuel_consumed = request.fuel - self._fuel_left(store)
        for pipe in pipes:
            self._pump.finish(pipe)
        pipes.clear()
        return WasmResult(
            exit_code=exit_code,
            stdout=stdout.value(),
            stderr=stderr.value(),
            duration=duration,
            fuel_consumed=fuel_consumed,
            stdout_truncated=stdout.truncated,
            stderr_truncated=stderr.truncated,
        )

    def _wasi_config(self, request: WasmRequest, pipes: list[_Pipe]) -> wasmtime.WasiConfig:
        wasi = wasmtime.WasiConfig()
        # Deliberately no inherit_env/inherit_stdin/...: the module sees only what is set here.
        name = request.module.name if isinstance(request.module, Path) else "module"
        wasi.argv = list(request.argv) or [name]
        wasi.stdout_file = pipes[0].path
        wasi.stderr_file = pipes[1].path
        if request.stdin:
            # wasmtime opens the file when it is configured, so it can go right after.
            fd, stdin_path = tempfile.mkstemp(dir=self._scratch)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(request.stdin)
                wasi.stdin_file = stdin_path
            finally:
                os.unlink(stdin_path)
        for preopen in request.preopens:
            # Opened here and handed over by descriptor, after checking that its path has no
            # symlink in it: a directory swapped for a link (to `.git`, to `/`) between the
            # choice of preopens and this moment is refused, not followed.
            host = os.fspath(preopen.host)
            try:
                fd = os.open(host, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError:
                raise ExecutionFailed(f"cannot preopen {host}: not a directory") from None
            try:
                check_pinned(fd, host)
                wasi.preopen_dir(f"/proc/self/fd/{fd}", preopen.guest, preopen.writable)
            except NotBeneath as exc:
                raise ExecutionFailed(f"cannot preopen {host}: {exc.strerror}") from None
            finally:
                os.close(fd)  # wasmtime has opened the directory itself
        return wasi

    def _map_failure(
        self,
        exc: Exception,
        request: WasmRequest,
        store: wasmtime.Store,
        instance: wasmtime.Instance | None,
    ) -> ExecutionFailed | ExecutionTimeout | OutOfFuel | OutOfMemory:
        cause = wasmtime_cause(exc)
        code = exc.trap_code if isinstance(exc, wasmtime.Trap) else None
        if code is wasmtime.TrapCode.INTERRUPT:
            return ExecutionTimeout(f"the module ran past its timeout of {request.timeout:g}s")
        if code is wasmtime.TrapCode.OUT_OF_FUEL:
            return OutOfFuel(f"the module used up its fuel ({request.fuel:,} units)")
        if "exceeds memory limits" in cause:
            return OutOfMemory(
                f"the module needs more memory than its limit of {request.memory_limit:,} bytes"
            )
        if "exceeds table limits" in cause:
            return OutOfMemory(
                f"the module's tables need more than their limit of "
                f"{_table_elements(request.memory_limit):,} elements ({cause})"
            )
        if "resource limit exceeded" in cause:
            return ExecutionFailed(
                f"the module needs more of its sandbox than it allows ({cause}): one memory, "
                f"at most {MAX_TABLES} tables, one instance"
            )
        used = self._memory_size(store, instance)
        # wasmtime makes a refused memory.grow return -1 instead of trapping, and programs
        # then abort (an `unreachable` trap) or fault, so the refusal itself is invisible here.
        # A trap with memory within a quarter of the limit is reported as what it almost
        # always is; the trap's own message is kept in case it was not.
        if used + max(WASM_PAGE, request.memory_limit // 4) > request.memory_limit:
            return OutOfMemory(
                f"the module hit its memory limit of {request.memory_limit:,} bytes (it was "
                f"using {used:,}) and then failed: {cause}"
            )
        if isinstance(exc, wasmtime.Trap):
            trace = _trace(exc)
            if used > request.memory_limit // 2:  # a large allocation may have been refused
                cause += f" (linear memory {used:,} of its limit of {request.memory_limit:,} bytes)"
            return ExecutionFailed(f"the module trapped: {cause}" + (f"\n{trace}" if trace else ""))
        return ExecutionFailed(f"the module failed: {cause}")

    @staticmethod
    def _memory_size(store: wasmtime.Store, instance: wasmtime.Instance | None) -> int:
        if instance is None:
            return 0
        sizes = [
            item.data_len(store)
            for item in instance.exports(store).by_index
            if isinstance(item, wasmtime.Memory)
        ]
        return max(sizes, default=0)

    @staticmethod
    def _fuel_left(store: wasmtime.Store) -> int:
        try:
            return store.get_fuel()
        except wasmtime.WasmtimeError:
            return 0

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._ticker.close()
        self._pump.close()
        with self._lock:
            self._modules.clear()
            self._path_digests.clear()
        shutil.rmtree(self._scratch, ignore_errors=True)


# --- poll_oneoff with the call's deadline ---------------------------------------------------

_SUBSCRIPTION_SIZE = 48  # wasi_snapshot_preview1 subscription_t
_EVENT_SIZE = 32  # event_t
_EVENTTYPE_CLOCK = 0
_SUBCLOCKFLAGS_ABSTIME = 1
_ERRNO_INVAL = 28
_ERRNO_FAULT = 21
_ERRNO_INTR = 27
_CLOCKS = {0: time.time_ns, 1: time.monotonic_ns, 2: time.process_time_ns, 3: time.thread_time_ns}


def _poll_oneoff_type() -> wasmtime.FuncType:
    # A new FuncType for each engine: wasmtime registers a type with the first engine that
    # uses it, and asserts (aborting the process) when another engine does.
    return wasmtime.FuncType([wasmtime.ValType.i32()] * 4, [wasmtime.ValType.i32()])


def _clock_time_get_type() -> wasmtime.FuncType:
    return wasmtime.FuncType(
        [wasmtime.ValType.i32(), wasmtime.ValType.i64(), wasmtime.ValType.i32()],
        [wasmtime.ValType.i32()],
    )


class _CallState(threading.local):
    """The call running in this thread: its deadline, disk budget, cancel event, and why it
    was stopped."""

    deadline: float | None = None
    budget: _DiskBudget | None = None
    cancel: threading.Event | None = None
    stopped: str | None = None  # "timeout", "slept" (in poll_oneoff), "disk" or "cancelled"

    def start(
        self, deadline: float, budget: _DiskBudget | None, cancel: threading.Event | None = None
    ) -> None:
        self.deadline, self.budget, self.cancel, self.stopped = deadline, budget, cancel, None

    def finish(self) -> None:
        self.deadline, self.budget, self.cancel, self.stopped = None, None, None, None


_CALL = _CallState()


class _DiskBudget:
    """How much a writable call may grow the filesystems of its writable preopens.

    Measured as the growth of each filesystem's used space (statvfs), which catches every way
    of writing (files, fallocate, directories) at the cost of counting what other processes
    write there at the same time.
    """

    def __init__(self, hosts: list[Path], limit: int) -> None:
        self.limit = limit
        self._devices: dict[int, str] = {}
        for host in hosts:
            with contextlib.suppress(OSError):
                self._devices.setdefault(os.stat(host).st_dev, os.fspath(host))
        self._before = self._used()

    def _used(self) -> int:
        used = 0
        for path in self._devices.values():
            with contextlib.suppress(OSError):
                st = os.statvfs(path)
                used += (st.f_blocks - st.f_bfree) * st.f_frsize
        return used

    def grown(self) -> int:
        return self._used() - self._before

    def spent(self) -> bool:
        return self.grown() > self.limit


# The epoch deadline callback: wasmtime-py exposes only its C binding, used here as is. It runs
# in the thread running the module, at every epoch tick, between wasm instructions.
_EpochCallback = ctypes.CFUNCTYPE(
    ctypes.c_size_t,
    ctypes.POINTER(wasmtime_ffi.wasmtime_context_t),
    ctypes.c_void_p,
    ctypes.POINTER(ctypes.c_uint64),
    ctypes.POINTER(wasmtime_ffi.wasmtime_update_deadline_kind_t),
)
_NO_FINALIZER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)()


def _stop(reason: str) -> int:
    _CALL.stopped = reason
    error = wasmtime_ffi.wasmtime_error_new(
        ctypes.create_string_buffer(f"codecoder: {reason}".encode())
    )
    return ctypes.cast(error, ctypes.c_void_p).value or 0


def _on_epoch(_context: object, _data: object, delta: Any, kind: Any) -> int:
    """Continue one more tick, or stop the module: cancelled, past its deadline, or its disk
    budget."""
    try:
        if _CALL.cancel is not None and _CALL.cancel.is_set():
            return _stop("cancelled")
        if _CALL.deadline is not None and time.monotonic() >= _CALL.deadline:
            return _stop("timeout")
        budget = _CALL.budget
        if budget is not None and budget.spent():
            return _stop("disk")
        delta[0] = 1
        kind[0] = 0  # WASMTIME_UPDATE_DEADLINE_CONTINUE
        return 0
    except BaseException:  # never continue on an error here: stop the module
        return _stop("timeout")


_ON_EPOCH = _EpochCallback(_on_epoch)


def _watch_epochs(store: wasmtime.Store) -> None:
    wasmtime_ffi.wasmtime_store_epoch_deadline_callback(store.ptr(), _ON_EPOCH, None, _NO_FINALIZER)


def _poll_oneoff(
    caller: wasmtime.Caller, in_ptr: int, out_ptr: int, count: int, nevents_ptr: int
) -> int:
    """WASI poll_oneoff that never sleeps past the call's deadline.

    File descriptors here are files and pipes drained by the runtime, so fd subscriptions are
    ready at once; clock subscriptions are slept in Python, up to the deadline and no further.
    """
    if _CALL.stopped is not None:
        return _ERRNO_INTR
    memory = caller.get("memory")
    if not isinstance(memory, wasmtime.Memory):
        return _ERRNO_FAULT
    if count == 0:
        return _ERRNO_INVAL
    try:
        raw = bytes(memory.read(caller, in_ptr, in_ptr + count * _SUBSCRIPTION_SIZE))
    except (IndexError, ValueError, wasmtime.WasmtimeError):
        return _ERRNO_FAULT
    if len(raw) != count * _SUBSCRIPTION_SIZE:
        return _ERRNO_FAULT
    ready: list[tuple[int, int]] = []  # (userdata, event type)
    clocks: list[tuple[int, int]] = []  # (userdata, nanoseconds to wait)
    for i in range(count):
        sub = raw[i * _SUBSCRIPTION_SIZE : (i + 1) * _SUBSCRIPTION_SIZE]
        userdata = int.from_bytes(sub[0:8], "little")
        tag = sub[8]
        if tag != _EVENTTYPE_CLOCK:
            ready.append((userdata, tag))
            continue
        clock_id = int.from_bytes(sub[16:20], "little")
        timeout = int.from_bytes(sub[24:32], "little")
        flags = int.from_bytes(sub[40:42], "little")
        now = _CLOCKS.get(clock_id)
        if now is None:
            return _ERRNO_INVAL
        wait = timeout - now() if flags & _SUBCLOCKFLAGS_ABSTIME else timeout
        clocks.append((userdata, max(wait, 0)))
    if not ready and clocks:
        shortest = min(wait for _, wait in clocks)
        deadline = _CALL.deadline
        seconds = shortest / 1e9
        late = deadline is not None and time.monotonic() + seconds > deadline
        if late:
            assert deadline is not None
            seconds = max(deadline - time.monotonic(), 0.0)
        # The call is marked stopped and the sleep interrupted, rather than raising through
        # wasmtime's trampoline: the epoch callback stops the module at its next check, and
        # whatever it did after this is not reported as its result.
        cancel = _CALL.cancel
        if cancel is not None and cancel.wait(seconds):
            _CALL.stopped = "cancelled"
            return _ERRNO_INTR
        if cancel is None:
            time.sleep(seconds)
        if late:
            _CALL.stopped = "slept"
            return _ERRNO_INTR
        ready = [(userdata, _EVENTTYPE_CLOCK) for userdata, wait in clocks if wait <= shortest]
    else:
        ready += [(userdata, _EVENTTYPE_CLOCK) for userdata, wait in clocks if wait == 0]
    events = bytearray()
    for userdata, kind in ready:
        event = bytearray(_EVENT_SIZE)
        event[0:8] = userdata.to_bytes(8, "little")
        event[10] = kind
        if kind != _EVENTTYPE_CLOCK:
            event[16:24] = (1).to_bytes(8, "little")  # readable/writable now
        events += event
    try:
        memory.write(caller, bytes(events), out_ptr)
        memory.write(caller, len(ready).to_bytes(4, "little"), nevents_ptr)
    except (IndexError, ValueError, wasmtime.WasmtimeError):
        return _ERRNO_FAULT
    return 0


def _clock_time_get(caller: wasmtime.Caller, clock_id: int, precision: int, out_ptr: int) -> int:
    """WASI clock_time_get on the same clocks as `_poll_oneoff`."""
    memory = caller.get("memory")
    now = _CLOCKS.get(clock_id)
    if now is None:
        return _ERRNO_INVAL
    if not isinstance(memory, wasmtime.Memory):
        return _ERRNO_FAULT
    try:
        memory.write(caller, (now() & (2**64 - 1)).to_bytes(8, "little"), out_ptr)
    except (IndexError, ValueError, wasmtime.WasmtimeError):
        return _ERRNO_FAULT
    return 0
