"""Compiling Wasm modules in a process that can be killed, so compiling counts against a call's
timeout.

wasmtime compiles in native code that no signal or epoch can interrupt: a module built to
compile slowly would hold a call (and a CPU) far past its timeout. So modules are compiled by a
worker process (`python -m environments.wasm.compile`), started on first use and shared by
every WasmEnvironment of this process (they all use the same engine settings, so its output
deserializes in any of them). At the call's deadline the worker is killed and the call fails;
the next compile starts a new one. The worker's address space is limited, so a compile cannot
take the host's memory either.

Protocol on the worker's stdin and stdout: a request is an 8-byte big-endian length and the
module's bytes (binary or text format); the answer is one status byte (0: compiled, 1: not a
valid module), an 8-byte length, and the serialized module or the error's text.
"""

from __future__ import annotations

import contextlib
import os
import resource
import selectors
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING, Final

from codecoder.foundation.errors import (
    ExecutionFailed,
    ExecutionTimeout,
    SandboxUnavailable,
)

if TYPE_CHECKING:
    import wasmtime

__all__ = ["COMPILE_MEMORY", "ENGINE_SETTINGS", "compile_module", "engine_config", "error_cause"]

COMPILE_MEMORY: Final = 4 * 1024**3
_HEADER: Final = 8

# The engine settings that change generated code, kept here so that the worker needs nothing
# but wasmtime. They are applied from this one table and hashed into every cache key
# (environments.wasm.cache), so a change here can never load code compiled differently.
ENGINE_SETTINGS: dict[str, object] = {
    "consume_fuel": True,
    "epoch_interruption": True,
    "cranelift_opt_level": "speed",
    # One linear memory per module, so the store's memory limit is a limit on all of it (a
    # module declaring several is refused when it is compiled), and none shared or 64-bit.
    "wasm_multi_memory": False,
    "wasm_memory64": False,
    "wasm_threads": False,
}


def engine_config() -> wasmtime.Config:
    """A wasmtime configuration with ENGINE_SETTINGS."""
    import wasmtime

    config = wasmtime.Config()
    for name, value in ENGINE_SETTINGS.items():
        setattr(config, name, value)
    return config


def error_cause(text: str) -> str:
    """The one line of a wasmtime error's text that says what happened (it leads with a
    trace), or "" for an empty text."""
    text = text.strip()
    if "Caused by:" in text:
        lines = [line.strip() for line in text.split("Caused by:", 1)[1].splitlines()]
        return next((line for line in lines if line), text)
    return text.splitlines()[0] if text else ""


class _Worker:
    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "codecoder.environments.wasm.compile"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            close_fds=True,
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self.send = self.process.stdin.fileno()
        self.receive = self.process.stdout.fileno()
        os.set_blocking(self.send, False)
        os.set_blocking(self.receive, False)

    def compile(self, data: bytes, deadline: float) -> tuple[int, bytes]:
        pending = memoryview(len(data).to_bytes(_HEADER, "big") + data)
        answer = bytearray()
        wanted: int | None = None
        with selectors.DefaultSelector() as selector:
            selector.register(self.send, selectors.EVENT_WRITE)
            selector.register(self.receive, selectors.EVENT_READ)
            while wanted is None or len(answer) < wanted:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                for key, _ in selector.select(left):
                    if key.fd == self.send:
                        pending = pending[os.write(self.send, pending[: 1 << 20]) :]
                        if not pending:
                            selector.unregister(self.send)
                        continue
                    chunk = os.read(self.receive, 1 << 20)
                    if not chunk:
                        raise EOFError
                    answer += chunk
                    if wanted is None and len(answer) >= 1 + _HEADER:
                        wanted = 1 + _HEADER + int.from_bytes(answer[1 : 1 + _HEADER], "big")
        return answer[0], bytes(answer[1 + _HEADER :])

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


_lock = threading.Lock()
_worker: _Worker | None = None


def compile_module(data: bytes, deadline: float, timeout: float) -> bytes:
    """The serialized module compiled from `data`, or ExecutionTimeout at `deadline`.

    Raises ExecutionFailed for an invalid module; `timeout` is only for the message.
    """
    global _worker
    if not _lock.acquire(timeout=max(deadline - time.monotonic(), 0)):
        raise ExecutionTimeout(
            f"the module could not be compiled within its timeout of {timeout:g}s (another "
            "module was being compiled)"
        )
    try:
        if _worker is None or _worker.process.poll() is not None:
            try:
                _worker = _Worker()
            except OSError as exc:
                raise SandboxUnavailable(f"cannot start the wasm compiler: {exc}") from exc
        try:
            status, payload = _worker.compile(data, deadline)
        except TimeoutError:
            _worker.kill()
            _worker = None
            raise ExecutionTimeout(
                f"compiling the module took longer than its timeout of {timeout:g}s; it was stopped"
            ) from None
        except (EOFError, OSError):
            code = _worker.process.poll()
            _worker.kill()
            _worker = None
            raise ExecutionFailed(
                "the module could not be compiled: the compiler stopped"
                + (f" (exit status {code})" if code is not None else "")
                + f"; compiling may take at most {COMPILE_MEMORY // 1024**3} GiB of memory"
            ) from None
    finally:
        _lock.release()
    if status != 0:
        raise ExecutionFailed(f"invalid wasm module: {payload.decode(errors='replace')}")
    return payload


def _serve() -> None:
    import wasmtime

    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_AS, (COMPILE_MEMORY, COMPILE_MEMORY))
    engine = wasmtime.Engine(engine_config())
    requests, answers = sys.stdin.buffer, sys.stdout.buffer
    while True:
        header = requests.read(_HEADER)
        if len(header) < _HEADER:
            return
        data = requests.read(int.from_bytes(header, "big"))
        try:
            payload, status = bytes(wasmtime.Module(engine, data).serialize()), 0
        except wasmtime.WasmtimeError as exc:
            payload, status = (error_cause(str(exc)) or "not a module").encode(), 1
        answers.write(bytes([status]) + len(payload).to_bytes(_HEADER, "big") + payload)
        answers.flush()


if __name__ == "__main__":
    _serve()
