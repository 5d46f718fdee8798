"""The @wasm environment: WASI modules run by wasmtime, confined to what each call preopens.

A `WasmRequest` (`request`) names a module (a `.wasm` or `.wat` file, or its bytes), its argv
and stdin, and the host directories it may see (`Preopen`, read-only unless marked writable).
Nothing else reaches the module: no environment variables, no inherited stdio, no sockets, no
other files. Each call gets a fresh `Store`, and everything it can take is bounded (`limits`):

* fuel (instructions, roughly) -> `OutOfFuel` when used up;
* time -> `ExecutionTimeout`: the call's timeout covers compiling the module (done by a worker
  process killed at the deadline, `environments.wasm.compile`) and running it (an epoch callback
  every tick, in the module's thread, stops it at the deadline, `epoch`; `poll_oneoff` never
  sleeps past it, `clocks`; a thread blocked in the host on a FIFO is freed, see
  `epoch.EpochTicker` and `fifos`);
* cancellation -> `Cancelled`: once `WasmRequest.cancel` is set, the same epoch callback stops
  the module at its next tick and `poll_oneoff` stops sleeping;
* memory -> `OutOfMemory`: one limiter over the whole store, one linear memory (the engine
  refuses modules declaring more, or shared or 64-bit ones), at most `MAX_TABLES` tables whose
  elements take at most an eighth of the memory limit more, one instance;
* disk, for a call with writable preopens -> `ExecutionFailed` once their filesystems grew by
  more than `disk_budget`, and, for a module the runtime did not write (the request names the
  workspace it guards), once what it wrote counts more than that at apparent size (sparse
  files, hard links: `environments.apparent`);
* output -> capped head and tail (below, `output`);
* the workspace, when the request names it: writable preopens may hold no protected path, and
  one the module creates is quarantined after the call (`environments.workspaceguard`).

`proc_exit(n)` is not an error: it is `WasmResult.exit_code`. Any other trap becomes
`ExecutionFailed` with the trap's message (`traps`). No wasmtime exception leaves this module.

Output goes through pipes drained by one thread per environment into capped buffers, so a
module flooding stdout costs memory up to its cap and no disk. Compiling is the expensive part
(about 0.1 s for fileops.wasm; a warm call takes under a millisecond), so compiled modules are
cached twice: in process (digest -> `InstancePre`, here), and on disk (`cache`) so a new
process does not recompile. `Module.deserialize` trusts its input completely (it is machine
code), so the disk cache is used only if its directory is private to this user, and every entry
carries an HMAC, keyed by a secret kept in that directory, over the entry's cache key and bytes:
a corrupt, truncated, renamed or foreign entry is deleted and the module recompiled, never
loaded.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import stat
import tempfile
import threading
import time
from pathlib import Path

import wasmtime

from codecoder.environments.apparent import call_start, hidden_bytes
from codecoder.environments.base import Environment
from codecoder.environments.wasm.cache import (
    WASMTIME_VERSION,
    CacheStats,
    DiskCache,
    default_cache_dir,
    engine_fingerprint,
)
from codecoder.environments.wasm.clocks import (
    clock_time_get,
    clock_time_get_type,
    poll_oneoff,
    poll_oneoff_type,
)
from codecoder.environments.wasm.compile import compile_module, engine_config
from codecoder.environments.wasm.epoch import CALL, EpochTicker, watch_epochs
from codecoder.environments.wasm.limits import (
    MAX_MODULE_BYTES,
    MAX_TABLES,
    DiskBudget,
    table_elements,
)
from codecoder.environments.wasm.output import CappedOutput, OutputPump, Pipe
from codecoder.environments.wasm.request import WasmRequest, WasmResult
from codecoder.environments.wasm.traps import map_failure, wasmtime_cause
from codecoder.environments.workspaceguard import ProtectedScan, quarantine
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.errors import (
    Cancelled,
    ExecutionFailed,
    ExecutionTimeout,
    SandboxUnavailable,
)
from codecoder.foundation.openbeneath import NotBeneath, check_pinned
from codecoder.foundation.scratch import scratch_directory

__all__ = ["WasmEnvironment"]

log = logging.getLogger(__name__)


def _in(directory: str, entry: str) -> str:
    return f"{directory}/{entry}" if directory not in ("", ".") else entry


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
            poll_oneoff_type(),
            poll_oneoff,
            access_caller=True,
        )
        # Its clocks must be the ones poll_oneoff measures absolute timeouts against.
        self._linker.define_func(
            "wasi_snapshot_preview1",
            "clock_time_get",
            clock_time_get_type(),
            clock_time_get,
            access_caller=True,
        )
        self._ticker = EpochTicker(self._engine, epoch_interval)
        self._fingerprint = engine_fingerprint()
        self.cache_stats = CacheStats()
        self._disk: DiskCache | None = None
        if use_disk_cache:
            try:
                directory = cache_dir or default_cache_dir()
            except RuntimeError:  # no home directory to put it in
                log.warning("no wasm module cache: no cache directory was given or found")
            else:
                disk = DiskCache(directory, self.cache_stats)
                self._disk = disk if disk.usable else None
        self._lock = threading.Lock()
        self._modules: dict[str, wasmtime.InstancePre] = {}
        self._path_digests: dict[tuple[object, ...], str] = {}
        # The pipes of its calls: in the process's scratch, gone with it even if never closed.
        self._scratch = scratch_directory("codecoder-wasm-")  # mode 0700
        self._pump = OutputPump(self._scratch)
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
            f"{digest}\0{WASMTIME_VERSION}\0{self._fingerprint}".encode()
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
        stdout = CappedOutput(request.max_output)
        stderr = CappedOutput(request.max_output)
        pipes: list[Pipe] = []
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
        pipes: list[Pipe],
        stdout: CappedOutput,
        stderr: CappedOutput,
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
                table_elements=table_elements(request.memory_limit),
                instances=1,
                tables=MAX_TABLES,
                memories=1,
            )
            store.set_wasi(self._wasi_config(request, pipes))
            watch_epochs(store)
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
        started_ns = call_start()
        budget = DiskBudget(writable, request.disk_budget) if writable else None
        hosts = tuple(p.host for p in request.preopens)
        with self._ticker.running(deadline, hosts, request.cancel):
            store.set_epoch_deadline(1)  # then every tick: see _on_epoch
            CALL.start(deadline, budget, request.cancel)
            try:
                instance = pre.instantiate(store)
                start = instance.exports(store).get("_start")
                if not isinstance(start, wasmtime.Func):
                    raise ExecutionFailed("the module exports no _start: it is not a WASI command")
                start(store)
            except wasmtime.ExitTrap as exc:
                exit_code = exc.code
            except (wasmtime.Trap, wasmtime.WasmtimeError) as exc:
                if CALL.stopped is None:
                    raise map_failure(exc, request, store, instance) from exc
            finally:
                stopped = CALL.stopped
                CALL.finish()
        if stopped == "disk" or (budget is not None and budget.spent()):
            assert budget is not None
            raise ExecutionFailed(
                f"the module wrote more than its disk budget of {budget.limit:,} bytes to the "
                f"workspace (its filesystem grew by {budget.grown():,} bytes) and was stopped; "
                "what it wrote is still there"
            )
        if budget is not None and request.workspace is not None:
            # A module the runtime did not write: what it wrote counts at apparent size.
            hidden = hidden_bytes(writable, started_ns)
            grown = max(budget.grown(), 0)
            if hidden.bytes and grown + hidden.bytes > budget.limit:
                raise ExecutionFailed(
                    f"the module wrote more than its disk budget of {budget.limit:,} bytes to "
                    f"the workspace, counting apparent sizes: its filesystem grew by "
                    f"{grown:,} bytes, and what it wrote holds {hidden.bytes:,} bytes more that "
                    f"occupy no space yet (holes, more names of one file), which a copy of it "
                    f"would write: {hidden.describe()}. What it wrote is still there"
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

    def _wasi_config(self, request: WasmRequest, pipes: list[Pipe]) -> wasmtime.WasiConfig:
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
