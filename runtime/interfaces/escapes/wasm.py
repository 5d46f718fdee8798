"""The wasm layer (wasm.json): probe.wasm (probe.c) attacking WASI from inside, a symlink swapped
during a call, a tampered compiled-module cache, file tools, modules built to exhaust memory,
tables or the compiler, FIFOs, the disk, protected paths planted at any depth. A file tool runs
in the environment the project binds it to and, where that is not @wasm, in @wasm as well.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Final

import wasmtime

from codecoder.config.project import PROJECT_FILE
from codecoder.environments.wasm.cache import default_cache_dir
from codecoder.environments.wasm.environment import WasmEnvironment
from codecoder.environments.wasm.limits import DEFAULT_MEMORY_LIMIT
from codecoder.environments.wasm.request import WasmRequest, WasmResult
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.errors import CodecoderError
from codecoder.interfaces.escapes.calls import _Asker, _last_line, _result_line
from codecoder.interfaces.escapes.corpus import _ERRORS, Attempt, ToolCall, WasmEntry, _substituted
from codecoder.interfaces.escapes.layer import OVERRUN_GRACE, AuditContext, _LayerRunner
from codecoder.interfaces.escapes.outcomes import _escaped, _NotApplicable, _NotRun
from codecoder.interfaces.escapes.probe import _probe_bytes
from codecoder.session import Runtime
from codecoder.tools.files import run_wasm_preopens

PROTECTED: Final = (PROJECT_FILE, ".codecoder", ".git")


def slow_to_compile(branches: int) -> bytes:
    """A small module that takes long to compile: one function of `branches` ifs over 64
    locals (register allocation grows faster than the code: 60,000 take seconds)."""

    def leb(n: int) -> bytes:
        out = bytearray()
        while True:
            byte, n = n & 0x7F, n >> 7
            out.append(byte | (0x80 if n else 0))
            if not n:
                return bytes(out)

    def section(number: int, body: bytes) -> bytes:
        return bytes([number]) + leb(len(body)) + body

    code = bytearray(leb(1) + leb(64) + b"\x7f")
    for i in range(branches):
        # local.get a; if; local.get b; i32.const 1; i32.add; local.set c; end
        code += b"\x20" + leb(i % 64) + b"\x04\x40\x20" + leb((i + 1) % 64)
        code += b"\x41\x01\x6a\x21" + leb((i + 2) % 64) + b"\x0b"
    code += b"\x0b"
    return (
        b"\0asm\x01\0\0\0"
        + section(1, b"\x01\x60\x00\x00")  # one type: () -> ()
        + section(3, b"\x01\x00")  # one function of it
        + section(7, b"\x01\x06_start\x00\x00")  # exported as _start
        + section(10, b"\x01" + leb(len(code)) + bytes(code))
    )


@dataclass(slots=True)
class _Runs:
    """What a sequence of module runs produced: results, the error that ended them, the time."""

    results: list[WasmResult] = field(default_factory=list)
    error: CodecoderError | None = None
    elapsed: float = 0.0

    @property
    def output(self) -> str:
        return "".join(r.stdout_text() + r.stderr_text() for r in self.results) + (
            str(self.error) if self.error else ""
        )


class _WasmLayer(_LayerRunner):
    def __init__(self, audit: AuditContext) -> None:
        self.audit = audit

    def run(self, attempt: Attempt) -> str:
        entry = attempt.entry
        assert isinstance(entry, WasmEntry)
        workspace = self.audit.workspace
        if entry.fifo is not None:
            os.mkfifo(workspace.path / entry.fifo)  # gone with the rest at restore()
        if entry.kind == "tool":
            return self._tool(entry)
        if entry.kind == "cache":
            return self._cache(entry)
        env = self.audit.environment(EnvironmentTag.WASM)
        assert isinstance(env, WasmEnvironment)
        protected_before = workspace.state(PROTECTED)
        if entry.kind == "race":
            runs, flips = self._race(env, entry)
        else:
            runs, flips = self._run(env, entry, self._requests(entry)), 0
        self._check(entry, runs)
        changed = workspace.changed(protected_before, PROTECTED)
        if changed:
            _escaped(f"the module changed {', '.join(changed)}")
        outside = workspace.outside_changed()
        if outside:
            _escaped(f"the module changed the directory outside the workspace: {outside}")
        how = self._defence(entry, runs)
        if entry.kind == "race":
            if flips < 2:
                raise _NotRun("the symlink could not be swapped during the call")
            how += f"; the symlink was swapped {flips} times during the call"
        return how

    def _timeout(self, entry: WasmEntry) -> float:
        return entry.timeout or self.audit.limits.timeout

    def _requests(self, entry: WasmEntry) -> list[WasmRequest]:
        workspace = self.audit.workspace
        preopens = run_wasm_preopens(workspace.path, writable=entry.writable)
        module = (
            "\n".join(entry.wat).encode()
            if entry.kind == "module"
            else slow_to_compile(entry.branches)
            if entry.kind == "slow-compile"
            else _probe_bytes()
        )
        values = {
            "@TOKEN@": workspace.token,
            "@OUTSIDE@": str(workspace.outside),
            "@MEMORY_BYTES_X4@": str(4 * DEFAULT_MEMORY_LIMIT),
        }
        requests = []
        for argv in entry.runs or (entry.argv,):
            for placeholder, value in values.items():
                argv = tuple(arg.replace(placeholder, value) for arg in argv)
            requests.append(
                WasmRequest(
                    module=module,
                    argv=("probe", *argv),
                    preopens=preopens,
                    timeout=self._timeout(entry),
                    max_output=self.audit.limits.max_output,
                    workspace=workspace.path,
                )
            )
        return requests

    def _run(
        self, env: WasmEnvironment, entry: WasmEntry, requests: Sequence[WasmRequest]
    ) -> _Runs:
        runs = _Runs()
        started = time.monotonic()
        try:
            for request in requests:
                runs.results.append(env.run(request))
        except _ERRORS as exc:
            if type(exc).__name__ not in entry.blocked_by:
                raise _NotRun(f"{type(exc).__name__}: {exc}") from exc
            runs.error = exc
        runs.elapsed = time.monotonic() - started
        return runs

    def _check(self, entry: WasmEntry, runs: _Runs) -> None:
        token = self.audit.workspace.token
        checks = set(entry.escaped_if) | {"secret"}
        last = runs.results[-1] if runs.results else None
        if "secret" in checks and token in runs.output:
            _escaped("the secret outside the workspace was read")
        if "succeeded" in checks and last is not None and last.exit_code == 0:
            _escaped(f"the operation succeeded: {_last_line(last.stdout_text())}")
        if "completed" in checks and runs.error is None:
            _escaped(f"the module ran to its end ({runs.elapsed:.1f}s) without being stopped")
        timeout = self._timeout(entry)
        if "overran" in checks and runs.elapsed > timeout + OVERRUN_GRACE:
            _escaped(
                f"it held the runtime for {runs.elapsed:.1f}s, past its timeout of {timeout:g}s"
            )
        if "uncapped" in checks and last is not None:
            cap = self.audit.limits.max_output
            if len(last.stdout) > cap + 200:
                _escaped(f"{len(last.stdout):,} bytes of output kept, past the cap of {cap:,}")
        if entry.stdout_matches and re.search(entry.stdout_matches, runs.output):
            _escaped(f"the output matched {entry.stdout_matches!r}: {runs.output[:120]}")
        if entry.expect_exit is not None and (last is None or last.exit_code != entry.expect_exit):
            raise _NotRun(f"expected exit code {entry.expect_exit}, got {last and last.exit_code}")

    def _defence(self, entry: WasmEntry, runs: _Runs) -> str:
        if runs.error is not None:
            error = _last_line(str(runs.error))
            return f"{type(runs.error).__name__} after {runs.elapsed:.1f}s: {error}"
        last = runs.results[-1]
        if "uncapped" in entry.escaped_if:
            return (
                f"output capped at {len(last.stdout):,} bytes (truncated: "
                f"{last.stdout_truncated}) in {runs.elapsed:.1f}s"
            )
        if entry.expect_exit is not None:
            return f"exit code {last.exit_code} reported; the runtime carried on"
        line = _last_line(last.stderr_text() or last.stdout_text())
        return f"{line} (exit code {last.exit_code})"

    def _race(self, env: WasmEnvironment, entry: WasmEntry) -> tuple[_Runs, int]:
        workspace = self.audit.workspace
        link = workspace.path / "race" / "dir"
        spare = workspace.path / "race" / ".swap"
        op = "reads" if entry.mode == "read" else "writes"
        target = "secret.txt" if entry.mode == "read" else "planted"
        request = WasmRequest(
            module=_probe_bytes(),
            argv=("probe", op, f"/workspace/race/dir/{target}", "3000"),
            preopens=run_wasm_preopens(workspace.path, writable=entry.mode == "write"),
            timeout=self._timeout(entry),
            max_output=self.audit.limits.max_output,
        )
        stop = threading.Event()
        flips = 0

        def swap() -> None:
            nonlocal flips
            # A symlink renamed over another is atomic: race/dir is always one or the other.
            targets = ("real-dir", "../../outside")
            while not stop.is_set():
                with contextlib.suppress(FileNotFoundError):
                    spare.unlink()
                spare.symlink_to(targets[flips % 2])
                os.replace(spare, link)
                flips += 1

        swapper = threading.Thread(target=swap, name="codecoder-audit-swap", daemon=True)
        swapper.start()
        try:
            runs = self._run(env, entry, [request])
        finally:
            stop.set()
            swapper.join()
        return runs, flips

    def _cache(self, entry: WasmEntry) -> str:
        """Tamper with the disk cache entry of a module, then run the module in a new
        environment (a new process would do the same): the entry must be discarded."""
        cache_dir = self.audit.options.wasm_cache_dir or default_cache_dir()
        # A module of our own (the probe plus a custom section holding a nonce): its digest,
        # and so its cache entry, belongs to this run alone.
        module = _probe_bytes() + _custom_section("codecoder-audit", self.audit.token.encode())
        request = WasmRequest(module=module, argv=("probe", "environ"))
        before = set(cache_dir.glob("*.cwasm")) if cache_dir.is_dir() else set()
        first = WasmEnvironment(cache_dir)
        try:
            if first.disk_cache_dir is None:
                raise _NotApplicable(f"the compiled-module cache {cache_dir} is not in use")
            genuine = first.run(request).stdout
        finally:
            first.close()
        created = sorted(set(cache_dir.glob("*.cwasm")) - before)
        if len(created) != 1:
            raise _NotRun(f"expected one new cache entry in {cache_dir}, found {len(created)}")
        (path,) = created
        try:
            forged = _tampered(path.read_bytes(), entry.mode, self.audit.token)
            path.write_bytes(forged)
            second = WasmEnvironment(cache_dir)
            try:
                with _captured_log("codecoder.environments.wasm.cache") as reported:
                    result = second.run(request)
                stats = second.cache_stats
            finally:
                second.close()
        finally:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        if self.audit.token in result.stdout_text() or result.stdout != genuine:
            _escaped(f"the tampered entry was loaded and ran: {result.stdout_text()[:100]}")
        if stats.discarded != 1 or stats.compiled != 1:
            _escaped(
                f"the module ran as compiled, but the cache reported {stats.discarded} discarded "
                f"and {stats.compiled} compiled: the tampered entry was not caught"
            )
        said = f" (the runtime logged: {reported[-1]})" if reported else ""
        return f"the tampered entry was discarded{said}; the module was recompiled"

    def _tool(self, entry: WasmEntry) -> str:
        """The file tool's call in the environment the project binds it to and, where that is
        not @wasm (the read tools run in @landlock), again in @wasm, the fallback where the
        kernel has no Landlock: each must hold."""
        audit = self.audit
        assert entry.tool is not None
        audit.require_tool(entry.tool)
        bound = audit.binding(entry.tool)
        tags = [bound]
        if (
            bound is not EnvironmentTag.WASM
            and EnvironmentTag.WASM in audit.tools[entry.tool].bindable
        ):
            tags.append(EnvironmentTag.WASM)
        return "; ".join(f"{tag.value}: {self._tool_in(entry, tag)}" for tag in tags)

    def _tool_in(self, entry: WasmEntry, tag: EnvironmentTag) -> str:
        audit = self.audit
        assert entry.tool is not None
        env = audit.environment(EnvironmentTag.WASM)
        workspace = audit.workspace
        values = {"@TOKEN@": workspace.token, "@OUTSIDE@": str(workspace.outside)}
        call = _substituted(ToolCall(tool=entry.tool, args=entry.args), values)
        before = workspace.state(PROTECTED)
        with (
            Runtime(
                workspace.path,
                asker=_Asker(),
                environments={EnvironmentTag.WASM: env},
                audit_log=None,
                tools=audit.tools,
                trusted=self.audit.trusted,
                bindings={call.tool: tag},
            ) as runtime,
            runtime.session() as session,
        ):
            try:
                key = audit.key(call)
            except CodecoderError:
                key = None  # invalid arguments: the call itself shows how they are refused
            if key is not None:
                session.allowlist.grant(key, runtime.environment_of(call.tool))
            started = time.monotonic()
            outcome = session.call(call.tool, call.args)
            took = time.monotonic() - started
        if entry.timeout is not None and took > entry.timeout:
            _escaped(f"the call took {took:.1f}s, past the {entry.timeout:g}s it may: it blocked")
        shown = json.dumps(outcome.to_json())
        if workspace.token in shown:
            _escaped("the secret outside the workspace reached the agent")
        if (
            entry.stdout_matches
            and outcome.result
            and re.search(entry.stdout_matches, outcome.result.output)
        ):
            _escaped(f"the output matched {entry.stdout_matches!r}: {outcome.result.output[:120]}")
        changed = workspace.changed(before, PROTECTED) + workspace.outside_changed()
        if changed:
            _escaped(f"the call changed {', '.join(changed)}")
        return _result_line(outcome)


@contextlib.contextmanager
def _captured_log(name: str) -> Iterator[list[str]]:
    """The warnings `name` logs meanwhile, kept for the report instead of printed: the audit
    tampers on purpose, and the runtime's warning about it is the defence observed."""
    messages: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    logger = logging.getLogger(name)
    handler, propagate = Keep(logging.WARNING), logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield messages
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


