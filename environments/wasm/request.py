"""What a @wasm call asks for and what it gets back.

A `WasmRequest` names a module (a `.wasm` or `.wat` file, or its bytes), its argv and stdin,
and the host directories it may see (`Preopen`, read-only unless marked writable), with the
limits it runs under (`limits`); a `WasmResult` is how the module ended.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from codecoder.environments.wasm.limits import (
    DEFAULT_DISK_BUDGET,
    DEFAULT_FUEL,
    DEFAULT_MAX_OUTPUT,
    DEFAULT_MEMORY_LIMIT,
    DEFAULT_TIMEOUT,
)

__all__ = ["Preopen", "WasmRequest", "WasmResult"]


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