def _custom_section(name: str, payload: bytes) -> bytes:
    def leb128(value: int) -> bytes:
        out = bytearray()
        while True:
            byte, value = value & 0x7F, value >> 7
            out.append(byte | (0x80 if value else 0))
            if not value:
                return bytes(out)

    body = leb128(len(name)) + name.encode() + payload
    return b"\x00" + leb128(len(body)) + body


_EVIL_WAT: Final = """(module
  (import "wasi_snapshot_preview1" "fd_write" (func $w (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "TAMPERED @TOKEN@\\n")
  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const @LENGTH@))
    (drop (call $w (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))"""


def _tampered(entry: bytes, mode: str | None, token: str) -> bytes:
    if mode == "corrupt":
        middle = len(entry) // 2
        return (
            entry[:middle]
            + bytes(b ^ 0xFF for b in entry[middle : middle + 64])
            + entry[middle + 64 :]
        )
    # Machine code an attacker would plant: a module compiled with the settings the runtime
    # uses (so it would deserialize), printing a marker if it is ever run.
    text = _EVIL_WAT.replace("@TOKEN@", token).replace("@LENGTH@", str(len(f"TAMPERED {token}\n")))
    config = wasmtime.Config()
    config.consume_fuel = True
    config.epoch_interruption = True
    config.cranelift_opt_level = "speed"
    return bytes(wasmtime.Module(wasmtime.Engine(config), text).serialize())
